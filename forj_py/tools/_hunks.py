"""Approving part of a reviewed change: hunk by hunk, file by file.

The review shows each file's change as the unified diff of
:func:`._edit.unified_diff`; the user may approve some of its hunks and
drop the others.  Hunk ``i`` of a file is the ``i``-th ``@@`` hunk of
that diff, counted from 0.  :func:`file_hunks` finds the same hunks the
diff shows (same trimming, same matcher, same context), so an index the
user chose names exactly the lines they saw.

What gets written is computed here, from the text the proposal started
from and the proposed text: each approved hunk's lines come from the
proposal, each dropped hunk's from the file as it was.  The write itself
is edit-before-approve's (:func:`._edit.apply_user_text`): the file must
still hold what the review started from, the new text passes the same
checks, every file is written atomically with a backup, and the change
is journaled for undo.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError
from ..output import visible_controls
from ..protocol import FileHunks
from . import _edit
from .registry import Staged, ToolContext


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk: lines ``[old_start, old_end)`` of the old text become
    ``[new_start, new_end)`` of the new one (0-based, context included)."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


@dataclass(frozen=True)
class FileDecision:
    """The user's word on one file's hunks: every index is in exactly one of them."""

    approved: frozenset[int]
    dropped: dict[int, str]  # index -> the user's reason ("" when none)


def file_hunks(old: str, new: str) -> list[Hunk]:
    """The hunks of the diff the review shows for ``old`` -> ``new``, in order.

    Mirrors :func:`._edit.unified_diff`: the lines both texts share at
    their start and end are set aside (all but the context), then
    difflib groups the rest with the same context.
    """
    a, b = _edit.split_lines(old), _edit.split_lines(new)
    head = _edit._common_run(a, b)
    tail = _edit._common_run(a[head:][::-1], b[head:][::-1])
    context = _edit.DIFF_CONTEXT
    skip = max(head - context, 0)
    cut = max(tail - context, 0)
    matcher = difflib.SequenceMatcher(None, a[skip : len(a) - cut], b[skip : len(b) - cut])
    out = []
    for group in matcher.get_grouped_opcodes(context):
        out.append(
            Hunk(
                old_start=group[0][1] + skip,
                old_end=group[-1][2] + skip,
                new_start=group[0][3] + skip,
                new_end=group[-1][4] + skip,
            )
        )
    return out


def count(old: str, new: str) -> int:
    """How many hunks the review shows for this change."""
    return len(file_hunks(old, new))


def shown_as_staged(preview: str, staged: list[Staged]) -> bool:
    """Whether ``preview`` (as the review shows it) is, file by file and in
    order, exactly the diffs whose hunks :func:`file_hunks` numbers for
    ``staged`` (the files that change), each followed by its notes only.

    A hunk index names lines the user saw only if this holds; a tool whose
    preview is made some other way is approved or denied whole.
    """
    pieces = _edit.split_file_diffs(preview)
    if len(pieces) != len(staged):
        return False
    for piece, item in zip(pieces, staged, strict=True):
        diff = visible_controls(_edit.review(item.display, item.old, item.new, item.existed))
        if not diff or not piece.startswith(diff):
            return False
        if any(line and not line.startswith("note: ") for line in piece[len(diff) :].split("\n")):
            return False
    return True


def partial(old: str, new: str, approved: frozenset[int]) -> tuple[str, list[tuple[int, int]]]:
    """The text with only the ``approved`` hunks of ``old`` -> ``new`` applied.

    Also returns, per hunk, the lines it spans in that text
    (``[start, end)``, 0-based, context included), so the model can be
    shown what each place holds now.
    """
    a, b = _edit.split_lines(old), _edit.split_lines(new)
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0  # next line of ``a`` not yet copied
    for index, hunk in enumerate(file_hunks(old, new)):
        out.extend(a[at : hunk.old_start])
        start = len(out)
        if index in approved:
            out.extend(b[hunk.new_start : hunk.new_end])
        else:
            out.extend(a[hunk.old_start : hunk.old_end])
        spans.append((start, len(out)))
        at = hunk.old_end
    out.extend(a[at:])
    return "".join(out), spans


def apply_hunks(
    ctx: ToolContext,
    staged: list[Staged],
    user_texts: dict[str, str],
    decisions: dict[str, FileDecision],
) -> Any:
    """Write a reviewed change with only the hunks the user approved.

    ``decisions`` maps some of the call's files to the user's word on
    their hunks; the other files are written as proposed, or as the user
    edited them (``user_texts``).  The result tells the model which hunks
    were applied and which dropped (and why), and what each hunk's place
    in the file holds now.
    """
    texts = dict(user_texts)
    spans: dict[str, list[tuple[int, int]]] = {}
    for item in staged:
        if item.display in decisions:
            texts[item.display], spans[item.display] = partial(
                item.old, item.new, decisions[item.display].approved
            )
        elif item.display not in texts:
            # Written as proposed: every hunk applied.
            _, spans[item.display] = partial(
                item.old, item.new, frozenset(range(count(item.old, item.new)))
            )
    # A file the call would create, every hunk of it dropped, is not created.
    kept = [
        item
        for item in staged
        if item.existed or item.display not in decisions or decisions[item.display].approved
    ]
    written = _edit.apply_user_text(ctx, kept, texts)
    by_path = {item.display: item for item in staged}
    files: list[dict[str, Any]] = []
    for item in staged:
        if item not in kept:
            files.append(
                {
                    "path": item.display,
                    "created": False,
                    "bytes_written": 0,
                    "note": "not created: the user dropped all of it",
                    "hunks": [_hunk_report(0, decisions[item.display], [], 0, 0)],
                }
            )
    for entry in written["files"]:
        path = entry["path"]
        entry["user_modified"] = path in user_texts
        if path in spans:
            decision = decisions.get(path)
            lines = _edit.split_lines(texts.get(path, by_path[path].new))
            entry["hunks"] = [
                _hunk_report(index, decision, lines, start, end)
                for index, (start, end) in enumerate(spans[path])
            ]
        files.append(entry)
    applied = sum(1 for f in files for h in f.get("hunks", []) if h["state"] == "applied")
    dropped = sum(1 for f in files for h in f.get("hunks", []) if h["state"] == "dropped")
    return {
        "partly_applied": True,
        "hunks_applied": applied,
        "hunks_dropped": dropped,
        "note": (
            "The user approved only part of your change. Hunks marked 'applied' were written; "
            "hunks marked 'dropped' were not (with the user's reason when given), and their "
            "lines are as they were before your change. Each hunk's 'now' is what the file "
            "holds at its 'lines' after this write, and 'preview' is the change actually "
            "written. Start any further edit from that text, not from your proposal."
        ),
        "files": files,
        "preview": written["preview"],
    }


def _hunk_report(
    index: int, decision: FileDecision | None, lines: list[str], start: int, end: int
) -> dict[str, Any]:
    dropped = decision is not None and index in decision.dropped
    report: dict[str, Any] = {"index": index, "state": "dropped" if dropped else "applied"}
    if dropped and decision is not None and decision.dropped[index]:
        report["reason"] = decision.dropped[index]
    report["lines"] = f"{start + 1}-{end}" if end > start else f"{start + 1} (no lines now)"
    report["now"] = "".join(lines[start:end])
    return report


def check_decisions(
    call_id: str,
    staged: list[Staged],
    given: dict[str, FileHunks],
    modified: set[str],
) -> dict[str, FileDecision]:
    """The user's hunk decisions for one call, checked against its proposal.

    Every path must be a file the call writes and not one the user also
    edited by hand; every hunk of a named file must be approved or
    dropped, once; an index the diff does not have is an error that says
    how many hunks the file has.
    """
    by_path = {item.display: item for item in staged}
    out: dict[str, FileDecision] = {}
    for path, decision in given.items():
        item = by_path.get(path)
        if item is None:
            raise ProtocolError(
                "bad-request",
                f"call {call_id!r} does not write {path}; its hunks cannot be decided",
                [f"Decide hunks only of the files of its proposal: {', '.join(sorted(by_path))}"],
            )
        if path in modified:
            raise ProtocolError(
                "bad-request",
                f"{path} of call {call_id!r} is both edited by hand ('modified') and decided "
                "hunk by hunk ('hunks')",
                ["Send one of them for this file: the edited text already says what to write"],
            )
        total = count(item.old, item.new)
        approved = list(decision.approved)
        dropped = [d.index for d in decision.dropped]
        named = approved + dropped
        if total == 0:
            raise ProtocolError(
                "bad-request",
                f"call {call_id!r} leaves {path} as it is: it has no hunks to decide",
                ["Leave this file out of 'hunks'"],
            )
        bad = sorted({i for i in named if i >= total})
        if bad:
            raise ProtocolError(
                "bad-request",
                f"{path} of call {call_id!r} has {total} hunk(s), numbered 0 to {total - 1}; "
                f"there is no hunk {', '.join(map(str, bad))}",
                ["Number the hunks of each file's diff in the preview from 0, in order"],
            )
        twice = sorted({i for i in named if named.count(i) > 1})
        if twice:
            raise ProtocolError(
                "bad-request",
                f"hunk {', '.join(map(str, twice))} of {path} in call {call_id!r} is named "
                "twice; each hunk is either approved or dropped",
                ["Put each hunk index in 'approved' or in 'dropped', once"],
            )
        missing = sorted(set(range(total)) - set(named))
        if missing:
            raise ProtocolError(
                "bad-request",
                f"hunk {', '.join(map(str, missing))} of {path} in call {call_id!r} is neither "
                "approved nor dropped",
                [f"Decide all {total} hunks of {path}, or leave the file out to write it whole"],
            )
        out[path] = FileDecision(
            approved=frozenset(approved),
            dropped={d.index: d.reason.strip() for d in decision.dropped},
        )
    return out


def all_dropped(staged: list[Staged], decisions: dict[str, FileDecision]) -> str | None:
    """If the user dropped every hunk of every file of the call: the reasons given
    (a denial, "" when none); otherwise None."""
    if any(item.display not in decisions and count(item.old, item.new) for item in staged):
        return None
    if any(decision.approved for decision in decisions.values()):
        return None
    reasons = [
        reason for decision in decisions.values() for reason in decision.dropped.values() if reason
    ]
    return "; ".join(dict.fromkeys(reasons))
