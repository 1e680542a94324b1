"""Diff markers in ``old_string`` are never read as indentation.

Generated over real files whose own lines start with '-' or '+' (the
Markdown lists of this repository's docs, now and as its history left
them): an ``old_string`` copied from a unified diff (' ' before the
context lines, the changed lines as the diff shows them) matches those
lines only if each ' ' marker is read as one column of indentation.  It is
refused with that reason.  The same lines copied a level out as a whole
(no markers, a list at another depth) still land.  Every case runs through
the real worker.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

from conftest import MakeWorker, call, run

from forj_py.service import Worker

ROOT = Path(__file__).resolve().parent.parent


def _sources() -> list[tuple[str, str]]:
    """Markdown files of this repository, as they stand and as earlier commits left them."""
    out = [(p.name, p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").glob("*.md"))]
    log = subprocess.run(
        ["git", "log", "--format=%H", "-n", "200", "--", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for commit in log[::20]:
        for doc in ("docs/emacs.md", "docs/tools.md", "docs/architecture.md", "README.md"):
            shown = subprocess.run(
                ["git", "show", f"{commit}:{doc}"], cwd=ROOT, capture_output=True, check=False
            )
            if shown.returncode == 0:
                out.append((Path(doc).name, shown.stdout.decode("utf-8", "replace")))
    return [(n, t) for n, t in out if "\r" not in t and "\t" not in t]


def _signed(line: str) -> bool:
    """A line that starts as a diff's changed line would: '-' or '+' in its first column."""
    return line[:1] in "+-" and len(line.strip()) > 3


def _block(lines: list[str], rng: random.Random) -> tuple[int, int] | None:
    """Lines around one starting with '-' or '+', unique in the file, all with text."""
    signed = [i for i, line in enumerate(lines) if _signed(line)]
    rng.shuffle(signed)
    for k in signed[:20]:
        i, j = max(k - rng.randint(1, 2), 0), min(k + rng.randint(2, 3), len(lines))
        block = lines[i:j]
        if not all(x.strip() for x in block) or not any(not _signed(x) for x in block):
            continue
        keys = [x.strip() for x in block]
        stripped = [x.strip() for x in lines]
        hits = sum(stripped[n : n + len(block)] == keys for n in range(len(lines)))
        if hits == 1:
            return i, j
    return None


def _exec(worker: Worker, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    _, result = run(worker, list(calls), approved=[c["id"] for c in calls], capacity_bytes=1 << 22)
    return list(result["results"])


def _edit(worker: Worker, project: Path, name: str, text: str, old: str, new: str) -> Any:
    (project / name).write_text(text, encoding="utf-8")
    (r,) = _exec(worker, call("r", "read_file", path=name))
    assert r["ok"], r
    (e,) = _exec(worker, call("e", "edit", path=name, old_string=old, new_string=new))
    return e, (project / name).read_text(encoding="utf-8")


def test_sources_hold_lines_starting_with_diff_signs() -> None:
    assert len(_sources()) >= 8


def test_old_string_in_diff_form_is_refused_never_read_as_indentation(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    rng = random.Random(2811)
    refused = 0
    for name, text in _sources():
        lines = text.splitlines(keepends=True)
        picked = _block(lines, rng)
        if picked is None:
            continue
        i, j = picked
        block = lines[i:j]
        # As a diff shows them: ' ' before the context lines, the '-' and '+'
        # lines as they stand (their sign read as the diff's marker).
        old = "".join(x if _signed(x) else " " + x for x in block)
        if old in text:
            continue  # the file holds the text as sent: no marker is read as anything
        new = "".join(x[1:] if x[:1] == " " else x for x in old.splitlines(keepends=True))
        new = new.replace(block[0].strip(), block[0].strip() + " (changed)", 1)
        r, after = _edit(worker, project, name, text, old, new)
        assert not r["ok"], (name, old, r)
        assert after == text
        if r["error"]["details"].get("problem") == "diff-markers":
            assert "read as one column of indentation" in r["error"]["message"]
            refused += 1
    assert refused >= 5, refused


def test_lists_copied_a_level_out_as_a_whole_still_land(
    make_worker: MakeWorker, project: Path
) -> None:
    """No markers: the same lines at another depth, drifting alike, are placed."""
    worker = make_worker()
    rng = random.Random(2812)
    landed = 0
    for name, text in _sources():
        lines = text.splitlines(keepends=True)
        picked = _block(lines, rng)
        if picked is None:
            continue
        i, j = picked
        block = lines[i:j]
        old = "".join("  " + x for x in block)
        if old in text:
            continue
        new_block = [*block[:-1], block[-1].rstrip("\n") + " (changed)\n"]
        new = "".join("  " + x for x in new_block)
        r, after = _edit(worker, project, name, text, old, new)
        if r["ok"]:
            assert after == "".join(lines[:i] + new_block + lines[j:]), (name, r)
            landed += 1
        else:
            assert after == text
            assert r["error"]["details"].get("problem") != "diff-markers", r
    assert landed >= 5, landed


def test_hunk_copied_into_old_string_names_the_lines_and_the_reason(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "# Steps\n\nRun it:\n- build the worker\n- start Emacs\nThen wait.\n"
    old = " Run it:\n- build the worker\n- start Emacs\n Then wait.\n"
    r, after = _edit(worker, project, "s.md", text, old, "Run it:\n- build\nThen wait.\n")
    assert not r["ok"] and r["error"]["details"]["problem"] == "diff-markers", r
    assert "lines 3-6" in r["error"]["message"]
    assert after == text
