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

import importlib
import logging
import re
from collections.abc import Iterable, Sequence
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
    if marks_dirs:
        spec: pathspec.PathSpec[Any] = pathspec.GitIgnoreSpec.from_lines([line], backend="simple")
    else:
        spec = pathspec.PathSpec.from_lines("gitignore", [line], backend="simple")
    out: list[tuple[str, bool]] = []
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        include = getattr(pattern, "include", None)
        if regex is None or include is None:
            continue
        source = str(regex.pattern)
        check(line, source)
        out.append((source, bool(include)))
    return out


def gitignore_spec(lines: Sequence[str]) -> pathspec.GitIgnoreSpec:
    """A :class:`pathspec.GitIgnoreSpec` on RE2 (or checked for the fallback)."""
    if linear():
        return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    for line in lines:
        gitignore_regexes(line)
    return pathspec.GitIgnoreSpec.from_lines(lines, backend="simple")


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
    RE2 expressions always finish.
    """

    def __init__(self, sources: Iterable[str], *, ignore_case: bool = False) -> None:
        self.sources = list(sources)
        self._ignore_case = ignore_case
        self._re2 = linear()
        self._chunks = [self.sources[i : i + _CHUNK] for i in range(0, len(self.sources), _CHUNK)]
        self._any = [
            _Engine("|".join(f"(?:{s})" for s in chunk), ignore_case, self._re2)
            for chunk in self._chunks
        ]
        self._sets: list[Any] = [None] * len(self._chunks)
        self._singles: list[list[_Engine] | None] = [None] * len(self._chunks)

    def __len__(self) -> int:
        return len(self.sources)

    def any(self, text: str) -> bool:
        return any(engine.search(text) for engine in self._any)

    def matching(self, text: str) -> list[int]:
        """Indices of the regexes that match ``text``, ascending."""
        found: list[int] = []
        for n, engine in enumerate(self._any):
            if not engine.search(text):
                continue
            base = n * _CHUNK
            hits = self._set(n).Match(text) if self._re2 else None
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
            singles = [_Engine(s, self._ignore_case, self._re2) for s in self._chunks[n]]
            self._singles[n] = singles
        return singles

    def _set(self, n: int) -> Any:
        regex_set = self._sets[n]
        if regex_set is None:
            regex_set = _re2.Set.SearchSet(_re2_options(self._ignore_case))
            for source in self._chunks[n]:
                regex_set.Add(source)
            regex_set.Compile()
            self._sets[n] = regex_set
        return regex_set
