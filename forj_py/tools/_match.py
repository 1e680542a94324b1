"""Finding the text an edit means, the way models actually send it.

A model copies ``old_string`` from what it read, and the copy is rarely
exact: trailing blanks dropped, the block indented one level more or less,
tabs typed as spaces, straight quotes turned curly.  :func:`find` tries
passes in order; the first that finds anything decides how the new text
is written, and the looser ones still look for other places (a copy can
equal a twin elsewhere exactly while a looser pass finds the block it was
copied from: two candidates, so the caller refuses and names both):

``exact``
    the text as sent;
``trailing``
    line by line, ignoring trailing whitespace;
``indent``
    line by line, ignoring leading and trailing whitespace; the new text is
    re-indented by the offset the match showed (relative indentation kept,
    tabs or spaces as the file has them);
``unicode``
    as ``indent``, with typographic punctuation (curly quotes, dashes,
    ellipsis, non-breaking and other spaces) read as its ASCII form; where
    the model's old text had such a character in place of the file's, the
    same character in the new text is written as the file has it.

Never fuzzier than that: a line missing or changed is no match.  A pass
that finds several places reports them all; the caller refuses (or, for
``replace_all``, replaces those of the first pass).  Depth is measured in
columns at the file's tab width.  Lines of the new text that repeat a
line of the old text unchanged are written exactly as the file has them,
so a tolerated difference never leaks into lines the model meant to keep.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PASSES = ("exact", "trailing", "indent", "unicode")

# Typographic characters and the ASCII a model (or an editor) swaps them with.
_PUNCT_MAP = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
    "\u00ab": '"',
    "\u00bb": '"',
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2015": "-",
    "\u2212": "-",
    "\u2026": "...",
    "\u00a0": " ",
    "\u2007": " ",
    "\u202f": " ",
    "\u205f": " ",
    "\u3000": " ",
    **{chr(c): " " for c in range(0x2000, 0x200B)},
}


_PUNCT_RE = re.compile("[" + "".join(_PUNCT_MAP) + "]")


def ascii_punct(text: str) -> str:
    """``text`` with typographic punctuation and odd spaces in their ASCII form."""
    if text.isascii():
        return text
    # A search in C finds the few such characters of a large text fast.
    return _PUNCT_RE.sub(lambda m: _PUNCT_MAP[m.group()], text)


@dataclass(frozen=True)
class Span:
    """One place in the file: character offsets and 1-based lines (inclusive)."""

    start: int
    end: int
    first_line: int
    last_line: int
    replacement: str  # the new text as it will be written there


@dataclass(frozen=True)
class Found:
    way: str
    spans: list[Span]
    # Places a looser pass finds besides ``spans`` (lines no span covers): the
    # text could mean those too, so a single edit is refused and names them all.
    others: tuple[Span, ...] = ()

    @property
    def places(self) -> list[Span]:
        """Every place any pass finds, in file order."""
        return sorted([*self.spans, *self.others], key=lambda s: s.start)


class Lines:
    """A text cut into lines once, with offsets, for the line-based passes."""

    def __init__(self, text: str) -> None:
        self.text = text
        raw = text.split("\n")
        # A final newline ends the last line rather than starting an empty one.
        self.has_final_newline = text.endswith("\n")
        if self.has_final_newline:
            raw.pop()
        self._raw = raw
        if "\r" in text:
            self.content = [line[:-1] if line.endswith("\r") else line for line in raw]
        else:
            self.content = raw
        self._starts: list[int] | None = None
        self._keys: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return len(self.content)

    @property
    def starts(self) -> list[int]:
        """Offset of each line's start (and one past the last line)."""
        if self._starts is None:
            # C-level iterators only: a megabyte's lines in about a millisecond.
            ends = itertools.accumulate(map((1).__add__, map(len, self._raw)))
            self._starts = [0, *ends]
        return self._starts

    def keys(self, way: str) -> list[str]:
        """Every line's key under a pass, computed once (whole-text operations run in C)."""
        cached = self._keys.get(way)
        if cached is None:
            if way == "exact":
                cached = self.content
            elif way == "trailing":
                cached = [line.rstrip() for line in self.content]
            elif way == "indent":
                cached = [line.strip() for line in self.content]
            else:
                # Only lines holding typographic characters or "--" differ from
                # their ``indent`` key: find those with one search, patch them.
                cached = list(self.keys("indent"))
                starts = self.starts
                for index in sorted(
                    {bisect.bisect_right(starts, at) - 1 for at in _normalised_at(self.text)}
                ):
                    if index < len(cached):
                        cached[index] = _unicode_key(self.content[index])
            self._keys[way] = cached
        return cached

    def end_of(self, index: int, with_newline: bool) -> int:
        """Offset just after line ``index`` (0-based), with or without its line end."""
        if with_newline:
            return min(self.starts[index + 1], len(self.text))
        return self.starts[index] + len(self.content[index])


def _strip_key(line: str) -> str:
    return line.strip()


_HYPHENS = re.compile(r"-{2,}")


def _normalised_at(text: str, dashes: bool = True) -> Iterator[int]:
    """Offsets of every typographic character and (``dashes``) every "--" of ``text``."""
    if not text.isascii():
        for m in _PUNCT_RE.finditer(text):
            yield m.start()
    if not dashes:
        return
    at = text.find("--")
    while at >= 0:
        yield at
        at = text.find("--", at + 2)


def _unicode_key(line: str) -> str:
    # "--" is how ASCII writes the dash typography turns into one character.
    return _HYPHENS.sub("-", ascii_punct(line)).strip()


def _same(line: str) -> str:
    return line


KEYS: dict[str, Callable[[str], str]] = {
    "exact": _same,
    "trailing": str.rstrip,
    "indent": _strip_key,
    "unicode": _unicode_key,
}


def find(
    text: str,
    old: str,
    new: str,
    newline: str = "\n",
    lines: Lines | None = None,
    passes: tuple[str, ...] = PASSES,
    whole_lines: bool = False,
    tab_width: TabWidth = 8,
) -> Found | None:
    """The places ``old`` matches in ``text``: the first pass that finds any,
    and the places every looser pass finds besides.

    ``old`` and ``new`` are given with the file's line ends (``newline``),
    and so are the replacements.  With ``whole_lines`` even the exact pass
    matches whole lines only (``expected`` of a line range).  None when no
    pass finds anything.

    The first pass that finds something does not settle the place alone: a
    copy drifted a level (or stripped of trailing blanks) can equal a twin
    block elsewhere exactly while a looser pass also finds the block it was
    copied from.  So the looser passes run too, and whatever lines they
    find that the first pass did not come back in ``others``; a caller
    placing one edit refuses and names them all.
    """
    exact: list[Span] = []
    if "exact" in passes and not whole_lines:
        exact = _find_exact(text, old, new)
        if exact and not all(_whole_line_span(text, s) for s in exact):
            # Part of a line, copied as it is: no line pass reads it the same way.
            return Found("exact", exact)
    model_old = old.replace("\r\n", "\n")
    old_lines = model_old.split("\n")
    # Whole lines (``expected``) come without their last line end: every
    # piece is a line.  Otherwise a final newline ends the last line.
    ends_nl = not whole_lines and model_old.endswith("\n")
    if ends_nl:
        old_lines.pop()
    if not any(line.strip() for line in old_lines):
        return Found("exact", exact) if exact else None  # blank lines match everywhere
    if exact and not _may_find_more(text, old_lines, len(exact)):
        return Found("exact", exact)
    lines = lines or Lines(text)
    first: Found | None = Found("exact", exact) if exact else None
    taken = {(s.first_line, s.last_line) for s in exact}
    others: list[Span] = []
    tab_width = once(tab_width)
    marked = diff_marked(old_lines)
    for way in passes:
        if way == "exact" and not whole_lines:
            continue
        starts = _find_lines(lines, old_lines, way, ends_nl)
        if not starts:
            continue
        if marked and way in ("indent", "unicode"):
            for i in starts:
                _refuse_markers_as_indent(
                    old_lines, lines.content[i : i + len(old_lines)], i, tab_width
                )
        if first is None:
            if not _may_find_more(text, old_lines, len(starts)):
                return Found(
                    way,
                    [
                        _line_span(lines, i, old_lines, new, newline, ends_nl, way, tab_width)
                        for i in starts
                    ],
                )
            spans = [
                _line_span(lines, i, old_lines, new, newline, ends_nl, way, tab_width)
                for i in starts
            ]
            first = Found(way, spans)
            taken = {(s.first_line, s.last_line) for s in spans}
            continue
        for i in starts:
            if (i + 1, i + len(old_lines)) not in taken:
                try:
                    span = _line_span(lines, i, old_lines, new, newline, ends_nl, way, tab_width)
                except IndentUnclear:
                    # Only listed, never written: the place is what counts.
                    start, end = lines.starts[i], lines.end_of(i + len(old_lines) - 1, ends_nl)
                    span = Span(start, end, i + 1, i + len(old_lines), "")
                others.append(span)
                taken.add((span.first_line, span.last_line))
    if first is None:
        return None
    return Found(first.way, first.spans, tuple(others))


def _may_find_more(text: str, old_lines: list[str], found: int) -> bool:
    """Whether a looser pass could find lines the exact matches do not cover.

    A cheap test in C before cutting a large file into lines three ways:
    every looser match holds the old text's longest line (stripped) as a
    substring of the file, unless typographic characters or ``--`` stand in
    it, which only the lines holding those can show.
    """
    stripped = [line.strip() for line in old_lines]
    anchor = max(stripped, key=len)
    if text.count(anchor) > found * sum(line.count(anchor) for line in stripped):
        return True
    plain = _unicode_key(anchor)
    if plain != anchor and plain and plain in text:
        return True  # the same line written plainly elsewhere
    want = {_unicode_key(line) for line in old_lines if line.strip()}
    if text.isascii() and all(key.isascii() for key in want) and "--" not in text:
        return False
    seen: set[int] = set()
    # A line's "--" reads as "-": only wanted lines holding a dash can match one.
    dashes = any("-" in key for key in want)
    for at in _normalised_at(text, dashes):
        head = text.rfind("\n", 0, at) + 1
        if head in seen:
            continue  # this line was looked at already
        seen.add(head)
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        if _unicode_key(text[head:line_end].rstrip("\r")) in want:
            return True
    return False


def _whole_line_span(text: str, span: Span) -> bool:
    """Whether a match covers whole lines: from a line's start to a line's end."""
    if span.start > 0 and text[span.start - 1] != "\n":
        return False
    end = span.end
    return end == len(text) or text[end - 1] == "\n" or text[end] in "\r\n"


def _find_exact(text: str, old: str, new: str) -> list[Span]:
    """Every occurrence as sent; none when each one is lines at another depth.

    Occurrences inside a line's indentation count only beside others: alone,
    they are left to the ``indent`` pass (which re-indents ``new``); beside
    an occurrence elsewhere, the place is ambiguous and all are listed.
    """
    spans: list[Span] = []
    deeper = 0
    at = text.find(old)
    line = 1
    counted = 0
    indented = old[:1] in (" ", "\t")
    # An empty first line is a line of its own: it starts where a line starts,
    # never at the end of whatever line comes before it.
    blank_first = old.startswith(("\n", "\r\n"))
    while at >= 0:
        if blank_first and at > 0 and text[at - 1] != "\n":
            at = text.find(old, at + 1)
            continue
        if at > 0 and text[at - 1] in " \t" and _whole_lines_elsewhere(text, old, at, indented):
            deeper += 1
        line += text.count("\n", counted, at)
        counted = at
        end = at + len(old)
        last = line + old.count("\n", 0, max(len(old) - 1, 0))
        spans.append(Span(at, end, line, last, new))
        at = text.find(old, at + 1)
    return [] if deeper == len(spans) else spans


def _whole_lines_elsewhere(text: str, old: str, at: int, indented: bool) -> bool:
    """Whether a match inside a line's indentation is really lines at another depth.

    Text that starts with indentation, or that runs to a line's end, is
    whole lines to the model; found after part of a line's indentation (or
    after all of it), it is the same lines at another depth, and the
    ``indent`` pass places and re-indents it.  Only when the line holds
    nothing but whitespace before the match.
    """
    head = text.rfind("\n", 0, at) + 1
    if text[head:at].strip(" \t"):
        return False
    if indented:
        return True
    end = at + len(old)
    return old.endswith("\n") or end == len(text) or text[end] in "\r\n"


def _find_lines(lines: Lines, old_lines: list[str], way: str, ends_nl: bool) -> list[int]:
    """0-based first lines where every line of ``old_lines`` matches under the pass."""
    key = KEYS[way]
    want = [key(line) for line in old_lines]
    keys = lines.keys(way)
    n = len(want)
    # Anchor on the most telling line: the longest key.
    anchor = max(range(n), key=lambda k: len(want[k]))
    target = want[anchor]
    found = []
    start = 0
    try:
        while True:
            pos = keys.index(target, start)
            start = pos + 1
            first = pos - anchor
            if first < 0 or first + n > len(keys):
                continue
            if keys[first : first + n] != want:
                continue
            if ends_nl and first + n == len(keys) and not lines.has_final_newline:
                continue  # the old text ends with a newline the file does not have
            found.append(first)
    except ValueError:
        pass
    return found


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_span(
    lines: Lines,
    first: int,
    old_lines: list[str],
    new: str,
    newline: str,
    ends_nl: bool,
    way: str,
    tab_width: TabWidth = 8,
) -> Span:
    n = len(old_lines)
    end = lines.end_of(first + n - 1, ends_nl)
    if way == "exact":
        return Span(lines.starts[first], end, first + 1, first + n, new)
    file_lines = lines.content[first : first + n]
    new_text = new.replace("\r\n", "\n")
    new_ends_nl = new_text.endswith("\n")
    new_lines = new_text.split("\n") if new_text else []  # nothing: no line at all
    if new_ends_nl:
        new_lines.pop()
    kept: dict[str, str] = {}
    for old_line, file_line in zip(old_lines, file_lines, strict=True):
        kept.setdefault(old_line, file_line)
    # Lines kept in place map to their own file line, found by aligning the
    # new text with the old: two kept lines of the same text (a closing
    # brace at two depths) each keep their own.
    own: dict[int, str] = {}
    counterpart: dict[int, int] = {}  # a changed new line -> the old line it rewrites
    aligned = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in aligned.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                own[j1 + k] = file_lines[i1 + k]
        elif tag == "replace":
            for k in range(min(i2 - i1, j2 - j1)):
                counterpart[j1 + k] = i1 + k
    shift = None
    if way in ("indent", "unicode") and _drifted(old_lines, file_lines, new_lines):
        shift = _Reindent(old_lines, file_lines, resolve(tab_width))
    punct = _punct_map(old_lines, file_lines, lines.text) if way == "unicode" else {}
    out = []
    for j, line in enumerate(new_lines):
        if j in own:
            out.append(own[j])  # a line the model meant to keep: the file's own text
            continue
        if line in kept:
            out.append(kept[line])
            continue
        if way == "unicode" and not line.isascii():
            rewrites = counterpart.get(j)
            if rewrites is not None:
                line = _punct_in_place(line, old_lines[rewrites], file_lines[rewrites], punct)
            else:
                line = "".join(punct.get(ch, ch) for ch in line)
        if shift is not None and line.strip():
            line = shift.apply(line)
        out.append(line)
    replacement = "\n".join(out) + ("\n" if new_ends_nl else "")
    if newline != "\n":
        replacement = replacement.replace("\n", newline)
    return Span(lines.starts[first], end, first + 1, first + n, replacement)


def _drifted(old_lines: list[str], file_lines: list[str], new_lines: list[str]) -> bool:
    """Whether the new text carries the old text's drift, so it needs re-indenting.

    Models start the old and the new text with the same line at the same
    level.  Where the new text's first line is the old text's first line
    (the same words) at the file's depth instead of the copy's, the new
    text was written for the file as it is and is kept as written; without
    that evidence it carries the drift.
    """
    old_first = next((o for o in old_lines if o.strip()), None)
    file_first = next((f for f in file_lines if f.strip()), None)
    new_first = next((n for n in new_lines if n.strip()), None)
    if old_first is None or file_first is None or new_first is None:
        return True
    if new_first.strip() != old_first.strip():
        return True
    return not (_indent(new_first) == _indent(file_first) != _indent(old_first))


# A tab width, or how to find it: looking costs a pass over the file's head,
# paid only by an edit whose tolerant pass needs columns.
TabWidth = int | Callable[[], int]


def once(tab_width: TabWidth) -> TabWidth:
    """``tab_width``, a callable asked at most once."""
    if isinstance(tab_width, int):
        return tab_width
    box: list[int] = []

    def get() -> int:
        if not box:
            box.append(tab_width())
        return box[0]

    return get


def resolve(tab_width: TabWidth) -> int:
    return tab_width if isinstance(tab_width, int) else tab_width()


def columns(indent: str, tab_width: int) -> int:
    """How many columns ``indent`` spans, tabs stopping at multiples of ``tab_width``."""
    col = 0
    for ch in indent:
        col = (col // tab_width + 1) * tab_width if ch == "\t" else col + 1
    return col


class _Reindent:
    """Moves the model's indentation onto the file's, keeping relative depth.

    Depth is measured in columns, tabs at the file's tab width: a file that
    indents with tabs and aligns with spaces after them (gofmt continuation
    lines, Lisp alignment) has depths no count of characters tells.  A
    depth the old text showed takes the file's own indentation for it;
    another is moved by the ratio the pairs of old and file lines show, and
    written as the file writes indentation (tabs as far as they go, then
    spaces, in a file that indents with tabs).  Where the pairs disagree on
    that ratio, a new depth cannot be told and the edit is refused.
    """

    def __init__(self, old_lines: list[str], file_lines: list[str], tab_width: int = 8) -> None:
        self.width = max(tab_width, 1)
        pairs = [
            (_indent(o), _indent(f))
            for o, f in zip(old_lines, file_lines, strict=True)
            if o.strip() and f.strip()
        ]
        self.known: dict[str, str] = {}
        self.known_cols: dict[int, str] = {}
        self.readings: tuple[float, ...] = ()
        for o, f in pairs:
            self.known.setdefault(o, f)
            self.known_cols.setdefault(self._cols(o), f)
        old_base, file_base = pairs[0] if pairs else ("", "")
        self.old_base, self.file_base = self._cols(old_base), self._cols(file_base)
        self.tabs = "\t" in file_base or any("\t" in f for _, f in pairs)
        ratios = set()
        deltas = set()
        for o, f in pairs:
            oc, fc = self._cols(o) - self.old_base, self._cols(f) - self.file_base
            if oc and fc and fc / oc > 0:
                ratios.add(round(fc / oc, 6))
                deltas.add(oc)
        self.unclear = len(ratios) > 1
        model_tabs = "\t" in old_base or any("\t" in o for o, _ in pairs)
        if len(ratios) == 1 and len(deltas) == 1 and (self.tabs or model_tabs):
            # One pair of depths shows the ratio.  Where tabs stand on either
            # side, a copy whose tabs were expanded at another width than the
            # file's maps tabs and alignment spaces differently, so that ratio
            # is trusted only where it is a reading a copy has: the same
            # columns, two or four spaces a level, or a tab a level.
            w = float(self.width)
            readings = {1.0, 2.0, 0.5, w / 4, 4 / w, w / 2, 2 / w}
            self.unclear = not any(abs(next(iter(ratios)) - r) < 1e-6 for r in readings)
        if len(ratios) == 1:
            self.ratio = ratios.pop()
        else:
            # One tab per four spaces, the common width, when nothing shows otherwise.
            self.ratio = (
                self.width / 4
                if self.tabs and not model_tabs
                else 4 / self.width
                if model_tabs and not self.tabs
                else 1.0
            )
            if self.tabs and not model_tabs and not ratios and self.width != 4:
                # Spaces for a file's tabs, all at one depth: the copy may have
                # expanded the tabs at the file's width or written four spaces
                # a tab, each with some drift, and one depth cannot tell which.
                # A new depth is written only where both readings agree.
                self.readings = (1.0, self.width / 4)

    def _cols(self, indent: str) -> int:
        return columns(indent, self.width)

    def apply(self, line: str) -> str:
        indent = _indent(line)
        body = line[len(indent) :]
        known = self.known.get(indent)
        if known is not None:
            return known + body
        col = self._cols(indent)
        known = self.known_cols.get(col)
        if known is not None:
            return known + body
        if self.unclear:
            raise IndentUnclear(line)
        written = {self._write(col, ratio) for ratio in self.readings or (self.ratio,)}
        if len(written) > 1:
            raise IndentUnclear(line)
        return written.pop() + body

    def _write(self, col: int, ratio: float) -> str:
        """The indentation of a line at model column ``col``, moved by ``ratio``."""
        target = max(self.file_base + round((col - self.old_base) * ratio), 0)
        if self.tabs:
            return "\t" * (target // self.width) + " " * (target % self.width)
        return " " * target


def diff_marked(old_lines: list[str]) -> bool:
    """Whether every line carries a unified diff's marker: ' ', '+' or '-' first.

    Both kinds: context lines (' ') and changed ones ('+' or '-').  Lines
    all starting with a space are indentation; all with '-', a list.
    """
    body = [line for line in old_lines if line.strip()]
    return (
        bool(body)
        and all(line[:1] in " +-" for line in body)
        and any(line[:1] == " " for line in body)
        and any(line[:1] in "+-" for line in body)
    )


def _refuse_markers_as_indent(
    old_lines: list[str], file_lines: list[str], first: int, tab_width: TabWidth
) -> None:
    """Refuse a match that reads a diff's ' ' marker as one column of indentation.

    Lines that drift alike are the copy at another depth (a YAML list a
    level out); where the ' ' lines stand exactly one column deeper than
    the '+' and '-' lines do, against the file, the column is the marker.
    """
    context: set[int] = set()
    changed: set[int] = set()
    for o, f in zip(old_lines, file_lines, strict=True):
        if not o.strip():
            continue
        width = resolve(tab_width)
        drift = columns(_indent(o), width) - columns(_indent(f), width)
        (context if o[:1] == " " else changed).add(drift)
    if len(context) == 1 and len(changed) == 1 and context.pop() - changed.pop() == 1:
        raise MarkersAsIndent(old_lines[0], first + 1, first + len(old_lines))


class IndentUnclear(ValueError):
    """A new line's depth cannot be told from the old text's (see :class:`_Reindent`)."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


class MarkersAsIndent(IndentUnclear):
    """An old text in diff form that only reading its ' ' markers as indentation places."""

    def __init__(self, line: str, first_line: int, last_line: int) -> None:
        super().__init__(line)
        self.first_line, self.last_line = first_line, last_line


MAX_ALIGNED = 2000  # longer lines take the edit's one mapping, not a per-position one


def _punct_in_place(new: str, old: str, file_line: str, punct: dict[str, str]) -> str:
    """A changed line's typographic characters, each as the file has it at that place.

    Where the new line keeps the old line's character, the file's own
    character at that place is written (the file may mix ``"`` and ``“``);
    a character the model wrote anew follows the edit's mapping only when
    the file's own characters agree on one form, and otherwise stays as
    the model wrote it.
    """
    if len(new) > MAX_ALIGNED or len(old) > MAX_ALIGNED:
        return "".join(punct.get(ch, ch) for ch in new)
    at_file = _positions(old, file_line)
    out = list(new)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            ch = new[j]
            if ch not in _PUNCT_MAP:
                continue
            if tag == "equal":
                out[j] = at_file.get(i1 + j - j1, ch)
            elif ch in punct and not (ch in file_line and punct[ch] != ch):
                out[j] = punct[ch]
    return "".join(out)


def _positions(old: str, file_line: str) -> dict[int, str]:
    """For each typographic character of ``old``, what the file has in its place."""
    found: dict[int, str] = {}
    i = j = 0
    while i < len(old) and j < len(file_line):
        if old[i] == file_line[j]:
            if old[i] in _PUNCT_MAP:
                found[i] = old[i]
            i += 1
            j += 1
            continue
        if old[i].isspace() and file_line[j].isspace():
            i += 1
            j += 1
            continue
        plain = _PUNCT_MAP.get(old[i])
        if plain is not None and file_line.startswith(plain, j):
            if plain == "-":
                plain = file_line[j : len(file_line) - len(file_line[j:].lstrip("-"))]
            found[i] = plain
            i += 1
            j += len(plain)
            continue
        fancy = _PUNCT_MAP.get(file_line[j])
        if fancy is not None and old.startswith(fancy, i):
            i += len(fancy)
            j += 1
            continue
        if old[i].isspace():
            i += 1
            continue
        if file_line[j].isspace():
            j += 1
            continue
        break
    return found


def _punct_map(old_lines: list[str], file_lines: list[str], text: str) -> dict[str, str]:
    """How the model's typographic characters are written in this file.

    Those it wrote where the file has something plainer take the file's
    form; others take their ASCII form unless the file itself uses them
    (the model typographised the whole text, not only the lines it copied).
    """
    found: dict[str, str] = {ch: plain for ch, plain in _PUNCT_MAP.items() if ch not in text}
    for o, f in zip(old_lines, file_lines, strict=True):
        if o.isascii():
            continue
        o, f = o.strip(), f.strip()
        i = j = 0
        while i < len(o) and j < len(f):
            if o[i] == f[j]:
                i += 1
                j += 1
                continue
            plain = _PUNCT_MAP.get(o[i])
            if plain is not None and f.startswith(plain, j):
                if plain == "-":
                    plain = f[j : len(f) - len(f[j:].lstrip("-"))]
                found[o[i]] = plain
                i += 1
                j += len(plain)
                continue
            fancy = _PUNCT_MAP.get(f[j])
            if fancy is not None and o.startswith(fancy, i):
                i += len(fancy)
                j += 1
                continue
            break
    return found


# --- pointing at the place a missed edit meant ----------------------------------------

# Lines this common carry no information about where an edit belongs.
_MAX_VOTE_POSITIONS = 64
ALIKE_MARGIN = 0.03  # stretches this close to the best are named as well
MAX_OTHERS = 3


@dataclass(frozen=True)
class Closest:
    first_line: int  # 1-based, inclusive
    last_line: int
    ratio: float
    # Other stretches as alike (repeated code): the refusal names them too.
    others: tuple[tuple[int, int], ...] = ()


def closest(lines: Lines, wanted: str) -> Closest | None:
    """The stretch of the file most like ``wanted``, or None when nothing is.

    Each line of ``wanted`` that occurs in the file (ignoring whitespace
    and typographic punctuation) votes for where the whole would start; the
    best-supported starts are then compared in full.  A missing or changed
    line costs one vote, so the place meant still wins.
    """
    want = wanted.replace("\r\n", "\n").rstrip("\n").split("\n")
    n = len(want)
    keys = lines.keys("unicode")
    if not keys:
        return None
    want_keys = [_unicode_key(line) for line in want]
    telling = {k for k in want_keys if len(k) >= 3}
    positions: dict[str, list[int]] = {}
    for pos, key in enumerate(keys):
        if key in telling:
            positions.setdefault(key, []).append(pos)
    votes: dict[int, float] = {}
    for k, key in enumerate(want_keys):
        where = positions.get(key, [])
        if len(where) > _MAX_VOTE_POSITIONS:
            continue
        # A line found once says more than one found in many places.
        weight = 1 / len(where) if where else 0.0
        for pos in where:
            votes[pos - k] = votes.get(pos - k, 0.0) + weight
    candidates: list[int]
    if votes:
        ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))
        candidates = [start for start, _ in ranked[:6]]
    else:
        candidates = _first_line_candidates(lines, want_keys[0] if want_keys else "", n)
    alike = Similarity(want_keys)
    scored: list[Closest] = []
    for start in candidates:
        best: Closest | None = None
        for first, width in ((start, n), (start, n + 1), (start - 1, n + 1), (start, n - 1)):
            first = max(first, 0)
            width = max(min(width, len(keys) - first), 1)
            ratio = alike.ratio(keys[first : first + width])
            if best is None or ratio > best.ratio + 1e-9:
                best = Closest(first + 1, first + width, ratio)
        if best is not None:
            scored.append(best)
    if not scored:
        return None
    scored.sort(key=lambda c: (-c.ratio, c.first_line))
    top = scored[0]
    if top.ratio < 0.3:
        return None
    others: list[tuple[int, int]] = []
    for c in scored[1:]:
        if c.ratio < top.ratio - ALIKE_MARGIN or len(others) == MAX_OTHERS:
            break
        taken = [(top.first_line, top.last_line), *others]
        if all(c.last_line < a or c.first_line > b for a, b in taken):
            others.append((c.first_line, c.last_line))
    return Closest(top.first_line, top.last_line, top.ratio, tuple(others))


def _first_line_candidates(lines: Lines, first: str, n: int) -> list[int]:
    """Lines most like ``first``: those sharing most of its words, then by characters."""
    keys = lines.keys("unicode")
    last = max(len(keys) - n + 1, 1)
    # The longest words tell most; each is looked for in the whole text (in C).
    words = sorted(set(_WORD.findall(first[:HEAD])), key=len, reverse=True)[:MAX_WORDS]
    hits: dict[int, int] = {}
    text, starts = lines.text, lines.starts
    for word in words:
        seen: set[int] = set()
        at = text.find(word)
        while at >= 0 and len(seen) < _MAX_VOTE_POSITIONS:
            line = bisect.bisect_right(starts, at) - 1
            seen.add(line)
            # On from the next line: a word repeated along one long line costs one search.
            at = text.find(word, starts[line + 1]) if line + 1 < len(starts) else -1
        if at >= 0:
            continue  # a word this common says nothing about where
        for i in seen:
            hits[i] = hits.get(i, 0) + 1
    ranked = sorted((i for i in hits if i < last), key=lambda i: (-hits[i], i))
    pool = ranked[:64] or list(range(min(last, 64)))
    matcher = difflib.SequenceMatcher(autojunk=False)
    # A line's head tells as much as its whole here, at a bounded cost per line.
    matcher.set_seq2(first[:HEAD])
    scored = []
    for i in pool:
        matcher.set_seq1(keys[i][:HEAD])
        scored.append((matcher.quick_ratio(), -i))
    scored.sort(reverse=True)
    return [-i for _, i in scored[:8]]


MAX_WORDS = 12
_WORD = re.compile(r"\w{3,}")
HEAD = 160  # characters of a line compared when nothing else tells where it is
CHAR_BUDGET = 4000  # texts this short are compared character by character


class Similarity:
    """How alike stretches of lines are to one wanted stretch, in bounded time.

    Short texts are compared character by character (difflib's ratio).
    Longer ones, where that comparison grows with the product of the
    lengths (a minute for one 8 KB line), are compared line by line: equal
    lines count whole, and a changed line counts what it shares with its
    counterpart at both ends, which finds the one changed word of a
    100 KB line in a single pass.
    """

    def __init__(self, want: list[str]) -> None:
        self.want = want
        self.size = sum(len(line) + 1 for line in want)
        self._chars: difflib.SequenceMatcher[str] | None = None
        if self.size <= CHAR_BUDGET:
            self._chars = difflib.SequenceMatcher(autojunk=False)
            self._chars.set_seq2("\n".join(want))
        self._lines: difflib.SequenceMatcher[str] = difflib.SequenceMatcher(autojunk=False)
        self._lines.set_seq2(want)

    def ratio(self, have: list[str]) -> float:
        size = sum(len(line) + 1 for line in have)
        if self._chars is not None and size <= CHAR_BUDGET:
            self._chars.set_seq1("\n".join(have))
            return self._chars.ratio()
        total = size + self.size
        if not total:
            return 1.0
        self._lines.set_seq1(have)
        shared = 0
        for tag, i1, i2, j1, j2 in self._lines.get_opcodes():
            if tag == "equal":
                shared += sum(len(line) + 1 for line in have[i1:i2])
            elif tag == "replace":
                for a, b in zip(have[i1:i2], self.want[j1:j2], strict=False):
                    shared += _ends_shared(a, b)
        return min(2 * shared / total, 1.0)


def _ends_shared(a: str, b: str) -> int:
    """Characters ``a`` and ``b`` share at their start and end (not overlapping)."""
    limit = min(len(a), len(b))
    return min(_common(a, b, limit, head=True) + _common(a, b, limit, head=False), limit)


def _common(a: str, b: str, limit: int, head: bool) -> int:
    """Length of the common prefix (or suffix): halving, each comparison a slice in C."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        same = a[:mid] == b[:mid] if head else a[len(a) - mid :] == b[len(b) - mid :]
        if same:
            lo = mid
        else:
            hi = mid - 1
    return lo
