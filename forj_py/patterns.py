"""Gitignore-style pattern matching in time linear in the path and the pattern.

``pathspec`` turns each gitignore line into a regular expression.  Run by
Python's ``re`` (a backtracking engine), a line such as ``*a*a*a…*b``
takes time exponential in its stars against a long name, and a
``.gitignore`` in a cloned repository or a project's ``denied_patterns``
is untrusted input: one path check could hold the worker for minutes.
RE2 (the ``google-re2`` package) runs the same expressions as an
automaton, in time linear in the text, whatever the pattern.

Where ``google-re2`` cannot be imported (a platform without a wheel), the
expressions run on ``re``, and a pattern is refused when its expression
has more than :data:`FALLBACK_MAX_WILDCARDS` unbounded repetitions (each
``*``, each ``**`` and the implicit "any leading directories" of a
pattern without a slash count one): with two, the worst path forj accepts
(4,096 characters) is checked in about 0.1 s; with three it took 0.2 s to
over a minute, depending on the pattern.  The first refusal is logged once.

Every expression is compiled with ``.`` matching newlines too: a
directory name holding a newline must not hide a ``**/.env`` from its
denial.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import itertools
import logging
import operator
import re
from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any

import pathspec

log = logging.getLogger("forj.patterns")

try:
    _re2: Any = importlib.import_module("re2")
    _re2.Options()  # the google-re2 API, not another package named re2
except Exception:  # any failure means the same: no RE2 here
    _re2 = None

HAVE_RE2 = _re2 is not None
FALLBACK_MAX_WILDCARDS = 2
# Regexes per compiled RE2 program: RE2 refuses programs over its memory
# budget (8 MiB), which a few thousand gitignore lines reach.
_CHUNK = 256
# ... and at most this much expression text: RE2's compile time grows
# faster than the text (a few thousand-star lines take a second together).
_CHUNK_CHARS = 16_384

_state = {"linear": HAVE_RE2, "warned": False}


def linear() -> bool:
    """Whether matching runs on RE2 (linear time) rather than ``re``."""
    return bool(_state["linear"])


def set_linear(enabled: bool) -> bool:
    """Choose the engine (RE2 only if installed); returns the previous choice.

    Lets the tests run the fallback on a machine that has RE2.
    """
    previous = linear()
    _state["linear"] = enabled and HAVE_RE2
    return previous


class PatternTooComplex(ValueError):
    """A pattern the backtracking fallback cannot match in bounded time."""


def wildcard_count(regex: str) -> int:
    """Unbounded repetitions (``*``, ``+``) in a regular expression, outside classes."""
    count = 0
    i, n = 0, len(regex)
    while i < n:
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            # Skip the class: a "]" right after "[" or "[^" is literal.
            j = i + 1
            if j < n and regex[j] == "^":
                j += 1
            if j < n and regex[j] == "]":
                j += 1
            while j < n and regex[j] != "]":
                j += 2 if regex[j] == "\\" else 1
            i = j + 1
            continue
        if ch in "*+":
            count += 1
        i += 1
    return count


def _refuse(pattern: str, count: int) -> PatternTooComplex:
    if not _state["warned"]:
        _state["warned"] = True
        log.warning(
            "google-re2 is not installed: gitignore-style patterns run on Python's "
            "backtracking re, and patterns with more than %d wildcards are refused "
            "(first: %r)",
            FALLBACK_MAX_WILDCARDS,
            pattern,
        )
    return PatternTooComplex(
        f"{pattern!r} has {count} wildcards; without google-re2 at most "
        f"{FALLBACK_MAX_WILDCARDS} are allowed (more could take minutes to match one "
        "long path); install google-re2, or split the pattern into simpler ones"
    )


def check(pattern: str, regex: str) -> None:
    """Refuse ``pattern`` (compiled to ``regex``) if the fallback could crawl on it."""
    if linear():
        return
    count = wildcard_count(regex)
    if count > FALLBACK_MAX_WILDCARDS:
        raise _refuse(pattern, count)


def gitignore_regexes(line: str, *, marks_dirs: bool = False) -> list[tuple[str, bool]]:
    """The regexes of one gitignore line as ``(source, includes?)``; [] for none.

    ``marks_dirs``: pathspec's :class:`GitIgnoreSpec` form, whose group
    ``ps_d`` is the slash after a directory the pattern matched (for
    telling a match of the path itself from a match of a parent); else its
    plain "gitignore" form, without groups.

    ``includes`` is pathspec's sense: True for a pattern that selects the
    path (ignores it), False for a ``!`` re-inclusion.  Raises ValueError
    for a line pathspec cannot parse, :class:`PatternTooComplex` as
    :func:`check` does.
    """
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{line!r} is not valid Unicode text") from None
    try:
        if marks_dirs:
            spec: pathspec.PathSpec[Any] = pathspec.GitIgnoreSpec.from_lines(
                [line], backend="simple"
            )
        else:
            spec = pathspec.PathSpec.from_lines("gitignore", [line], backend="simple")
    except (re.error, FutureWarning) as exc:
        # pathspec hands some brackets to re unchecked: "[S-8]" is an error,
        # "[[:alpha:]]" a warning (an error where warnings are, as in the
        # tests; elsewhere RE2 refuses the expression just below).
        raise ValueError(f"{line!r} cannot be matched: {exc}") from None
    out: list[tuple[str, bool]] = []
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        include = getattr(pattern, "include", None)
        if regex is None or include is None:
            continue
        source = str(regex.pattern)
        check(line, source)
        if linear():
            # pathspec's expressions are meant for RE2, but a line like
            # "[[:alpha:]]" comes out as one RE2 rejects; and git's own
            # reading of it differs anyway.
            try:
                _re2.compile(source, _re2_options(False))
            except Exception as exc:
                raise ValueError(f"{line!r} cannot be matched: {exc}") from None
        out.append((source, bool(include)))
    return out


def gitignore_spec(lines: Sequence[str]) -> pathspec.GitIgnoreSpec:
    """A :class:`pathspec.GitIgnoreSpec` on RE2 (or checked for the fallback)."""
    for line in lines:
        gitignore_regexes(line)  # a clear ValueError for a line that cannot be used
    if not linear():
        return pathspec.GitIgnoreSpec.from_lines(lines, backend="simple")
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    except Exception as exc:  # RE2's own error: the set is over its memory budget
        raise ValueError(f"the patterns together are too large to match ({exc})") from None


def _re2_options(ignore_case: bool) -> Any:
    options = _re2.Options()
    options.dot_nl = True
    options.case_sensitive = not ignore_case
    options.never_capture = True
    options.log_errors = False
    return options


class _Engine:
    """One compiled regex with ``search``: RE2's or ``re``'s."""

    def __init__(self, source: str, ignore_case: bool, use_re2: bool) -> None:
        self.compiled: Any
        if use_re2:
            self.compiled = _re2.compile(source, _re2_options(ignore_case))
        else:
            flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
            self.compiled = re.compile(source, flags)

    def search(self, text: str) -> bool:
        return self.compiled.search(text) is not None


class RegexSet:
    """Which of several regexes match a text (``search`` semantics).

    Per chunk of regexes, a combined expression answers "any?" (most paths
    match nothing).  With RE2 a ``re2.Set`` then names the matches in one
    pass; when its automaton gives up (RE2 sets have no slower fallback,
    and say nothing), each regex of the chunk is tried alone, which single
    RE2 expressions always finish.  A chunk too big for one RE2 program is
    split until it fits.
    """

    def __init__(self, sources: Iterable[str], *, ignore_case: bool = False) -> None:
        self.sources = list(sources)
        self._ignore_case = ignore_case
        self._re2 = linear()
        self._ranges: list[tuple[int, int]] = []
        self._any: list[_Engine] = []
        start = size = 0
        for end, source in enumerate(self.sources):
            if end > start and (end - start >= _CHUNK or size + len(source) > _CHUNK_CHARS):
                self._add_range(start, end)
                start, size = end, 0
            size += len(source)
        if start < len(self.sources):
            self._add_range(start, len(self.sources))
        self._sets: list[Any] = [None] * len(self._ranges)
        self._singles: list[list[_Engine] | None] = [None] * len(self._ranges)

    def _add_range(self, start: int, end: int) -> None:
        combined = "|".join(f"(?:{s})" for s in self.sources[start:end])
        try:
            engine = _Engine(combined, self._ignore_case, self._re2)
        except Exception:
            if end - start == 1:
                raise  # one expression RE2 cannot take: the caller checked it
            middle = (start + end) // 2
            self._add_range(start, middle)
            self._add_range(middle, end)
            return
        self._ranges.append((start, end))
        self._any.append(engine)

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def ignore_case(self) -> bool:
        return self._ignore_case

    def any(self, text: str) -> bool:
        return any(engine.search(text) for engine in self._any)

    def matching(self, text: str) -> list[int]:
        """Indices of the regexes that match ``text``, ascending."""
        found: list[int] = []
        for n, engine in enumerate(self._any):
            if not engine.search(text):
                continue
            base = self._ranges[n][0]
            hits = self._set_match(n, text) if self._re2 else None
            if hits:
                found.extend(base + h for h in sorted(hits))
            else:
                found.extend(base + i for i, one in enumerate(self._each(n)) if one.search(text))
        return found

    def first(self, text: str) -> int | None:
        found = self.matching(text)
        return found[0] if found else None

    def _each(self, n: int) -> list[_Engine]:
        singles = self._singles[n]
        if singles is None:
            start, end = self._ranges[n]
            singles = [_Engine(s, self._ignore_case, self._re2) for s in self.sources[start:end]]
            self._singles[n] = singles
        return singles

    def _set_match(self, n: int, text: str) -> Any:
        regex_set = self._sets[n]
        if regex_set is None:
            start, end = self._ranges[n]
            try:
                regex_set = _re2.Set.SearchSet(_re2_options(self._ignore_case))
                for source in self.sources[start:end]:
                    regex_set.Add(source)
                regex_set.Compile()
            except Exception:
                regex_set = False  # over RE2's budget as a set: each regex alone
            self._sets[n] = regex_set
        if regex_set is False:
            return None
        return regex_set.Match(text)


# Sources with anchors or flags that mean something else once many paths
# share one text: "\A", "\z" and "\Z" would only match at its ends, an inline
# flag could turn multi-line mode off.  Such sources are matched path by path.
_WHOLE_TEXT_ONLY = re.compile(r"\\[AzZ]|\(\?[^:P]")


class LineScan:
    """Which of many paths a set of regexes may match, in one RE2 pass.

    The walk asks about every name in the project; RE2's Python binding
    costs microseconds per call, more than the matching itself.  A
    directory's paths are joined with newlines and scanned at once in
    multi-line mode, with no expression able to match a newline, so a
    match lies within one path.  Each line a match touches is reported: a
    *suspect* that the caller then judges alone, by the exact code a single
    path goes through; a path no match touches is matched by no
    expression (anything matching it alone also matches it as a line of
    the text, so the leftmost-match scan cannot step over it).  A path
    that holds a newline cannot be a line: callers judge those alone.
    """

    def __init__(self, sources: Sequence[str], *, ignore_case: bool = False) -> None:
        if not HAVE_RE2 or not linear():
            raise ValueError("one pass over many paths needs RE2")
        if any(_WHOLE_TEXT_ONLY.search(s) for s in sources):
            raise ValueError("an expression anchored to the whole text")
        options = _re2_options(ignore_case)
        options.dot_nl = False
        options.never_nl = True
        combined = "(?m)" + ("|".join(f"(?:{s})" for s in sources) if sources else "[^\\s\\S]")
        self._regexp = _re2.compile(combined, options)._regexp
        self._unanchored = _re2._re2.RE2.Anchor.UNANCHORED

    def hits(self, lines: Sequence[str], prefix: str = "") -> set[int]:
        """Indices of ``lines`` (none holding a newline) that a match touches.

        Each line is scanned as ``prefix`` + the line (one directory's
        names, as paths): the text is put together in C.
        """
        text = prefix + f"\n{prefix}".join(lines) if prefix else "\n".join(lines)
        data = text.encode("utf-8")
        found: set[int] = set()
        pos, end = 0, len(data)
        match = self._regexp.Match
        starts: list[int] | None = None
        while pos <= end:
            begin, stop = match(self._unanchored, data, pos, end)[0]
            if begin == -1:
                break
            if starts is None:
                # Where each line starts, counted only once something matched
                # (most directories hold nothing any rule names).
                lengths = (
                    map(len, lines)
                    if len(data) == len(text)
                    else (len(line.encode("utf-8")) for line in lines)
                )
                # Line n starts after n earlier lines, their prefixes and newlines.
                step = len(prefix.encode("utf-8")) + 1
                starts = list(
                    map(
                        operator.add,
                        itertools.accumulate(lengths, initial=0),
                        count(0, step),
                    )
                )
                starts.pop()
            first = bisect.bisect_right(starts, begin) - 1
            last = bisect.bisect_right(starts, max(stop - 1, begin)) - 1
            found.update(range(first, last + 1))
            if last + 1 >= len(starts):
                break
            pos = starts[last + 1]  # the rest of a suspect line tells nothing more
        return found


@functools.lru_cache(maxsize=64)
def line_scanner(sources: tuple[str, ...], ignore_case: bool = False) -> LineScan | None:
    """A :class:`LineScan` of ``sources``, or None where paths must be matched one by one."""
    try:
        return LineScan(sources, ignore_case=ignore_case)
    except Exception:  # no RE2, an anchored source, over RE2's memory budget
        return None
