"""Refusals for new text that would break a file the way models typically do.

Shapes of model output that look fine to a schema and wreck a file:

* **double escaping**: the whole new text arrives as one line holding
  literal ``\\n`` sequences (the model escaped its JSON twice);
* **lazy placeholders**: a line such as ``# ... existing code ...`` stands
  where the original had real lines, which the write would delete;
* **pasted surroundings**: the whole file in place of a few lines, a
  Markdown fence, diff markers or a read tool's line numbers.

Each is refused with the reason and what to send instead.  Only
the text being replaced is compared, so a placeholder that was already in
the file, or an escape that the replaced text had too, passes.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import NoReturn

from .. import errors
from ..errors import ToolFailure
from ..output import CredentialRestoreError, redact_url_credentials, restore_url_credentials

# --- double escaping ---------------------------------------------------------------


# Which characters open a string literal, by file type (prose: only code spans).
_LISP = {".el", ".lisp", ".scm", ".clj"}
_PROSE = {".md", ".txt", ".rst", ".org"}


def _quotes(where: str) -> str:
    """The quote characters of the file ``where`` names (its suffix decides)."""
    suffix = where[where.rfind(".") :] if "." in where.rsplit("/", 1)[-1] else ""
    if suffix in _LISP:
        return '"'
    if suffix in _PROSE:
        return "`"
    return "\"'`"


def literal_newlines(text: str, where: str = "") -> int:
    """How many literal backslash-n pairs stand outside string literals and comments."""
    return _scan(text, where)[0]


def _scan(text: str, where: str = "") -> tuple[int, int, list[int]]:
    """Literal backslash-n pairs: (outside strings and comments, inside comments, offsets).

    A string literal's own ``\\n`` (``printf("done\\n")``) is normal code, and
    so is a regular expression literal's (``/\\n+/``) and Emacs Lisp's
    character ``?\\n``; an escaped backslash (``\\\\n``) is not a newline
    either.  A comment runs to the next literal ``\\n`` (in text escaped twice,
    that is where it ended); those in comments are counted apart, since a
    real comment may speak of ``\\n``.  What opens a string depends on the file
    (``where``): no apostrophe in Lisp or between two letters, no triple
    quote; a quote that never closes opened nothing.  The offsets are those
    of the pairs counted outside strings and comments.
    """
    quotes = _quotes(where)
    lisp = quotes == '"' and _suffix(where) in _LISP
    c_like = quotes == "\"'`"
    code = in_comment = 0
    at: list[int] = []
    i, n = 0, len(text)
    quote = ""
    opened = -1
    inside = 0  # literal newlines counted as inside the open string
    comment = False
    while i < n:
        if not quote and not comment:
            # Jump to the next character that can matter (in C).
            m = _SPECIAL.search(text, i)
            if m is None:
                break
            i = m.start()
        elif quote:
            m = _IN_STRING[quote].search(text, i)
            if m is None:
                break
            i = m.start()
        else:
            k = text.find("\\", i)
            if k < 0:
                break
            i = k
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            if text[i + 1] == "n":
                if quote:
                    inside += 1
                elif comment:
                    in_comment += 1
                    comment = False
                else:
                    code += 1
                    at.append(i)
            i += 2
            continue
        if comment:
            i += 1
            continue
        if quote:
            if ch == quote:
                quote = ""
                inside = 0
            i += 1
            continue
        if lisp and ch == "?" and text.startswith("?\\", i):
            i += 3  # a character literal: ?\n is the newline character
            continue
        if ch in quotes and text.startswith(ch * 3, i):
            i += 3  # a triple quote spans real lines: no help in telling
            continue
        if ch in quotes and not (
            ch == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        ):
            quote, opened, inside = ch, i, 0
        elif c_like and ch == "/" and _regex_starts(text, i):
            quote, opened, inside = "/", i, 0
        elif ch == "#" or text.startswith("//", i) or (ch == ";" and quotes == '"'):
            comment = True
        i += 1
    if quote and inside:
        # Never closed: it was no string. Count on from just after it.
        more, more_comment, more_at = _scan(text[opened + 1 :], where)
        return code + more, in_comment + more_comment, at + [opened + 1 + k for k in more_at]
    return code, in_comment, at


_SPECIAL = re.compile(r"[\\\"'`#/;?]")
_IN_STRING = {q: re.compile("[\\\\" + re.escape(q) + "]") for q in "\"'`/"}


def _regex_starts(text: str, i: int) -> bool:
    """Whether the ``/`` at ``i`` opens a regular expression literal (JavaScript's)."""
    if text.startswith(("//", "/*"), i):
        return False
    before = text[:i].rstrip()
    return not before or before[-1] in "(=,:;!&|?{}[+" or before.endswith("return")


def check_double_escape(new: str, replaced: str, what: str, where: str) -> None:
    """Refuse one-line text whose literal ``\\n`` stand for line breaks.

    The signs, any one enough: two lines of the replaced text joined by
    literal ``\\n``; more literal ``\\n`` than the replaced lines held, where
    a piece they separate is a line of the replaced text or starts at its
    indentation; two literal ``\\n`` outside strings and comments; or one,
    with such a piece.  Never for sequences the replaced text held around
    the same words, nor for text with real line breaks of its own.
    """
    if "\n" in new.rstrip("\r\n") or "\\n" not in new:
        return
    old_lines = {line.strip() for line in replaced.replace("\r\n", "\n").split("\n")}
    raw_pieces = new.split("\\n")
    pieces = [p.strip() for p in raw_pieces]
    shared = [p for p in pieces if _telling(p) and p in old_lines]
    if len(set(shared)) >= 2:
        # Two lines of the replaced text joined by a literal \n: escaped, whatever
        # quotes the pieces hold (a docstring's closing quote opens nothing).
        _refuse_escaped(what, where, new.count("\\n"))
    indents = {_leading(line) for line in replaced.split("\n") if line.strip()} - {""}
    indented = any(_leading(piece) in indents for piece in raw_pieces[1:] if piece.strip())
    evidence = indented or (bool(shared) and len(pieces) > len(shared))
    replaced_lines = len(replaced.rstrip("\r\n").split("\n"))
    if replaced_lines >= 2 and new.count("\\n") > replaced.count("\\n") and evidence:
        _refuse_escaped(what, where, new.count("\\n"))
    code, in_comment, at = _scan(new, where)
    if code + in_comment == 0:
        return
    kept = [k for k in at if new[max(k - 8, 0) : k + 10] in replaced]
    if kept and len(kept) == len(at) and not in_comment:
        return  # the replaced text held the same sequences
    fresh = code - len(kept)
    if fresh < 2 and not (fresh + in_comment >= 1 and evidence):
        return
    _refuse_escaped(what, where, code + in_comment)


def _refuse_escaped(what: str, where: str, count: int) -> NoReturn:
    raise errors.bad_args(
        f"{what} is a single line holding {count} literal '\\n' sequences where {where} "
        "has real lines: it looks escaped twice, and written as is it would put the text "
        "on one line; nothing was changed",
        recovery=[
            f"Send {what} again with real line breaks: in the JSON arguments a line break "
            'is written "\\n" (one backslash), not "\\\\n"',
            "If the file really needs a literal backslash-n, edit only the line that holds it",
        ],
        path=where,
        problem="double-escaped",
        literal_newlines=count,
    )


def _leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


# --- lazy placeholders -----------------------------------------------------------------

_LEADER = re.compile(
    r"^(?:#+|//+|/\*+|\*+|--+|;+|<!--|\{/\*|\(\*|%+|\"\"\"|'''|'|rem\b|::)\s*", re.IGNORECASE
)
_TRAILER = re.compile(r"\s*(?:\*+/\}?|-->|\*\)|\"\"\"|''')\s*$")
# What surrounds a placeholder's words: ellipses, brackets, dashes, punctuation.
_WRAPPING = " \t.\u2026[](){}<>-\u2013\u2014:;,!*=~_"
_ALONE = {"", "snip", "snipped", "etc", "truncated", "omitted", "elided", "cut", "more"}
_THING = (
    r"(?:code|file|lines?|content|contents|implementation|methods?|functions?|class|body|"
    r"module|cases|tests?|imports|logic|definitions?|fields|properties|config|script|loop|"
    r"handlers?|helpers|components?|routes|styles|markup|section|block|program|original)"
)
_SO = (
    r"(?:\s+(?:is\s+|are\s+|remains?\s+|stays?\s+|goes\s+|kept\s+|left\s+)?"
    r"(?:unchanged|the\s+same|as\s+before|as\s+is|omitted|elided|here|below|above|"
    r"not\s+shown|not\s+changed|untouched|intact))?"
)
_PLACEHOLDER = re.compile(
    r"(?:"
    rf"(?:the\s+)?(?:rest|remainder)(?:\s+of\s+(?:the\s+|this\s+)?(?:\w+\s+)?{_THING})?{_SO}"
    rf"|(?:the\s+)?(?:remaining|existing|previous|other|original|same)\s+(?:\w+\s+)?{_THING}{_SO}"
    rf"|(?:\w+\s+){{0,3}}(?:unchanged|omitted|elided|untouched|as\s+before|not\s+shown)"
    r"|same\s+as\s+(?:before|above|below|original|previous|the\s+original)"
    r"|keep(?:s)?\s+(?:existing|the\s+rest|as\s+is|the\s+same)(?:\s+\w+)?"
    r"|no\s+changes?(?:\s+(?:here|below|above|needed))?"
    r"|(?:\w+\s+)?(?:code|content|lines?|implementation|body)\s+(?:omitted|elided|as\s+before)"
    r")",
    re.IGNORECASE,
)
_PYTHON = {".py", ".pyi", ".pyw"}
MAX_PLACEHOLDER = 200  # a note standing for code is short; longer lines are code
# Every placeholder holds one of these: a cheap first test for each line.
_HINT = re.compile(
    r"\.\.\.|\u2026|snip|etc|unchang|rest|remain|exist|omit|elid|same|keep|change|previous|"
    r"other|original|cut|truncat|more|untouch|shown|before|intact",
    re.IGNORECASE,
)


def is_placeholder(line: str, where: str = "") -> bool:
    """Whether ``line`` is an abbreviation standing for code, not code.

    A placeholder is a comment (in any comment style) or a bracketed note
    that holds nothing but the abbreviation: ellipses, "snip", or words
    such as "rest of the code unchanged".  A comment that says more
    ("Rest of the list is parsed below") is a comment.  A bare ``...`` is
    Python's Ellipsis in Python and a placeholder elsewhere; spreads and
    variadics (``...args``, ``args...``) are code.
    """
    text = line.strip()
    if not text or len(text) > MAX_PLACEHOLDER or not _HINT.search(text):
        return False
    ellipsis = text.startswith(("...", "\u2026"))
    if ellipsis and text.lstrip(".\u2026").strip():
        # "...  # unchanged" after Python's Ellipsis: the comment decides.
        rest = text.lstrip(".\u2026").strip()
        if _LEADER.match(rest):
            text = rest
    leader = _LEADER.match(text)
    body = _TRAILER.sub("", text[leader.end() :] if leader else text).strip()
    if not leader:
        if text in ("...", "\u2026"):
            return _suffix(where) not in _PYTHON
        if not (text[:1] in "[(" or ellipsis):
            return False  # bare code: a spread, a call, a statement
    words = " ".join(body.strip(_WRAPPING).split()).lower()
    if not leader and not (words in _ALONE or body.strip(_WRAPPING) != body):
        return False  # "(x)" or "[a, b]" is code: a note comes wrapped in dots or brackets
    if words in _ALONE:
        # Wrapping alone ("# ...", "[...]") or one word ("# snip"), but not a bare "#".
        return bool(body.strip()) and (bool(words) or any(c in body for c in ".\u2026"))
    return _PLACEHOLDER.fullmatch(words) is not None


MAX_DROPPED_SHOWN = 8


def check_placeholders(new: str, replaced: str, first_line: int, what: str, where: str) -> None:
    """Refuse a placeholder that stands for original lines the new text no longer holds.

    Lines are counted, not just compared: a line whose text recurs (a
    ``}``, a ``return None``) is dropped when the new text holds it fewer
    times than the replaced text did.
    """
    new_lines = new.replace("\r\n", "\n").split("\n")
    added = [line for line in new_lines if is_placeholder(line, where)]
    if not added:
        return
    old_lines = replaced.replace("\r\n", "\n").split("\n")
    before = {line.strip() for line in old_lines}
    fresh = [line for line in added if line.strip() not in before]
    if not fresh:
        return
    kept = Counter(line.strip() for line in new_lines)
    dropped = []
    for k, line in enumerate(old_lines):
        key = line.strip()
        if not key:
            continue
        if kept[key] > 0:
            kept[key] -= 1
        else:
            dropped.append((first_line + k, line))
    if not dropped:
        return
    # File text reaches the model: credentials in it stay redacted.
    shown = redact_url_credentials(
        "\n".join(f"{n:6}\t{line}" for n, line in dropped[:MAX_DROPPED_SHOWN])
    )[0]
    more = (
        f"\n       ... and {len(dropped) - MAX_DROPPED_SHOWN} more line(s)"
        if len(dropped) > MAX_DROPPED_SHOWN
        else ""
    )
    raise errors.bad_args(
        f"{what} holds the placeholder line {fresh[0].strip()!r} where {where} has real "
        f"code; written as is, it would delete {len(dropped)} line(s), nothing was "
        f"changed. The lines it would drop:\n{shown}{more}",
        recovery=[
            "Send the full text, with every line that should stay written out",
            "Or make a narrower edit that covers only the lines you change",
        ],
        path=where,
        problem="placeholder",
        placeholder=fresh[0].strip(),
        dropped_lines=[n for n, _ in dropped[:100]],
    )


# --- pasted surroundings: the whole file, a fence, diff markers, a read gutter -------

_MARKDOWN = {".md", ".markdown", ".mdx", ".mkd", ".rmd", ".qmd"}
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*[\w+#.-]*\s*$")
# A read tool's line numbers: forj's "    12\t", the arrow form "  12→", "12:" / "12|".
_GUTTER = re.compile(r"^\s*(\d+)(?:\t|\u2192|: ?| ?\| ?)")
WHOLE_FILE_SHARE = 0.6  # of the lines outside the range, repeated in the new text


def _suffix(where: str) -> str:
    name = where.rsplit("/", 1)[-1]
    return name[name.rfind(".") :].lower() if "." in name else ""


def _telling(line: str) -> bool:
    """A line that says something about where it is: not a brace, not blank."""
    text = line.strip()
    return len(text) >= 4 and any(ch.isalnum() for ch in text)


def check_pasted(
    new: str, replaced: str, text: str, first: int, last: int, what: str, where: str, path: str
) -> None:
    """Refuse new text that carries what surrounds an edit rather than the edit.

    ``replaced`` stands at lines ``first..last`` of ``text`` (the file at
    ``path``).  Refused: the whole file (or most of it) pasted in place of
    a few lines, which would leave the file holding itself; a Markdown
    fence around code for a file that is not Markdown; diff markers on
    every line; a read tool's line-number gutter.  Each only when the
    replaced text did not have the same shape itself.
    """
    new_lines = new.replace("\r\n", "\n").split("\n")
    old_lines = replaced.replace("\r\n", "\n").split("\n")
    body = [line for line in new_lines if line.strip()]
    if not body:
        return
    _check_fence(body, old_lines, what, where, path)
    _check_markers(body, old_lines, what, where)
    _check_gutter(body, old_lines, what, where)
    _check_whole_file(new_lines, old_lines, text, first, last, what, where)


def _pasted(what: str, where: str, why: str, problem: str, send: str) -> ToolFailure:
    return errors.bad_args(
        f"{what} {why}; written as is, {where} would hold it; nothing was changed",
        recovery=[send, "Send only the lines that belong in the file, as the file will hold them"],
        path=where,
        problem=problem,
    )


def _check_fence(body: list[str], old_lines: list[str], what: str, where: str, path: str) -> None:
    if _suffix(path) in _MARKDOWN:
        return
    if not (_FENCE.match(body[0]) and len(body) >= 2 and _FENCE.match(body[-1])):
        return
    old_body = [line for line in old_lines if line.strip()]
    if old_body and _FENCE.match(old_body[0]):
        return  # the file has the fence itself (a docstring's example, a here-document)
    raise _pasted(
        what,
        where,
        f"is wrapped in a Markdown code fence ({body[0].strip()!r} ... {body[-1].strip()!r}), "
        "which is chat formatting, not part of the file",
        "fence",
        "Send the text without the ``` lines around it",
    )


def _check_markers(body: list[str], old_lines: list[str], what: str, where: str) -> None:
    if not all(line[:1] in "+- " for line in body):
        return
    if not any(line[:1] in "+-" for line in body):
        return  # all indented by a space: indentation, not markers
    old_body = {line.strip() for line in old_lines if line.strip()}
    unmarked_old = [line[1:].strip() for line in body if line[:1] in "- " and line[1:].strip()]
    if not unmarked_old or not all(line in old_body for line in unmarked_old):
        return  # the '-' and ' ' lines are not the replaced lines: a list, not a diff
    if all(line.strip() in old_body for line in body):
        return  # the replaced lines read so themselves
    raise _pasted(
        what,
        where,
        "carries diff markers: every line starts with '+', '-' or ' ', and without them "
        "its '-' and ' ' lines are the lines it replaces",
        "diff-markers",
        "Send the new lines as the file will read, without '+', '-' or ' ' in front "
        "(or use apply_patch for a diff)",
    )


def _check_gutter(body: list[str], old_lines: list[str], what: str, where: str) -> None:
    numbers = []
    for line in body:
        m = _GUTTER.match(line)
        if m is None:
            return
        numbers.append(int(m.group(1)))
    if any(_GUTTER.match(line) for line in old_lines if line.strip()):
        return  # the replaced lines start with numbers too: data, not a gutter
    consecutive = all(b == a + 1 for a, b in itertools.pairwise(numbers))
    if len(numbers) < 2 and not ("\t" in body[0] or "\u2192" in body[0]):
        return
    if len(numbers) >= 2 and not consecutive:
        return
    raise _pasted(
        what,
        where,
        f"starts every line with a line number ({body[0].strip()[:40]!r}), as read_file "
        "shows lines; the numbers are not part of the file",
        "line-numbers",
        "Send the lines without the line numbers and the tab or arrow after them",
    )


def _check_whole_file(
    new_lines: list[str],
    old_lines: list[str],
    text: str,
    first: int,
    last: int,
    what: str,
    where: str,
) -> None:
    if len(new_lines) < 4 or len(new_lines) < len(old_lines) + 2:
        return  # not longer than what it replaces: no room for the file around it
    file_lines = text.replace("\r\n", "\n").split("\n")
    if len(file_lines) < 6:
        return
    replaced = {line.strip() for line in old_lines}
    outside = {
        line.strip()
        for k, line in enumerate(file_lines, 1)
        if (k < first or k > last) and _telling(line) and line.strip() not in replaced
    }
    if len(outside) < 2:
        return
    carried = outside & {line.strip() for line in new_lines}
    if len(carried) < 2 or len(carried) < WHOLE_FILE_SHARE * len(outside):
        return
    raise errors.bad_args(
        f"{what} holds most of the file ({len(carried)} of the {len(outside)} distinct lines "
        f"outside {where} are in it), in place of {last - first + 1} line(s): written as "
        "is, the file would hold itself twice; nothing was changed",
        recovery=[
            "Send only the new text of the lines being replaced",
            "To replace the whole file, use write_file with the full content",
        ],
        path=where,
        problem="whole-file",
        carried_lines=len(carried),
    )


# --- redacted credentials ------------------------------------------------------------


def restore_credentials(original: str, new: str, what: str, where: str) -> tuple[str, int]:
    """``new`` with each ``***`` the model saw in place of a URL credential put back."""
    try:
        return restore_url_credentials(original, new)
    except CredentialRestoreError as exc:
        raise _credential_failure(exc, what, where) from None


def _credential_failure(exc: CredentialRestoreError, what: str, where: str) -> ToolFailure:
    return errors.bad_args(
        f"Line {exc.line} of {what} holds a redacted credential (***) that matches no "
        f"single credential of {where}, so the original cannot be put back; nothing was "
        f"changed. The line: {exc.text.strip()!r}",
        recovery=[
            "Keep such lines out of the edit (edit around them), or leave the URL "
            "exactly as read so the original credential can be restored",
            "To set a new credential, ask the user to do it",
        ],
        path=where,
        problem="redacted-credential",
        line=exc.line,
    )
