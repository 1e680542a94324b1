"""Is this Emacs Lisp text readable?  A structural check before any ``.el`` write.

Seed 001 asks every write or edit of an ``.el`` file to pass a paren check
(its ``forj-paren-check``): the result must not have unbalanced parentheses
or brackets, an unterminated string, or a malformed character literal.
This is not a Lisp reader; it tracks exactly what decides whether a
paren counts: strings (with backslash escapes), ``;`` comments, character
literals (``?(``, ``?\\(``, ``?\\C-x``, ``?\\^I``, ``?\\M-\\C-a``), backslash
escapes inside symbols (``foo\\(bar``), and vectors ``[...]``.

Positions are Emacs's: line numbers from 1, columns from 0.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# Where a ``?`` may start a character literal: after these (or whitespace).
_DELIMITERS = set(" \t\n\r\f()[]\";'`,")
# What may follow a character literal, as Emacs's reader lists it; anything
# else right after one (``?ab``) is the "?" syntax error Emacs 27+ signals.
_AFTER_CHAR = set(" \t\n\r\f()[]\";'`,#?.")
_MODIFIERS = set("CMSHsA")
# What Emacs's reader accepts after a "#" that starts a token: #'f, #(...),
# #[...], #s(...), #&N"...", #@N, #$, #:sym, #_, ##, #xFF, #o7, #b1, #24r1,
# #1= / #1#, #^[...], and a #! line.
_AFTER_HASH = set("'([s&@$:_#xXoObB0123456789^!")


@dataclass(frozen=True)
class ElispProblem:
    message: str
    line: int
    column: int

    def describe(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


def check(text: str) -> ElispProblem | None:
    """The first structural problem in ``text``, or None if it reads."""
    stack: list[tuple[str, int]] = []  # (opener, offset)
    i = 0
    n = len(text)
    line_starts = _LineIndex(text)
    after_char = False  # "?a?b": a "?" right after a character literal starts another
    while i < n:
        c = text[i]
        starts_char = c == "?" and (after_char or _token_start(text, i))
        after_char = False
        if c == ";":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == '"':
            j = _string_end(text, i + 1)
            if j < 0:
                return line_starts.problem("unterminated string", i)
            if j >= n or text[j] != '"':
                return line_starts.problem("bad \\u or \\U escape in string", j)
            i = j + 1
        elif c == "\\":
            i += 2  # an escaped character inside a symbol: never syntax
        elif c == "#" and _token_start(text, i):
            if i + 1 >= n or text[i + 1] not in _AFTER_HASH:
                return line_starts.problem("invalid '#' syntax", i)
            # "#(" and "#[" open a list or vector that must be balanced.
            i += 1 if text[i + 1] in "([" else 2
        elif c == "." and _standalone_dot(text, i):
            k = _skip_blank(text, i + 1)
            if k >= n or text[k] in ")]":
                return line_starts.problem("nothing after '.' in a dotted pair", i)
            i += 1
        elif starts_char:
            j = _char_literal_end(text, i + 1)
            # ``? `` (a literal space or tab) ends at once, whatever follows.
            spaced = j == i + 2 and text[i + 1] in " \t"
            if j < 0 or (
                not spaced and j < n and text[j] not in _AFTER_CHAR and not text[j].isspace()
            ):
                return line_starts.problem("bad character literal", i)
            i = j
            after_char = True
        elif c in "([":
            stack.append((c, i))
            i += 1
        elif c in ")]":
            if not stack:
                return line_starts.problem(f"unmatched closing {c!r}", i)
            opener, at = stack.pop()
            if (opener == "(") != (c == ")"):
                where = line_starts.position(at)
                return line_starts.problem(
                    f"{c!r} closes {opener!r} opened at line {where[0]}, column {where[1]}", i
                )
            i += 1
        else:
            i += 1
    if stack:
        opener, at = stack[-1]
        return line_starts.problem(f"{opener!r} is never closed", at)
    return None


def _string_end(text: str, i: int) -> int:
    """Offset of the closing quote of a string whose body starts at ``i``, or -1.

    A ``\\u`` or ``\\U`` escape without its 4 or 8 hex digits returns the
    offset of the escape instead (the caller sees no quote there).
    """
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] in "uU":
                digits = 4 if text[i + 1] == "u" else 8
                hexes = text[i + 2 : i + 2 + digits]
                if len(hexes) < digits or any(h not in _HEX for h in hexes):
                    return i
                i += 2 + digits
                continue
            i += 2
        elif c == '"':
            return i
        else:
            i += 1
    return -1


_HEX = set("0123456789abcdefABCDEF")


def _standalone_dot(text: str, i: int) -> bool:
    """A "." that is a token of its own (the dot of a dotted pair)."""
    before = text[i - 1] if i > 0 else " "
    after = text[i + 1] if i + 1 < len(text) else " "
    return (before.isspace() or before in "([") and (after.isspace() or after in ")]([\"';")


def _skip_blank(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text[i] == ";":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        else:
            break
    return i


def _token_start(text: str, i: int) -> bool:
    """A ``?`` starts a character literal only where a new token can start."""
    if i == 0:
        return True
    prev = text[i - 1]
    if prev == "\\":
        # ``foo\?`` escapes the question mark, unless that backslash was itself escaped.
        k = i - 1
        while k > 0 and text[k - 1] == "\\":
            k -= 1
        return (i - k) % 2 == 0
    return prev in _DELIMITERS or prev == "#" or prev.isspace()


def _char_literal_end(text: str, i: int) -> int:
    """Offset just past the character literal body starting at ``i`` (after ``?``)."""
    n = len(text)
    if i >= n:
        return -1
    if text[i] != "\\":
        return i + 1
    # Backslash forms.
    if i + 1 >= n:
        return -1
    c = text[i + 1]
    # Modifier prefixes (\C-, \M-, ^) in a loop: a long chain must not recurse.
    while True:
        if c in _MODIFIERS and i + 2 < n and text[i + 2] == "-":
            i += 3
        elif c == "^":
            i += 2
        else:
            break
        if i >= n:
            return n
        if text[i] != "\\":
            return i + 1
        if i + 1 >= n:
            return -1
        c = text[i + 1]
    if c in _MODIFIERS and c != "s":
        return -1  # \C, \M, \S, \H, \A need their "-"
    if c == "N" and i + 2 < n and text[i + 2] == "{":
        j = text.find("}", i + 3)
        return -1 if j < 0 else j + 1
    if c in "xuU":
        j = i + 2
        while j < n and text[j] in "0123456789abcdefABCDEF":
            j += 1
        return j
    if c in "01234567":
        j = i + 1
        while j < n and j < i + 4 and text[j] in "01234567":
            j += 1
        return j
    return i + 2


class _LineIndex:
    def __init__(self, text: str) -> None:
        self.starts = [0]
        pos = text.find("\n")
        while pos >= 0:
            self.starts.append(pos + 1)
            pos = text.find("\n", pos + 1)

    def position(self, offset: int) -> tuple[int, int]:
        idx = bisect.bisect_right(self.starts, offset) - 1
        return idx + 1, offset - self.starts[idx]

    def problem(self, message: str, offset: int) -> ElispProblem:
        line, column = self.position(offset)
        return ElispProblem(message, line, column)
