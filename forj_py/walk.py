"""Walking the project the way ripgrep does: ignore files, hidden files, no secrets.

``list_files``, ``glob`` and the pure-Python ``search`` share this walker,
and the ripgrep-backed ``search`` is given flags that make rg walk the same
way, so both searches see the same files:

- ``.gitignore``, ``.ignore`` and ``.rgignore`` in every directory, with real
  gitignore semantics (``pathspec``): patterns relative to their file's
  directory, ``!`` negation, directory-only patterns, and the deepest file
  that has an opinion about a path decides (within one directory,
  ``.rgignore`` over ``.ignore`` over ``.gitignore``); plus
  ``.git/info/exclude`` at the root.  They apply whether or not the project
  is a git repository, and ignore files above the root or the user's global
  excludes do not (rg: ``--no-require-git --no-ignore-parent
  --no-ignore-global``).
- hidden names (a leading ``.``) are skipped unless asked for; ``.git`` is
  always skipped;
- paths matching the sandbox's denied patterns are never listed;
- symlinks are listed but not followed unless asked, and never out of the
  project.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from typing import NamedTuple

import pathspec

from .sandbox import Sandbox

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")  # lowest precedence first
MAX_IGNORE_FILE_BYTES = 1 << 20
MAX_DEPTH = 60  # below the sandbox's limit on path components


class Entry(NamedTuple):
    rel: str  # relative to the project root, forward slashes
    kind: str  # "file" | "dir" | "symlink" | "other"
    size: int
    mtime: int  # seconds since the epoch
    depth: int  # 1 for a direct child of the walk's start


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


class Walker:
    def __init__(self, sandbox: Sandbox, *, include_hidden: bool = False) -> None:
        self.sandbox = sandbox
        self.root = sandbox.project_root
        self.include_hidden = include_hidden
        self._specs: dict[str, Rules | None] = {}
        self._chains: dict[str, list[tuple[int, Rules]]] = {}
        self.unreadable_names = 0
        # Only what lies in an allowed root is listed or searched; directories
        # above an allowed root are walked through, not shown.
        self._roots = [r.rstrip(os.sep) for r in sandbox.allowed_roots]
        self._everything = self.root.rstrip(os.sep) in self._roots

    # --- ignore rules ---------------------------------------------------------

    def _spec(self, rel_dir: str) -> Rules | None:
        if rel_dir in self._specs:
            return self._specs[rel_dir]
        lines: list[str] = []
        base = self.root if rel_dir == "" else os.path.join(self.root, rel_dir)
        sources = [os.path.join(base, name) for name in IGNORE_FILES]
        if rel_dir == "":
            sources.insert(0, os.path.join(self.root, ".git", "info", "exclude"))
        for path in sources:
            # Lines with many "**" can make matching crawl (a cloned repository's
            # .gitignore is untrusted input); rg handles them, we skip them.
            lines.extend(line for line in _read_lines(path) if line.count("**") <= 2)
        spec = _compile(lines) if lines else None
        self._specs[rel_dir] = spec
        return spec

    def _specs_above(self, rel_dir: str) -> list[tuple[int, Rules]]:
        """The ignore specs of ``rel_dir`` and its ancestors, deepest first, as
        (length of the directory prefix to strip, spec)."""
        cached = self._chains.get(rel_dir)
        if cached is not None:
            return cached
        if rel_dir == "":
            chain: list[tuple[int, Rules]] = []
        else:
            parent = rel_dir.rsplit("/", 1)[0] if "/" in rel_dir else ""
            chain = list(self._specs_above(parent))
        spec = self._spec(rel_dir)
        if spec is not None:
            chain.insert(0, (len(rel_dir) + 1 if rel_dir else 0, spec))
        self._chains[rel_dir] = chain
        return chain

    @staticmethod
    def _ignored_in(chain: list[tuple[int, Rules]], rel: str, is_dir: bool) -> bool:
        for strip, rules in chain:  # deepest first: the nearest file with an opinion decides
            verdict = _verdict(rules, rel[strip:], is_dir)
            if verdict is not None:
                return verdict
        return False

    # --- walking -----------------------------------------------------------------

    def walk(
        self,
        start_rel: str = "",
        *,
        max_depth: int | None = None,
        follow_symlinks: bool = False,
        files_only: bool = False,
    ) -> Iterator[Entry]:
        """Entries under ``start_rel`` (depth-first, names sorted), filtered as above."""
        seen: set[tuple[int, int]] = set()
        start_abs = self.root if start_rel in ("", ".") else os.path.join(self.root, start_rel)
        try:
            st = os.stat(start_abs)
            seen.add((st.st_dev, st.st_ino))
        except OSError:
            return
        yield from self._walk_dir(
            start_abs,
            "" if start_rel == "." else start_rel,
            1,
            max_depth,
            follow_symlinks,
            files_only,
            seen,
        )

    def _walk_dir(
        self,
        abs_dir: str,
        rel_dir: str,
        depth: int,
        max_depth: int | None,
        follow: bool,
        files_only: bool,
        seen: set[tuple[int, int]],
    ) -> Iterator[Entry]:
        # Depth first with an explicit stack: nested generators would pass
        # every entry up through one frame per directory level.
        limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
        denied = self.sandbox.denied_inside
        stack: list[tuple[str, str, int] | Entry] = [(abs_dir, rel_dir, depth)]
        while stack:
            item = stack.pop()
            if isinstance(item, Entry):
                yield item
                continue
            abs_dir, rel_dir, depth = item
            try:
                with os.scandir(abs_dir) as it:
                    children = sorted(it, key=_name)
            except OSError:
                continue
            chain = self._specs_above(rel_dir)
            pending: list[tuple[str, str, int] | Entry] = []
            for child in children:
                name = child.name
                if not name.isascii():
                    try:
                        name.encode("utf-8")
                    except UnicodeEncodeError:
                        self.unreadable_names += 1  # the model could not name it
                        continue
                if name == ".git" or (name[0] == "." and not self.include_hidden):
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                try:
                    is_link = child.is_symlink()
                    is_dir = child.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if denied(rel, is_dir) is not None:
                    continue
                target_dir = False
                if is_link and follow:
                    target_dir = self._followable_dir(child.path, seen)
                if chain and self._ignored_in(chain, rel, is_dir or target_dir):
                    continue
                visible = True
                if not self._everything:
                    real = os.path.realpath(child.path) if target_dir else child.path
                    visible = self._inside(real)
                    if not visible and not ((is_dir or target_dir) and self._above(real)):
                        continue
                entry = _entry(child, rel, depth, is_link, is_dir)
                if entry is None:
                    continue
                is_file = entry.kind == "file" or (entry.kind == "symlink" and not target_dir)
                if visible and (not files_only or is_file):
                    pending.append(entry)
                if (is_dir or target_dir) and depth < limit:
                    pending.append((child.path, rel, depth + 1))
            stack.extend(reversed(pending))

    def _inside(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self._roots)

    def _above(self, path: str) -> bool:
        return any(r.startswith(path.rstrip(os.sep) + os.sep) for r in self._roots)

    def _followable_dir(self, path: str, seen: set[tuple[int, int]]) -> bool:
        """A symlinked directory inside the project, not denied, and not seen yet."""
        real = os.path.realpath(path)
        if not (real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep)):
            return False
        if self.sandbox.denied_pattern(self.sandbox.display(real)) is not None:
            return False
        try:
            st = os.stat(real)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            return False
        seen.add((st.st_dev, st.st_ino))
        return True


def _entry(
    child: os.DirEntry[str], rel: str, depth: int, is_link: bool, is_dir: bool
) -> Entry | None:
    try:
        st = child.stat(follow_symlinks=False)
    except OSError:
        return None
    if is_link:
        kind = "symlink"
    elif is_dir:
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    return Entry(rel, kind, st.st_size, int(st.st_mtime), depth)


# One ignore file's rules, in order: (regex, ignores?, directory-only?).
Rules = list[tuple["re.Pattern[str]", bool, bool]]


def _compile(lines: list[str]) -> Rules:
    rules: Rules = []
    for line in lines:
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([line])
        except ValueError:
            continue  # git ignores what it cannot parse; so do we
        for pattern in spec.patterns:
            regex = getattr(pattern, "regex", None)
            include = getattr(pattern, "include", None)
            if regex is None or include is None:
                continue
            body = line.rstrip()
            rules.append((regex, bool(include), body.endswith("/") and not body.endswith("\\/")))
    return rules


def _verdict(rules: Rules, rel: str, is_dir: bool) -> bool | None:
    """Ignored (True), re-included (False) or no opinion (None), last rule winning.

    Git's distinction: a directory is excluded only by a rule that matches
    the directory itself ("build/", "/a", "*"), not by one that matches its
    contents ("x/**", "x/*"), so a later "!x/keep" can still bring a file
    back.  A directory-only rule is tried against "dir/", every other rule
    against the bare name.
    """
    verdict: bool | None = None
    for regex, ignores, dir_only in rules:
        if dir_only and not is_dir:
            continue
        if _matches_itself(regex, rel + "/" if dir_only else rel):
            verdict = ignores
    return verdict


def _matches_itself(regex: re.Pattern[str], candidate: str) -> bool:
    """Whether ``regex`` matches ``candidate`` itself, not one of its parents.

    pathspec's regexes also match every path below a matching directory
    (group ``ps_d`` is the slash after it); the walk has already judged the
    parents, so such a match is not about this path.
    """
    if "ps_d" not in regex.groupindex:
        return regex.search(candidate) is not None
    for match in regex.finditer(candidate):
        if match.group("ps_d") is None or match.end("ps_d") == len(candidate):
            return True
    return False


def _read_lines(path: str) -> list[str]:
    # No symlinks, no FIFOs: an ignore file planted in a repository must not
    # make the walk read elsewhere or hang.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = fh.read(MAX_IGNORE_FILE_BYTES)
    return data.decode("utf-8", "replace").splitlines()
