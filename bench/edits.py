"""Edit benchmarks, part of `make bench`.  Reports; asserts nothing.

- the edit corpus (``tests/edit_corpus.py``) in full: real edits from this
  repository's history and the standard library, sent clean and with the
  noise models add, through the real worker; prints the outcome table;
- generated edits over real files (``tests/edit_properties.py``): legitimate
  edits, twins, fences, diff markers, line numbers, whole files, escapes,
  placeholders; wrong writes, refusals of legitimate edits, and the
  refusals of what must be refused;
- matching speed: one ``edit`` of a 1 MB file (plan, review diff, approve,
  write) for each matching pass, and a miss (refusal with the closest
  lines), as a median and as a ratio to the exact pass;
- refusal speed: every refusal and guard on a 1 MB file with 100 KB lines
  (minified JavaScript, JSON lines) and on a file of one 8 KB line, the
  slowest reported.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import ROOT, median_of  # sets the import path for forj_py

sys.path.insert(0, str(ROOT / "tests"))

import edit_corpus  # the corpus lives with the tests that use it
import edit_properties

SEED = 20261123


def corpus_table() -> tuple[str, list[tuple[str, str, str]]]:
    t0 = time.perf_counter()
    cases = edit_corpus.build(SEED, history=80, stdlib=40, versions=True)
    tally = edit_corpus.run_all(cases)
    took = time.perf_counter() - t0
    sources = sorted({c.pair.source for c in cases})
    pairs = len({c.pair.name for c in cases})
    recoverable = edit_corpus.RECOVERABLE
    missed = edit_corpus.MISSED_MATCH
    written_wrong = set(edit_corpus.NOISE_ORDER) - {"off by N, without expected"}
    rows = [
        (
            f"edit corpus: {len(cases)} cases from {pairs} file pairs ({', '.join(sources)})",
            f"{took:.0f} s",
            "—",
        ),
        (
            "edit corpus: exact edits applied correctly",
            f"{100 * tally.rate('correct', noises={'clean'}):.1f}%",
            "100%",
        ),
        (
            "edit corpus: noisy but recoverable edits applied correctly",
            f"{100 * tally.rate('correct', noises=recoverable - {'clean'}):.1f}%",
            "≥ 95%",
        ),
        (
            "edit corpus: written wrong (all but off by N without expected)",
            f"{100 * tally.rate('wrong', noises=written_wrong):.1f}%",
            "0",
        ),
        (
            "edit corpus: missed matches refused pointing at the right lines",
            f"{100 * tally.rate('refused with pointer', noises=missed):.1f}%",
            "≥ 95%",
        ),
    ]
    return tally.table(), rows


# --- matching speed on a 1 MB file ----------------------------------------------------


def _one_mb_of_code() -> str:
    lib = Path(os.__file__).parent
    text = "".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(lib.glob("*.py"))
    )
    text = text[:1_000_000]
    return text[: text.rindex("\n") + 1]


def _edit_args(text: str) -> dict[str, dict[str, str]]:
    """One edit per pass, near the end of the file, where a scan finds it last."""
    lines = text.split("\n")
    at = next(
        i
        for i in range(len(lines) - 200, 0, -1)
        if lines[i].startswith("        ")
        and len(lines[i].strip()) > 30
        and sum(1 for x in lines if x.strip() == lines[i].strip()) == 1
        and lines[i + 1].startswith("        ")
        and lines[i + 1].strip()
    )
    old = lines[at] + "\n" + lines[at + 1] + "\n"
    new = lines[at] + "\n" + "        pass  # added\n" + lines[at + 1] + "\n"
    deeper = "".join("    " + x + "\n" for x in old.splitlines())
    return {
        "exact": {"old_string": old, "new_string": new},
        "trailing": {
            "old_string": "".join(x + "  \n" for x in old.splitlines()),
            "new_string": new,
        },
        "indent": {
            "old_string": deeper,
            "new_string": "".join("    " + x + "\n" for x in new.splitlines()),
        },
        "unicode": {
            # A non-breaking space inside the line, where the file has a plain one.
            "old_string": "".join(_nbsp(x) + "\n" for x in deeper.splitlines()),
            "new_string": "".join("    " + x + "\n" for x in new.splitlines()),
        },
        "miss (refused with the closest lines)": {
            "old_string": old.replace(lines[at].strip()[:5], "zzzzz", 1) + "    nothing\n",
            "new_string": new,
        },
    }


def _nbsp(line: str) -> str:
    body = line.lstrip()
    return line[: len(line) - len(body)] + body.replace(" ", "\u00a0", 1)


def matching_speed() -> list[tuple[str, str, str]]:
    from forj_py.config import load
    from forj_py.service import Worker
    from forj_py.store.journal import Journal
    from forj_py.tools import builtin_tools
    from forj_py.tools.registry import Registry

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        state = Path(tmp) / "state"
        state.mkdir()
        config = Path(tmp) / "config.toml"
        config.write_text("", encoding="utf-8")
        text = _one_mb_of_code()
        data = text.encode("utf-8")
        path = root / "big.py"
        journal = Journal(state / "journal.sqlite3")
        worker = Worker(root, load(root, str(config)), Registry(builtin_tools()), journal, state)

        def batch(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
            plan = worker.plan({"calls": calls})
            ids = [i["id"] for i in plan["items"] if i["disposition"] == "confirm"]
            res = worker.execute({"batch_id": plan["batch_id"], "approved": ids}, lambda e: None)
            return list(res["results"])

        timings: dict[str, float] = {}
        for way, args in _edit_args(text).items():
            samples = []
            for k in range(9):
                path.write_bytes(data)
                (read,) = batch(
                    [{"id": "r", "name": "read_file", "args": {"path": "big.py", "end_line": 1}}]
                )
                assert read["ok"], read
                call = {"id": "e", "name": "edit", "args": {"path": "big.py", **args}}
                t0 = time.perf_counter()
                (r,) = batch([call])
                took = time.perf_counter() - t0
                if way.startswith("miss"):
                    assert not r["ok"] and "closest" in r["error"]["details"], r
                else:
                    assert r["ok"] and r["result"]["matched"] == way, r
                if k >= 2:
                    samples.append(took)
            timings[way] = statistics.median(samples)
        journal.close()
    size = f"{len(data) / 1e6:.1f} MB"
    matching = _matching_only(text)
    for way in timings:
        rows.append(
            (
                f"matching an edit in a {size} file, {way}",
                f"{matching[way] * 1000:.1f} ms ({matching[way] / matching['exact']:.1f}× exact)",
                "≤ 50 ms",
            )
        )
    for way, t in timings.items():
        rows.append(
            (
                f"whole edit call on a {size} file, {way} (plan, review diff, approve, "
                "backup, write, journal)",
                f"{t * 1000:.1f} ms ({t / timings['exact']:.2f}× exact)",
                "—",
            )
        )
    return rows


def _matching_only(text: str) -> dict[str, float]:
    """Finding the place (or, for a miss, the closest lines) on the file as loaded."""
    from forj_py.tools import _match, _pointer

    out = {}
    for way, args in _edit_args(text).items():

        def once(args: dict[str, str] = args) -> None:
            lines = _match.Lines(text)
            found = _match.find(text, args["old_string"], args["new_string"], lines=lines)
            if found is None:
                _pointer.locate(lines, args["old_string"])

        out[way] = median_of(once, 9, warmup=2)
    return out


# --- generated edits over real files -------------------------------------------------


def _worker_runner(root: Path, state: Path, config: Path) -> tuple[Any, Any]:
    from forj_py.config import load
    from forj_py.service import Worker
    from forj_py.store.journal import Journal
    from forj_py.tools import builtin_tools
    from forj_py.tools.registry import Registry

    journal = Journal(state / "journal.sqlite3")
    worker = Worker(root, load(root, str(config)), Registry(builtin_tools()), journal, state)

    def run_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        plan = worker.plan({"calls": calls})
        ids = [i["id"] for i in plan["items"] if i["disposition"] == "confirm"]
        res = worker.execute({"batch_id": plan["batch_id"], "approved": ids}, lambda e: None)
        return list(res["results"])

    return run_calls, journal


def generated_edits(rounds: int = 3) -> tuple[str, list[tuple[str, str, str]]]:
    """Every shape over every source file, ``rounds`` seeded picks each."""
    import random

    sources = edit_properties.all_sources()
    tally: dict[str, dict[str, int]] = {}
    wrong: list[str] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root, state = Path(tmp) / "project", Path(tmp) / "state"
        root.mkdir()
        state.mkdir()
        config = Path(tmp) / "config.toml"
        config.write_text("", encoding="utf-8")
        run_calls, journal = _worker_runner(root, state, config)
        rng = random.Random(SEED)
        for _ in range(rounds):
            for source in sources:
                for shape in edit_properties.SHAPES:
                    case = edit_properties.make_case(source, shape, rng)
                    if case is None:
                        continue
                    outcome = edit_properties.run_case(case, root, run_calls)
                    counts = tally.setdefault(shape, {})
                    counts[outcome.kind] = counts.get(outcome.kind, 0) + 1
                    if outcome.kind == "wrong":
                        wrong.append(f"{shape} {source.origin}:{source.name}\n{outcome.detail}")
        journal.close()
    took = time.perf_counter() - t0
    origins = sorted({s.origin for s in sources})
    head = (
        "| shape | cases | intended file | refused | written wrong |\n"
        "| --- | --- | --- | --- | --- |"
    )
    body = []
    for shape in edit_properties.SHAPES:
        c = tally.get(shape, {})
        n = sum(c.values())
        body.append(
            f"| {shape} | {n} | {c.get('intended', 0)} | {c.get('refused', 0)} | "
            f"{c.get('wrong', 0)} |"
        )
    table = "\n".join([head, *body])
    if wrong:
        table += "\n\nWritten wrong:\n" + "\n".join(wrong[:10])

    def total(shapes: tuple[str, ...], kind: str) -> tuple[int, int]:
        n = sum(sum(tally.get(s, {}).values()) for s in shapes)
        return sum(tally.get(s, {}).get(kind, 0) for s in shapes), n

    all_wrong, all_n = total(edit_properties.SHAPES, "wrong")
    rows = [
        (
            f"generated edits: {all_n} cases over {len(sources)} real files ({', '.join(origins)})",
            f"{took:.0f} s",
            "—",
        ),
        ("generated edits: written wrong", str(all_wrong), "0"),
    ]
    for shape in edit_properties.LEGIT:
        refused, n = total((shape,), "refused")
        rows.append(
            (
                f"generated edits: legitimate '{shape}' edits refused (false refusals)",
                f"{refused} of {n} ({100 * refused / max(n, 1):.1f}%)",
                "0" if shape == "clean" else "—",
            )
        )
    refused, n = total(edit_properties.MUST_REFUSE, "refused")
    rows.append(
        (
            "generated edits: fences, markers, line numbers, whole files, escapes, "
            "placeholders, blank starts refused",
            f"{refused} of {n} ({100 * refused / max(n, 1):.1f}%)",
            "100%",
        )
    )
    return table, rows


# --- refusal speed -------------------------------------------------------------------------


def _long_line_file() -> tuple[str, list[str]]:
    """About 1 MB: code lines, with a 100 KB JSON line every so often."""
    import random

    rng = random.Random(SEED)
    lines: list[str] = []
    size = 0
    while size < 1_000_000:
        if len(lines) % 97 == 50:
            record = ",".join(f'"key{k}": {rng.randint(0, 99999)}' for k in range(7000))
            line = ("{" + record + "}")[:100_000]
        else:
            line = f"    value_{len(lines)} = compute({rng.randint(0, 999)}, {rng.randint(0, 99)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n", lines


def refusal_speed() -> list[tuple[str, str, str]]:
    """Each refusal and guard at the tool's level (matching, pointer, guards), median."""
    from forj_py.tools import _guards, _match, _pointer, _regions
    from forj_py.tools._edit import split_lines

    big, big_lines = _long_line_file()
    long_at = next(k for k, line in enumerate(big_lines) if len(line) > 50_000)
    long_line = big_lines[long_at]
    one = long_line[:8000]
    eight = f"first line\n{one}\nlast line\n"

    def miss(text: str, old: str) -> Callable[[], None]:
        def run() -> None:
            lines = _match.Lines(text)
            assert _match.find(text, old, "x", lines=lines) is None
            _pointer.locate(lines, old)

        return run

    def changed(line: str) -> str:
        mid = len(line) // 2
        return line[:mid] + "CHANGED" + line[mid + 7 :]

    big_split = split_lines(big)
    lazy = "".join([*big_split[:100], "    // ... existing code ...\n", *big_split[140:]])
    cases: dict[str, Callable[[], None]] = {
        "a miss on a 100 KB line of a 1 MB file": miss(big, changed(long_line) + "\n"),
        "a miss of short lines in a 1 MB file with 100 KB lines": miss(
            big, "    nothing_here = compute(1, 2)\n    more = 3\n"
        ),
        "a miss on a file of one 8 KB line": miss(eight, changed(one) + "\n"),
        "the off-by-lines check beside 100 KB lines": lambda: _regions._echo_guard(
            "big.js",
            big_split,
            _regions.Region(long_at + 2, long_at + 2, changed(long_line)),
            long_at + 2,
            long_at + 2,
        ),
        "the pasted-text guards (whole file, fence, markers) on a 1 MB file": lambda: (
            _guards.check_pasted(
                "\n".join(big_lines[:400]),
                long_line,
                big,
                long_at + 1,
                long_at + 1,
                "n",
                "w",
                "b.js",
            )
        ),
        "the placeholder guard on a 1 MB replacement": lambda: _guards.check_placeholders(
            lazy, big, 1, "n", "b.js"
        ),
        "the double-escape guard on a 100 KB line": lambda: _guards.check_double_escape(
            long_line + "\\n" * 2, long_line, "n", "b.js"
        ),
    }
    rows = []
    slowest = ("", 0.0)
    for label, fn in cases.items():
        took = _time_raising(fn)
        if took > slowest[1]:
            slowest = (label, took)
        rows.append((f"refusal speed: {label}", f"{took * 1000:.1f} ms", "≤ 50 ms"))
    rows.append(
        (
            "refusal speed: the slowest refusal or guard",
            f"{slowest[1] * 1000:.1f} ms ({slowest[0]})",
            "≤ 50 ms",
        )
    )
    return rows


def _time_raising(fn: Callable[[], None], runs: int = 5) -> float:
    from forj_py.errors import ToolFailure

    samples = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        with contextlib.suppress(ToolFailure):  # the refusal is what is timed
            fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples[1:])


def main() -> list[tuple[str, str, str]]:
    table, rows = corpus_table()
    print(table)
    print()
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "edit-corpus.md").write_text(table + "\n")
    generated, generated_rows = generated_edits()
    print(generated)
    print()
    (results / "edit-properties.md").write_text(generated + "\n")
    return rows + generated_rows + refusal_speed() + matching_speed()


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
