"""File tool benchmarks, part of `make bench`.  Reports medians and ratios; asserts nothing.

- ``search`` end to end (client → worker → rg → result) against ``rg --json``
  run directly, on the Python standard library of this machine;
- ``list_files`` and ``glob`` against ``rg --files`` on the same tree;
- ``read_file`` of a line range near the end of a 500 MB file;
- ``multi_edit`` of 100 files in one call (staging, backups, atomic writes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py

from forj_py.tools.search import find_rg
from forj_py.transport.client import Client, WorkerProcess


def run_calls(
    c: Client, calls: list[dict[str, Any]], approve: bool = False
) -> list[dict[str, Any]]:
    plan = c.call("plan", {"calls": calls})
    ids = [i["id"] for i in plan["items"]] if approve else []
    res = c.call(
        "execute",
        {"batch_id": plan["batch_id"], "approved": ids, "capacity_bytes": 8_000_000},
        timeout=600,
    )
    for r in res["results"]:
        assert r["ok"], r
    return list(res["results"])


def main() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    rg = find_rg()
    if rg is None:
        print("ripgrep not found: skipping the comparisons with rg")
        return rows
    with tempfile.TemporaryDirectory() as tmp:
        # The standard library as it ships: no site-packages, no bytecode caches.
        stdlib = Path(tmp) / "stdlib"
        shutil.copytree(
            Path(os.__file__).parent,
            stdlib,
            symlinks=True,
            ignore=shutil.ignore_patterns("site-packages", "__pycache__"),
        )
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(
            "[tools.output]\nmax_bytes = 8000000\n"
            "[tools.listing]\nmax_entries = 1000000\n"
            "[tools.read_file]\nmax_scan_bytes = 1000000000\n"
            "[tools.approval]\nmode = 'auto'\n"
        )
        env = dict(os.environ, FORJ_CONFIG=str(cfg), FORJ_STATE_DIR=str(Path(tmp) / "state"))
        files = subprocess.run([rg, "--files"], cwd=stdlib, capture_output=True, text=True)
        n_files = len(files.stdout.splitlines())

        with WorkerProcess(stdlib, env=env) as proc, Client(proc.port) as c:
            c.call("hello", {"token": proc.token})

            def rg_direct(*argv: str) -> Callable[[], object]:
                return lambda: subprocess.run(
                    # The path is explicit: given no path and a stdin that is
                    # not a terminal, rg searches stdin instead of the tree.
                    [rg, *argv, "."],
                    cwd=stdlib,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    check=False,
                )

            query = "def __init_subclass__"
            t_rg = median_of(rg_direct("--json", "--fixed-strings", query), 15)
            t_forj = median_of(
                lambda: run_calls(
                    c,
                    [
                        {
                            "id": "s",
                            "name": "search",
                            "args": {"query": query, "case_sensitive": True, "max_results": 1000},
                        }
                    ],
                ),
                15,
            )
            rows.append(
                (
                    f"search a literal in the stdlib ({n_files} files): forj vs rg --json",
                    f"{t_forj * 1000:.0f} ms vs {t_rg * 1000:.0f} ms ({t_forj / t_rg:.2f}×)",
                    "≤ 1.3×",
                )
            )
            # A regex with many hits: the default 200 results of thousands.
            regex = r"def \w+\("
            t_rg = median_of(rg_direct("--json", regex), 15)
            t_forj = median_of(
                lambda: run_calls(
                    c, [{"id": "s", "name": "search", "args": {"query": regex, "is_regex": True}}]
                ),
                15,
            )
            rows.append(
                (
                    "search a regex with many hits (`def \\w+\\(`, default max_results) in the "
                    "stdlib vs rg --json",
                    f"{t_forj * 1000:.0f} ms vs {t_rg * 1000:.0f} ms ({t_forj / t_rg:.2f}×)",
                    "≤ 1.3×",
                )
            )
            t_files = median_of(rg_direct("--files"), 15)
            t_list = median_of(
                lambda: run_calls(
                    c, [{"id": "l", "name": "list_files", "args": {"max_depth": 64}}]
                ),
                15,
            )
            rows.append(
                (
                    "list_files of the stdlib vs rg --files",
                    f"{t_list * 1000:.0f} ms vs {t_files * 1000:.0f} ms ({t_list / t_files:.2f}×)",
                    "≤ 1.5×",
                )
            )
            t_glob = median_of(
                lambda: run_calls(
                    c,
                    [
                        {
                            "id": "g",
                            "name": "glob",
                            "args": {"patterns": ["**/*.py"], "max_results": 100000},
                        }
                    ],
                ),
                15,
            )
            rows.append(
                (
                    "glob **/*.py in the stdlib vs rg --files",
                    f"{t_glob * 1000:.0f} ms vs {t_files * 1000:.0f} ms ({t_glob / t_files:.2f}×)",
                    "≤ 1.5×",
                )
            )

        # A 500 MB file and 100 small files, in a project of their own.
        project = Path(tmp) / "project"
        (project / "many").mkdir(parents=True)
        line = b"x" * 99 + b"\n"
        with open(project / "huge.log", "wb") as fh:
            block = line * 10_000
            for _ in range(500):
                fh.write(block)
        for i in range(100):
            (project / "many" / f"f{i:03}.txt").write_text(
                "".join(f"line {k}\n" for k in range(50))
            )
        with WorkerProcess(project, env=env) as proc, Client(proc.port) as c:
            c.call("hello", {"token": proc.token})
            total = 5_000_000
            t = median_of(
                lambda: run_calls(
                    c,
                    [
                        {
                            "id": "r",
                            "name": "read_file",
                            "args": {
                                "path": "huge.log",
                                "start_line": total - 99,
                                "end_line": total,
                            },
                        }
                    ],
                ),
                5,
            )
            rows.append(
                (
                    "read_file of lines 4,999,901-5,000,000 of a 500 MB file",
                    f"{t * 1000:.0f} ms",
                    "—",
                )
            )
            reads = [
                {"id": f"r{i}", "name": "read_file", "args": {"path": f"many/f{i:03}.txt"}}
                for i in range(100)
            ]
            for start in range(0, 100, 8):
                run_calls(c, reads[start : start + 8])
            counter = [0]

            def edit_all() -> None:
                counter[0] += 1
                edits = [
                    {
                        "path": f"many/f{i:03}.txt",
                        "start_line": 10,
                        "end_line": 10,
                        "new_content": f"edited {counter[0]}",
                    }
                    for i in range(100)
                ]
                run_calls(c, [{"id": "m", "name": "multi_edit", "args": {"edits": edits}}])

            t = median_of(edit_all, 5)
            rows.append(
                ("multi_edit of 100 files in one call (backups, fsyncs)", f"{t * 1000:.0f} ms", "—")
            )
    return rows


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
