"""Reading a patch: Codex's ``*** Begin Patch`` envelope or a unified diff.

Both formats become the same list of :class:`FileOp` (add, update or
delete one file, an update possibly moving it), each update a list of
:class:`HunkSpec` (context, removed and added lines, and where the patch
says it goes: a line number in a unified diff, ``@@`` anchor lines in the
envelope).  Parsing is pure: no file is looked at, so the planner can ask
which paths a patch names before anything runs.

The envelope, as models trained on Codex write it::

    *** Begin Patch
    *** Add File: docs/new.md
    +first line
    *** Update File: src/app.py
    *** Move to: src/main.py
    @@ def main():
     context
    -old line
    +new line
    *** Delete File: src/old.py
    *** End Patch

Models drop the space of blank context lines, so an empty line inside a
hunk is a blank context line.  Unified diffs are read as ``git diff`` and
``diff -u`` write them (``a/`` and ``b/`` prefixes, ``/dev/null`` for an
added or deleted file, git's ``rename from`` / ``rename to`` headers,
``\\ No newline at end of file``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from .. import errors
from ..errors import ToolFailure

OpKind = Literal["add", "update", "delete"]


@dataclass
class HunkSpec:
    """One hunk: its lines, each (' ' | '-' | '+', text without line end)."""

    patch_line: int  # 1-based line of the patch where the hunk starts
    lines: list[tuple[str, str]] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)  # envelope "@@ text" lines
    old_start: int | None = None  # unified diff: the line the hunk claims to start at
    end_of_file: bool = False  # envelope "*** End of File": the hunk ends the file
    old_no_eol: bool = False  # the old side's last line has no line end
    new_no_eol: bool = False  # the new side's last line has no line end

    @property
    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]

    @property
    def changes(self) -> bool:
        return any(tag != " " for tag, _ in self.lines)


@dataclass
class FileOp:
    kind: OpKind
    path: str
    move_to: str | None = None
    content: str | None = None  # "add": the whole new text
    hunks: list[HunkSpec] = field(default_factory=list)
    patch_line: int = 0

    @property
    def paths(self) -> list[str]:
        return [self.path] + ([self.move_to] if self.move_to else [])


@dataclass
class Patch:
    format: Literal["envelope", "unified"]
    ops: list[FileOp]


def _bad(message: str, line: int | None = None, recovery: list[str] | None = None) -> ToolFailure:
    where = f" (patch line {line})" if line else ""
    return errors.bad_args(
        f"The patch cannot be read{where}: {message}; nothing was changed",
        recovery=recovery
        or [
            "Send either a '*** Begin Patch' ... '*** End Patch' envelope or a unified diff "
            "('--- a/path', '+++ b/path', '@@ -l,n +l,n @@' hunks)",
        ],
        **({"patch_line": line} if line else {}),
    )


def parse(text: str) -> Patch:
    """Read ``text`` in whichever format it is in."""
    body = text.replace("\r\n", "\n")
    if body.lstrip().startswith("*** Begin Patch"):
        return Patch("envelope", _parse_envelope(body))
    ops = _parse_unified(body)
    if not ops:
        raise _bad("it is neither a '*** Begin Patch' envelope nor a unified diff")
    return Patch("unified", ops)


# --- the envelope ------------------------------------------------------------------

_ENV_HEADER = re.compile(r"\*\*\* (Add|Update|Delete) File: (.+)")


def _parse_envelope(text: str) -> list[FileOp]:
    lines = text.split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    i += 1  # "*** Begin Patch"
    ops: list[FileOp] = []
    ended = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped == "*** End Patch":
            ended = True
            i += 1
            break
        if not stripped:
            i += 1
            continue
        m = _ENV_HEADER.fullmatch(line.rstrip())
        if m is None:
            raise _bad(
                f"expected '*** Add File:', '*** Update File:', '*** Delete File:' or "
                f"'*** End Patch', found {line[:80]!r}",
                i + 1,
            )
        kind, path = m.group(1).lower(), m.group(2).strip()
        op = FileOp(kind, path, patch_line=i + 1)  # type: ignore[arg-type]
        i += 1
        if kind == "add":
            added = []
            while i < len(lines) and lines[i].startswith("+"):
                added.append(lines[i][1:])
                i += 1
            op.content = "".join(a + "\n" for a in added)
        elif kind == "update":
            if i < len(lines) and lines[i].startswith("*** Move to:"):
                op.move_to = lines[i][len("*** Move to:") :].strip()
                i += 1
            i = _envelope_hunks(lines, i, op)
        ops.append(op)
    if not ended:
        raise _bad("it has no '*** End Patch' line", None)
    trailing = [n for n in range(i, len(lines)) if lines[n].strip()]
    if trailing:
        raise _bad("there is text after '*** End Patch'", trailing[0] + 1)
    if not ops:
        raise _bad("the envelope names no file")
    return ops


def _envelope_hunks(lines: list[str], i: int, op: FileOp) -> int:
    hunk: HunkSpec | None = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("*** ") and line.strip() != "*** End of File":
            break
        if line.strip() == "*** End of File":
            if hunk is None:
                raise _bad("'*** End of File' outside a hunk", i + 1)
            hunk.end_of_file = True
            i += 1
            continue
        if line.startswith("@@"):
            anchor = line[2:].strip()
            if hunk is None or hunk.lines:
                hunk = HunkSpec(patch_line=i + 1)
                op.hunks.append(hunk)
            if anchor:
                hunk.anchors.append(anchor)
            i += 1
            continue
        if hunk is None:
            # The first hunk of a file may come without an "@@" line.
            hunk = HunkSpec(patch_line=i + 1)
            op.hunks.append(hunk)
        if line == "":
            if _only_blank_to_header(lines, i):
                break
            hunk.lines.append((" ", ""))
        elif line[0] in " -+":
            hunk.lines.append((line[0], line[1:]))
        else:
            raise _bad(
                f"a hunk line must start with ' ', '-' or '+', found {line[:80]!r}",
                i + 1,
                [
                    "Prefix every line of a hunk: ' ' for context, '-' to remove, '+' to add",
                    "Start each hunk with '@@' (optionally followed by a line to anchor on)",
                ],
            )
        i += 1
    op.hunks = [h for h in op.hunks if h.lines]
    if not any(h.changes for h in op.hunks) and op.move_to is None:
        raise _bad(f"the update of {op.path} changes nothing", op.patch_line)
    return i


def _only_blank_to_header(lines: list[str], i: int) -> bool:
    """Blank lines up to the next header or the end: the gap between files."""
    for line in lines[i:]:
        if line.strip():
            return line.startswith("*** ")
    return True


# --- unified diffs -----------------------------------------------------------------

_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _diff_path(raw: str) -> str | None:
    """A header's path: timestamps after a tab dropped, quotes undone; None for /dev/null."""
    name = raw.split("\t", 1)[0].rstrip()
    if name.startswith('"') and name.endswith('"') and len(name) >= 2:
        name = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    if name == "/dev/null":
        return None
    return name


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """git's a/ and b/ prefixes, dropped when the headers carry them."""
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        return (old[2:] if old else None), (new[2:] if new else None)
    return old, new


def _parse_unified(text: str) -> list[FileOp]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    ops: list[FileOp] = []
    i = 0
    rename: tuple[str | None, str | None] = (None, None)
    git_header: int | None = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            git_header = i + 1
            rename = (None, None)
            i += 1
            continue
        if line.startswith("rename from "):
            rename = (line[len("rename from ") :], rename[1])
            i += 1
            continue
        if line.startswith("rename to "):
            rename = (rename[0], line[len("rename to ") :])
            if rename[0] is not None and not _header_follows(lines, i + 1):
                # A pure rename: git writes no ---/+++ lines for it.
                ops.append(
                    FileOp("update", rename[0], move_to=rename[1], patch_line=git_header or i)
                )
                rename = (None, None)
            i += 1
            continue
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip_prefixes(_diff_path(line[4:]), _diff_path(lines[i + 1][4:]))
            start = i + 1
            i += 2
            hunks: list[HunkSpec] = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _unified_hunk(lines, i)
                hunks.append(hunk)
            _check_hunks_ended(lines, i, hunks[-1] if hunks else None)
            if not hunks:
                raise _bad(f"no '@@' hunk follows the header of {new or old}", start)
            if old is None and new is None:
                raise _bad("both sides of a file header are /dev/null", start)
            if old is None:
                assert new is not None
                added = [t for h in hunks for tag, t in h.lines if tag == "+"]
                no_eol = hunks[-1].new_no_eol
                content = "\n".join(added) + ("" if no_eol or not added else "\n")
                ops.append(FileOp("add", new, content=content, patch_line=start))
            elif new is None:
                ops.append(FileOp("delete", old, hunks=hunks, patch_line=start))
            else:
                src = rename[0] or old
                dst = rename[1] or new
                op = FileOp("update", src, hunks=hunks, patch_line=start)
                if dst != src:
                    op.move_to = dst
                ops.append(op)
            rename = (None, None)
            continue
        if line.startswith("@@") and not ops:
            raise _bad("a hunk comes before any '--- a/path' / '+++ b/path' header", i + 1)
        i += 1
    return ops


def _check_hunks_ended(lines: list[str], i: int, hunk: HunkSpec | None) -> None:
    """Refuse hunk lines left over after a hunk's counts ran out.

    When a hunk holds more lines than its ``@@ -l,n +l,n @@`` counts say, the
    rest would otherwise be read as text between files, and the hunks after
    it silently dropped.  Lines of a hunk's shape before the next file (or
    the end) mean the counts are wrong: the patch is refused whole.
    """
    if hunk is None:
        return
    j = i
    while j < len(lines):
        line = lines[j]
        if line.startswith("diff --git ") or (
            line.startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ ")
        ):
            break
        if line == "-- ":
            break  # git format-patch's signature: "-- " then the version
        if line[:1] in ("+", "-", "@") or (line[:1] == " " and line.strip()):
            raise _bad(
                f"the hunk's header says {_counts(hunk)}, but hunk lines follow it "
                f"(patch line {j + 1}: {line[:80]!r}); applying only part of the hunk, "
                "or none of the hunks after it, would be wrong",
                hunk.patch_line,
                [
                    "Make the counts in '@@ -l,n +l,n @@' match the hunk's lines, or send the "
                    "patch as a '*** Begin Patch' envelope, which has no counts",
                ],
            )
        j += 1


def _counts(hunk: HunkSpec) -> str:
    old = sum(1 for tag, _ in hunk.lines if tag != "+")
    new = sum(1 for tag, _ in hunk.lines if tag != "-")
    return f"{old} old and {new} new lines"


def _header_follows(lines: list[str], i: int) -> bool:
    while i < len(lines) and not lines[i].startswith(("diff --git ", "--- ")):
        if not lines[i].startswith(("similarity index", "dissimilarity index", "index ")):
            return False
        i += 1
    return i < len(lines) and lines[i].startswith("--- ")


def _unified_hunk(lines: list[str], i: int) -> tuple[HunkSpec, int]:
    m = _HUNK_HEADER.match(lines[i])
    if m is None:
        raise _bad(f"a hunk header must read '@@ -l,n +l,n @@', found {lines[i][:80]!r}", i + 1)
    old_count = int(m.group(2)) if m.group(2) is not None else 1
    new_count = int(m.group(4)) if m.group(4) is not None else 1
    hunk = HunkSpec(patch_line=i + 1, old_start=int(m.group(1)))
    i += 1
    old_seen = new_seen = 0
    while i < len(lines) and (old_seen < old_count or new_seen < new_count):
        line = lines[i]
        if line.startswith("\\"):
            _mark_no_eol(hunk)
            i += 1
            continue
        tag = line[:1] or " "  # a blank line whose space was stripped
        if tag not in " -+":
            raise _bad(
                f"the hunk says {old_count} old and {new_count} new lines but ends after "
                f"{old_seen} and {new_seen}",
                hunk.patch_line,
                [
                    "Make the counts in '@@ -l,n +l,n @@' match the hunk's lines, or send the "
                    "patch as a '*** Begin Patch' envelope, which has no counts",
                ],
            )
        hunk.lines.append((tag, line[1:]))
        if tag != "+":
            old_seen += 1
        if tag != "-":
            new_seen += 1
        i += 1
    if old_seen != old_count or new_seen != new_count:
        raise _bad(
            f"the hunk says {old_count} old and {new_count} new lines, the patch ends after "
            f"{old_seen} and {new_seen}",
            hunk.patch_line,
        )
    while i < len(lines) and lines[i].startswith("\\"):
        _mark_no_eol(hunk)
        i += 1
    if hunk.old_start == 0 and old_count == 0:
        hunk.old_start = None  # a new file: nothing to place
    return hunk, i


def _mark_no_eol(hunk: HunkSpec) -> None:
    """``\\ No newline at end of file`` qualifies the line before it."""
    if not hunk.lines:
        return
    tag = hunk.lines[-1][0]
    if tag in " -":
        hunk.old_no_eol = True
    if tag in " +":
        hunk.new_no_eol = True
