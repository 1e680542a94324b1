"""Refusals for new text that would break a file the way models typically do.

Two shapes of model output look fine to a schema and wreck a file:

* **double escaping**: the whole new text arrives as one line holding
  literal ``\\n`` sequences (the model escaped its JSON twice);
* **lazy placeholders**: a line such as ``# ... existing code ...`` stands
  where the original had real lines, which the write would delete.

Both are refused with the line at fault and what to send instead.  Only
the text being replaced is compared, so a placeholder that was already in
the file, or an escape that the replaced text had too, passes.
"""

from __future__ import annotations

import re

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
    """How many literal backslash-n pairs stand outside string literals.

    A string literal's own ``\\n`` (``printf("done\\n")``) is normal code;
    an escaped backslash (``\\\\n``) is not a newline either.  A line
    comment runs to the next literal ``\\n``.  What opens a string depends
    on the file (``where``): no apostrophe in Lisp or between two letters,
    no triple quote; a quote that never closes opened nothing.
    """
    quotes = _quotes(where)
    count = 0
    i, n = 0, len(text)
    quote = ""
    opened = -1
    inside = 0  # literal newlines counted as inside the open string
    comment = False
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            if text[i + 1] == "n":
                if quote:
                    inside += 1
                else:
                    count += 1
                    comment = False
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
        if ch in quotes and text.startswith(ch * 3, i):
            i += 3  # a triple quote spans real lines: no help in telling
            continue
        if ch in quotes and not (
            ch == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        ):
            quote, opened, inside = ch, i, 0
        elif ch == "#" or text.startswith("//", i) or (ch == ";" and quotes == '"'):
            comment = True
        i += 1
    if quote:
        # Never closed: it was no string. Count on from just after it.
        return count + literal_newlines(text[opened + 1 :], where) if inside else count
    return count


def check_double_escape(new: str, replaced: str, what: str, where: str) -> None:
    """Refuse one-line text full of literal ``\\n`` that replaces several lines."""
    replaced_lines = replaced.count("\n") + (0 if replaced.endswith("\n") else 1)
    if "\n" in new.rstrip("\r\n") or replaced_lines < 2:
        return
    if new.count("\\n") < 2:
        return
    count = literal_newlines(new, where)
    if count < 2 or literal_newlines(replaced, where) > 0:
        return
    raise errors.bad_args(
        f"{what} is a single line holding {count} literal '\\n' sequences, and it would "
        f"replace several lines of {where}: it looks escaped twice, and written as is it "
        "would put the whole text on one line; nothing was changed",
        recovery=[
            f"Send {what} again with real line breaks: in the JSON arguments a line break "
            'is written "\\n" (one backslash), not "\\\\n"',
            "If the file really needs a literal backslash-n, edit only the line that holds it",
        ],
        path=where,
        problem="double-escaped",
        literal_newlines=count,
    )


# --- lazy placeholders -----------------------------------------------------------------

_LEADER = re.compile(r"^(?:#+|//+|/\*+|\*+|--+|;+|<!--|\{/\*|\(\*|%+|\"\"\"|''')\s*")
_TRAILER = re.compile(r"\s*(?:\*+/\}?|-->|\*\)|\"\"\"|''')\s*$")
_ELLIPSIS_ONLY = {"...", "\u2026", "[...]", "(...)", "etc", "etc.", "...etc", "... etc"}
_PLACEHOLDER_WORDS = re.compile(
    r"^(?:\.\.\.|\u2026)*\s*[\[(]?\s*(?:\.\.\.|\u2026)?\s*(?:"
    r"(?:the\s+)?rest\s+of\b"
    r"|(?:the\s+)?remaining\s+(?:code|lines|content|methods|functions|cases|tests|file)\b"
    r"|(?:the\s+)?existing\s+(?:code|content|lines|implementation|methods|functions|imports)\b"
    r"|(?:\w+\s+)?unchanged\b"
    r"|(?:code|content|lines?|implementation|body)\s+(?:unchanged|omitted|elided|as\s+before)\b"
    r"|same\s+as\s+(?:before|above|original|previous)\b"
    r"|previous\s+(?:code|content|lines|implementation)\b"
    r"|other\s+(?:code|methods|functions|lines|cases)\b"
    r"|(?:code\s+)?omitted\b"
    r"|keep\s+(?:existing|the\s+rest)\b"
    r"|no\s+changes?\b"
    r")",
    re.IGNORECASE,
)


def is_placeholder(line: str) -> bool:
    """Whether ``line`` is an abbreviation standing for code, not code."""
    text = line.strip()
    if not text:
        return False
    leader = _LEADER.match(text)
    body = _TRAILER.sub("", text[leader.end() :] if leader else text).strip()
    if leader and body.lower() in _ELLIPSIS_ONLY:
        return True
    if not leader and not body.startswith(("(", "[", "...", "\u2026")):
        return False  # bare code: Python's own ``...`` is a statement
    return _PLACEHOLDER_WORDS.match(body) is not None


MAX_DROPPED_SHOWN = 8


def check_placeholders(new: str, replaced: str, first_line: int, what: str, where: str) -> None:
    """Refuse a placeholder that stands for original lines the new text no longer holds."""
    new_lines = new.replace("\r\n", "\n").split("\n")
    added = [line for line in new_lines if is_placeholder(line)]
    if not added:
        return
    old_lines = replaced.replace("\r\n", "\n").split("\n")
    before = {line.strip() for line in old_lines}
    fresh = [line for line in added if line.strip() not in before]
    if not fresh:
        return
    kept = {line.strip() for line in new_lines}
    dropped = [
        (first_line + k, line)
        for k, line in enumerate(old_lines)
        if line.strip() and line.strip() not in kept
    ]
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
