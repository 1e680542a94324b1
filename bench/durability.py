"""One durable ``edit`` beside the least a durable edit must do, part of `make bench`.

forj: a client sends ``plan`` and ``execute`` (approved) for one ``edit`` of
a 200-line file to a worker process: stale-file check, matching, the
review diff, a backup synced to disk, the new file written to a temporary
file, synced, renamed over the old one, the directory synced, and the
journal's commits (calls, dispositions, state, the file's checkpoint, the
result).

The reference, in this Python: read the file, replace the text, write a
backup and ``fsync`` it, write a temporary file, ``fsync``, ``rename``,
``fsync`` the directory, and five commits of a small row into an SQLite
database in WAL mode with ``synchronous=FULL`` (the journal's settings).
The two run in turns, one sample of each at a time, so that both see the
same load on a shared machine (a disk's flush time moves by 10× from one
second to the next).  Reports medians; asserts nothing.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common  # noqa: F401 - sets the import path for forj_py

from forj_py.transport.client import Client, WorkerProcess

LINES = 200
RUNS = 40


def medians_in_turns(
    first: Callable[[], object], second: Callable[[], object], runs: int, warmup: int = 3
) -> tuple[float, float]:
    """The median wall times of ``first`` and ``second``, sampled alternately."""
    for _ in range(warmup):
        first()
        second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b)


def _durable_reference(root: Path, db: sqlite3.Connection, counter: list[int]) -> None:
    counter[0] += 1
    path = root / "ref.py"
    text = path.read_text()
    new = text.replace(f"line 100 {counter[0] - 1}\n", f"line 100 {counter[0]}\n", 1)
    backup = root / "backups" / f"ref.py.{counter[0]}"
    with open(backup, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp = root / ".ref.py.tmp"
    with open(tmp, "w") as fh:
        fh.write(new)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for step in range(5):
        with db:
            db.execute("INSERT INTO log VALUES (?, ?)", (counter[0], f"step {step}"))


def main() -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        (root / "backups").mkdir(parents=True)
        body = "".join(f"line {i} 0\n" for i in range(LINES))
        (root / "ref.py").write_text(body)
        (root / "mod.py").write_text(body)
        db = sqlite3.connect(Path(tmp) / "ref.sqlite3", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE log (n INTEGER, what TEXT)")
        db.isolation_level = "DEFERRED"
        counter = [0]

        env = dict(os.environ, FORJ_STATE_DIR=str(Path(tmp) / "state"))
        env.pop("FORJ_CONFIG", None)
        with WorkerProcess(root, env=env) as proc, Client(proc.port) as c:
            c.call("hello", {"token": proc.token})

            def batch(calls: list[dict[str, Any]]) -> dict[str, Any]:
                plan = c.call("plan", {"calls": calls})
                ids = [i["id"] for i in plan["items"] if i["disposition"] == "confirm"]
                res = c.call("execute", {"batch_id": plan["batch_id"], "approved": ids})
                (r,) = res["results"]
                assert r["ok"], r
                return dict(r)

            batch([{"id": "r", "name": "read_file", "args": {"path": "mod.py"}}])
            n = [0]

            def edit() -> None:
                n[0] += 1
                args = {
                    "path": "mod.py",
                    "old_string": f"line 100 {n[0] - 1}\n",
                    "new_string": f"line 100 {n[0]}\n",
                }
                batch([{"id": "e", "name": "edit", "args": args}])

            t_forj, t_ref = medians_in_turns(
                edit, lambda: _durable_reference(root, db, counter), RUNS
            )
        db.close()
    return [
        (
            f"one durable `edit` of a {LINES}-line file, end to end, vs read + replace + "
            "backup + fsync + rename + 5 synced SQLite commits in Python",
            f"{t_forj * 1000:.1f} ms vs {t_ref * 1000:.1f} ms ({t_forj / t_ref:.1f}×)",
            "≤ 2×",
        )
    ]


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
