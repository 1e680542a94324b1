"""A fast reader and printer for the s-expressions EPC messages are made of.

EPC frames each message as six hex digits of length and one s-expression:
``(call 3 plan ("{...json...}"))``, ``(return 3 "{...}")``.  Our payloads are
JSON texts inside Lisp strings, so a message is a handful of tokens around
one long string.  ``sexpdata`` reads such a string one character at a time
(~180 ms for a megabyte of quotes and backslashes); this module finds string
bounds with one regular expression and unescapes with ``str`` methods, so
the same megabyte takes a few milliseconds.

Only what EPC needs is read: lists, strings, integers, floats and symbols
(``nil`` reads as the empty list, as in Lisp).  Anything else is a
:class:`SexpError`; the reader never evaluates anything.
"""

from __future__ import annotations

import json
import re
from typing import Any


class Symbol(str):
    """A Lisp symbol (as opposed to a string)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


class SexpError(ValueError):
    """Input that is not an s-expression this reader accepts."""


_TOKEN_RE = re.compile(
    r"""
      (?P<ws>\s+|;[^\n]*)
    | (?P<open>\()
    | (?P<close>\))
    | "(?P<str>[^"\\]*(?:\\.[^"\\]*)*)"
    | (?P<atom>[^\s()"';\[\]\#`,?]+)
    """,
    re.VERBOSE | re.DOTALL,
)
_INT_RE = re.compile(r"[+-]?\d+\.?\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:e[+-]?\d+)?\Z", re.IGNORECASE)
_ESCAPE_RE = re.compile(
    r"""\\(?:
        (?P<oct>[0-7]{1,3})
      | x(?P<hex>[0-9a-fA-F]+)
      | u(?P<u4>[0-9a-fA-F]{4})
      | U(?P<u8>[0-9a-fA-F]{8})
      | N\{U\+(?P<uname>[0-9a-fA-F]+)\}
      | (?P<skip>[\n ])
      | (?P<ch>.)
    )""",
    re.VERBOSE | re.DOTALL,
)
_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
    "s": " ",
    "d": "\x7f",
}
_SYMBOL_OK_RE = re.compile(r"[A-Za-z0-9\-+*/_<>=:.!$%&~^]+\Z")


def _unescape_general(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        if m.group("skip") is not None:
            return ""
        for group, base in (("oct", 8), ("hex", 16), ("u4", 16), ("u8", 16), ("uname", 16)):
            value = m.group(group)
            if value is not None:
                code = int(value, base)
                if code > 0x10FFFF:
                    raise SexpError(f"character code {value} out of range")
                return chr(code)
        ch = m.group("ch")
        return _SIMPLE_ESCAPES.get(ch, ch)

    return _ESCAPE_RE.sub(repl, text)


def unescape(body: str) -> str:
    """The characters of a Lisp string literal, given what is between its quotes."""
    if "\\" not in body:
        return body
    # Split on escaped backslashes first: what remains has a backslash only
    # where an escape starts, and almost always that escape is \" (JSON text
    # printed by Emacs escapes nothing else).
    parts = body.split("\\\\")
    for i, part in enumerate(parts):
        if "\\" in part:
            if part.count("\\") == part.count('\\"'):
                parts[i] = part.replace('\\"', '"')
            else:
                parts[i] = _unescape_general(part)
    return "\\".join(parts)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _fast_body(body: str) -> str | None:
    """Decode a string body that uses only the escapes ``\\\\`` and ``\\"``.

    ``unicode_escape`` does the work in C; non-Latin-1 characters are first
    turned into ``\\uXXXX`` so they survive the byte round trip.  The result
    is accepted only if printing it again gives back exactly ``body``: that
    proves the body held no bare quote and no escape but those two.
    """
    try:
        decoded = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return None
    return decoded if _escape(decoded) == body else None


def loads(text: str) -> Any:
    """Read exactly one s-expression from ``text``."""
    first = text.find('"')
    last = text.rfind('"')
    if 0 <= first < last and last - first > 256:
        # EPC messages hold one long string among a few atoms; decode that
        # string in bulk and read only the short skeleton around it.
        body = _fast_body(text[first + 1 : last])
        if body is not None:
            skeleton = loads(text[: first + 1] + text[last:])
            if _replace_only_string(skeleton, body):
                return skeleton
    value, pos = _read(text, _skip_ws(text, 0))
    pos = _skip_ws(text, pos)
    if pos != len(text):
        raise SexpError(f"trailing data at offset {pos}")
    return value


def _replace_only_string(tree: Any, body: str) -> bool:
    if not isinstance(tree, list):
        return False
    for i, item in enumerate(tree):
        if isinstance(item, str) and not isinstance(item, Symbol):
            tree[i] = body
            return True
        if _replace_only_string(item, body):
            return True
    return False


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None or m.lastgroup != "ws":
            break
        pos = m.end()
    return pos


def _read(text: str, pos: int) -> tuple[Any, int]:
    stack: list[list[Any]] = []
    while True:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            if pos >= len(text):
                raise SexpError("unexpected end of input")
            raise SexpError(f"unsupported syntax at offset {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        value: Any
        if kind == "ws":
            continue
        if kind == "open":
            stack.append([])
            continue
        if kind == "close":
            if not stack:
                raise SexpError(f"unbalanced ')' at offset {pos - 1}")
            value = stack.pop()
        elif kind == "str":
            value = unescape(m.group("str"))
        else:
            value = _atom(m.group("atom"))
        if not stack:
            return value, pos
        stack[-1].append(value)


def _atom(atom: str) -> Any:
    if _INT_RE.match(atom):
        return int(atom.rstrip("."))
    if _FLOAT_RE.match(atom):
        return float(atom)
    if atom == "nil":
        return []
    if atom == ".":
        raise SexpError("dotted pairs are not supported")
    if "\\" in atom:
        raise SexpError(f"escaped symbol {atom!r} is not supported")
    return Symbol(atom)


def dumps(value: Any) -> str:
    """Print ``value`` so that Emacs's ``read`` gives it back."""
    out: list[str] = []
    _dump(value, out)
    return "".join(out)


def _dump(value: Any, out: list[str]) -> None:
    if isinstance(value, Symbol):
        if not _SYMBOL_OK_RE.match(value):
            raise SexpError(f"cannot print symbol {str(value)!r}")
        out.append(value)
    elif isinstance(value, str):
        out.append('"' + _escape(value) + '"')
    elif value is None or value is False:
        out.append("nil")
    elif value is True:
        out.append("t")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SexpError("cannot print a non-finite float")
        out.append(repr(value))
    elif isinstance(value, (list, tuple)):
        out.append("(")
        for i, item in enumerate(value):
            if i:
                out.append(" ")
            _dump(item, out)
        out.append(")")
    else:
        raise SexpError(f"cannot print {type(value).__name__}")


# --- EPC framing ------------------------------------------------------------------

MAX_FRAME = 0xFFFFFF  # six hex digits of length


def frame(value: Any) -> bytes:
    """One EPC message: six hex digits of byte length, the s-expression, a newline.

    Built as bytes directly: strings are encoded once and escaped as bytes,
    which saves several copies of a megabyte-sized reply over printing to
    ``str`` first.
    """
    parts: list[bytes] = [b""]
    _dump_bytes(value, parts)
    parts.append(b"\n")
    size = sum(len(p) for p in parts)
    if size > MAX_FRAME:
        raise SexpError(f"message of {size} bytes exceeds EPC's {MAX_FRAME}-byte frame")
    parts[0] = b"%06x" % size
    return b"".join(parts)


def _dump_bytes(value: Any, out: list[bytes]) -> None:
    if isinstance(value, str) and not isinstance(value, Symbol):
        data = value.encode("utf-8")
        out += (b'"', data.replace(b"\\", b"\\\\").replace(b'"', b'\\"'), b'"')
    elif isinstance(value, (list, tuple)):
        out.append(b"(")
        for i, item in enumerate(value):
            if i:
                out.append(b" ")
            _dump_bytes(item, out)
        out.append(b")")
    else:
        out.append(dumps(value).encode("utf-8"))


# --- JSON frames -----------------------------------------------------------------
#
# A client that says so in ``hello`` (``client.frames`` holding ``"json"``)
# also gets a second kind of frame inside the same length framing: one line
# holding a short s-expression header, then a JSON text as it is, not
# wrapped in a Lisp string.  The reader hands the body straight to its JSON
# parser (Emacs's ``json-parse-buffer``), with no string escaping on the way
# out and no unescaping on the way in.
#
#     LLLLLL(return-json 7)\n{"ok": true, ...}\n
#     LLLLLL(event-json)\n{"kind": "finished", ...}\n
#     LLLLLL(event-json 6 ascii)\n{"kind": "stdout", ...}\n1\n2\n3\n\n
#
# An event with ``N`` in its header carries its ``data`` (command output)
# raw: the N bytes of UTF-8 before the frame's final newline, after the
# event's other fields as JSON; ``ascii`` says they are all ASCII.  Output
# then costs the reader a copy, not a JSON string's parse.

JSON_FRAMES = "json"

# A reply may also lift its long strings out of the JSON (a client that
# offers ``raw`` besides ``json``): each goes raw after the JSON, in
# order, and the header says where each belongs and how many bytes it is:
#
#     LLLLLL(return-json 7 (raw (("results" 0 "result" "content") 1000000 ascii)))\n
#     {"results":[{"result":{"content":null,...}}]}\n<1000000 bytes>\n
#
# The reader parses the short JSON and puts each string in place of its
# null: a megabyte of file content then costs Emacs a copy and a UTF-8
# decode, not a JSON string's parse (about a quarter of the time).
RAW_STRINGS = "raw"
RAW_MIN_CHARS = 64 << 10  # shorter strings stay in the JSON
_RAW_MAX_DEPTH = 8
_RAW_MAX_LIST = 64  # a longer list is not searched: its strings are many and short
_RAW_KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")

RawPath = list[str | int]


def lift_long_strings(value: Any) -> tuple[Any, list[tuple[RawPath, str]]]:
    """``value`` with its long strings replaced by None, and those strings with
    their paths (object keys and list indices), in document order.

    Only strings reached through plain keys (letters, digits, ``_``, ``-``)
    are lifted, so that every path prints on the header's one line; the
    containers on a lifted string's path are copied, ``value`` is not changed.
    """
    found: list[tuple[RawPath, str]] = []

    def walk(item: Any, path: RawPath) -> Any:
        if isinstance(item, str):
            if len(item) >= RAW_MIN_CHARS:
                found.append((path, item))
                return None
            return item
        if len(path) >= _RAW_MAX_DEPTH:
            return item
        if isinstance(item, dict):
            copy: dict[Any, Any] | None = None
            for key, child in item.items():
                if isinstance(key, str) and _RAW_KEY_RE.match(key):
                    new = walk(child, [*path, key])
                    if new is not child:
                        if copy is None:
                            copy = dict(item)
                        copy[key] = new
            return item if copy is None else copy
        if isinstance(item, list) and len(item) <= _RAW_MAX_LIST:
            listed: list[Any] | None = None
            for n, child in enumerate(item):
                new = walk(child, [*path, n])
                if new is not child:
                    if listed is None:
                        listed = list(item)
                    listed[n] = new
            return item if listed is None else listed
        return item

    return walk(value, []), found


def raw_reply_frame(uid: Any, value: Any) -> bytes | None:
    """A ``return-json`` frame for ``value`` with its long strings raw, or None
    when it has none (or one that UTF-8 cannot carry: the caller's usual
    path sanitizes it)."""
    lifted, found = lift_long_strings(value)
    if not found:
        return None
    try:
        tails = [text.encode("utf-8") for _, text in found]
        body = json.dumps(lifted, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None
    specs = [
        [path, len(data), Symbol("ascii") if text.isascii() else None]
        for (path, text), data in zip(found, tails, strict=True)
    ]
    header = [Symbol("return-json"), uid, [Symbol("raw"), *specs]]
    return json_frame(header, b"".join([body, b"\n", *tails]))


def json_frame(header: list[Any], body: bytes) -> bytes:
    """One JSON frame: the header's s-expression on its own line, then ``body``."""
    head = dumps(header).encode("utf-8")
    if b"\n" in head:
        raise SexpError("a JSON frame's header must fit on one line")
    size = len(head) + len(body) + 2
    if size > MAX_FRAME:
        raise SexpError(f"message of {size} bytes exceeds EPC's {MAX_FRAME}-byte frame")
    return b"".join((b"%06x" % size, head, b"\n", body, b"\n"))


def split_json_frame(data: bytes) -> tuple[Any, bytes] | None:
    """The header and JSON body of a JSON frame's payload; None for a standard frame.

    A standard frame's s-expression is a list whose first element is one of
    EPC's kinds; a JSON frame's header names a kind ending in ``-json``.
    """
    end = data.find(b"\n", 0, 256)
    if end < 0 or not data.startswith(b"("):
        return None
    first = data[1:end].split(b" ", 1)[0].rstrip(b")")
    if not first.endswith(b"-json"):
        return None
    try:
        header = loads(data[:end].decode("ascii"))
    except UnicodeDecodeError as exc:
        raise SexpError(f"a JSON frame's header is not ASCII: {exc}") from None
    return header, data[end + 1 :]


def parse_header(head: bytes) -> int:
    if len(head) != 6 or not all(c in b"0123456789abcdefABCDEF" for c in head):
        raise SexpError(f"bad EPC frame header {head!r}")
    return int(head, 16)
