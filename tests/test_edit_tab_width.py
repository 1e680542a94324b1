"""Tab width from the file, the project, the editor or the indentation.

Edits come out written as the file would write them, or are refused.

Generated over real files: Emacs's own Lisp (tabs of 8 then alignment
spaces), C sources that indent with tabs and align with spaces after them
(the gofmt way), and files re-rendered with 2-column tabs declared in each
way a file or a project declares them, or sent by the editor.  The model's
copy comes in spaces, a level too deep, with one line changed and a line
added at a depth the copy does not show; the file must come out with that
line as the file writes indentation at its tab width, or the edit refused.
Every case runs through the real worker (plan, approve, execute).
"""

from __future__ import annotations

import gzip
import random
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker

from forj_py.service import Worker
from forj_py.tools import _tabs
from forj_py.tools._match import columns

EMACS_LISP = sorted(Path("/usr/share/emacs").glob("*/lisp/**/*.el.gz"))


def _canonical(cols: int, width: int) -> str:
    """Indentation as an editor filling tabs writes it: tabs as far as they go, then spaces."""
    return "\t" * (cols // width) + " " * (cols % width)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _tab_filled(text: str, width: int) -> bool:
    """Every indentation is tabs then fewer spaces than a tab spans."""
    for line in text.splitlines():
        indent = _indent(line)
        spaces = indent.lstrip("\t")
        if "\t" in spaces or (len(spaces) >= width and "\t" in indent):
            return False
    return True


def _lisp_sources(limit: int = 24) -> list[tuple[str, str]]:
    out = []
    for path in EMACS_LISP:
        text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        if "\n\t" in text and len(text) < 60_000 and _tab_filled(text, 8) and "\r" not in text:
            out.append((path.name.removesuffix(".gz"), text))
        if len(out) >= limit:
            break
    return out


def _c_sources(limit: int = 24) -> list[tuple[str, str]]:
    """C files that indent with tabs and align with spaces after them."""
    out = []
    roots = [
        Path("/usr/include"),
        Path("/usr/share/doc/git/contrib"),
        Path(sysconfig.get_paths()["include"]),
    ]
    for root in roots:
        for path in sorted(root.rglob("*.[ch]"))[:3000]:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            lines = text.splitlines()
            tabbed = sum(line.startswith("\t") for line in lines)
            if "\r" in text or len(text) > 60_000 or tabbed < 20:
                continue
            if any(line.startswith(" ") for line in lines if line.strip()[:1] not in ("*", "")):
                continue  # tabs only for depth: the gofmt way
            out.append((path.name, text))
            if len(out) >= limit:
                return out
    return out


@dataclass(frozen=True)
class TabCase:
    name: str
    text: str
    width: int
    old: str
    new: str
    intended: str


def make_tab_case(
    name: str, text: str, width: int, rng: random.Random, tab_filled: bool = True
) -> TabCase | None:
    """One edit as a model sends it: spaces, a level deep, a line added at a new depth."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 12 or not lines[-1].endswith("\n"):
        return None
    for _ in range(40):
        i = rng.randrange(len(lines) - 4)
        block = lines[i : i + rng.randint(3, 5)]
        if not all(line.strip() for line in block) or not block[0].startswith("\t"):
            continue
        keys = [line.strip() for line in block]
        if (
            sum([x.strip() for x in lines[k : k + len(block)]] == keys for k in range(len(lines)))
            != 1
        ):
            continue
        k = rng.randrange(len(block))
        indent = _indent(block[k])
        # A file filling tabs writes any depth one way (alignment two columns
        # in, or a level deeper); one aligning with spaces after tabs (gofmt)
        # writes a level deeper as one more tab before the same alignment.
        extra = rng.choice((2, width)) if tab_filled else width
        cols_k = columns(indent, width)
        added = "XADDED(1);\n"
        # The copy in spaces, tabs expanded at the file's width, maybe a level deep.
        drift = rng.choice((0, 4))
        copy = [" " * (columns(_indent(x), width) + drift) + x.lstrip(" \t") for x in block]
        new = [*copy[: k + 1], " " * (cols_k + drift + extra) + added, *copy[k + 1 :]]
        meant = [*block[: k + 1], _canonical(cols_k + extra, width) + added, *block[k + 1 :]]
        intended = "".join(lines[:i] + meant + lines[i + len(block) :])
        return TabCase(name, text, width, "".join(copy), "".join(new), intended)
    return None


Declare = Callable[[str, Path, int], tuple[str, list[dict[str, Any]]]]


def _undeclared(text: str, project: Path, width: int) -> tuple[str, list[dict[str, Any]]]:
    return text, []


def _emacs_first_line(text: str, project: Path, width: int) -> tuple[str, list[dict[str, Any]]]:
    return f"/* -*- mode: c; tab-width: {width}; -*- */\n" + text, []


def _emacs_local_variables(
    text: str, project: Path, width: int
) -> tuple[str, list[dict[str, Any]]]:
    return text + f"\n/* Local Variables: */\n/* tab-width: {width} */\n/* End: */\n", []


def _vim_modeline(text: str, project: Path, width: int) -> tuple[str, list[dict[str, Any]]]:
    return text + f"/* vim: set ts={width} sw={width}: */\n", []


def _editorconfig(text: str, project: Path, width: int) -> tuple[str, list[dict[str, Any]]]:
    (project / ".editorconfig").write_text(f"root = true\n\n[*]\ntab_width = {width}\n")
    return text, []


def _editor(text: str, project: Path, width: int) -> tuple[str, list[dict[str, Any]]]:
    return text, [{"path": "f.c", "width": width}]


DECLARATIONS: dict[str, Declare] = {
    "emacs-first-line": _emacs_first_line,
    "emacs-local-variables": _emacs_local_variables,
    "vim-modeline": _vim_modeline,
    "editorconfig": _editorconfig,
    "editor": _editor,
}


def _run(worker: Worker, calls: list[dict[str, Any]], hints: list[dict[str, Any]]) -> Any:
    plan = worker.plan({"calls": calls, "tab_widths": hints})
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": [c["id"] for c in calls]}, lambda e: None
    )
    return result["results"]


def _apply(
    worker: Worker, project: Path, name: str, text: str, old: str, new: str, hints: list[Any]
) -> tuple[dict[str, Any], str]:
    (project / name).write_text(text, encoding="utf-8")
    (read,) = _run(worker, [{"id": "r", "name": "read_file", "args": {"path": name}}], hints)
    assert read["ok"], read
    args = {"path": name, "old_string": old, "new_string": new}
    (r,) = _run(worker, [{"id": "e", "name": "edit", "args": args}], hints)
    return r, (project / name).read_text(encoding="utf-8")


def _check(r: dict[str, Any], after: str, before: str, intended: str) -> str:
    if not r["ok"]:
        assert after == before, "refused, yet the file changed"
        return "refused"
    assert after == intended, (r, after)
    return "intended"


def test_real_sources_are_found() -> None:
    assert len(_lisp_sources()) >= 10
    assert len(_c_sources()) >= 5


def test_lisp_alignment_after_tabs_in_emacs_own_files_comes_out_as_emacs_writes_it(
    make_worker: MakeWorker, project: Path
) -> None:
    """Emacs Lisp: tabs of 8, then alignment spaces; a copy in spaces, drifted."""
    worker = make_worker()
    rng = random.Random(28)
    tally = {"intended": 0, "refused": 0}
    for name, text in _lisp_sources():
        case = make_tab_case(name, text, 8, rng)
        if case is None:
            continue
        r, after = _apply(worker, project, name, text, case.old, case.new, [])
        tally[_check(r, after, text, case.intended)] += 1
    assert tally["intended"] >= 8 and tally["refused"] <= tally["intended"] // 2, tally


def test_gofmt_alignment_spaces_after_tabs_come_out_as_the_file_writes_them(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    rng = random.Random(34)
    tally = {"intended": 0, "refused": 0}
    for name, text in _c_sources():
        case = make_tab_case(name, text, 8, rng, tab_filled=False)
        if case is None:
            continue
        r, after = _apply(worker, project, name, text, case.old, case.new, [])
        tally[_check(r, after, text, case.intended)] += 1
    assert tally["intended"] >= 4, tally


@pytest.mark.parametrize("how", sorted(DECLARATIONS))
def test_two_column_tabs_declared_by_the_file_project_or_editor_are_written_at_two(
    make_worker: MakeWorker, project: Path, how: str
) -> None:
    """Files re-rendered with 2-column tabs: the edit lands as the file writes it."""
    worker = make_worker()
    rng = random.Random(2)
    tally = {"intended": 0, "refused": 0}
    for _, two in _c_sources():
        text, hints = DECLARATIONS[how](two, project, 2)
        case = make_tab_case("f.c", text, 2, rng, tab_filled=False)
        if case is None:
            continue
        r, after = _apply(worker, project, "f.c", text, case.old, case.new, hints)
        tally[_check(r, after, text, case.intended)] += 1
    # Blocks copied at one depth are refused where a new depth is asked for
    # (four spaces a tab or the file's width: one depth cannot tell).
    assert tally["intended"] >= 5, tally


def _emacs_style(text: str, width: int, step: int) -> str | None:
    """A spaces-indented file as Emacs with ``indent-tabs-mode`` writes it at ``width``."""
    out = []
    for line in text.splitlines(keepends=True):
        indent = _indent(line)
        if "\t" in indent or len(indent) % 4:
            return None
        out.append(_canonical(len(indent) // 4 * step, width) + line[len(indent) :])
    return "".join(out)


STDLIB = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def test_width_inferred_from_a_file_mixing_tabs_and_spaces_places_the_edit(
    make_worker: MakeWorker, project: Path
) -> None:
    """Indented by 2 with tabs of 4 (no declaration): only width 4 makes the depths agree."""
    worker = make_worker()
    rng = random.Random(4)
    tally = {"intended": 0, "refused": 0}
    for path in STDLIB[:80]:
        source = path.read_text(encoding="utf-8", errors="replace")
        text = _emacs_style(source, 4, 2) if len(source) < 60_000 else None
        if text is None or "\r" in text:
            continue
        assert _tabs.inferred(text) in (4, None)
        case = make_tab_case("f.py", text, 4, rng)
        if case is None:
            continue
        r, after = _apply(worker, project, "f.py", text, case.old, case.new, [])
        tally[_check(r, after, text, case.intended)] += 1
    assert tally["intended"] >= 5, tally


def test_inference_does_not_guess_on_emacs_lisp_or_tabs_alone() -> None:
    for _, text in _lisp_sources(200):
        assert _tabs.inferred(text) in (None, 8)
    assert _tabs.inferred("a\n\tb\n\t\tc\n\t\t\td\n") is None
    assert _tabs.inferred("a\n    b\n        c\n") is None


def test_tab_width_precedence_file_then_editorconfig_then_editor_then_indentation(
    tmp_path: Path,
) -> None:
    root = tmp_path
    path = root / "f.c"
    mixed = "f\n" + "".join("  a\n\tb\n\t  c\n" for _ in range(4))
    assert _tabs.inferred(mixed) == 4
    assert _tabs.tab_width(root, path, mixed) == 4
    assert _tabs.tab_width(root, path, mixed, editor=3) == 3
    (root / ".editorconfig").write_text("root = true\n[*.c]\ntab_width = 6\n")
    assert _tabs.tab_width(root, path, mixed, editor=3) == 6
    declared = "/* -*- tab-width: 2 -*- */\n" + mixed
    assert _tabs.tab_width(root, path, declared, editor=3) == 2
    # Out of bounds says nothing.
    assert _tabs.tab_width(root, path, "/* -*- tab-width: 99 -*- */\n", editor=None) == 6


def test_editor_tab_width_hint_is_validated_bounded_one_to_thirty_two(
    make_worker: MakeWorker,
) -> None:
    from forj_py.errors import ProtocolError

    worker = make_worker()
    calls = [{"id": "r", "name": "read_file", "args": {"path": "README.md"}}]
    for bad in (0, 33, "4", None, 4.5, True):
        with pytest.raises(ProtocolError) as raised:
            worker.plan({"calls": calls, "tab_widths": [{"path": "a.c", "width": bad}]})
        assert "tab_widths" in str(raised.value)
    with pytest.raises(ProtocolError):
        worker.plan({"calls": calls, "tab_widths": [{"path": "a.c", "width": 4, "x": 1}]})


def test_copy_at_one_depth_cannot_tell_four_spaces_a_tab_from_the_width_so_a_new_depth_is_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    """Tabs of 2 at one depth, copied as 8 spaces: a tab expanded at 2 plus a level
    of drift, or four spaces a tab; the new line's depth differs by reading: refused."""
    worker = make_worker()
    text = "/* -*- tab-width: 2 -*- */\nstruct s {\n\t\tint a;\n\t\tint b;\n};\n"
    old = "        int a;\n        int b;\n"
    r, after = _apply(worker, project, "s.c", text, old, old + "          int c;\n", [])
    assert not r["ok"] and r["error"]["details"]["problem"] == "indentation-unclear", r
    assert after == text
    # A line at a depth the copy shows is placed under either reading.
    r, after = _apply(worker, project, "s.c", text, old, old + "        int c;\n", [])
    assert r["ok"], r
    assert after == text.replace("\t\tint b;\n", "\t\tint b;\n\t\tint c;\n")
