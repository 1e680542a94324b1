"""Per-test times of two checkouts compared: does any test run slower than before?

Not part of ``make bench``: it needs two working trees, an older one and a newer
one, each with a ``.venv`` (a symlink to a shared one will do; ``PYTHONPATH`` is
set to the tree, so each tree imports its own ``forj_py``).  Make them with
``git worktree add --detach DIR COMMIT`` and ``ln -s .../.venv DIR/.venv``, then::

    python bench/suite_times.py --old /path/to/old-tree --new /path/to/new-tree

What it does:

1. Runs the old and the new pytest suites at the same time, each pinned to one
   core (``taskset``, when there are two cores or more), so that both see the
   same load; reads each test's time from ``--junitxml``.  Then the two ERT
   suites the same way, reading the times Emacs's batch runner prints.
2. Compares the tests present in both trees that passed in both, and flags a
   test when new > ``--ratio`` x old and new - old exceeds the threshold
   (``--pytest-ms``, ``--ert-ms``).
3. Runs every flagged test alone, alternating old and new, ``--repeats`` times
   each, and keeps the flag only when the medians still cross both limits.
   When more than ``--alone-limit`` tests are flagged, each repetition runs
   them all in one process per tree instead (a few hundred lone pytest starts
   would take an hour).

It prints the totals of the common tests and every confirmed slower test with
both medians, and leaves the raw material (JUnit files, ERT logs, a JSON
summary) in ``--out``.  ``--reuse`` skips step 1 and reads its files from
``--out`` instead.  The times are the machine's of the moment: read the ratios,
and run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Emacs 28's batch ERT runner: "   passed  12/40  forj-some-test (0.123456 sec)".
ERT_LINE = re.compile(r"^\s*(passed|FAILED|skipped)\s+\d+/\d+\s+(\S+)\s+\((\d+(?:\.\d+)?) sec\)")


@dataclass
class Result:
    """One test's time in seconds and whether it passed."""

    seconds: float
    passed: bool


@dataclass
class Comparison:
    """One suite's comparison between the two trees."""

    suite: str
    common: int = 0
    only_old: int = 0
    only_new: int = 0
    not_passing: list[str] = field(default_factory=list)
    total_old: float = 0.0
    total_new: float = 0.0
    flagged: list[tuple[str, float, float]] = field(default_factory=list)
    confirmed: list[tuple[str, float, float]] = field(default_factory=list)
    grouped: bool = False
    noise: list[tuple[str, float, float]] = field(default_factory=list)


def python_of(tree: Path) -> Path:
    """The interpreter of TREE's virtual environment."""
    return tree / ".venv" / "bin" / "python"


def tree_env(tree: Path, state: Path | None = None) -> dict[str, str]:
    """The environment for running TREE's code: its own forj_py first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["FORJ_PYTHON"] = str(python_of(tree))
    env.pop("PYTEST_ADDOPTS", None)
    if state is not None:
        env["FORJ_STATE_DIR"] = str(state)
    return env


def check_tree(tree: Path) -> None:
    """Refuse a tree whose interpreter would import some other tree's forj_py."""
    out = subprocess.run(
        [str(python_of(tree)), "-c", "import forj_py; print(forj_py.__file__)"],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"{tree}: forj_py comes from {out}, not from this tree")


def pinned(command: list[str], core: int | None) -> list[str]:
    """COMMAND run on one CORE, when taskset exists and a core was given."""
    taskset = shutil.which("taskset")
    if core is None or taskset is None:
        return command
    return [taskset, "-c", str(core), *command]


def pytest_command(tree: Path, junit: Path, selection: list[str]) -> list[str]:
    """The pytest command line for TREE writing JUNIT, on SELECTION (all when empty)."""
    return [
        str(python_of(tree)),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--junitxml={junit}",
        *selection,
    ]


def ert_command(tree: Path, selector: str | None) -> list[str]:
    """The batch ERT command line for TREE: every test file, SELECTOR or all tests."""
    files = sorted((tree / "test-el").glob("*-test.el"))
    command = ["emacs", "-Q", "--batch", "-L", "elisp", "-L", "test-el"]
    for path in files:
        command += ["-l", str(path.relative_to(tree))]
    if selector is None:
        command += ["-f", "ert-run-tests-batch-and-exit"]
    else:
        command += ["--eval", f"(ert-run-tests-batch-and-exit (quote {selector}))"]
    return command


def junit_node(classname: str, name: str, tree: Path) -> str:
    """The pytest node id for a JUnit CLASSNAME and NAME, as found in TREE."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (tree / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return f"{classname}::{name}"


def read_junit(junit: Path, tree: Path) -> dict[str, Result]:
    """Each test case of a JUnit file, by node id."""
    results: dict[str, Result] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        bad = case.find("failure") is not None or case.find("error") is not None
        node = junit_node(case.get("classname", ""), case.get("name", ""), tree)
        results[node] = Result(float(case.get("time", "0")), not bad)
    return results


def read_ert(log: str) -> dict[str, Result]:
    """Each test of a batch ERT run's output, by name."""
    results: dict[str, Result] = {}
    for line in log.splitlines():
        match = ERT_LINE.match(line)
        if match and match.group(1) != "skipped":
            results[match.group(2)] = Result(float(match.group(3)), match.group(1) == "passed")
    return results


def run_both(commands: dict[str, tuple[list[str], Path, dict[str, str]]], out: Path) -> None:
    """Run both trees' COMMANDS at once, one core each; logs go to OUT/<name>.log."""
    cores = os.cpu_count() or 1
    processes = []
    for index, (name, (command, cwd, env)) in enumerate(commands.items()):
        core = index if cores >= 2 else None
        log = (out / f"{name}.log").open("w")
        processes.append(
            (
                name,
                log,
                subprocess.Popen(
                    pinned(command, core), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
                ),
            )
        )
    for name, log, process in processes:
        rc = process.wait()
        log.close()
        print(f"  {name}: exit {rc}", file=sys.stderr)


def whole_suites(trees: dict[str, Path], out: Path) -> None:
    """Step 1: both pytest suites at once, then both ERT suites at once."""
    pytest_runs = {
        f"pytest-{side}": (
            pytest_command(tree, out / f"pytest-{side}.xml", []),
            tree,
            tree_env(tree),
        )
        for side, tree in trees.items()
    }
    print("pytest, both trees at once ...", file=sys.stderr)
    run_both(pytest_runs, out)
    ert_runs = {
        f"ert-{side}": (
            ert_command(tree, None),
            tree,
            tree_env(tree, Path(tempfile.mkdtemp(prefix="forj-state-"))),
        )
        for side, tree in trees.items()
    }
    print("ERT, both trees at once ...", file=sys.stderr)
    run_both(ert_runs, out)


def compare(
    suite: str, old: dict[str, Result], new: dict[str, Result], ratio: float, floor: float
) -> Comparison:
    """Step 2: the common tests' totals and the ones that look slower."""
    result = Comparison(suite)
    result.only_old = len(old.keys() - new.keys())
    result.only_new = len(new.keys() - old.keys())
    for name in sorted(old.keys() & new.keys()):
        result.common += 1
        before, after = old[name], new[name]
        if not (before.passed and after.passed):
            result.not_passing.append(name)
            continue
        result.total_old += before.seconds
        result.total_new += after.seconds
        if after.seconds > ratio * before.seconds and after.seconds - before.seconds > floor:
            result.flagged.append((name, before.seconds, after.seconds))
    return result


def time_group(suite: str, names: list[str], tree: Path, out: Path) -> dict[str, float]:
    """NAMES of SUITE run in one process of their own in TREE: the times of those that passed."""
    if suite == "pytest":
        junit = out / "alone.xml"
        junit.unlink(missing_ok=True)
        subprocess.run(
            pytest_command(tree, junit, names),
            cwd=tree,
            env=tree_env(tree),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        found = read_junit(junit, tree) if junit.exists() else {}
    else:
        selector = names[0] if len(names) == 1 else f"(member {' '.join(names)})"
        with tempfile.TemporaryDirectory(prefix="forj-state-") as state:
            log = subprocess.run(
                ert_command(tree, selector),
                cwd=tree,
                env=tree_env(tree, Path(state)),
                capture_output=True,
                text=True,
                check=False,
            )
        found = read_ert(log.stdout + log.stderr)
    return {name: found[name].seconds for name in names if name in found and found[name].passed}


def confirm(
    comparison: Comparison,
    trees: dict[str, Path],
    out: Path,
    options: argparse.Namespace,
    floor: float,
) -> None:
    """Step 3: re-run the flagged tests, old and new alternating; keep what holds.

    Each test runs alone, in a process of its own, unless more than
    ``--alone-limit`` are flagged: then each repetition runs all of them in one
    process per tree (still one tree at a time, without the rest of the suite).
    Run alone, a test also pays for every import its code makes first; a tree
    that imports lazily pays there what the other paid while collecting.
    """
    names = [name for name, _, _ in comparison.flagged]
    groups = [[name] for name in names] if len(names) <= options.alone_limit else [names]
    comparison.grouped = len(groups) == 1 and len(names) > 1
    samples: dict[str, dict[str, list[float]]] = {n: {"old": [], "new": []} for n in names}
    for _ in range(options.repeats):
        for group in groups:
            for side in ("old", "new"):
                for name, seconds in time_group(comparison.suite, group, trees[side], out).items():
                    samples[name][side].append(seconds)
    for name in names:
        if not samples[name]["old"] or not samples[name]["new"]:
            print(f"  {name}: failed when re-run; left out", file=sys.stderr)
            continue
        before = statistics.median(samples[name]["old"])
        after = statistics.median(samples[name]["new"])
        verdict = after > options.ratio * before and after - before > floor
        (comparison.confirmed if verdict else comparison.noise).append((name, before, after))
        print(
            f"  {name}: old {before * 1000:.0f} ms, new {after * 1000:.0f} ms"
            f" -> {'slower' if verdict else 'noise'}",
            file=sys.stderr,
        )


def report(comparisons: list[Comparison]) -> str:
    """The tables: totals of the common tests, then the confirmed slower tests."""
    lines = [
        "| suite | common tests | not passing in both | old total (s) | new total (s) | new/old |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        share = c.total_new / c.total_old if c.total_old else float("nan")
        lines.append(
            f"| {c.suite} | {c.common} | {len(c.not_passing)} | {c.total_old:.2f}"
            f" | {c.total_new:.2f} | {share:.2f} |"
        )
    lines += [
        "",
        "| suite | test | flagged old/new (ms) | median alone old (ms) | new (ms) | new/old |",
    ]
    lines.append("|---|---|---:|---:|---:|---:|")
    count = 0
    for c in comparisons:
        first = {name: (before, after) for name, before, after in c.flagged}
        for name, before, after in c.confirmed:
            count += 1
            b0, a0 = first[name]
            lines.append(
                f"| {c.suite} | `{name}` | {b0 * 1000:.0f}/{a0 * 1000:.0f} | {before * 1000:.0f}"
                f" | {after * 1000:.0f} | {after / before if before else float('inf'):.2f} |"
            )
    if count == 0:
        lines.append("| | no test confirmed slower | | | | |")
    flagged = sum(len(c.flagged) for c in comparisons)
    noise = sum(len(c.noise) for c in comparisons)
    lines += ["", f"Flagged in the whole-suite runs: {flagged}; did not hold up re-run: {noise}."]
    for c in comparisons:
        how = "together, one process per tree and repetition" if c.grouped else "each alone"
        lines.append(f"{c.suite}: {len(c.flagged)} flagged, re-run {how}.")
    return "\n".join(lines)


def main() -> None:
    """Compare the two trees' suites, test by test."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the older working tree")
    parser.add_argument("--new", type=Path, required=True, help="the newer working tree")
    parser.add_argument("--out", type=Path, help="where the logs go (default: a new temp dir)")
    parser.add_argument("--reuse", action="store_true", help="read step 1's files from --out")
    parser.add_argument("--ratio", type=float, default=1.3)
    parser.add_argument("--pytest-ms", type=float, default=50.0)
    parser.add_argument("--ert-ms", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--alone-limit",
        type=int,
        default=25,
        help="above this many flagged tests, re-run them together rather than one by one",
    )
    parser.add_argument("--only", choices=["pytest", "ert"], help="one suite only")
    args = parser.parse_args()

    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for tree in trees.values():
        check_tree(tree)
    if args.reuse and args.out is None:
        parser.error("--reuse needs --out")
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="suite-times-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"logs in {out}", file=sys.stderr)
    started = time.monotonic()
    if not args.reuse:
        whole_suites(trees, out)

    comparisons = []
    floors = {"pytest": args.pytest_ms / 1000, "ert": args.ert_ms / 1000}
    for suite in ("pytest", "ert"):
        if args.only not in (None, suite):
            continue
        if suite == "pytest":
            old = read_junit(out / "pytest-old.xml", trees["old"])
            new = read_junit(out / "pytest-new.xml", trees["new"])
        else:
            old = read_ert((out / "ert-old.log").read_text(errors="replace"))
            new = read_ert((out / "ert-new.log").read_text(errors="replace"))
        comparison = compare(suite, old, new, args.ratio, floors[suite])
        print(f"{suite}: {len(comparison.flagged)} flagged; re-running them ...", file=sys.stderr)
        confirm(comparison, trees, out, args, floors[suite])
        comparisons.append(comparison)

    (out / "summary.json").write_text(json.dumps([asdict(c) for c in comparisons], indent=1))
    print(report(comparisons))
    print(f"\n({time.monotonic() - started:.0f} s; logs and summary.json in {out})")


if __name__ == "__main__":
    main()
