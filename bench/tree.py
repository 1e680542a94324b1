"""A synthetic repository of N files for the scaling benchmarks.

The shape follows a source tree: directories of 24 files and up to 16
subdirectories, filled breadth-first as deep as the count needs, a mix of
source, text and data files, a root ``.gitignore`` (logs, build output)
and nested ones, ignored files and directories the walk must skip, a
vendored ``node_modules`` the default excludes skip, and a denied ``.env``
in each first-level directory.  Names are short (``a/b/c/f07.py``) so
that a listing of all 100,000 files fits one result at the largest
output limit (8 MiB, and 7 MiB per reply): the benchmark compares whole
listings, not a cut one.  The same N gives the same tree.
"""

from __future__ import annotations

import collections
import os
import random
from pathlib import Path

EXTENSIONS = (".py", ".py", ".py", ".js", ".ts", ".md", ".txt", ".json", ".c", ".h")
FILES_PER_DIR = 24
SUBDIRS = "abcdefghijklmnop"


def make_tree(root: Path, n_files: int, *, seed: int = 7) -> int:
    """Create ``n_files`` visible files under ``root``; returns how many were made.

    Ignored, excluded and denied files come on top of that count.
    """
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / ".gitignore").write_text("*.log\nbuild/\n/dist\n*.tmp\n!keep.tmp\n")
    made = 0
    queue: collections.deque[tuple[Path, int]] = collections.deque([(root, 0)])
    while queue and made < n_files:
        directory, level = queue.popleft()
        directory.mkdir(parents=True, exist_ok=True)
        for k in range(min(FILES_PER_DIR, n_files - made)):
            ext = EXTENSIONS[rng.randrange(len(EXTENSIONS))]
            _write(directory / f"f{k:02d}{ext}", f"# {made}\nvalue = {rng.randrange(1 << 30)}\n")
            made += 1
        if level == 1:
            # What the walk must leave out: ignored files and directories,
            # a vendored tree, a secret, a generated file a nested
            # .gitignore names.
            _write(directory / "debug.log", "log\n")
            _write(directory / "build" / "out.o", "obj\n")
            _write(directory / "node_modules" / "lib" / "index.js", "module.exports = 1\n")
            _write(directory / ".env", "TOKEN=x\n")
            _write(directory / ".gitignore", "*.gen.py\n")
            _write(directory / "x.gen.py", "generated = 1\n")
        for name in SUBDIRS:
            queue.append((directory / name, level + 1))
    return made


def _write(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
