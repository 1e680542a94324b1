"""``read_file``: a file's text (or a line range of it), inside the sandbox.

Semantics are seed 001's arguments with seed 000's rules (FR-TOOL-READ-01):
1-based inclusive line ranges; ``start_line > end_line`` is a bad argument;
a range past the end returns through the end; a range scan stops at the
scan limit with an error that asks for a narrower range; a whole file over
the read limit is an error that asks for a range.  A file with a NUL byte
in its first 8 KiB, or that is not UTF-8 there, is binary and comes back
as base64, limited by the tool itself to fit the output budget.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import json
import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import errors
from ..output import redact_url_credentials, say_redacted, truncate_text
from .registry import Tool, ToolContext

SNIFF_BYTES = 8192
SKIP_CHUNK = 1 << 20
# A larger sample for telling one legacy encoding from another.
DETECT_BYTES = 65536
_WIDE = re.compile(r"utf[-_]?(16|32)", re.IGNORECASE)
# Files up to this size are hashed whole even when read by range, so they
# can be edited afterwards; larger ones must be edited after a whole read.
HASH_WHOLE_FILE_LIMIT = 64 << 20


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    max_bytes: int = Field(
        default=100_000,
        ge=1,
        le=64 << 20,
        description="Return at most this many bytes of content; the rest is cut and "
        "'truncated' is true",
    )
    start_line: int | None = Field(
        default=None, ge=1, description="First line to return, 1-based, inclusive"
    )
    end_line: int | None = Field(
        default=None, ge=1, description="Last line to return, 1-based, inclusive"
    )
    include_context: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="Extra lines to include before and after the requested range",
    )

    @model_validator(mode="after")
    def _range_in_order(self) -> ReadFileArgs:
        if (
            self.start_line is not None
            and self.end_line is not None
            and self.start_line > self.end_line
        ):
            raise ValueError(f"start_line ({self.start_line}) is after end_line ({self.end_line})")
        return self

    @property
    def ranged(self) -> bool:
        return self.start_line is not None or self.end_line is not None


class ReadFile(Tool[ReadFileArgs]):
    name = "read_file"
    description = (
        "Read a text file of the project, whole or as a line range (1-based, inclusive). "
        "Large files must be read in ranges. Binary files come back as base64."
    )
    Args = ReadFileArgs
    timeout_kind = "file"

    def summary(self, args: ReadFileArgs) -> str:
        if args.ranged:
            start = args.start_line or 1
            end = args.end_line if args.end_line is not None else "end"
            return f"Read {args.path} [lines {start}-{end}]"
        return f"Read {args.path}"

    def paths(self, args: ReadFileArgs) -> list[str]:
        return [args.path]

    def execute(self, args: ReadFileArgs, ctx: ToolContext) -> Any:
        sp = ctx.sandbox.resolve(args.path, ctx.working_dir)
        fd = ctx.sandbox.open_regular(sp)
        limits = ctx.config.tools.read_file
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(DETECT_BYTES)
            encoding = detect_encoding(head)
            if encoding is None:
                if args.ranged:
                    raise errors.bad_args(
                        f"{sp.display} is a binary file; line ranges do not apply",
                        recovery=["Read it without start_line/end_line to get base64"],
                        path=sp.display,
                    )
                return _binary_result(sp.display, fh, head, size, ctx)
            if not args.ranged:
                if size > limits.max_file_read_bytes:
                    raise errors.bad_args(
                        f"{sp.display} is {size} bytes, over the {limits.max_file_read_bytes}-byte "
                        "limit for reading a whole file",
                        recovery=[
                            "Read it in line ranges: start_line=1, end_line=200, then onwards",
                            "Use search to find the lines you need first",
                        ],
                        path=sp.display,
                        size=size,
                        limit=limits.max_file_read_bytes,
                    )
                # Bounded even if the file grew since fstat.
                data = head + fh.read(max(limits.max_file_read_bytes + 1 - len(head), 0))
                if len(data) > limits.max_file_read_bytes:
                    raise errors.bad_args(
                        f"{sp.display} grew past the whole-file limit while being read",
                        recovery=["Read it in line ranges"],
                        path=sp.display,
                    )
                ctx.session.record_read(sp.canonical, hashlib.sha256(data).hexdigest())
                text = data.decode(encoding, "replace")
                shown, redacted = redact_url_credentials(text)
                # Redacted before the cut: a cut through a URL could leave a
                # secret without the "@" that marks it.
                content = truncate_text(shown, args.max_bytes)
                return say_redacted(
                    {
                        "path": sp.display,
                        "encoding": encoding,
                        "content": content,
                        "truncated": content != shown,
                        "size": size,
                        "total_lines": _count_lines(text),
                    },
                    redacted,
                )
            fh.seek(0)
            result = _range_result(sp.display, fh, size, args, limits.max_scan_bytes, ctx, encoding)
            if size <= HASH_WHOLE_FILE_LIMIT:
                # The stale-file rule compares whole files: a range read counts
                # as a read of the file it came from.
                fh.seek(0)
                digest = hashlib.sha256()
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
                ctx.session.record_read(sp.canonical, digest.hexdigest())
            return result


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def detect_encoding(head: bytes) -> str | None:
    """The text encoding of a file from its first bytes, or None if it is binary.

    A byte-order mark decides; otherwise a NUL byte in the first 8 KiB means
    binary (seed 000 FR-TOOL-READ-01); valid UTF-8 is UTF-8; anything else is
    left to charset-normalizer, and what it cannot place is binary.
    """
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    if b"\x00" in head[:SNIFF_BYTES]:
        return None
    try:
        # final=False: a multi-byte character cut by the sample's end is fine.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    import charset_normalizer  # only for the rare file that is not UTF-8: keeps start-up fast

    best = charset_normalizer.from_bytes(head).best()
    if best is None or best.encoding is None:
        return None
    return str(best.encoding)


def _lines_of(text: str) -> list[str]:
    """Lines ended by "\\n" only, as everywhere else in forj."""
    parts = [part + "\n" for part in text.split("\n")]
    parts[-1] = parts[-1][:-1]
    return parts if parts[-1] else parts[:-1]


def _count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _binary_result(display: str, fh: Any, head: bytes, size: int, ctx: ToolContext) -> Any:
    # FR-TOOL-READ-01b: the framework must not cut base64; fit it ourselves.
    ctx.allow_truncation = False
    skeleton = {
        "id": ctx.call_id,
        "name": "read_file",
        "ok": True,
        "result": {
            "path": display,
            "encoding": "base64",
            "binary": True,
            "content": "",
            "truncated": True,
            "size": size,
        },
    }
    overhead = len(json.dumps(skeleton, ensure_ascii=False).encode("utf-8")) + 16
    budget = max(ctx.output_limit - overhead, 4)
    nbytes = budget // 4 * 3
    data = (head + fh.read(max(nbytes - len(head), 0)))[:nbytes]
    return {
        "path": display,
        "encoding": "base64",
        "binary": True,
        "content": base64.b64encode(data).decode("ascii"),
        "truncated": len(data) < size,
        "size": size,
    }


def _scan_limit(display: str, end: int | None, max_scan: int) -> Exception:
    return errors.bad_args(
        f"Reading to line {end or 'the end'} of {display} would scan more than {max_scan} bytes",
        recovery=[
            "Narrow the range (a smaller end_line, or fewer lines at a time)",
            "Use search to find the line numbers you need",
        ],
        path=display,
        scan_limit=max_scan,
    )


def _skip_lines(fh: Any, count: int, max_scan: int, ctx: ToolContext) -> tuple[int, int]:
    """Move ``fh`` past ``count`` lines; return (lines skipped, bytes scanned)."""
    skipped = scanned = 0
    last = b"\n"
    while skipped < count:
        chunk = fh.read(SKIP_CHUNK)
        if not chunk:
            if last != b"\n":
                skipped += 1  # a last line without a newline is a line too
            break
        last = chunk[-1:]
        newlines = chunk.count(b"\n")
        if skipped + newlines < count:
            skipped += newlines
            scanned += len(chunk)
            if scanned > max_scan:
                return skipped, scanned
            ctx.check_cancelled()
            continue
        at = -1
        for _ in range(count - skipped):
            at = chunk.index(b"\n", at + 1)
        fh.seek(at + 1 - len(chunk), os.SEEK_CUR)
        scanned += at + 1
        skipped = count
    return skipped, scanned


def _range_result(
    display: str,
    fh: Any,
    size: int,
    args: ReadFileArgs,
    max_scan: int,
    ctx: ToolContext,
    encoding: str,
) -> Any:
    want_start = args.start_line or 1
    start = max(1, want_start - args.include_context)
    end = None if args.end_line is None else args.end_line + args.include_context
    lines: list[bytes] = []
    scanned = 0
    lineno = 0
    shown_encoding = encoding
    if _WIDE.match(encoding):
        # Two- and four-byte encodings: bytes cannot be split on b"\n".
        if size > max_scan:
            raise _scan_limit(display, end, max_scan)
        decoded = fh.read(max_scan + 1).decode(encoding, "replace")
        source: Any = (part.encode("utf-8") for part in _lines_of(decoded))
        encoding = "utf-8"
    else:
        # Skip to the first wanted line a megabyte at a time (counting
        # newlines in C), then read line by line.  readline with a size: a
        # file that is one enormous line must not be pulled into memory whole
        # before the scan limit is checked.
        lineno, scanned = _skip_lines(fh, start - 1, max_scan, ctx)
        if scanned > max_scan:
            raise _scan_limit(display, end, max_scan)
        source = iter(lambda: fh.readline(max_scan + 1), b"")
    for raw in source:
        lineno += 1
        scanned += len(raw)
        if scanned > max_scan:
            raise _scan_limit(display, end, max_scan)
        if lineno >= start:
            lines.append(raw)
        if end is not None and lineno >= end:
            break
        if lineno % 4096 == 0:
            ctx.check_cancelled()
    text, redacted = redact_url_credentials(b"".join(lines).decode(encoding, "replace"))
    content = truncate_text(text, args.max_bytes)
    last = start + len(lines) - 1
    result: dict[str, Any] = {
        "path": display,
        "encoding": shown_encoding,
        "content": content,
        "truncated": content != text,
        "size": size,
        "range": {"start_line": start, "end_line": last},
    }
    if end is None or lineno < end:
        result["total_lines"] = lineno
    return say_redacted(result, redacted)
