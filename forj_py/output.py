"""What every string leaving the worker goes through: sanitize, redact, truncate.

Tool output is untrusted: a file or a command can carry
terminal escape sequences or bidi overrides that would make Emacs show
something other than what the model reads.  :func:`sanitize` removes them.
:func:`truncate_text` cuts a string to a byte budget with the marker
*inside* the budget and never through a UTF-8 character (the model must
see that something is missing, and Emacs must be able to decode the rest);
:func:`fit_json` applies that to a whole result object.  :func:`redact`
blanks out things that look like credentials in summaries.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported on first use (the functools.cache functions below): most results
    # never need it, and the worker starts faster without it.
    import regex

TRUNCATION_MARKER = "\n\n... [output truncated]"

# ESC-introduced sequences, longest forms first:
#  - CSI:  ESC [ params intermediates final
#  - OSC, DCS, SOS, PM, APC: ESC ] / P / X / ^ / _ ... up to BEL or ST (ESC \);
#    an unterminated one runs to the end of the string (it would swallow the
#    rest of a terminal's output too, so dropping it is what a terminal does)
#  - nF / Fp / Fe / Fs: ESC, intermediates 0x20-0x2F, one final byte 0x30-0x7E
#  - a lone ESC
# and their 8-bit C1 forms (CSI U+009B, OSC U+009D, DCS U+0090, SOS U+0098,
# PM U+009E, APC U+009F), then every remaining C0 control but tab and
# newline, DEL, every C1 control, and the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069).
_CONTROL_RE = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|\Z)
    | \x1b [\x20-\x2f]* [\x30-\x7e]?
    | [\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]
    """,
    re.VERBOSE | re.DOTALL,
)
# Cheap pre-check: almost all text has none of these, and a search with this
# class is several times faster than running the full alternation.
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_ANY_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_ASCII_CONTROLS = bytes(range(0x09)) + bytes(range(0x0B, 0x20)) + b"\x7f"


def _has_controls(text: str) -> bool:
    if text.isascii():
        # Most source code is ASCII: deleting the control bytes in C and
        # comparing lengths is several times faster than a regex search.
        data = text.encode("ascii")
        return len(data.translate(None, _ASCII_CONTROLS)) != len(data)
    return _ANY_CONTROL_RE.search(text) is not None


def sanitize(text: str) -> str:
    """Remove terminal controls and bidi overrides, keeping tab and newline.

    Lone surrogates (which JSON can carry but UTF-8 cannot) become U+FFFD so
    the result always encodes.
    """
    if _has_controls(text):
        text = _CONTROL_RE.sub("", text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE_RE.sub("\ufffd", text)
    return text


# What a reviewer must see but a display would hide or misdraw: controls
# (but tab and newline), format characters (soft hyphen, zero-width spaces
# and joiners, bidi marks and controls, U+180E, the tag block, the BOM),
# private-use characters, line and paragraph separators (JavaScript ends a
# line at U+2028), every space but the plain one (no-break, en, em,
# ideographic, ...), and the rest of what Unicode says a display draws as
# nothing (Default_Ignorable_Code_Point): the combining grapheme joiner, the
# Hangul and Khmer fillers, the Mongolian and all the variation selectors
# (U+E0100-U+E01EF carry a byte each: a program hides in an empty-looking
# string).  elisp/forj-review.el marks the same set.
_DEFAULT_IGNORABLE = (
    "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u3164\ufe00-\ufe0f\uffa0"
    "\ufff0-\ufff8\U000e0000-\U000e0fff"
)


@functools.cache
def _review_hidden_re() -> regex.Pattern[str]:
    import regex

    return regex.compile(
        "[[\\p{Cc}\\p{Cf}\\p{Co}\\p{Zl}\\p{Zp}\\p{Zs}" + _DEFAULT_IGNORABLE + "]--[\\t\\n\\x20]]",
        regex.VERSION1,
    )


# How a marked character reads: ⟨U+00AD⟩.  The brackets are not ASCII, so
# text cannot be mistaken for a marker by accident.
_MARK_RE = re.compile("\u27e8U\\+[0-9A-F]{4,6}\u27e9")


def _mark(m: regex.Match[str]) -> str:
    return f"\u27e8U+{ord(m.group()):04X}\u27e9"


def visible_controls(text: str) -> str:
    """Show every character a display would hide as ``⟨U+XXXX⟩``, instead of removing it.

    For text a person approves (diffs, summaries): removing an escape sequence
    or a bidi override there would hide what is really about to be written,
    and a soft hyphen or a tag character would hide text in plain sight.
    """
    if text.isascii() and not _has_controls(text):
        return text
    return _review_hidden_re().sub(_mark, text)


# --- free text in a review ---------------------------------------------------------
#
# A preview is forj's own lines (``argv:``, ``risk:``, ``env:``, diff headers)
# with text from the call inside them: a script, a commit message, a request
# body, a path.  Every such text goes through the functions below, so none of
# it can pass for forj's own lines, and every character of it can be read
# back: a line of a block starts with the line mark, an inline text holds no
# newline, invisible characters and literal marker brackets are marked, and
# wide runs of blanks show their length.

LINE_MARK = "\u2502 "
BLANK_LINE = "\u27e8blank\u27e9"
# How a newline inside a one-line field reads.
NEWLINE_MARK = "\u27e8U+000A\u27e9"
_WIDE_BLANKS_RE = re.compile(r"[ \t]{8,}")


def shown_line(line: str) -> str:
    """One line of free text as a review shows it.

    Characters a display would hide are marked (``visible_controls``), a
    literal ``⟨`` too (so text cannot imitate a marker), and runs of eight
    or more blanks show their length.  A newline is marked as well: the
    result is always a single line.
    """
    if "\u27e8" in line:
        line = line.replace("\u27e8", "\u27e8U+27E8\u27e9")
    line = line.replace("\n", NEWLINE_MARK)
    line = _WIDE_BLANKS_RE.sub(lambda m: f"\u27e8{len(m.group())} blanks\u27e9", line)
    return visible_controls(line)


def quoted_lines(text: str) -> list[str]:
    """``text`` as lines of a quoted block: each behind the line mark.

    Lines end at ``\\n`` only (a carriage return, a form feed, U+2028 are
    marked inside their line).  An empty line reads ``⟨blank⟩``; a line of
    nothing but blanks reads as their count, so the whole block still shows
    every character.  A final newline ends the last line; whether there is
    one is told by :func:`block_shape`.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        if not line:
            out.append(LINE_MARK + BLANK_LINE)
        elif not line.strip(" \t"):
            out.append(LINE_MARK + f"\u27e8{len(line)} blanks\u27e9")
        else:
            out.append(LINE_MARK + shown_line(line))
    return out


def block_shape(text: str) -> str:
    """What a block's header says of it: its lines, and a missing final newline."""
    n = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    shape = f"{n} line{'' if n == 1 else 's'}"
    if text and not text.endswith("\n"):
        shape += ", no newline at the end"
    return shape


def quoted_block(name: str, text: str, about: str = "") -> list[str]:
    """``name (N lines, ...):``, the text's lines behind the mark, and ``end of name``.

    The header and the end line are forj's: no line of the text can be
    either, since every line of the text starts with the mark.
    """
    head = f"{name} ({block_shape(text)}{', ' + about if about else ''}):"
    return [head, *quoted_lines(text), f"end of {name}"]


def count_marks(text: str) -> int:
    """How many ``⟨U+XXXX⟩`` markers :func:`visible_controls` left in ``text``."""
    return len(_MARK_RE.findall(text)) if "\u27e8" in text else 0


# In compact JSON (ensure_ascii=False) a control character shows up either
# escaped (C0 but tab/newline: \u00XX, \b, \f, \r) or raw (DEL, C1, bidi,
# a lone surrogate).
_JSON_ESCAPED_CONTROL_RE = re.compile(r"\\(?:u00(?:0[0-8bcef]|1[0-9a-fA-F])|[bfr])")
# The raw ones in UTF-8: C1 is C2 80-9F; the bidi controls E2 80 AA-AE and E2 81 A6-A9.
_UTF8_RAW_CONTROL_RE = re.compile(rb"\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def json_has_controls(text: str) -> bool:
    """Whether JSON ``text`` holds a string that :func:`sanitize` would change.

    This runs on every result, so every step is a search in C: a clean
    megabyte costs a few milliseconds, where sanitizing it and encoding
    it again would cost several times that.
    """
    # A source text that spells "\\r", or a Windows path ("C:\\files"), holds
    # escaped backslashes, not controls: a megabyte of it must not take the
    # slow path.  So a hit is checked again with the pairs dropped, left to
    # right as a JSON reader pairs them (an odd run keeps the backslash that
    # starts an escape).  Dropping pairs makes no new hit, so a text without
    # one is done after a single search.
    search = _JSON_ESCAPED_CONTROL_RE.search
    if search(text) is not None and search(text.replace("\\\\", "")) is not None:
        return True
    if "\x7f" in text:
        return True
    if text.isascii():
        return False
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return True  # a lone surrogate
    # Most non-ASCII text holds none of these lead bytes: a byte search each.
    if b"\xc2" in data or b"\xe2\x80" in data or b"\xe2\x81" in data:
        return _UTF8_RAW_CONTROL_RE.search(data) is not None
    return False


def sanitize_value(value: Any) -> Any:
    """Sanitize every string (keys included) inside a JSON-like value."""
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, dict):
        return {sanitize(str(k)): sanitize_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize_value(v) for v in value]
    return value


def truncate_text(text: str, max_bytes: int, marker: str = TRUNCATION_MARKER) -> str:
    """Cut ``text`` so its UTF-8 form, marker included, is at most ``max_bytes``.

    Never splits a character: the cut moves back to a character boundary.
    When even the marker does not fit, a prefix of the marker is returned.
    """
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    mark = marker.encode("utf-8")
    if max_bytes <= len(mark):
        return mark[: max(max_bytes, 0)].decode("utf-8", "ignore")
    # errors="ignore" drops the partial character a byte cut may leave at the end.
    body = data[: max_bytes - len(mark)].decode("utf-8", "ignore")
    return body + marker


def utf8_len(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


_utf8_len = utf8_len


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON: how results are measured."""
    return len(dumps(value).encode("utf-8"))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fit_json(value: Any, max_bytes: int) -> tuple[Any, bool]:
    """Shrink ``value`` until its JSON is at most ``max_bytes``; see :func:`fit_json_text`."""
    fitted, _, cut = fit_json_text(value, max_bytes)
    return fitted, cut


def fit_json_text(value: Any, max_bytes: int) -> tuple[Any, str, bool]:
    """Shrink ``value`` until its JSON is at most ``max_bytes``.

    Cuts the longest strings first (with the truncation marker), then the
    longest lists.  Returns the fitted value, its compact JSON text (so
    callers need not encode it again) and whether anything was cut.  A value
    that cannot be made to fit (its skeleton alone is too big) comes back as
    a short string saying so; callers treat that as an error.
    """
    text = dumps(value)
    size = _utf8_len(text)
    if size <= max_bytes:
        return value, text, False
    value = [_copy(value)]  # a box, so a top-level string can be cut in place too
    for _ in range(64):
        if not _cut_longest(value, size - max_bytes):
            break
        text = dumps(value[0])
        size = _utf8_len(text)
        if size <= max_bytes:
            return value[0], text, True
    # Nothing left to cut: the skeleton itself is too big for the budget.
    note = "[output truncated]"[: max(max_bytes - 2, 0)]
    return note, dumps(note), True


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _cut_longest(root: Any, excess: int) -> bool:
    """Cut the single biggest string or list in ``root`` by about ``excess`` bytes."""
    best: tuple[int, Any, Any, str] | None = None  # (size, container, key, "str"|"list")
    if not isinstance(root, (dict, list)):
        return False
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, str):
                # A cheap size for ranking (escapes ignored); exact below.
                n = len(child) + 2
                if n > len(TRUNCATION_MARKER) + 8 and (best is None or n > best[0]):
                    best = (n, node, key, "str")
            elif isinstance(child, (dict, list)):
                if isinstance(child, list) and len(child) > 1:
                    n = json_size(child)
                    if best is None or n > best[0]:
                        best = (n, node, key, "list")
                    if len(child) > 64:
                        continue  # many small items: the list is what gets cut
                stack.append(child)
    if best is None:
        return False
    _, container, key, what = best
    n = json_size(container[key])
    if what == "str":
        text = container[key]
        # JSON escaping can make the encoded string longer than its UTF-8
        # bytes; scale the cut by that ratio so one pass usually suffices.
        raw = len(text.encode("utf-8")) or 1
        ratio = n / raw
        target = max(int((n - excess) / ratio) - 2, 0)
        cut = truncate_text(text, target)
        if cut == text:
            return False
        container[key] = cut
        return True
    items = container[key]
    keep = max(1, int(len(items) * max(n - excess, 0) / n))
    if keep >= len(items):
        keep = len(items) - 1
    container[key] = items[:keep]
    return True


# --- secrets in summaries -------------------------------------------------------

_SECRET_PATTERNS = [
    # key=value / key: value where the key names a secret; the key may be
    # quoted, as in JSON, YAML or a Python dict ("api_key": "...")
    re.compile(
        r"(?i)((?:api[_-]?key|secret|token|passw(?:or)?d|pwd|auth(?!orization)|credential|private[_-]?key)"
        r"[\w.-]*[\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
    ),
    re.compile(r"(?i)(authorization:\s*(?:bearer|basic|token)\s+)\S+"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # well-known credential shapes
    re.compile(r"()\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"()\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"()\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"()\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_-]{30,}"),
    re.compile(
        r"()-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"
    ),
    # user:password@ in URLs
    re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)"),
]

REDACTED = "[REDACTED]"


def redact(text: str, extra_values: list[str] | None = None) -> str:
    """Replace credential-looking substrings (and any ``extra_values``) with a marker."""
    for value in extra_values or []:
        if len(value) >= 4:
            text = text.replace(value, REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_hidden, text)
    return text


def credential_values(text: str) -> list[str]:
    """The values :func:`redact` would hide in ``text`` (without their quotes)."""
    found = []
    for pattern in _SECRET_PATTERNS:
        for m in pattern.finditer(text):
            value = m.group(2) if m.lastindex and m.lastindex >= 2 else m.group()[len(m.group(1)) :]
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            if value:
                found.append(value)
    return found


def _hidden(m: re.Match[str]) -> str:
    """A credential match with its value replaced; a value quoted after a
    quoted key (JSON, a Python dict) keeps its quotes, so the text still parses."""
    value = m.group(2) if m.lastindex and m.lastindex >= 2 else ""
    key = m.group(1).rstrip(" \t=:")
    if key[-1:] in ("'", '"'):
        if value[:1] == key[-1]:
            return m.group(1) + value[0] + REDACTED + value[0]
        # A bare value after a quoted key (a JSON number): up to the
        # delimiter, which stays.
        end = next((i for i, c in enumerate(value) if c in ",}]"), len(value))
        return m.group(1) + REDACTED + value[end:]
    return m.group(1) + REDACTED


# Credential values that may stand in a command line or a path without
# being code: redacted in summaries.  Key=value forms are not: in a command
# line the "value" is often the code that runs.
# Nor a private key block: it spans lines, and lines of base64 can be commands
# ("////usr/bin/reboot" is base64), so hiding it could hide what runs.  The
# summary's cut keeps a key's head and tail at most.
_SUMMARY_SECRETS = [
    p for p in _SECRET_PATTERNS if p.pattern.startswith("()") and "PRIVATE KEY" not in p.pattern
]
# A run of this many blanks inside a summary is shown by its length, so
# padding cannot push the rest of a command out of sight.
_BLANK_RUN_RE = re.compile(r"[ \t]{8,}")


def short_summary(text: str, limit: int = 200) -> str:
    """One line for the review: what it says is what runs.

    Newlines become ``⏎``, runs of blanks show their length, invisible
    characters are marked, credential values (URL passwords, well-known
    token shapes) are hidden and counted.  Past ``limit`` the middle is cut,
    with the count, so the end of a long command stays visible.
    """
    text, hidden = redact_url_credentials(text, keep_code=True)
    for pattern in _SUMMARY_SECRETS:
        text, n = pattern.subn(lambda m: m.group(1) + REDACTED, text)
        hidden += n
    text = _BLANK_RUN_RE.sub(lambda m: f" \u27e8{len(m.group())} blanks\u27e9 ", text)
    text = visible_controls(text.replace("\r\n", "\n").replace("\n", " \u23ce "))
    text = _SURROGATE_RE.sub("\ufffd", text)
    if hidden:
        text += f" ({hidden} credential{'s' if hidden > 1 else ''} hidden)"
    if len(text) <= limit:
        return text
    head = (limit - 24) * 2 // 3
    tail = limit - 24 - head
    cut = len(text) - head - tail
    return f"{text[:head]} …⟨{cut} chars⟩… {text[-tail:]}"


# --- credentials in URLs (file and command text) ----------------------------------
#
# A remote URL in .git/config, a DSN in a settings file or a command's echo
# can carry ``scheme://user:secret@host``.  Text the model reads has the
# secret part replaced by ``***``; an edit that sends the marker back gets
# the original restored by :func:`restore_url_credentials`, so redaction
# never makes a file unwritable.

URL_CREDENTIAL_MARK = "***"


# scheme://user:password@  or  scheme://TOKEN@ (a token as the user name,
# as GitHub and GitLab accept).  The user part excludes ``/`` ``@`` and
# whitespace, so the match cannot run across the host or the path.
# Possessive quantifiers (the ``regex`` module) keep a failed match linear:
# each part stops at a character the next part needs, so giving back
# characters could never help.
@functools.cache
def _url_userinfo_re() -> regex.Pattern[str]:
    import regex

    return regex.compile(
        r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{0,30}+://)"
        r"(?P<user>[^/\s:@\"'<>]{0,256}+)"
        r"(?::(?P<password>[^/\s@\"'<>]{1,1024}+))?"
        r"@(?P<host>[^/\s@\"'<>?#]{1,256}+)"
    )


# Necessary for a match: "://", then only characters a user name or a
# password may hold, then "@".  Text with URLs but no credential (a lock
# file, a page of links) is cleared by this one scan, ten times faster than
# trying the full expression at every "://".
@functools.cache
def _userinfo_hint_re() -> regex.Pattern[str]:
    import regex

    return regex.compile(r"://[^/\s@\"'<>]*+@")


# A user name with no password is a secret only when it looks like a token:
# long, and made of a token's alphabet (``git@``, ``user@`` stay).
_TOKEN_LIKE_RE = re.compile(r"[A-Za-z0-9_\-.~+=]{20,}")


def _url_secret(m: regex.Match[str]) -> tuple[str, str] | None:
    """``(which part, secret)`` of one userinfo match, or None when it holds none."""
    password = m.group("password")
    if password is not None:
        return ("password", password) if password != URL_CREDENTIAL_MARK else None
    user = m.group("user")
    if _TOKEN_LIKE_RE.fullmatch(user) and user != URL_CREDENTIAL_MARK:
        return ("user", user)
    return None


# What makes a "password" code in a command line: a shell runs it
# (``https://x:$(cmd)@host``, ``x:a;reboot;@host``).
SHELL_CODE_RE = re.compile(r"[$`;|&()<>\\]")


def redact_url_credentials(text: str, keep_code: bool = False) -> tuple[str, int]:
    """Replace the secret of every ``scheme://user:secret@`` with ``***``.

    Returns the new text and how many were replaced.  Cheap when the text
    holds no ``://`` at all, which is almost always.  With ``keep_code``
    (a summary, where the text may be a command line) a secret holding
    shell syntax is left as it is: it is code a shell would run, and
    hiding it would hide what runs.
    """
    if "://" not in text or _userinfo_hint_re().search(text) is None:
        return text, 0
    count = 0

    def sub(m: regex.Match[str]) -> str:
        nonlocal count
        found = _url_secret(m)
        if found is None or (keep_code and SHELL_CODE_RE.search(found[1])):
            return m.group()
        count += 1
        head, host = m.group("head"), m.group("host")
        if found[0] == "password":
            return f"{head}{m.group('user')}:{URL_CREDENTIAL_MARK}@{host}"
        return f"{head}{URL_CREDENTIAL_MARK}@{host}"

    return _url_userinfo_re().sub(sub, text), count


def credential_spans(line: str) -> list[tuple[int, int]]:
    """Where the secrets of ``scheme://user:secret@`` URLs lie in ``line``."""
    if "://" not in line:
        return []
    spans = []
    for m in _url_userinfo_re().finditer(line):
        found = _url_secret(m)
        if found is not None:
            spans.append(m.span(found[0]))
    return spans


def say_redacted(result: dict[str, Any], redacted: int, extra: str = "") -> dict[str, Any]:
    """Tell the model, in a result, that credentials were shown as the marker."""
    if redacted:
        result["redacted_credentials"] = redacted
        result["note"] = (
            f"{redacted} credential(s) in URLs (scheme://user:secret@host) are shown as "
            f"{URL_CREDENTIAL_MARK}; an edit that keeps {URL_CREDENTIAL_MARK} there keeps "
            "the original" + extra
        )
    return result


class CredentialRestoreError(ValueError):
    """New text holds ``***`` where no single original credential fits.

    ``line`` is the 1-based line of the new text that holds it.
    """

    def __init__(self, line: int, text: str) -> None:
        super().__init__(
            f"line {line} holds a redacted credential ({URL_CREDENTIAL_MARK}) that does "
            "not match exactly one credential of the original text"
        )
        self.line = line
        self.text = text


def _marker_key(m: regex.Match[str]) -> tuple[str, str, str, str] | None:
    """The lookup key of a URL whose secret reads ``***``, or None if it has none."""
    head, user, password, host = m.group("head", "user", "password", "host")
    if password == URL_CREDENTIAL_MARK:
        return ("password", head.lower(), user, host.lower())
    if password is None and user == URL_CREDENTIAL_MARK:
        return ("user", head.lower(), "", host.lower())
    return None


def restore_url_credentials(original: str, new: str) -> tuple[str, int]:
    """Put back the credentials that the model saw as ``***``.

    Each marker in ``new`` is matched with the original's credentials by
    scheme, host and (for a password) user name.  Exactly one distinct
    secret must fit; otherwise :class:`CredentialRestoreError` names the
    line, and nothing is written.  Returns the restored text and how many
    markers were put back.
    """
    if URL_CREDENTIAL_MARK not in new or "://" not in new:
        return new, 0
    secrets: dict[tuple[str, str, str, str], set[str]] = {}
    # URLs the original already spells with the marker (a documentation
    # example): sent back, they stay as they are.
    literal: set[tuple[str, str, str, str]] = set()
    for m in _url_userinfo_re().finditer(original):
        found = _url_secret(m)
        if found is None:
            key = _marker_key(m)
            if key is not None:
                literal.add(key)
            continue
        kind, secret = found
        user = m.group("user") if kind == "password" else ""
        key = (kind, m.group("head").lower(), user, m.group("host").lower())
        secrets.setdefault(key, set()).add(secret)
    count = 0

    def sub(m: regex.Match[str]) -> str:
        nonlocal count
        head, user, host = m.group("head", "user", "host")
        key = _marker_key(m)
        if key is None:
            return m.group()
        fits = secrets.get(key, set())
        if key in literal and not fits:
            return m.group()
        if len(fits) != 1 or key in literal:
            line = new.count("\n", 0, m.start()) + 1
            raise CredentialRestoreError(line, new.splitlines()[line - 1])
        (secret,) = fits
        count += 1
        if key[0] == "password":
            return f"{head}{user}:{secret}@{host}"
        return f"{head}{secret}@{host}"

    return _url_userinfo_re().sub(sub, new), count
