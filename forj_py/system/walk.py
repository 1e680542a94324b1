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
- hidden names (a leading ``.``) are skipped unless asked for; ``.git`` (in
  any case, a directory or a gitfile, at any depth) is always skipped, and a
  symlinked directory that leads into one is not followed;
- paths matching the sandbox's denied patterns are never listed;
- symlinks are listed but not followed unless asked, and never out of the
  project.
"""

from __future__ import annotations

import collections
import functools
import operator
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence, Set
from typing import NamedTuple

from ..patterns import LineScan, RegexSet, gitignore_regexes, line_scanner, linear
from ..safety.paths import Sandbox

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")  # lowest precedence first
EXCLUDED_EXAMPLES = 5
MAX_IGNORE_FILE_BYTES = 1 << 20
MAX_DEPTH = 60  # below the sandbox's limit on path components


class Entry(NamedTuple):
    rel: str  # relative to the project root, forward slashes
    kind: str  # "file" | "dir" | "symlink" | "other"
    size: int
    mtime: int  # seconds since the epoch
    depth: int  # 1 for a direct child of the walk's start


class Walker:
    def __init__(
        self,
        sandbox: Sandbox,
        *,
        include_hidden: bool = False,
        excludes: Excludes | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.root = sandbox.project_root
        self.include_hidden = include_hidden
        self.excludes = excludes
        # What the excludes left out: how many entries (a skipped directory
        # counts once) and the first few, for the result to name.
        self.excluded = 0
        self.excluded_examples: list[str] = []
        self._specs: dict[str, Rules | None] = {}
        self._chains: dict[str, list[tuple[int, Rules]]] = {}
        self.unreadable_names = 0
        # Only what lies in an allowed root is listed or searched; directories
        # above an allowed root are walked through, not shown.
        self._roots = [r.rstrip(os.sep) for r in sandbox.allowed_roots]
        self._everything = self.root.rstrip(os.sep) in self._roots

    # --- ignore rules ---------------------------------------------------------

    def _spec(self, rel_dir: str, present: Sequence[str] | None = None) -> Rules | None:
        """``rel_dir``'s ignore rules; ``present``: which ignore files its listing holds."""
        if rel_dir in self._specs:
            return self._specs[rel_dir]
        lines: list[str] = []
        base = self.root if rel_dir == "" else os.path.join(self.root, rel_dir)
        names = IGNORE_FILES if present is None else [n for n in IGNORE_FILES if n in present]
        sources = [os.path.join(base, name) for name in names]
        if rel_dir == "":
            sources.insert(0, os.path.join(self.root, ".git", "info", "exclude"))
        for path in sources:
            lines.extend(_read_lines(path))
        spec = _compile_cached(tuple(lines), linear()) if lines else None
        self._specs[rel_dir] = spec
        return spec

    def _specs_above(
        self, rel_dir: str, present: Sequence[str] | None = None
    ) -> list[tuple[int, Rules]]:
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
        spec = self._spec(rel_dir, present)
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
        wanted: Callable[[str], bool] | None = None,
        suffixes: tuple[str, ...] | None = None,
        check: Callable[[], None] | None = None,
    ) -> Iterator[Entry]:
        """Entries under ``start_rel`` (breadth-first, names sorted), filtered as above.

        ``wanted``: only paths it accepts are yielded (and ``stat``-ed); the
        walk still goes through every directory.  ``suffixes``: what every
        path ``wanted`` accepts ends with, if that is known (``.py`` for
        ``**/*.py``); a file whose name ends otherwise is passed over before
        any other question is asked of it.  ``check`` runs before each
        directory is read (a cancel check that raises).
        """
        for batch in self.walk_batches(
            start_rel,
            max_depth=max_depth,
            follow_symlinks=follow_symlinks,
            files_only=files_only,
            wanted=wanted,
            suffixes=suffixes,
            check=check,
        ):
            yield from batch

    def walk_batches(
        self,
        start_rel: str = "",
        *,
        max_depth: int | None = None,
        follow_symlinks: bool = False,
        files_only: bool = False,
        wanted: Callable[[str], bool] | None = None,
        suffixes: tuple[str, ...] | None = None,
        check: Callable[[], None] | None = None,
    ) -> Iterator[list[Entry]]:
        """:meth:`walk`'s entries, one list per directory read (none empty)."""
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
            wanted,
            suffixes,
            check,
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
        wanted: Callable[[str], bool] | None = None,
        suffixes: tuple[str, ...] | None = None,
        check: Callable[[], None] | None = None,
    ) -> Iterator[list[Entry]]:
        # Breadth first, names sorted within each directory: a walk stopped
        # early (a cap) has shown the top of the tree, not one deep corner.
        limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
        keep = None if wanted is None or suffixes is None else _may_hold(suffixes)
        queue: collections.deque[tuple[str, str, int]] = collections.deque(
            [(abs_dir, rel_dir, depth)]
        )
        while queue:
            abs_dir, rel_dir, depth = queue.popleft()
            if check is not None:
                check()
            fd = _open_dir(abs_dir)
            if fd is None:
                continue
            try:
                # Through the directory's descriptor, each child's stat is an
                # fstatat of its bare name: no walk of the whole path again.
                with os.scandir(fd) if _SCANDIR_FD else os.scandir(abs_dir) as it:
                    children = sorted(it if keep is None else filter(keep, it), key=_by_name)
                entries, descend = self._judge(
                    abs_dir, rel_dir, children, depth, follow, files_only, seen, wanted, suffixes
                )
            finally:
                os.close(fd)
            if depth < limit:
                queue.extend((path, rel, depth + 1) for path, rel in descend)
            if entries:
                yield entries

    def _judge(
        self,
        abs_dir: str,
        rel_dir: str,
        children: list[os.DirEntry[str]],
        depth: int,
        follow: bool,
        files_only: bool,
        seen: set[tuple[int, int]],
        wanted: Callable[[str], bool] | None,
        suffixes: tuple[str, ...] | None = None,
    ) -> tuple[list[Entry], list[tuple[str, str]]]:
        """One directory's children that pass every filter, in order.

        Returns the entries to show and the directories to walk into, as
        (absolute, relative) paths; a directory may be walked through
        without being shown (one above an allowed root, one a glob does not
        match).
        The denied patterns and each ignore file's rules are asked about the
        whole directory at once (:class:`LineScan`); only the names one of
        them may match are then judged one by one, by the same code a
        single path goes through.  Runs while the directory's descriptor is
        open: the children's ``stat`` goes through it.

        With ``wanted``, a file it does not accept is dropped first: no
        rule can make it shown, and a glob's walk meets mostly such files.
        Directories (and, when followed, symlinks) are judged in full: what
        lies below them may be wanted.
        """
        prefix = f"{rel_dir}/" if rel_dir else ""
        kept: list[tuple[os.DirEntry[str], str, str, bool, bool]] = []
        # Files ``wanted`` already accepted, by their index in ``kept``.
        accepted: set[int] = set()
        ignore_files: list[str] = []
        include_hidden = self.include_hidden
        for child in children:
            name = child.name
            if name[0] == ".":
                if name in IGNORE_FILES:
                    ignore_files.append(name)
                # .git in any case: git's own store is never listed (on a
                # case-insensitive volume .GIT is the same directory).
                if not include_hidden or name.lower() == ".git":
                    continue
            if not name.isascii():
                try:
                    name.encode("utf-8")
                except UnicodeEncodeError:
                    self.unreadable_names += 1  # the model could not name it
                    continue
            try:
                # From the directory listing's file types; a symlink is not
                # a directory here whatever it points to.
                is_link = child.is_symlink()
                is_dir = not is_link and child.is_dir()
            except OSError:
                continue
            if wanted is not None and not is_dir and not (is_link and follow):
                if suffixes is not None and not name.endswith(suffixes):
                    continue
                if not wanted(prefix + name):
                    continue
                accepted.add(len(kept))
            kept.append((child, name, prefix + name, is_link, is_dir))
        if not kept:
            return [], []
        chain = self._specs_above(rel_dir, ignore_files)
        # Which children some rule may apply to; None means "ask about each".
        suspects = self._suspects(rel_dir, chain, kept)
        denied = self.sandbox.denied_inside
        excludes = self.excludes
        everything = self._everything
        entries: list[Entry] = []
        descend: list[tuple[str, str]] = []
        excluded_by = excludes.matches_name if excludes else None
        every = suspects is None
        no_suspects = not suspects
        for n, (child, name, rel, is_link, is_dir) in enumerate(kept):
            target_dir = False
            if is_link or every or (not no_suspects and n in suspects):  # type: ignore[operator]
                if denied(rel, is_dir) is not None:
                    continue
                if is_link and follow:
                    target_dir = self._followable_dir(f"{abs_dir}/{name}", seen)
                if chain and self._ignored_in(chain, rel, is_dir or target_dir):
                    continue
            walked = is_dir or target_dir
            if excluded_by is not None and excluded_by(name, rel, walked):
                self.excluded += 1
                if len(self.excluded_examples) < EXCLUDED_EXAMPLES:
                    self.excluded_examples.append(rel + "/" if walked else rel)
                continue
            visible = True
            if not everything:
                path = f"{abs_dir}/{name}"
                real = os.path.realpath(path) if target_dir else path
                visible = self._inside(real)
                if not visible and not (walked and self._above(real)):
                    continue
            if walked:
                descend.append((f"{abs_dir}/{name}", rel))
            # A symlink to a directory it does not follow is a file to a
            # files-only walk (search reads through it, inside the project).
            if (wanted is not None or files_only or not visible) and (
                not visible
                or (files_only and walked)
                or (wanted is not None and n not in accepted and not wanted(rel))
            ):
                continue
            try:
                # For what is not a symlink, DirEntry.stat() is its lstat.
                st = child.stat(follow_symlinks=False) if is_link else child.stat()
            except OSError:
                continue
            if is_link:
                kind = "symlink"
            elif is_dir:
                kind = "dir"
            elif stat.S_ISREG(st.st_mode):
                kind = "file"
            elif files_only:
                continue
            else:
                kind = "other"
            entries.append(_new_entry(Entry, (rel, kind, st.st_size, int(st.st_mtime), depth)))
        return entries, descend

    def _suspects(
        self,
        rel_dir: str,
        chain: list[tuple[int, Rules]],
        kept: list[tuple[os.DirEntry[str], str, str, bool, bool]],
    ) -> set[int] | None:
        """Indices of ``kept`` that a denied pattern or an ignore rule may match."""
        denied_scan = _denied_scan(self.sandbox)
        if denied_scan is None:
            return None
        # Each child's name (and "name/" for a directory), scanned as a path
        # below each scanner's own directory.
        lines: list[str] = []
        owners: list[int] = []
        for n, (_, name, _, _, is_dir) in enumerate(kept):
            lines.append(name)
            owners.append(n)
            if is_dir:
                lines.append(name + "/")
                owners.append(n)
        if "\n" in rel_dir or any("\n" in name for name in lines):
            return None  # one path over two lines: judge each path alone
        prefix = f"{rel_dir}/" if rel_dir else ""
        hits = denied_scan.hits(lines, prefix)
        suspects = {owners[i] for i in hits}
        for strip, rules in chain:
            scan = rules.scan()
            if scan is None:
                return None
            found = scan.hits(lines, prefix[strip:])
            suspects.update(owners[i] for i in found)
        return suspects

    def _inside(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self._roots)

    def _above(self, path: str) -> bool:
        return any(r.startswith(path.rstrip(os.sep) + os.sep) for r in self._roots)

    def _followable_dir(self, path: str, seen: set[tuple[int, int]]) -> bool:
        """A symlinked directory inside the project, not denied, and not seen yet."""
        real = os.path.realpath(path)
        if not (real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep)):
            return False
        shown = self.sandbox.display(real)
        if self.sandbox.denied_pattern(shown) is not None:
            return False
        if ".git" in shown.lower().split("/"):  # a link into a .git: never listed
            return False
        try:
            st = os.stat(real)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            return False
        seen.add((st.st_dev, st.st_ino))
        return True


def _may_hold(suffixes: tuple[str, ...]) -> Callable[[os.DirEntry[str]], bool]:
    """Whether a directory's child may be, or lead to, a path ending with ``suffixes``.

    A glob's walk asks this of every entry before sorting or judging any:
    in a source tree most files end otherwise.  Hidden names stay (the
    ignore files are among them), and so does anything that is or may be
    a directory (a symlink to one included): they are judged in full.
    """

    def keep(child: os.DirEntry[str]) -> bool:
        name = child.name
        if name.endswith(suffixes) or name[0] == ".":
            return True
        try:
            return child.is_dir()
        except OSError:
            return True

    return keep


def _open_dir(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError:
        return None


_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SCANDIR_FD = os.scandir in os.supports_fd
_by_name = operator.attrgetter("name")
# Entry's own constructor is a Python function; a walk makes one per entry.
_new_entry = tuple.__new__


def _denied_scan(sandbox: Sandbox) -> LineScan | None:
    """The sandbox's denied patterns as one :class:`LineScan`; None: check each path.

    Only for a sandbox whose one allowed root is the project: with several,
    a path is also judged relative to the root that holds it.
    """
    patterns = getattr(sandbox, "_denied", None)
    if not isinstance(patterns, RegexSet) or sandbox.allowed_roots != [sandbox.project_root]:
        return None
    return line_scanner(tuple(patterns.sources), patterns.ignore_case)


class Excludes:
    """Names listings and searches skip unless asked for (``[tools.listing] default_excludes``).

    Gitignore-style patterns relative to the project root, matched without
    regard to case (``IMG.PNG`` is an image too).  A request *names* a
    pattern when the text it gave (a directory to list, a glob) is itself
    matched by the pattern, or has a leading part that is:
    ``node_modules/react`` names ``node_modules/``, ``**/*.png`` and
    ``assets/logo.png`` name ``*.png``, ``src/**`` names nothing.  What a
    request names is not skipped for it (:meth:`lifting`).
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = list(patterns)
        # The usual shapes, "*.png", "node_modules/", "name", are looked up
        # by name (the walk asks about every entry); the rest go to RE2.
        self._suffixes: set[str] = set()
        self._dir_names: set[str] = set()
        self._names: set[str] = set()
        rest: list[str] = []
        for pattern in self.patterns:
            if _SUFFIX.match(pattern):
                self._suffixes.add(pattern[1:].lower())
            elif _DIR_NAME.match(pattern):
                self._dir_names.add(pattern[:-1].lower())
            elif _NAME.match(pattern):
                self._names.add(pattern.lower())
            else:
                rest.append(pattern)
        self._all = _compile(rest, ignore_case=True) if rest else None
        self._each_rules: list[Rules] | None = None

    @staticmethod
    @functools.lru_cache(maxsize=32)
    def of(patterns: tuple[str, ...]) -> Excludes:
        """The excludes for ``patterns``, compiled once per distinct list."""
        return Excludes(patterns)

    @property
    def _each(self) -> list[Rules]:
        # One rule set per pattern, to tell which ones a path falls under;
        # built only for requests that name something.
        if self._each_rules is None:
            self._each_rules = [_compile([p], ignore_case=True) for p in self.patterns]
        return self._each_rules

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` itself (not merely a parent) is excluded."""
        return self.matches_name(rel.rpartition("/")[2], rel, is_dir)

    def matches_name(self, name: str, rel: str, is_dir: bool) -> bool:
        """:meth:`matches`, for a walk that has ``rel``'s last part at hand."""
        name = name.lower()
        if name in self._names or (is_dir and name in self._dir_names):
            return True
        suffixes = self._suffixes
        if suffixes:
            # Every suffix starts with ".": the name ends with one exactly when
            # what follows one of its dots is one (a set lookup per dot, not
            # a comparison per suffix).
            dot = name.find(".")
            while dot != -1:
                if name[dot:] in suffixes:
                    return True
                dot = name.find(".", dot + 1)
        return self._all is not None and self._all.verdict(rel, is_dir) is True

    def under(self, rel: str, is_dir: bool) -> set[int]:
        """The patterns that exclude ``rel`` or one of its parents."""
        parts = rel.split("/")
        found: set[int] = set()
        for n, rules in enumerate(self._each):
            for depth in range(1, len(parts) + 1):
                last = depth == len(parts)
                if rules.verdict("/".join(parts[:depth]), is_dir or not last) is True:
                    found.add(n)
                    break
        return found

    def named_by(self, text: str, *, is_dir: bool = False) -> set[int]:
        """The patterns a request's path or glob ``text`` names (see the class)."""
        found: set[int] = set()
        for expanded in _expand_braces(text.strip("/") or "."):
            found |= self.under(expanded, is_dir)
        return found

    def without(self, lifted: Set[int]) -> Excludes:
        return Excludes.of(tuple(p for n, p in enumerate(self.patterns) if n not in lifted))


_SUFFIX = re.compile(r"\*\.[A-Za-z0-9_+~-]+(\.[A-Za-z0-9_+~-]+)*\Z")
_DIR_NAME = re.compile(r"[A-Za-z0-9_+~-][A-Za-z0-9_.+~-]*/\Z")
_NAME = re.compile(r"[A-Za-z0-9_+~-][A-Za-z0-9_.+~-]*\Z")


def _expand_braces(text: str) -> list[str]:
    import bracex  # wcmatch's own brace expander

    try:
        return list(bracex.expand(text, limit=256))
    except Exception:  # too many alternatives, or unbalanced: judge the text as written
        return [text]


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

    def __init__(self, *, ignore_case: bool = False) -> None:
        self._ignore_case = ignore_case
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

    def scan(self) -> LineScan | None:
        """All these rules as one :class:`LineScan` (paths, and directories with a slash)."""
        return line_scanner(tuple(self._any_sources + self._dir_sources), self._ignore_case)

    def freeze(self) -> Rules:
        self._any = RegexSet(self._any_sources, ignore_case=self._ignore_case)
        self._dirs = RegexSet(self._dir_sources, ignore_case=self._ignore_case)
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


def _compile(lines: list[str], *, ignore_case: bool = False) -> Rules:
    rules = Rules(ignore_case=ignore_case)
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
