"""How many columns a tab spans in a file, for measuring indentation depth.

Depth is compared in columns: a file that indents with tabs and aligns
with spaces after them, or a copy the model wrote in spaces, can only be
matched and re-indented when the width of a tab is known.  The width is
taken from the first of these that says:

1. the file's own declaration: Emacs file-local variables (``-*-
   tab-width: 4 -*-`` on the first or second line, or a ``Local
   Variables:`` block at the end) or a Vim modeline (``ts=4``,
   ``tabstop=4``).  It travels with the file, every editor that honours it
   writes the file that way, and Emacs applies it over everything else;
2. ``.editorconfig``: the project's declaration for the file;
3. the editor's value: the ``tab-width`` of the Emacs buffer visiting the
   file, sent with the plan request.  It is what the user sees and what
   Emacs's own indentation commands write there (the mode, directory-local
   variables, the user's setting), but it describes one user's view, so a
   declaration in the file or the project comes first;
4. the file's indentation, where it decides one width alone (see
   :func:`inferred`); where it does not, nothing is guessed;
5. 8, Emacs's default, which gofmt's tabs and Makefiles assume as well.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

DEFAULT_TAB_WIDTH = 8
MAX_TAB_WIDTH = 32
MAX_EDITORCONFIG_BYTES = 64 << 10
# Emacs reads a file's ``Local Variables:`` block only from its last 3000
# characters, and Vim its modelines from the first and last five lines.
LOCAL_VARIABLES_TAIL = 3000
MODELINE_LINES = 5
# Indentation evidence is taken from the head of a large file: a bounded
# cost per edit, and the head shows the file's habit as well as the whole.
INFER_BYTES = 64 << 10


def tab_width(root: Path, path: Path, text: str, editor: int | None = None) -> int:
    """The columns a tab spans in ``path`` (holding ``text``), in the order above."""
    width = declared(text)
    if width is None:
        width = editorconfig(root, path)
    if width is None and editor is not None and 0 < editor <= MAX_TAB_WIDTH:
        width = editor
    if width is None:
        width = inferred(text)
    return width if width is not None else DEFAULT_TAB_WIDTH


def _width(value: str) -> int | None:
    value = value.strip()
    if value.isdigit() and 0 < int(value) <= MAX_TAB_WIDTH:
        return int(value)
    return None


# --- the file's own declaration ----------------------------------------------

_FIRST_LINE = re.compile(r"-\*-(.*?)-\*-")
_LOCAL_VARIABLES = re.compile(r"^(.*?)Local Variables:[ \t]*(.*?)[ \t]*\r?$", re.MULTILINE)
_VIM_MODELINE = re.compile(r"(?:^|[ \t])(?:vi|vim|ex):[ \t]*(?:set?[ \t]+)?(.*)$")
_VIM_TABSTOP = re.compile(r"(?:^|[ \t:])(?:ts|tabstop)=(\d+)")


def declared(text: str) -> int | None:
    """The tab width the file declares for itself, Emacs's way first, or None."""
    width = _emacs_first_line(text)
    if width is None:
        width = _emacs_local_variables(text)
    if width is None:
        width = _vim_modeline(text)
    return width


def _emacs_first_line(text: str) -> int | None:
    """``-*- mode: c; tab-width: 4 -*-`` on the first line, or the second after ``#!``."""
    head = text[:4096].split("\n", 2)
    candidates = head[:1]
    if len(head) > 1 and head[0].startswith("#!"):
        candidates = head[:2]
    for line in candidates:
        found = _FIRST_LINE.search(line)
        if found is None or ":" not in found.group(1):
            continue  # "-*- c -*-" names a mode only
        for item in found.group(1).split(";"):
            key, sep, value = item.partition(":")
            if sep and key.strip().lower() == "tab-width":
                return _width(value)
    return None


def _emacs_local_variables(text: str) -> int | None:
    """``tab-width: N`` in a ``Local Variables:`` block near the file's end.

    Every line of the block carries the prefix (and suffix) the first line
    has around ``Local Variables:``, as Emacs requires; the block ends at
    ``End:``.
    """
    tail = text[-LOCAL_VARIABLES_TAIL:]
    tail = tail[tail.rfind("\f") + 1 :]  # Emacs looks after the last page break only
    starts = list(_LOCAL_VARIABLES.finditer(tail))
    if not starts:
        return None
    start = starts[-1]
    prefix, suffix = start.group(1), start.group(2)
    width = None
    for raw in tail[start.end() :].split("\n")[1:]:
        line = raw.rstrip("\r")
        if not line.startswith(prefix) or (suffix and not line.rstrip().endswith(suffix)):
            return None  # not a well-formed block: Emacs ignores it too
        body = line[len(prefix) :]
        if suffix:
            body = body.rstrip()[: -len(suffix)]
        key, sep, value = body.partition(":")
        if key.strip().lower() == "end" and sep:
            return width
        if sep and key.strip().lower() == "tab-width":
            width = _width(value)
    return None


def _vim_modeline(text: str) -> int | None:
    """``vim: ts=4 sw=4`` or ``vim: set tabstop=4:`` in the first or last five lines."""
    lines = text[:4096].split("\n")[:MODELINE_LINES]
    if len(text) > 4096 or len(lines) == MODELINE_LINES:
        lines += text[-4096:].split("\n")[-MODELINE_LINES:]
    for line in lines:
        found = _VIM_MODELINE.search(line.rstrip("\r"))
        if found is None:
            continue
        tabstop = _VIM_TABSTOP.search(" " + found.group(1))
        if tabstop is not None:
            return _width(tabstop.group(1))
    return None


# --- .editorconfig ----------------------------------------------------------------


def editorconfig(root: Path, path: Path) -> int | None:
    """The tab width ``.editorconfig`` sets for ``path``, or None.

    ``.editorconfig`` files from the file's directory up to the project root
    (or one saying ``root = true``) are read; the nearest section matching
    the file that sets ``tab_width`` (or a numeric ``indent_size``) wins.
    """
    try:
        path.relative_to(root)
    except ValueError:
        return None
    directory = path.parent
    while True:
        width, is_root = _editorconfig_width(directory / ".editorconfig", path)
        if width is not None:
            return width
        if is_root or directory == root or directory == directory.parent:
            return None
        directory = directory.parent


def _editorconfig_width(config: Path, target: Path) -> tuple[int | None, bool]:
    """(tab width the file sets for ``target``, whether it says ``root = true``)."""
    try:
        if config.is_symlink() or not config.is_file():
            return None, False
        with config.open("rb") as fh:
            text = fh.read(MAX_EDITORCONFIG_BYTES).decode("utf-8", "replace")
    except OSError:
        return None, False
    rel = target.relative_to(config.parent).as_posix()
    is_root = False
    section: str | None = None
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip().lower()
        if section is None:
            is_root = is_root or (key == "root" and value == "true")
        elif _glob_matches(section, rel) and key in ("tab_width", "indent_size"):
            found[key] = value  # later sections override earlier ones
    for key in ("tab_width", "indent_size"):
        width = _width(found.get(key, ""))
        if width is not None:
            return width, is_root
    return None, is_root


def _glob_matches(glob: str, rel: str) -> bool:
    """An EditorConfig section glob against a path relative to its file."""
    out = []
    i = 0
    while i < len(glob):
        ch = glob[i]
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "{":
            close = glob.find("}", i)
            if close < 0:
                out.append(re.escape(ch))
            else:
                alternatives = glob[i + 1 : close].split(",")
                out.append("(?:" + "|".join(re.escape(a) for a in alternatives) + ")")
                i = close + 1
                continue
        elif ch == "[":
            close = glob.find("]", i)
            if close < 0:
                out.append(re.escape(ch))
            else:
                out.append("[" + glob[i + 1 : close].replace("!", "^", 1) + "]")
                i = close + 1
                continue
        else:
            out.append(re.escape(ch))
        i += 1
    pattern = "".join(out)
    # A glob without a slash matches at any depth.
    pattern = "(?:.*/)?" + pattern if "/" not in glob else pattern.lstrip("/")
    return re.fullmatch(pattern, rel) is not None


# --- the file's indentation ----------------------------------------------------

_INDENT = re.compile(r"^([ \t]*)[^ \t\r\n]", re.MULTILINE)
MIN_VOTES = 3
AGREEMENT = 0.75


def inferred(text: str) -> int | None:
    """The one tab width under which the file's indentation is consistent, or None.

    Only a file that indents with tabs *and* spaces the way an editor
    filling tabs writes them (tabs as far as they go, then fewer spaces
    than a tab spans) tells anything: a file of tabs alone, or of spaces
    alone, reads the same under any width.  Such a file allows only widths
    greater than its longest run of spaces.  Its indentation step is what
    lines that change depth without changing their tabs move by (a move
    that no width affects); each line that goes one tab count deeper than
    the line before then votes for the width under which it moved exactly
    one step.  One width is decided when at least three lines vote, three
    in four of them for it, it is allowed, and it is a whole number of
    steps (where it is not, the moves were alignment, as in Lisp, not
    depth); otherwise None: nothing is guessed.
    """
    head = text[:INFER_BYTES]
    if "\t" not in head or "\n " not in head:
        return None  # not both tabs and spaces: nothing to decide, and no pass over lines
    indents = _INDENT.findall(head)
    shapes: list[tuple[int, int]] = []  # (tabs, spaces after them)
    for indent in indents:
        tabs = len(indent) - len(indent.lstrip("\t"))
        rest = indent[tabs:]
        if "\t" in rest:
            return None  # a tab after spaces: no editor filling tabs writes that
        shapes.append((tabs, len(rest)))
    if not any(t for t, _ in shapes) or not any(t == 0 and s for t, s in shapes):
        return None  # not both tabs and lines indented by spaces alone
    floor = max(s for _, s in shapes)  # allowed widths: greater than this
    moves: Counter[int] = Counter()
    for (t0, s0), (t1, s1) in itertools.pairwise(shapes):
        if t0 == t1 and s1 > s0:
            moves[s1 - s0] += 1
    if not moves:
        return None
    step = moves.most_common(1)[0][0]
    votes: Counter[int] = Counter()
    voted = 0
    for (t0, s0), (t1, s1) in itertools.pairwise(shapes):
        if t1 > t0:
            # (t1 - t0) * width + (s1 - s0) == step, solved for width.
            width, rem = divmod(step - (s1 - s0), t1 - t0)
            if rem == 0 and 0 < width <= MAX_TAB_WIDTH:
                votes[width] += 1
            voted += 1
    if not votes:
        return None
    width, count = votes.most_common(1)[0]
    if count < MIN_VOTES or count < AGREEMENT * voted or width <= floor:
        return None
    if width % step:
        return None  # a tab that is not a whole number of steps: alignment, not depth
    return width
