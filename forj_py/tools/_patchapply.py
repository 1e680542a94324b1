"""Placing a patch's hunks in a file, the way ``edit`` finds its text.

Each hunk's old side (context and removed lines) is looked for with the
passes of :mod:`._match`: exact, then ignoring trailing whitespace, then
indentation, then typographic punctuation; the first pass that finds it
decides, and the new side is written the way that pass writes
``new_string`` (re-indented, the file's punctuation, unchanged lines as
the file has them).  Never fuzzier: a context line that is missing or
changed is no match, and the hunk is refused with the closest lines.

Hunks apply in order and never overlap: each is looked for after the one
before it.  Where the patch says where a hunk goes (a unified diff's line
numbers, corrected by how far the previous hunk was off), the match
nearest that line wins; an envelope's ``@@`` anchor lines are found first,
and the hunk after them.  A hunk with neither a line number nor an anchor
found once must match one place in the whole file, at any pass, or it is
refused naming every place.  Every hunk reports where it landed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ToolFailure
from ..protocol import ErrorKind, ErrorType
from . import _match, _pointer
from ._patchparse import HunkSpec


@dataclass(frozen=True)
class Applied:
    """Where one hunk landed."""

    hunk: int  # 1-based, in the file's hunks
    old_start: int  # 1-based first line of the old side in the file as it was
    old_lines: int
    new_start: int  # 1-based first line of the new side in the patched file
    new_lines: int
    matched: str  # the pass that found it ("insert" for a hunk without old lines)
    offset: int | None  # lines away from where a unified diff said (None: no number given)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hunk": self.hunk,
            "old_start": self.old_start,
            "old_lines": self.old_lines,
            "new_start": self.new_start,
            "new_lines": self.new_lines,
            "matched": self.matched,
        }
        if self.offset:
            out["offset"] = self.offset
        return out


def patch_failed(message: str, path: str, recovery: list[str], **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.PATCH_FAILED,
        recovery=recovery,
        path=path,
        **details,
    )


def apply(
    display: str, text: str, newline: str, hunks: list[HunkSpec]
) -> tuple[str, list[Applied]]:
    """``text`` with every hunk applied, and where each landed; or a refusal."""
    lines = _match.Lines(text)
    cursor = 0  # hunks are looked for from here on (0-based line)
    drift = 0  # how far the previous hunk landed from its stated line
    grown = 0  # lines added minus removed by earlier hunks
    pieces: list[str] = []
    at = 0  # character offset in ``text`` copied up to
    applied: list[Applied] = []
    for number, hunk in enumerate(hunks, 1):
        old, new = hunk.old_lines, hunk.new_lines
        start = cursor
        anchored = bool(hunk.anchors)
        for anchor in hunk.anchors:
            found_anchor = _find(lines, [anchor], start, None, False)
            if found_anchor is None:
                raise _anchor_missed(display, lines, number, hunk, anchor)
            if anchored and len(_places(lines, [anchor], start, False)) > 1:
                anchored = False  # an anchor read in two places says nothing
            start = found_anchor[0] + 1
        if not old:
            first, way = _insertion_point(lines, hunk, start, drift), "insert"
            n = 0
        else:
            hint = None if hunk.old_start is None else max(hunk.old_start - 1 + drift, 0)
            located = _locate(lines, hunk, start, hint)
            if located is None:
                raise _missed(display, lines, number, hunk, cursor)
            first, n, way, old, new = located
            if hint is None and not anchored:
                # Nothing says where: the context must name one place in the file.
                places = _places(lines, old, 0, hunk.end_of_file)
                if len(places) > 1:
                    raise _ambiguous(display, lines, number, hunk, places, len(old))
        try:
            replacement = _replacement(lines, first, n, old, new, newline, way, hunk)
        except _match.IndentUnclear as exc:
            raise patch_failed(
                f"Hunk {number} of {display} (patch line {hunk.patch_line}) matched only "
                "ignoring indentation, and the file indents with tabs and spaces in a way "
                f"the hunk's depths do not map onto: the depth of {exc.line.strip()[:80]!r} "
                "cannot be told. Nothing was changed",
                display,
                ["Write the hunk's lines with the file's own tabs and spaces"],
                hunk=number,
                patch_line=hunk.patch_line,
                problem="indentation-unclear",
            ) from None
        begin = lines.starts[first] if first < len(lines) else len(text)
        end = lines.end_of(first + n - 1, True) if n else begin
        if not n and first == len(lines) and text and not lines.has_final_newline:
            replacement = newline + replacement  # the last line gets its end first
        pieces += [text[at:begin], replacement]
        at = end
        offset = None if hunk.old_start is None else first + 1 - hunk.old_start
        if hunk.old_start is not None:
            drift = first + 1 - hunk.old_start
        applied.append(
            Applied(
                hunk=number,
                old_start=first + 1 if n else first,
                old_lines=n,
                new_start=first + 1 + grown,
                new_lines=len(new),
                matched=way,
                offset=offset if n else None,
            )
        )
        grown += len(new) - n
        cursor = first + n
    pieces.append(text[at:])
    return "".join(pieces), applied


def _locate(
    lines: _match.Lines, hunk: HunkSpec, start: int, hint: int | None
) -> tuple[int, int, str, list[str], list[str]] | None:
    """First line, line count, pass, and the old and new lines as placed."""
    old, new = hunk.old_lines, hunk.new_lines
    found = _find(lines, old, start, hint, hunk.end_of_file)
    if found is not None:
        return found[0], len(old), found[1], old, new
    # Blank context lines a model added around a hunk for spacing.
    trimmed = _trim_blank_context(hunk)
    if trimmed is not None:
        t_old, t_new = trimmed
        if t_old:
            found = _find(lines, t_old, start, hint, hunk.end_of_file)
            if found is not None:
                return found[0], len(t_old), found[1], t_old, t_new
    return None


def _trim_blank_context(hunk: HunkSpec) -> tuple[list[str], list[str]] | None:
    body = list(hunk.lines)
    while body and body[0] == (" ", "") and len(body) > 1:
        body.pop(0)
    while body and body[-1] == (" ", "") and len(body) > 1:
        body.pop()
    if len(body) == len(hunk.lines):
        return None
    return [t for tag, t in body if tag != "+"], [t for tag, t in body if tag != "-"]


def _find(
    lines: _match.Lines, want_lines: list[str], start: int, hint: int | None, at_end: bool
) -> tuple[int, str] | None:
    """Where ``want_lines`` start at the first pass that finds them from ``start``."""
    n = len(want_lines)
    if not any(line.strip() for line in want_lines):
        # Blank lines alone match everywhere: only where the patch says.
        if hint is not None and lines.content[hint : hint + n] == want_lines:
            return hint, "exact"
        return None
    for way in _match.PASSES:
        key = _match.KEYS[way]
        want = [key(line) for line in want_lines]
        keys = lines.keys(way)
        anchor = max(range(n), key=lambda k: len(want[k]))
        target = want[anchor]
        positions = []
        pos = start + anchor - 1
        while True:
            try:
                pos = keys.index(target, pos + 1)
            except ValueError:
                break
            first = pos - anchor
            if first < start or first + n > len(keys):
                continue
            if keys[first : first + n] == want:
                positions.append(first)
        if at_end:
            positions = [p for p in positions if p + n == len(keys)] or positions
        if positions:
            if hint is None:
                return positions[0], way
            return min(positions, key=lambda p: (abs(p - hint), p)), way
    return None


def _places(lines: _match.Lines, want_lines: list[str], start: int, at_end: bool) -> list[int]:
    """Every first line, from ``start``, where any pass finds ``want_lines``."""
    n = len(want_lines)
    if not any(line.strip() for line in want_lines):
        return []
    found: set[int] = set()
    for way in _match.PASSES:
        key = _match.KEYS[way]
        want = [key(line) for line in want_lines]
        keys = lines.keys(way)
        anchor = max(range(n), key=lambda k: len(want[k]))
        target = want[anchor]
        pos = start + anchor - 1
        while True:
            try:
                pos = keys.index(target, pos + 1)
            except ValueError:
                break
            first = pos - anchor
            if first >= start and first + n <= len(keys) and keys[first : first + n] == want:
                found.add(first)
    if at_end:
        return [p for p in sorted(found) if p + n == len(lines)] or sorted(found)
    return sorted(found)


def _ambiguous(
    display: str,
    lines: _match.Lines,
    number: int,
    hunk: HunkSpec,
    places: list[int],
    n: int,
) -> ToolFailure:
    spans = [_match.Span(lines.starts[p], lines.starts[p], p + 1, p + n, "") for p in places]
    listed, matches = _pointer.list_places(lines, spans)
    return patch_failed(
        f"Hunk {number} of {display} (patch line {hunk.patch_line}) could go in "
        f"{len(places)} places: its context and removed lines occur more than once, and "
        f"the hunk says neither a line number nor a '@@' line found once. Nothing was "
        f"changed:\n{listed}",
        display,
        [
            "Add context lines (or an '@@ ' line naming the function or class) so the hunk "
            "matches one place",
            "Or send a unified diff whose '@@ -l,n +l,n @@' headers give the line numbers",
        ],
        hunk=number,
        patch_line=hunk.patch_line,
        matches=matches,
    )


def _insertion_point(lines: _match.Lines, hunk: HunkSpec, start: int, drift: int) -> int:
    """Where a hunk with no old lines goes (0-based line it is inserted before)."""
    if hunk.old_start is not None:
        # "@@ -5,0 +6,2 @@" inserts after line 5.
        return min(max(hunk.old_start + drift, start), len(lines))
    if hunk.anchors and not hunk.end_of_file:
        return start
    return len(lines)


def _replacement(
    lines: _match.Lines,
    first: int,
    n: int,
    old: list[str],
    new: list[str],
    newline: str,
    way: str,
    hunk: HunkSpec,
) -> str:
    new_text = "".join(line + "\n" for line in new)
    if n and way != "exact":
        span = _match._line_span(lines, first, old, new_text, newline, True, way)
        replacement = span.replacement
    else:
        replacement = new_text.replace("\n", newline) if newline != "\n" else new_text
    reaches_end = first + n == len(lines)
    if replacement and reaches_end:
        keep_open = not lines.has_final_newline and not (hunk.old_no_eol and not hunk.new_no_eol)
        if hunk.new_no_eol or (n and keep_open):
            replacement = replacement[: -len(newline)]
    return replacement


def _missed(
    display: str, lines: _match.Lines, number: int, hunk: HunkSpec, cursor: int
) -> ToolFailure:
    sent = "\n".join(hunk.old_lines)
    earlier = _find(lines, hunk.old_lines, 0, None, False)
    if earlier is not None and earlier[0] < cursor:
        return patch_failed(
            f"Hunk {number} of {display} (patch line {hunk.patch_line}) matches only at line "
            f"{earlier[0] + 1}, before or inside the previous hunk; hunks must come in file "
            "order and not overlap. Nothing was changed",
            display,
            ["Order the hunks of each file from top to bottom, and merge overlapping ones"],
            hunk=number,
            patch_line=hunk.patch_line,
        )
    text, details, near = _pointer.locate(lines, sent)
    return patch_failed(
        f"Hunk {number} of {display} (patch line {hunk.patch_line}) does not apply: its "
        "context and removed lines are not in the file, not even ignoring whitespace and "
        f"typographic punctuation. Nothing was changed. {text}",
        display,
        _next_steps(display, near),
        hunk=number,
        patch_line=hunk.patch_line,
        **details,
    )


def _anchor_missed(
    display: str, lines: _match.Lines, number: int, hunk: HunkSpec, anchor: str
) -> ToolFailure:
    text, details, near = _pointer.locate(lines, anchor)
    return patch_failed(
        f"Hunk {number} of {display} (patch line {hunk.patch_line}) is anchored at "
        f"'@@ {anchor[:120]}', and no line after the previous hunk reads so. Nothing was "
        f"changed. {text}",
        display,
        _next_steps(display, near),
        hunk=number,
        patch_line=hunk.patch_line,
        anchor=anchor,
        **details,
    )


def _next_steps(display: str, near: _match.Closest | None) -> list[str]:
    steps = []
    if near is not None:
        steps.append(
            f"If lines {near.first_line}-{near.last_line} are what the hunk means, copy its "
            "context and '-' lines from them as they are now (see the diff)"
        )
    steps.append(f"Read {display} again (read_file) and make the patch from what it holds now")
    return steps
