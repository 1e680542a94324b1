"""Line-range edits (``edit_region``, ``multi_edit``): where the lines really are.

Line numbers come from the file as the model last read it.  Three things
move them away from the file as it is now, and each is handled here:

* an earlier call of the same batch changed the file: the numbers are
  mapped through those changes (:func:`map_range`), and a range that an
  earlier call rewrote is refused unless ``expected`` finds it;
* the model miscounted, and sent ``expected``: if ``expected`` is not at
  the given lines but occurs exactly once in the file (whitespace- and
  punctuation-tolerant, as ``edit`` matches), it is applied there and the
  result says ``relocated_from``;
* the model miscounted without ``expected``: when the new content's first
  or last line repeats the line just outside the range (the sign of an
  off-by-N edit), the call is refused and asks for ``expected``.

A ``multi_edit``'s regions are all numbered in the original file; they
apply bottom-up so each stays valid.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from .. import errors
from . import _guards, _match, _pointer
from ._edit import DEFAULT_TAB_WIDTH, Loaded, split_lines, tab_width, with_newlines
from .registry import ToolContext

Hunk = tuple[int, int, int]  # first line (1-based), lines replaced, lines written
KEEP_BATCHES = 16
MAX_SHIFT = 10  # how far the echo guard looks for the lines a range was meant to cover


@dataclass(frozen=True)
class Region:
    start_line: int
    end_line: int  # start_line - 1 means "insert before start_line"
    new_content: str
    expected: str | None = None


@dataclass
class Placed:
    """A region as it will be applied: its lines now, and its final text."""

    region: Region
    start: int
    end: int
    replacement: str
    matched: str | None = None  # the pass that matched ``expected``
    relocated_from: tuple[int, int] | None = None
    mapped: bool = False  # moved by earlier changes of the batch
    credentials: int = 0  # redacted credentials put back


# --- line changes of a batch ------------------------------------------------------


def _phase(ctx: ToolContext) -> str:
    return f"{ctx.batch_id}:{'plan' if ctx.overlay is not None else 'run'}"


def earlier_changes(ctx: ToolContext, canonical: str) -> list[list[Hunk]]:
    with ctx.session.lock:
        return list(ctx.session.line_changes.get((_phase(ctx), canonical), []))


def record_changes(ctx: ToolContext, canonical: str, hunks: list[Hunk]) -> None:
    """Remember what this call changed, for later calls of the same batch."""
    if not hunks:
        return
    key = (_phase(ctx), canonical)
    with ctx.session.lock:
        changes = ctx.session.line_changes
        changes.setdefault(key, []).append(sorted(hunks))
        phases = list(dict.fromkeys(phase for phase, _ in changes))
        for old in phases[:-KEEP_BATCHES]:
            for stale_key in [k for k in changes if k[0] == old]:
                del changes[stale_key]


def text_hunks(old_text: str, new_text: str) -> list[Hunk]:
    """One hunk covering what changed between two texts (common ends trimmed)."""
    old_lines, new_lines = split_lines(old_text), split_lines(new_text)
    head = 0
    limit = min(len(old_lines), len(new_lines))
    while head < limit and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while (
        tail < limit - head
        and old_lines[len(old_lines) - 1 - tail] == new_lines[len(new_lines) - 1 - tail]
    ):
        tail += 1
    replaced = len(old_lines) - head - tail
    written = len(new_lines) - head - tail
    if replaced == 0 and written == 0:
        return []
    return [(head + 1, replaced, written)]


def map_range(changes: list[list[Hunk]], start: int, end: int) -> tuple[int, int] | None:
    """Lines ``start..end`` of the file as read, in the file as it is now.

    None when an earlier change rewrote any of them (or inserted lines
    between them): their old numbers no longer name lines of the file.
    """
    for hunks in changes:
        delta = 0
        for first, replaced, written in hunks:
            after = first + replaced
            if end < start:  # an insertion point, before line ``start``
                if start <= first:
                    continue
                if start >= after:
                    delta += written - replaced
                    continue
                return None
            if end < first:
                continue
            if start >= after and not (replaced == 0 and start == first and end >= first):
                delta += written - replaced
                continue
            return None
        start, end = start + delta, end + delta
    return start, end


# --- placing regions -----------------------------------------------------------------


def place(ctx: ToolContext | None, loaded: Loaded, regions: list[Region]) -> list[Placed]:
    """Where each region goes in the file as it is now, with its final text."""
    display = loaded.sp.display
    text = loaded.text
    lines = split_lines(text)
    matcher_lines = _match.Lines(text)
    changes = earlier_changes(ctx, loaded.sp.canonical) if ctx is not None else []
    tabs: _match.TabWidth = (
        _match.once(lambda: tab_width(ctx, loaded)) if ctx is not None else DEFAULT_TAB_WIDTH
    )
    placed = []
    for region in regions:
        new_content, restored = _guards.restore_credentials(
            text, region.new_content, "new_content", display
        )
        expected = region.expected
        if expected is not None:
            expected, _ = _guards.restore_credentials(text, expected, "expected", display)
        region = Region(region.start_line, region.end_line, new_content, expected)
        spot = map_range(changes, region.start_line, region.end_line) if changes else None
        mapped = bool(changes) and spot != (region.start_line, region.end_line)
        if not changes:
            spot = (region.start_line, region.end_line)
        if region.expected is not None and region.expected.strip():
            try:
                item = _with_expected(loaded, lines, matcher_lines, region, spot, tabs)
            except _match.IndentUnclear as exc:
                raise _pointer.indent_refusal(exc, "'expected'", display) from None
        else:
            item = _without_expected(loaded, lines, region, spot)
        item.mapped = mapped and item.relocated_from is None
        item.credentials = restored
        replaced = "".join(lines[item.start - 1 : item.end])
        where = f"lines {item.start}-{item.end} of {display}"
        _guards.check_double_escape(item.replacement, replaced, "new_content", where)
        _guards.check_pasted(
            item.replacement, replaced, text, item.start, item.end, "new_content", where, display
        )
        _guards.check_placeholders(item.replacement, replaced, item.start, "new_content", where)
        placed.append(item)
    _check_overlaps(display, placed)
    return placed


def _bounds_error(display: str, total: int, start: int, end: int) -> errors.ToolFailure:
    return errors.bad_args(
        f"Lines {start}-{end} are outside {display}, which has {total} line(s)",
        recovery=[
            f"Use 1 <= start_line <= {total + 1} and start_line - 1 <= end_line <= {total}",
            "end_line = start_line - 1 inserts before start_line without replacing",
            "Read the file again to see its current lines",
        ],
        path=display,
        total_lines=total,
    )


def _in_bounds(total: int, start: int, end: int) -> bool:
    return 1 <= start <= total + 1 and start - 1 <= end <= total


def _plain(loaded: Loaded, region: Region, start: int, end: int) -> Placed:
    return Placed(region, start, end, with_newlines(region.new_content, loaded.newline))


def _without_expected(
    loaded: Loaded, lines: list[str], region: Region, spot: tuple[int, int] | None
) -> Placed:
    display = loaded.sp.display
    if spot is None:
        raise errors.bad_args(
            f"Lines {region.start_line}-{region.end_line} of {display} were changed by an "
            "earlier call of this batch, so those numbers no longer name lines of the file; "
            "nothing was changed",
            recovery=[
                "Send 'expected' (the text you mean to replace) so the lines can be found",
                "Or read the file again and number the lines as they are now",
            ],
            path=display,
        )
    start, end = spot
    if not _in_bounds(len(lines), start, end):
        raise _bounds_error(display, len(lines), region.start_line, region.end_line)
    if region.expected is not None and end >= start:
        # An empty 'expected' claims the range is blank.
        actual = "".join(lines[start - 1 : end])
        if actual.strip():
            raise _expected_missed(loaded, lines, region, spot, None)
    _echo_guard(display, lines, region, start, end)
    return _plain(loaded, region, start, end)


def _trivial(line: str) -> bool:
    return len(line) < 4 or not any(ch.isalnum() for ch in line)


def _echo_guard(display: str, lines: list[str], region: Region, start: int, end: int) -> None:
    """Refuse new content that repeats the lines just outside its range.

    A model that miscounted sends the right text for the wrong lines: the
    unchanged lines it kept at the edges of its new content then stand
    next to (or a few lines from) their own originals.
    """
    new_lines = [line.strip() for line in split_lines(region.new_content.replace("\r\n", "\n"))]
    if not new_lines:
        return
    total = len(lines)

    def line(n: int) -> str | None:
        return lines[n - 1].strip() if 1 <= n <= total else None

    first, last = new_lines[0], new_lines[-1]
    if end >= start and line(start) == first and line(end) == last:
        return  # the range already starts and ends where the new content does
    shift = 0
    for distance in range(1, MAX_SHIFT + 1):
        for n in (-distance, distance):
            if end < start:
                # An insertion whose edge repeats its neighbour is what a diff
                # shows when it slides an insertion along repeated lines: no
                # evidence on its own.  Both edges repeating their neighbours is.
                fits = (
                    distance == 1
                    and n < 0
                    and not (_trivial(first) and _trivial(last))
                    and line(start - 1) == first
                    and line(start) == last
                    and len(new_lines) > 1
                )
            else:
                both = line(start + n) == first and line(end + n) == last
                fits = both and not (_trivial(first) and _trivial(last))
                if distance == 1 and not fits:
                    echo = (n < 0 and not _trivial(first) and line(start - 1) == first) or (
                        n > 0 and not _trivial(last) and line(end + 1) == last
                    )
                    # One edge repeating a neighbour is evidence only when the
                    # shifted lines share more with the new content than the
                    # lines given do.
                    fits = echo and _shared(lines, new_lines, start + n, end + n) > _shared(
                        lines, new_lines, start, end
                    )
            if fits:
                shift = n
                break
        if shift:
            break
    reason = ""
    if shift:
        edge = "first" if shift < 0 else "last"
        reason = (
            f"its {edge} line repeats a line just {'above' if shift < 0 else 'below'} the "
            "range, so it would end up twice"
        )
    elif end >= start:
        shift, reason = _resembles_nearby(lines, new_lines, start, end)
    if not shift:
        return
    suggest_start = max(start + shift, 1)
    suggest_end = min(end + shift, total) if end >= start else suggest_start - 1
    raise errors.bad_args(
        f"new_content for lines {start}-{end} of {display} looks placed {abs(shift)} line(s) "
        f"{'too low' if shift < 0 else 'too high'}: {reason}; nothing was changed. Perhaps "
        f"you mean lines {suggest_start}-{suggest_end}",
        recovery=[
            "Send 'expected' with the current text of the lines you mean to replace; the "
            "lines are then found even if the numbers are off",
            "Or correct start_line/end_line after reading those lines again",
        ],
        path=display,
        problem="off-by-lines",
        suggested={"start_line": suggest_start, "end_line": suggest_end},
    )


def _shared(lines: list[str], new_lines: list[str], first: int, last: int) -> int:
    """How many telling lines ``new_lines`` and lines ``first..last`` have in common."""
    have = Counter(
        x.strip() for x in lines[max(first - 1, 0) : max(last, 0)] if not _trivial(x.strip())
    )
    count = 0
    for line in new_lines:
        if have[line] > 0:
            have[line] -= 1
            count += 1
    return count


UNLIKE = 0.5  # new content this unlike the lines it replaces...
ALIKE = 0.8  # ...and this like lines a few away was meant for those


def _resembles_nearby(
    lines: list[str], new_lines: list[str], start: int, end: int
) -> tuple[int, str]:
    """A shift to lines the new content resembles far more than the given ones."""
    body = [line for line in new_lines if line]
    if not body:
        return 0, ""
    # Bounded comparison: a long line costs one pass, not its length squared.
    similarity = _match.Similarity(body)

    def alike(first: int, last: int) -> float:
        return similarity.ratio([x.strip() for x in lines[first - 1 : last] if x.strip()])

    here = alike(start, end)
    if here >= UNLIKE:
        return 0, ""
    best, best_ratio = 0, ALIKE
    for distance in range(1, MAX_SHIFT + 1):
        for n in (-distance, distance):
            if start + n < 1 or end + n > len(lines):
                continue
            ratio = alike(start + n, end + n)
            if ratio > best_ratio:
                best, best_ratio = n, ratio
    if not best:
        return 0, ""
    reason = (
        f"it is {best_ratio:.0%} like lines {start + best}-{end + best} but only {here:.0%} "
        "like the lines it would replace"
    )
    return best, reason


def _window_match(
    loaded: Loaded, lines: list[str], region: Region, start: int, end: int, tabs: _match.TabWidth
) -> _match.Found | None:
    """``expected`` matched against exactly the stated lines, or None.

    A final newline can be read two ways: ``X\\n\\n`` is the lines ``X`` and
    an empty one (the last newline ends the last line), or ``X`` and two
    empty ones (the pieces between newlines are the lines).  Where the stated
    lines match either reading, they are the place; ``new_content`` is then
    read the way ``expected`` was.
    """
    assert region.expected is not None
    window = "".join(lines[start - 1 : end])
    model = region.expected.replace("\r\n", "\n")
    new = region.new_content.replace("\r\n", "\n")
    readings = [(_expected_text(model, loaded.newline), new)]
    if model.endswith("\n"):
        # The pieces between newlines as the lines: the new content's too.
        readings.append((with_newlines(model, loaded.newline), new + "\n" if new else new))
    for expected, content in readings:
        found = _match.find(
            window,
            expected,
            with_newlines(content, loaded.newline),
            loaded.newline,
            whole_lines=True,
            tab_width=tabs,
        )
        if found is None:
            continue
        spans = [s for s in found.spans if s.first_line == 1 and s.last_line == end - start + 1]
        if spans:
            return _match.Found(found.way, spans)
    return None


def _expected_text(expected: str, newline: str) -> str:
    text = expected.replace("\r\n", "\n")
    # One final newline ends the last line; more are blank lines of their own.
    return with_newlines(text[:-1] if text.endswith("\n") else text, newline)


def _with_expected(
    loaded: Loaded,
    lines: list[str],
    matcher_lines: _match.Lines,
    region: Region,
    spot: tuple[int, int] | None,
    tabs: _match.TabWidth,
) -> Placed:
    assert region.expected is not None
    display = loaded.sp.display
    if spot is not None and _in_bounds(len(lines), *spot) and spot[1] >= spot[0]:
        here = _window_match(loaded, lines, region, *spot, tabs)
        if here is not None:
            return Placed(region, spot[0], spot[1], here.spans[0].replacement, matched=here.way)
    if region.end_line < region.start_line:
        raise _expected_missed(loaded, lines, region, spot, None)
    found = _match.find(
        loaded.text,
        _expected_text(region.expected, loaded.newline),
        with_newlines(region.new_content, loaded.newline),
        loaded.newline,
        lines=matcher_lines,
        whole_lines=True,
        tab_width=tabs,
    )
    if found is None:
        raise _expected_missed(loaded, lines, region, spot, matcher_lines)
    if len(found.spans) > 1 or found.others:
        # Several places, at one pass or across passes: never pick one.
        listed, places = _pointer.list_places(matcher_lines, found.places)
        raise errors.bad_args(
            f"Lines {region.start_line}-{region.end_line} of {display} are not what "
            f"'expected' says, and 'expected' occurs {len(found.places)} times elsewhere "
            f"in the file, so the place cannot be told; nothing was changed:\n{listed}",
            recovery=[
                "Give start_line/end_line of the one you mean (see the list)",
                "Or add a neighbouring line to 'expected' (and new_content) so it occurs once",
            ],
            path=display,
            matches=places,
        )
    span = found.spans[0]
    return Placed(
        region,
        span.first_line,
        span.last_line,
        span.replacement,
        matched=found.way,
        relocated_from=(region.start_line, region.end_line),
    )


def _expected_missed(
    loaded: Loaded,
    lines: list[str],
    region: Region,
    spot: tuple[int, int] | None,
    matcher_lines: _match.Lines | None,
) -> errors.ToolFailure:
    assert region.expected is not None
    display = loaded.sp.display
    text, details, near = _pointer.locate(
        matcher_lines or _match.Lines(loaded.text), region.expected
    )
    where = f"Lines {region.start_line}-{region.end_line}"
    if spot is not None and spot != (region.start_line, region.end_line):
        where += f" (lines {spot[0]}-{spot[1]} after this batch's earlier changes)"
    return errors.bad_args(
        f"{where} of {display} are not what 'expected' says, and it occurs nowhere else "
        f"in the file; nothing was changed. {text}",
        recovery=_pointer.next_steps("'expected'", near),
        path=display,
        **details,
    )


def _check_overlaps(display: str, placed: list[Placed]) -> None:
    ordered = sorted(placed, key=lambda p: (p.start, p.end))
    for before, after in itertools.pairwise(ordered):
        if after.start <= before.end or (after.start == before.start and after.end == before.end):
            raise errors.bad_args(
                f"Edits to {display} overlap: lines {before.start}-{before.end} and "
                f"{after.start}-{after.end}",
                recovery=["Merge overlapping edits into one, or make their line ranges disjoint"],
                path=display,
            )


def apply(loaded: Loaded, placed: list[Placed]) -> tuple[str, list[Hunk]]:
    """The new text, and the line changes made (in the numbering before them)."""
    lines = split_lines(loaded.text)
    hunks: list[Hunk] = []
    for item in sorted(placed, key=lambda p: (p.start, p.end), reverse=True):
        replacement = item.replacement
        at_eof_without_newline = bool(lines) and (
            item.end == len(lines) and not lines[-1].endswith("\n")
        )
        if replacement and not replacement.endswith("\n") and not at_eof_without_newline:
            replacement += loaded.newline
        if (
            item.start > 1
            and item.end < item.start
            and lines
            and item.start - 1 == len(lines)
            and not lines[-1].endswith("\n")
        ):
            # Appending after a last line that has no newline: give it one.
            lines[-1] += loaded.newline
        written = split_lines(replacement)
        lines[item.start - 1 : item.end] = written
        hunks.append((item.start, item.end - item.start + 1, len(written)))
    return "".join(lines), hunks
