"""A synthetic repository of N files for the scaling benchmarks.

The shape follows a real source tree: packages nested breadth-first as deep as the count needs,
about 24 files and a few subdirectories per directory, a mix of source,
text and data files, a root ``.gitignore`` (logs, build output) and a few
nested ones, ignored files and directories that the walk must skip, a
vendored ``node_modules`` the default excludes skip, and a denied
``.env`` per package.  The same N gives the same tree.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

EXTENSIONS = (".py", ".py", ".py", ".js", ".ts", ".md", ".txt", ".json", ".c", ".h")
FILES_PER_DIR = 24
SUBDIRS_PER_DIR = 4


def make_tree(root: Path, n_files: int, *, seed: int = 7) -> int:
    """Create about ``n_files`` visible files under ``root``; returns how many were made.

    Ignored, excluded and denied files come on top of that count.
    """
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / ".gitignore").write_text("*.log\nbuild/\n/dist\n*.tmp\n!keep.tmp\n")
    made = 0
    queue: list[tuple[Path, int]] = [(root, 0)]
    counter = 0
    while queue and made < n_files:
        directory, level = queue.pop(0)
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(FILES_PER_DIR):
            if made >= n_files:
                break
            counter += 1
            ext = EXTENSIONS[rng.randrange(len(EXTENSIONS))]
            name = f"mod_{counter:06d}{ext}"
            body = f"# file {counter}\nvalue = {rng.randrange(1 << 30)}\n"
            _write(directory / name, body)
            made += 1
        if level == 1:
            # Things the walk must leave out: ignored files and directories,
            # a vendored tree, a secret.
            _write(directory / "debug.log", "log\n")
            _write(directory / "build" / "out.o", "obj\n")
            _write(directory / "node_modules" / "lib" / "index.js", "module.exports = 1\n")
            _write(directory / ".env", "TOKEN=x\n")
            _write(directory / ".gitignore", "*.gen.py\n")
            _write(directory / "x.gen.py", "generated = 1\n")
        for s in range(SUBDIRS_PER_DIR):
            queue.append((directory / f"pkg{s}_{counter:06d}", level + 1))
    return made


def _write(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
