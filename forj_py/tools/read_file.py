"""``read_file``: a file's text (or a line range of it), inside the sandbox.

The rules:
1-based inclusive line ranges; ``start_line > end_line`` is a bad argument;
a range past the end returns through the end; a range scan stops at the
scan limit with an error that asks for a narrower range; a whole file over
the read limit is an error that asks for a range.  The text's encoding
comes from :mod:`._encoding`, and a result says ``encoding_guessed`` when
it rests on no evidence.  A file with a NUL byte in its first 8 KiB, or
that no encoding reads as text, is binary and comes back as base64,
limited by the tool itself to fit the output budget.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import errors
from ..output import TRUNCATION_MARKER, redact_url_credentials, say_redacted, truncate_text
from ._encoding import DETECT_BYTES, Detected, detect
from .registry import Tool, ToolContext

SKIP_CHUNK = 1 << 20
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
            detected = detect(head, complete=len(head) >= size)
            if detected is None:
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
                if detected.encoding == "utf-8" and len(data) > len(head):
                    # The whole file is at hand: bytes that are not UTF-8 after
                    # the first sample must not be lost to U+FFFD.
                    detected = detect(data, complete=True) or detected
                text = data.decode(detected.encoding, "replace")
                shown, redacted = redact_url_credentials(text)
                # Redacted before the cut: a cut through a URL could leave a
                # secret without the "@" that marks it.
                content = _cut(shown, args.max_bytes)
                return say_redacted(
                    _say_guessed(
                        {
                            "path": sp.display,
                            "encoding": detected.encoding,
                            "content": content,
                            "truncated": content != shown,
                            "size": size,
                            "total_lines": _count_lines(text),
                        },
                        detected,
                    ),
                    redacted,
                )
            fh.seek(0)
            result = _range_result(sp.display, fh, size, args, limits.max_scan_bytes, ctx, detected)
            if size <= HASH_WHOLE_FILE_LIMIT:
                # The stale-file rule compares whole files: a range read counts
                # as a read of the file it came from.
                fh.seek(0)
                digest = hashlib.sha256()
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
                ctx.session.record_read(sp.canonical, digest.hexdigest())
            return result


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
    # The framework must not cut base64 (it would not decode); fit it ourselves.
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
    detected: Detected,
) -> Any:
    want_start = args.start_line or 1
    start = max(1, want_start - args.include_context)
    end = None if args.end_line is None else args.end_line + args.include_context
    lines: list[bytes] = []
    scanned = 0
    lineno = 0
    encoding = shown_encoding = detected.encoding
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
    content = _cut(text, args.max_bytes)
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
    return say_redacted(_say_guessed(result, detected), redacted)


def _say_guessed(result: dict[str, Any], detected: Detected) -> dict[str, Any]:
    """Mark an encoding that rests on no evidence, so nobody takes it for a fact."""
    if detected.guessed:
        result["encoding_guessed"] = True
    return result


def _cut(text: str, max_bytes: int) -> str:
    """``text`` cut to ``max_bytes``, with the truncation marker when there is room for it.

    A small budget is the file's own bytes only (``truncated`` says it was
    cut): a marker in it would leave little or nothing of the file.
    """
    if max_bytes < 4 * len(TRUNCATION_MARKER):
        return truncate_text(text, max_bytes, marker="")
    return truncate_text(text, max_bytes)
