"""AST tool benchmarks, part of `make bench`.  Reports; asserts nothing.

- ``ast_generate`` over N source files (Python, Go, Rust, TypeScript, C):
  cold (every file parsed), incremental with nothing changed (stat only),
  after a ``touch`` of every file (read and hashed, not parsed) and after
  one file changed, as ratios to the cold run within one run;
- ``ast_query`` (the index re-checked, then a filter) and its outline;
- planning an ``ast_edit`` rename that touches 20 files (parse, rename,
  parse again, one diff per file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py

from forj_py.config import load
from forj_py.service import Worker
from forj_py.store.journal import Journal
from forj_py.tools import builtin_tools
from forj_py.tools.registry import Registry

N_FILES = 400
RENAMED_IN = 20


def _source(language: str, i: int) -> str:
    body = []
    for k in range(12):
        if language == "py":
            body.append(f'def f{i}_{k}(x):\n    """Doc."""\n    return helper(x) + {k}\n\n')
        elif language == "go":
            body.append(
                f"// F{i}x{k} does.\nfunc F{i}x{k}(x int) int {{ return helper(x) + {k} }}\n"
            )
        elif language == "rs":
            body.append(f"/// Doc.\npub fn f{i}_{k}(x: i32) -> i32 {{ helper(x) + {k} }}\n")
        elif language == "ts":
            body.append(
                f"/** Doc. */\nexport function f{i}_{k}(x: number) {{ return helper(x); }}\n"
            )
        else:
            body.append(f"/* Doc. */\nint f{i}_{k}(int x) {{ return helper(x) + {k}; }}\n")
    head = {"go": "package p\n\n", "py": "", "rs": "", "ts": "", "c": ""}[language]
    return head + "".join(body)


def _project(root: Path) -> None:
    languages = ["py", "go", "rs", "ts", "c"]
    for i in range(N_FILES):
        language = languages[i % len(languages)]
        path = root / f"d{i % 20}" / f"m{i}.{language}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_source(language, i))
    for i in range(RENAMED_IN):
        (root / "py" / f"use{i}.py").parent.mkdir(exist_ok=True)
        (root / "py" / f"use{i}.py").write_text(f"from lib import target\n\nx{i} = target({i})\n")
    (root / "py" / "lib.py").write_text('def target(x):\n    """Doc."""\n    return x\n')


def _drop(event: Any) -> None:
    pass


def _run(worker: Worker, name: str, **args: Any) -> Any:
    plan = worker.plan({"calls": [{"id": "c", "name": name, "args": args}]})
    reply = worker.execute({"batch_id": plan["batch_id"], "capacity_bytes": 8 << 20}, _drop)
    entry = reply["results"][0]
    assert entry["ok"], entry
    return entry["result"]


def main() -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        saved = os.environ.get("FORJ_CONFIG")
        os.environ["FORJ_CONFIG"] = str(base / "none.toml")
        try:
            return _measure(base)
        finally:
            if saved is None:
                os.environ.pop("FORJ_CONFIG", None)
            else:
                os.environ["FORJ_CONFIG"] = saved


def _measure(base: Path) -> list[tuple[str, str, str]]:
    root = base / "project"
    _project(root)
    state = base / "state"
    worker = Worker(
        root, load(root), Registry(builtin_tools()), Journal(state / "journal.sqlite3"), state
    )
    total = N_FILES + RENAMED_IN + 1
    cold = median_of(lambda: _run(worker, "ast_generate", paths=["**"], incremental=False), 5, 1)
    assert _run(worker, "ast_generate", paths=["**"])["unchanged_files"] == total
    warm = median_of(lambda: _run(worker, "ast_generate", paths=["**"]), 9, 1)

    def touch_all() -> None:
        for path in root.rglob("*.*"):
            os.utime(path)

    touched = []
    for _ in range(5):
        touch_all()
        touched.append(median_of(lambda: _run(worker, "ast_generate", paths=["**"]), 1, 0))
    touched.sort()
    t_touched = touched[len(touched) // 2]
    one = root / "d0" / "m0.py"
    changed = []
    for k in range(5):
        one.write_text(_source("py", 0) + f"\nx = {k}\n")
        result = median_of(lambda: _run(worker, "ast_generate", paths=["**"]), 1, 0)
        changed.append(result)
    changed.sort()
    t_changed = changed[len(changed) // 2]
    query = median_of(lambda: _run(worker, "ast_query", where={"name_like": "f1*"}), 9)
    outline = median_of(lambda: _run(worker, "ast_query", mode="outline"), 9)
    nodes = _run(worker, "ast_query", where={"name_like": "target", "type": "fn"})["nodes"]
    target = nodes[0]["id"]
    call = {"id": "r", "name": "ast_edit", "args": {"target_node_id": target, "new_name": "aim"}}
    plan_rename = median_of(lambda: worker.plan({"calls": [call]}), 9)
    return [
        (
            f"`ast_generate` over {total} files (5 languages): cold / nothing changed / every "
            "file touched / one file changed",
            f"{cold * 1000:.0f} ms / {warm * 1000:.1f} ms ({cold / warm:.0f}× faster) / "
            f"{t_touched * 1000:.1f} ms ({cold / t_touched:.1f}×) / {t_changed * 1000:.1f} ms "
            f"({cold / t_changed:.0f}×)",
            "incremental ≪ cold",
        ),
        (
            f"`ast_query` by name / outline, {total} files indexed (re-check included)",
            f"{query * 1000:.1f} ms / {outline * 1000:.1f} ms",
            "—",
        ),
        (
            f"plan an `ast_edit` rename touching {RENAMED_IN + 1} files",
            f"{plan_rename * 1000:.1f} ms",
            "—",
        ),
    ]


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
