"""Walking the project the way ripgrep does: ignore files, hidden files, no secrets.

``list_files``, ``glob`` and the pure-Python ``search`` share this walker,
and the ripgrep-backed ``search`` is given flags that make rg walk the same
way, so both searches see the same files:

- ``.gitignore``, ``.ignore`` and ``.rgignore`` in every directory, with real
  gitignore semantics (``pathspec``, matched on RE2 in linear time: see
  :mod:`forj_py.patterns`; a line that cannot be matched is skipped, as
  git skips what it cannot parse): patterns relative to their file's
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

import functools
import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

from ..patterns import RegexSet, gitignore_regexes, linear
from ..safety.paths import Sandbox

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
            lines.extend(_read_lines(path))
        spec = _compile_cached(tuple(lines), linear()) if lines else None
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
            verdict = rules.verdict(rel[strip:], is_dir)
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


class Rules:
    """One directory's ignore rules, in order, matched without backtracking.

    A cloned repository's ``.gitignore`` is untrusted input: its patterns run
    on RE2 (:mod:`forj_py.patterns`), two sets per directory: rules for any
    path, tried on the bare name, and directory-only rules, tried on
    "dir/".  Each holds, per rule, an expression that matches the path
    itself and not merely one of its parents (pathspec's expressions also
    match every path below a matching directory; the walk has already
    judged the parents).
    """

    def __init__(self) -> None:
        self._any_sources: list[str] = []
        self._dir_sources: list[str] = []
        self._any_rules: list[tuple[int, bool]] = []  # (rule number, ignores?)
        self._dir_rules: list[tuple[int, bool]] = []
        self._any: RegexSet | None = None
        self._dirs: RegexSet | None = None
        self.count = 0

    def add(self, source: str, ignores: bool, dir_only: bool) -> None:
        itself = _itself(source)
        if dir_only:
            self._dir_sources.append(itself)
            self._dir_rules.append((self.count, ignores))
        else:
            self._any_sources.append(itself)
            self._any_rules.append((self.count, ignores))
        self.count += 1

    def freeze(self) -> Rules:
        self._any = RegexSet(self._any_sources)
        self._dirs = RegexSet(self._dir_sources)
        return self

    def verdict(self, rel: str, is_dir: bool) -> bool | None:
        """Ignored (True), re-included (False) or no opinion (None), last rule winning.

        Git's distinction: a directory is excluded only by a rule that
        matches the directory itself ("build/", "/a", "*"), not by one that
        matches its contents ("x/**", "x/*"), so a later "!x/keep" can
        still bring a file back.
        """
        assert self._any is not None and self._dirs is not None
        best: tuple[int, bool] | None = None
        hits = self._any.matching(rel) if len(self._any) else []
        if hits:
            best = self._any_rules[hits[-1]]
        if is_dir and len(self._dirs):
            hits = self._dirs.matching(rel + "/")
            if hits and (best is None or self._dir_rules[hits[-1]][0] > best[0]):
                best = self._dir_rules[hits[-1]]
        return None if best is None else best[1]


_DIR_MARK = "(?P<ps_d>/)"
_DIR_MARK_OPTIONAL = "(?:(?P<ps_d>/)|$)"


def _itself(source: str) -> str:
    """A pathspec expression narrowed to paths it matches themselves.

    Its group ``ps_d`` is the slash after a matching directory; a match
    counts for the path itself when that group ends the text or did not
    take part (then ``$`` did).
    """
    if source.endswith(_DIR_MARK_OPTIONAL):
        return source[: -len(_DIR_MARK_OPTIONAL)] + "/?$"
    if source.endswith(_DIR_MARK):
        return source[: -len(_DIR_MARK)] + "/$"
    return source.replace(_DIR_MARK, "/")


@functools.lru_cache(maxsize=1024)
def _compile_cached(lines: tuple[str, ...], on_re2: bool) -> Rules:
    # Every walk builds a new Walker; the ignore files rarely change between
    # them, and pathspec compiles each line with ``re`` first (44 ms for a
    # thousand-star line), so a hostile .gitignore is paid for once.
    return _compile(list(lines))


def _compile(lines: list[str]) -> Rules:
    rules = Rules()
    for line in lines:
        try:
            compiled = gitignore_regexes(line, marks_dirs=True)
        except ValueError:
            # Git ignores what it cannot parse; so do we.  Without RE2 this
            # also skips a line too complex to match safely (logged once).
            continue
        body = line.rstrip()
        dir_only = body.endswith("/") and not body.endswith("\\/")
        for source, ignores in compiled:
            rules.add(source, ignores, dir_only)
    return rules.freeze()


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
