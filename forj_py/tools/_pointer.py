"""What a refusal of a missed match says: where the text probably is, and what to send.

Every refusal of an ``edit`` or an ``expected`` that matched nothing names
the closest lines of the file (numbers and text), shows a short diff of
what was sent against them, and says what to send next.  File text quoted
here reaches the model, so URL credentials in it stay redacted.
"""

from __future__ import annotations

import difflib
from typing import Any

from .. import errors
from ..errors import ToolFailure
from ..output import redact_url_credentials
from ._match import Closest, IndentUnclear, Lines, MarkersAsIndent, Span, closest

MAX_DIFF_LINES = 24
MAX_LISTED = 20


def locate(lines: Lines, sent: str) -> tuple[str, dict[str, Any], Closest | None]:
    """Message text and details pointing at the lines most like ``sent``."""
    if not len(lines):
        return "The file is empty.", {}, None
    near = closest(lines, sent)
    if near is None:
        return "No part of the file resembles what was sent.", {}, None
    numbered = "\n".join(
        f"{n:6}\t{lines.content[n - 1]}" for n in range(near.first_line, near.last_line + 1)
    )
    actual = "\n".join(lines.content[near.first_line - 1 : near.last_line]) + "\n"
    diff = _short_diff(sent.replace("\r\n", "\n"), actual, near)
    also = ""
    if near.others:
        also = (
            "Other lines as alike (the code repeats): "
            + ", ".join(f"{a}-{b}" for a, b in near.others)
            + "\n"
        )
    text = (
        f"The closest lines are {near.first_line}-{near.last_line} "
        f"({near.ratio:.0%} alike):\n{numbered}\n{also}"
        f"What was sent, against those lines:\n{diff}"
    )
    details: dict[str, Any] = {
        "closest": {
            "start_line": near.first_line,
            "end_line": near.last_line,
            "similarity": round(near.ratio, 2),
        }
    }
    if near.others:
        details["also_alike"] = [{"start_line": a, "end_line": b} for a, b in near.others]
    return redact_url_credentials(text)[0], details, near


def _short_diff(sent: str, actual: str, near: Closest) -> str:
    if not sent.endswith("\n"):
        sent += "\n"
    lines = list(
        difflib.unified_diff(
            sent.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile="sent",
            tofile=f"file lines {near.first_line}-{near.last_line}",
            n=1,
        )
    )
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines[:MAX_DIFF_LINES])
    if len(lines) > MAX_DIFF_LINES:
        body += "...\n"
    return body or "(they differ only in line endings)\n"


def indent_refusal(exc: IndentUnclear, what: str, where: str) -> ToolFailure:
    """The refusal of new text whose depth cannot be told in the file's indentation."""
    if isinstance(exc, MarkersAsIndent):
        return errors.bad_args(
            f"{what} carries diff markers: every line starts with ' ', '+' or '-', and it "
            f"matches {where} (lines {exc.first_line}-{exc.last_line}) only if each ' ' "
            "marker is read as one column of indentation; nothing was changed",
            recovery=[
                f"Send {what} as the file has the lines, without '+', '-' or ' ' in front",
                "Or send the diff itself with apply_patch",
            ],
            path=where,
            problem="diff-markers",
            lines=[exc.first_line],
        )
    return errors.bad_args(
        f"{what} matched {where} only ignoring indentation, and the file indents with tabs "
        "and spaces in a way the copy's depths do not map onto: the depth of the new line "
        f"{exc.line.strip()[:80]!r} cannot be told; nothing was changed",
        recovery=[
            "Copy the old text with the file's own tabs and spaces, and write the new lines "
            "the same way",
            "Or use edit_region with the line numbers and the lines as the file will hold them",
        ],
        path=where,
        problem="indentation-unclear",
    )


def next_steps(what: str, near: Closest | None) -> list[str]:
    """The recovery list of a missed match."""
    steps = []
    if near is not None:
        steps.append(
            f"If lines {near.first_line}-{near.last_line} are what you mean, copy {what} "
            "from them as they are now (see the diff), or use edit_region with "
            f"start_line={near.first_line}, end_line={near.last_line} and 'expected'"
        )
    steps.append(f"Read the file again (read_file) if it may have changed, and base {what} on it")
    return steps


def list_places(lines: Lines, spans: list[Span]) -> tuple[str, list[dict[str, Any]]]:
    """Every place of an ambiguous match: line numbers and the first line of each."""
    shown = []
    places = []
    for span in spans[:MAX_LISTED]:
        first = lines.content[span.first_line - 1] if span.first_line <= len(lines) else ""
        shown.append(f"  lines {span.first_line}-{span.last_line}: {first.strip()[:120]}")
    for span in spans[:100]:
        places.append({"start_line": span.first_line, "end_line": span.last_line})
    more = f"\n  ... and {len(spans) - MAX_LISTED} more" if len(spans) > MAX_LISTED else ""
    return redact_url_credentials("\n".join(shown) + more)[0], places
