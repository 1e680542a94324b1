"""Recovery and undo benchmarks, part of `make bench`.  Reports; asserts nothing.

- planning one ``write_file`` in a project that is a git repository (the
  worker asks git which targets hold uncommitted work) against the same
  project without git, as a ratio within one run;
- ``undo`` of a batch that edited 20 files: the dry run (diffs) and the
  undo itself (backups, atomic writes, journal commits);
- ``hello`` with 20 unfinished batches to report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py

from forj_py.config import load
from forj_py.service import Worker
from forj_py.store.journal import Journal
from forj_py.tools import builtin_tools
from forj_py.tools.registry import Registry

FILES = 20


def _worker(root: Path, state: Path) -> Worker:
    journal = Journal(state / "journal.sqlite3")
    return Worker(root, load(root), Registry(builtin_tools()), journal, state)


def _project(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    for i in range(FILES):
        (root / "src" / f"m{i}.py").write_text("".join(f"line {n}\n" for n in range(200)))


def _git(root: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com")
    env.update(GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def _plan_write(worker: Worker) -> Any:
    call = {"id": "w", "name": "write_file", "args": {"path": "src/m0.py", "content": "x\n"}}
    return worker.plan({"calls": [call]})


def main() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        # No user config of the machine's owner applies to the figures.
        saved = os.environ.get("FORJ_CONFIG")
        os.environ["FORJ_CONFIG"] = str(base / "none.toml")
        try:
            rows += _measure(base)
        finally:
            if saved is None:
                os.environ.pop("FORJ_CONFIG", None)
            else:
                os.environ["FORJ_CONFIG"] = saved
    return rows


def _measure(base: Path) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    plain, repo = base / "plain", base / "repo"
    _project(plain)
    _project(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    (repo / "src" / "m0.py").write_text("changed by hand\n")
    w_plain = _worker(plain, base / "state1")
    w_repo = _worker(repo, base / "state2")
    assert _plan_write(w_repo)["items"][0].get("uncommitted") == ["src/m0.py"]
    t_plain = median_of(lambda: _plan_write(w_plain), 40)
    t_repo = median_of(lambda: _plan_write(w_repo), 40)
    rows.append(
        (
            "plan one write_file, project without git / in git (git status asked)",
            f"{t_plain * 1000:.2f} ms / {t_repo * 1000:.2f} ms ({t_repo / t_plain:.1f}×)",
            "—",
        )
    )

    reads = [
        {"id": f"r{i}", "name": "read_file", "args": {"path": f"src/m{i}.py"}} for i in range(FILES)
    ]
    edits = [
        {
            "id": f"e{i}",
            "name": "edit",
            "args": {"path": f"src/m{i}.py", "old_string": "line 7\n", "new_string": "7\n"},
        }
        for i in range(FILES)
    ]

    def edit_all() -> str:
        w_plain.execute({"batch_id": w_plain.plan({"calls": reads})["batch_id"]}, _drop)
        plan = w_plain.plan({"calls": edits})
        w_plain.execute({"batch_id": plan["batch_id"], "approved": [e["id"] for e in edits]}, _drop)
        return str(plan["batch_id"])

    batch = edit_all()
    t_dry = median_of(lambda: w_plain.undo({"batch_id": batch, "dry_run": True}), 20)
    w_plain.undo({"batch_id": batch})
    undo_times = []
    for _ in range(7):
        batch = edit_all()
        undo_times.append(median_of(lambda b=batch: w_plain.undo({"batch_id": b}), 1, 0))
    undo_times.sort()
    rows.append(
        (
            f"undo of a batch that edited {FILES} files: dry run (diffs) / undo",
            f"{t_dry * 1000:.1f} ms / {undo_times[len(undo_times) // 2] * 1000:.1f} ms",
            "—",
        )
    )

    crashed = _worker(plain, base / "state3")
    for _ in range(FILES):
        crashed.journal_calls({"calls": reads[:3]})
    fresh = _worker(plain, base / "state3")
    assert len(fresh.hello_payload({})["unfinished"]) == FILES
    t_hello = median_of(lambda: fresh.hello_payload({}), 40)
    rows.append(
        (f"hello with {FILES} unfinished batches to report", f"{t_hello * 1000:.2f} ms", "—")
    )
    return rows


def _drop(event: object) -> None:
    pass


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    for row in main():
        print(f"| {row[0]} | {row[1]} | {row[2]} |")
