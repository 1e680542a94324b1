"""Audit timeline and metrics benchmarks.  Reports medians; asserts nothing.

Run on its own: ``.venv/bin/python bench/audit.py``.

- one page (200 rows) of the ``audit`` method over journals of 1k, 10k and
  50k calls: unfiltered, by tool, by outcome, by text; against a reference
  query reading the same page of calls joined to their batches only (the
  ratio is what the consent, results, times and file-change joins cost);
- a small ``read_file`` batch (plan + execute + delivery) with the
  per-session counters against the same batch with counting switched off,
  as a ratio within one run.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py

from forj_py.config import load
from forj_py.service import Worker
from forj_py.store.journal import Journal
from forj_py.tools import builtin_tools
from forj_py.tools.registry import Registry

SIZES = (1_000, 10_000, 50_000)
TOOLS = ("read_file", "edit", "run_shell", "search", "write_file")


def _fill(path: Path, root: str, n: int) -> None:
    """``n`` one-call batches shaped like real ones, written in one transaction."""
    Journal(path).close()  # the schema
    db = sqlite3.connect(path)
    now = time.time() - n
    with db:
        for i in range(n):
            b = f"b{i:08d}"
            tool = TOOLS[i % len(TOOLS)]
            ok = i % 7 != 0
            args = {"path": f"src/m{i % 300}.py", "old_string": "x" * 40, "new_string": "y"}
            call = {"id": f"c{i}", "name": tool, "args": args}
            result: dict[str, Any] = (
                {"id": f"c{i}", "name": tool, "ok": True, "result": {"content": "z" * 400}}
                if ok
                else {
                    "id": f"c{i}",
                    "name": tool,
                    "ok": False,
                    "error": {
                        "type": "permission-error" if i % 2 else "file-error",
                        "message": f"no such file src/m{i}.py",
                        "details": {"code": "E_FILE_IO"},
                        "recovery": ["x"],
                    },
                }
            )
            db.execute(
                "INSERT INTO batches (batch_id, root, mode, state, created_at, updated_at, kind) "
                "VALUES (?, ?, 'enabled', 'done', ?, ?, 'tools')",
                (b, root, now + i, now + i),
            )
            db.execute(
                "INSERT INTO calls VALUES (?, 0, ?, ?, ?, 'execute')",
                (b, f"c{i}", tool, json.dumps(call)),
            )
            db.execute(
                "INSERT INTO results VALUES (?, 0, ?, ?, ?, ?)",
                (b, f"c{i}", 1 if ok else 0, json.dumps(result), now + i + 0.01),
            )
            db.execute(
                "INSERT INTO consent (batch_id, seq, stage, reason, decided_at, step) "
                "VALUES (?, 0, 'plan', '[ask] runs: the call changes nothing', ?, 'default')",
                (b, now + i),
            )
            db.execute("INSERT INTO call_times VALUES (?, 0, ?, ?)", (b, now + i, now + i + 0.01))
            if tool in ("edit", "write_file"):
                db.execute(
                    "INSERT INTO file_changes (batch_id, seq, call_id, path, canonical, existed, "
                    "backup, hash_before, hash_after, at) VALUES (?, 0, ?, ?, ?, 1, NULL, 'a', "
                    "'b', ?)",
                    (b, f"c{i}", args["path"], f"{root}/{args['path']}", now + i),
                )
    db.close()


def _reference(path: Path, root: str) -> None:
    db = sqlite3.connect(path)
    db.execute(
        "SELECT b.batch_id, b.created_at, c.seq, c.call_id, c.name, c.raw FROM calls c "
        "JOIN batches b ON b.batch_id=c.batch_id WHERE b.root=? AND b.kind='tools' "
        "ORDER BY b.created_at DESC, b.rowid DESC, c.seq DESC LIMIT 201",
        (root,),
    ).fetchall()
    db.close()


def _pages(journal: Journal, path: Path, root: str) -> tuple[float, ...]:
    return (
        median_of(lambda: _reference(path, root), 15),
        median_of(lambda: journal.audit(root, limit=200), 15),
        median_of(lambda: journal.audit(root, limit=200, tool="edit"), 15),
        median_of(lambda: journal.audit(root, limit=200, outcome="refused"), 9),
        median_of(lambda: journal.audit(root, limit=200, text="m299.py"), 9),
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        os.environ["FORJ_CONFIG"] = str(base / "none.toml")
        for n in SIZES:
            path = base / f"j{n}.sqlite3"
            root = "/bench/project"
            _fill(path, root, n)
            journal = Journal(path)
            try:
                ref, page, tool, outcome, text = _pages(journal, path, root)
            finally:
                journal.close()
            rows.append(
                (
                    f"audit page of 200, {n:,} calls: plain / by tool / by outcome / by text "
                    "(reference: calls and batches only)",
                    f"{_ms(page)} ({page / ref:.1f}×) / {_ms(tool)} / {_ms(outcome)} / "
                    f"{_ms(text)} (ref {_ms(ref)})",
                )
            )
        project = base / "project"
        (project / "src").mkdir(parents=True)
        (project / "src" / "a.py").write_text("".join(f"line {i}\n" for i in range(200)))
        state = base / "state"
        state.mkdir()
        worker = Worker(
            project,
            load(project),
            Registry(builtin_tools()),
            Journal(state / "journal.sqlite3"),
            state,
        )

        def one_read() -> None:
            plan = worker.plan(
                {
                    "calls": [{"id": "r", "name": "read_file", "args": {"path": "src/a.py"}}],
                    "session": "bench",
                }
            )
            reply: Any = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
            reply.on_sent()

        # What counting adds to each batch, timed on its own against the
        # whole batch it is part of (the machine's load moves both alike).
        counting = worker._count
        spent: list[float] = []

        def timed(*args: Any) -> None:
            t0 = time.perf_counter()
            counting(*args)
            spent.append(time.perf_counter() - t0)

        worker._count = timed  # type: ignore[method-assign]
        batch = median_of(one_read, 41)
        count = sorted(spent)[len(spent) // 2]
        rows.append(
            (
                "read_file batch (plan + execute + delivery) / of which the session counters",
                f"{_ms(batch)} / {count * 1e6:.0f} µs ({count / batch:.1%})",
            )
        )
        worker.journal.close()
    return rows


if __name__ == "__main__":
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, {platform.system()} {platform.release()}"
    )
    print("\n| measurement (median) | result |\n| --- | --- |")
    for name, value in main():
        print(f"| {name} | {value} |")
