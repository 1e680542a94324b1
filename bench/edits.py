"""Edit benchmarks, part of `make bench`.  Reports; asserts nothing.

- the edit corpus (``tests/edit_corpus.py``) in full: real edits from this
  repository's history and the standard library, sent clean and with the
  noise models add, through the real worker; prints the outcome table;
- matching speed: one ``edit`` of a 1 MB file (plan, review diff, approve,
  write) for each matching pass, and a miss (refusal with the closest
  lines), as a median and as a ratio to the exact pass.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, median_of  # sets the import path for forj_py

sys.path.insert(0, str(ROOT / "tests"))

import edit_corpus  # the corpus lives with the tests that use it

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


def main() -> list[tuple[str, str, str]]:
    table, rows = corpus_table()
    print(table)
    print()
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "edit-corpus.md").write_text(table + "\n")
    return rows + matching_speed()


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
