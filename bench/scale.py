"""Listing, glob and search at 1k, 10k and 100k files, each beside its reference.

Part of `make bench`; reports medians and ratios measured in one run,
asserts nothing.  The trees come from :mod:`tree` (generated here, in a
temporary directory: the 100k tree takes about a minute to write on a
slow disk).  ``FORJ_BENCH_MAX_FILES=10000`` leaves the 100k tier out.

References, as the design decisions set them:

- a listing: ``rg --files`` run to completion, then one ``lstat`` per path
  and one ``json.dumps`` of the entries, in this Python: the least any
  listing with sizes and times does;
- glob ``**/*.py``: the same with ``rg --files --glob '*.py'``;
- search: ``rg --json`` with the same query, its output read whole.

forj's figures are end to end: a client sends ``plan`` and ``execute`` to
a worker process and reads the reply.  The worker's resident memory is
read from ``/proc`` before the first call and after each tier's calls.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py
from tree import make_tree

from forj_py.tools.search import find_rg
from forj_py.transport.client import Client, WorkerProcess

TIERS = (1_000, 10_000, 100_000)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_call(c: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    plan = c.call("plan", {"calls": [{"id": "x", "name": name, "args": args}]}, timeout=600)
    res = c.call("execute", {"batch_id": plan["batch_id"], "capacity_bytes": 64 << 20}, timeout=600)
    r = res["results"][0]
    assert r["ok"], r
    return dict(r["result"])


def reference_listing(rg: str, root: Path, *extra: str) -> Callable[[], int]:
    def run() -> int:
        out = subprocess.run([rg, "--files", *extra], cwd=root, capture_output=True, check=True)
        entries = []
        for rel in out.stdout.decode().splitlines():
            st = os.lstat(os.path.join(root, rel))
            entries.append(
                {"path": rel, "size": st.st_size, "mtime": int(st.st_mtime), "type": "file"}
            )
        return len(json.dumps(entries))

    return run


def medians_in_turns(fns: list[Callable[[], object]], runs: int) -> list[float]:
    """The median wall time of each of ``fns``, sampled one after the other, ``runs`` times."""
    for fn in fns:
        fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, times in zip(fns, samples, strict=True):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return [statistics.median(times) for times in samples]


def in_process(root: Path) -> tuple[Callable[[], int], Callable[[], int]]:
    """list_files and glob ``**/*.py`` run in this process, their result encoded once.

    What the worker does for the call before the reply path (journal, EPC
    framing, the client's decoding), with the benchmark's configuration.
    """
    from forj_py.config import Config
    from forj_py.output import dumps
    from forj_py.reads import Session
    from forj_py.safety.paths import Sandbox
    from forj_py.tools.listing import Glob, GlobArgs, ListFiles, ListFilesArgs
    from forj_py.tools.registry import ToolContext

    config = Config.model_validate(
        {"tools": {"output": {"max_bytes": 8 << 20}, "listing": {"max_entries": 1_000_000}}}
    )
    sandbox = Sandbox(root)

    def ctx() -> ToolContext:
        return ToolContext(
            sandbox=sandbox,
            config=config,
            session=Session(),
            batch_id="b",
            call_id="c",
            working_dir=sandbox.project_root,
            output_limit=config.tools.output.max_bytes,
        )

    def listing() -> int:
        return len(dumps(ListFiles().execute(ListFilesArgs(max_depth=64), ctx())))

    def glob() -> int:
        args = GlobArgs(patterns=["**/*.py"], max_results=100000)
        return len(dumps(Glob().execute(args, ctx())))

    return listing, glob


def forj_rg_command(rg: str, root: Path, query: str) -> list[str]:
    """The rg command line forj's search runs for ``query`` (the default config)."""
    from forj_py.config import Config
    from forj_py.safety.paths import Sandbox
    from forj_py.tools.listing import default_excludes
    from forj_py.tools.search import SearchArgs, _rg_command, _Skip

    class Ctx:
        config = Config()
        sandbox = Sandbox(root)

    ctx: Any = Ctx()
    args = SearchArgs(query=query, case_sensitive=True)
    return _rg_command(rg, args, ctx, _Skip(default_excludes(ctx), []))


def main() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    rg = find_rg()
    if rg is None:
        print("ripgrep not found: skipping the scaling benchmark")
        return rows
    most = int(os.environ.get("FORJ_BENCH_MAX_FILES", "100000"))
    tiers = [n for n in TIERS if n <= most]
    ratios: dict[str, list[str]] = {"list_files": [], "glob": [], "search": []}
    per_entry: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(
            "[tools.output]\nmax_bytes = 8388608\n[tools.listing]\nmax_entries = 1000000\n"
        )
        env = dict(os.environ, FORJ_CONFIG=str(cfg), FORJ_STATE_DIR=str(Path(tmp) / "state"))
        for n in tiers:
            root = Path(tmp) / f"tree{n}"
            make_tree(root, n)
            runs = 15 if n <= 10_000 else 5
            with WorkerProcess(root, env=env) as proc, Client(proc.port) as c:
                c.call("hello", {"token": proc.token})
                pid = proc.proc.pid
                base = rss_mb(pid)

                listed = run_call(c, "list_files", {"max_depth": 64})
                assert not listed["truncated"], listed.get("note")
                t_ref = median_of(reference_listing(rg, root), runs, warmup=1)
                t_forj = median_of(
                    lambda: run_call(c, "list_files", {"max_depth": 64}), runs, warmup=1
                )
                count = len(listed["files"])
                rows.append(
                    (
                        f"list_files, {n:,}-file tree ({count:,} entries) vs rg --files + "
                        "lstat + json.dumps",
                        f"{t_forj * 1000:.0f} ms vs {t_ref * 1000:.0f} ms ({t_forj / t_ref:.2f}×)",
                        "≤ 1.5×",
                    )
                )
                ratios["list_files"].append(f"{t_forj / t_ref:.2f}×")
                per_entry.append(f"{t_forj / count * 1e6:.1f}")

                globbed = run_call(c, "glob", {"patterns": ["**/*.py"], "max_results": 100000})
                assert not globbed["truncated"], globbed.get("note")
                t_ref = median_of(reference_listing(rg, root, "--glob", "*.py"), runs, warmup=1)
                t_forj = median_of(
                    lambda: run_call(c, "glob", {"patterns": ["**/*.py"], "max_results": 100000}),
                    runs,
                    warmup=1,
                )
                rows.append(
                    (
                        f"glob **/*.py, {n:,}-file tree ({len(globbed['files']):,} matches) vs "
                        "rg --files --glob + lstat + json.dumps",
                        f"{t_forj * 1000:.0f} ms vs {t_ref * 1000:.0f} ms ({t_forj / t_ref:.2f}×)",
                        "≤ 1.5×",
                    )
                )
                ratios["glob"].append(f"{t_forj / t_ref:.2f}×")

                # The same two calls in this process, up to their JSON text:
                # the worker's own part, without the reply path.
                list_here, glob_here = in_process(root)
                for label, here, extra in (
                    ("list_files", list_here, ()),
                    ("glob **/*.py", glob_here, ("--glob", "*.py")),
                ):
                    t_ref = median_of(reference_listing(rg, root, *extra), runs, warmup=1)
                    t_here = median_of(here, runs, warmup=1)
                    rows.append(
                        (
                            f"{label} in process (walk, result, its JSON text), {n:,}-file "
                            "tree vs its reference",
                            f"{t_here * 1000:.0f} ms vs {t_ref * 1000:.0f} ms "
                            f"({t_here / t_ref:.2f}×)",
                            "—",
                        )
                    )

                # A literal in a few files, and one in every file (the default
                # 200 results, most of the tree's matches never decoded).
                # Sampled in turns (forj, rg, rg with forj's flags), so that all
                # three see the same load on a shared machine.
                for query, label in (("value = 12345", "rare literal"), ("value", "every file")):
                    args = {"query": query, "case_sensitive": True}
                    t_forj, t_ref, t_flags = medians_in_turns(
                        [
                            lambda a=args: run_call(c, "search", a),  # type: ignore[misc]
                            lambda q=query, r=root: subprocess.run(  # type: ignore[misc]
                                # "." explicit: with no path and a stdin that is not
                                # a terminal, rg would search stdin.
                                [rg, "--json", "--fixed-strings", "--case-sensitive", q, "."],
                                cwd=r,
                                stdout=subprocess.DEVNULL,
                                check=False,
                            ),
                            lambda q=query, r=root: subprocess.run(  # type: ignore[misc]
                                forj_rg_command(rg, r, q),
                                cwd=r,
                                stdout=subprocess.DEVNULL,
                                check=False,
                            ),
                        ],
                        runs,
                    )
                    rows.append(
                        (
                            f"search, {label}, {n:,}-file tree, default max_results vs rg --json",
                            f"{t_forj * 1000:.0f} ms vs {t_ref * 1000:.0f} ms "
                            f"({t_forj / t_ref:.2f}×); rg with forj's flags alone "
                            f"{t_flags * 1000:.0f} ms",
                            "≤ 1.3×",
                        )
                    )
                    if label == "rare literal":
                        ratios["search"].append(f"{t_forj / t_ref:.2f}×")
                # The fixed cost of any call (plan, execute, five journal
                # commits with fsync, two round trips): a read of a tiny file.
                t_small = median_of(
                    lambda: run_call(c, "read_file", {"path": ".gitignore"}), runs, warmup=1
                )
                rows.append(
                    (
                        f"fixed cost of a call, same worker ({n:,}-file tree): read_file of 60 B",
                        f"{t_small * 1000:.1f} ms",
                        "—",
                    )
                )
                after = rss_mb(pid)
                rows.append(
                    (
                        f"worker RSS, {n:,}-file tree: after hello / after all the calls above",
                        f"{base:.0f} MB / {after:.0f} MB",
                        "≤ 150 MB",
                    )
                )
    tiers_text = " → ".join(f"{n // 1000}k" for n in tiers)
    for tool, values in ratios.items():
        rows.append(
            (f"{tool} ratio to its reference, {tiers_text} files", " → ".join(values), "flat")
        )
    rows.append(
        (f"list_files time per entry, {tiers_text} files", " → ".join(per_entry) + " µs", "flat")
    )
    return rows


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
