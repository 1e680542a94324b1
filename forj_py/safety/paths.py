"""Keeping every path the model names inside the project, and the I/O honest.

:meth:`Sandbox.resolve` is seed 000's path validation (FR-VAL-04), in its
seven steps: reject absolute paths unless allowed, reject any ``..``,
resolve against the working directory, canonicalize (symlinks resolved;
for a path that does not exist yet, its deepest existing ancestor),
rebuild the target under that ancestor, require it inside an allowed root,
then refuse it if a denied pattern matches.  Its result, :class:`SafePath`,
is what every later I/O uses (FR-VAL-04a).

Validation alone leaves a window: between the check and the ``open`` a
directory on the path could be swapped for a symlink.  :meth:`Sandbox.open`
closes it by walking from the root's file descriptor one component at a
time with ``O_NOFOLLOW`` (so no symlink is ever followed during the walk;
the canonical path has none by construction), then checking that the file
opened is the one validated (same device and inode).  That is Linux's and
macOS's behaviour; where ``O_NOFOLLOW``/``dir_fd`` are missing (Windows) it
falls back to re-validating just before the open and comparing identities
after it, which narrows the window but cannot close it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import errors
from ..errors import ToolFailure
from ..patterns import PatternTooComplex, RegexSet, gitignore_regexes
from ..protocol import DenialReason, ErrorKind, ErrorType

DEFAULT_DENIES = (
    "**/.ssh/**",
    "**/.gnupg/**",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/*.pem",
    "**/*.key",
    "**/.env",
    "**/.env.*",
    "**/.netrc",
    "**/.git-credentials",
    "**/.aws/**",
    # Editor backups (name~) and auto-saves (#name#) of the files above.
    "**/.env~",
    "**/#.env#",
    "**/#.env.*#",
    "**/*.pem~",
    "**/#*.pem#",
    "**/*.key~",
    "**/#*.key#",
    "**/#id_*#",
    "**/.netrc~",
    "**/#.netrc#",
    "**/.git-credentials~",
    "**/#.git-credentials#",
)

MAX_PATH_CHARS = 4096
MAX_PATH_COMPONENTS = 64

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
FD_WALK = bool(_O_NOFOLLOW and _O_DIRECTORY and os.open in os.supports_dir_fd)


@dataclass(frozen=True)
class SafePath:
    """A validated path: where it is, which root holds it, what the model calls it."""

    canonical: str  # absolute, symlinks resolved
    root: str  # the allowed root containing it (canonical)
    rel: str  # relative to ``root``, forward slashes; "." for the root itself
    display: str  # relative to the project root where possible: what results show
    ident: tuple[int, int] | None  # (st_dev, st_ino) at validation; None if absent

    @property
    def exists(self) -> bool:
        return self.ident is not None

    @property
    def parts(self) -> list[str]:
        return [] if self.rel == "." else self.rel.split("/")


def _violation(
    message: str, reason: DenialReason, recovery: list[str], **details: object
) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.SANDBOX_VIOLATION,
        reason=reason.value,
        recovery=recovery,
        **details,
    )


class Sandbox:
    """Path validation and symlink-safe I/O for one project."""

    def __init__(
        self,
        project_root: str | Path,
        allowed_roots: list[str] | None = None,
        denied_patterns: list[str] | None = None,
        *,
        allow_absolute: bool = False,
        include_default_denies: bool = True,
    ) -> None:
        self.project_root = os.path.realpath(project_root)
        if not os.path.isdir(self.project_root):
            raise ValueError(f"project root {project_root} is not a directory")
        roots = []
        for entry in allowed_roots or ["."]:
            expanded = os.path.expanduser(entry)
            roots.append(os.path.realpath(os.path.join(self.project_root, expanded)))
        # Longest first, so a path inside nested roots is attributed to the innermost.
        self.allowed_roots = sorted(dict.fromkeys(roots), key=len, reverse=True)
        self.allow_absolute = allow_absolute
        self._single_root = self.allowed_roots == [self.project_root]
        patterns = list(DEFAULT_DENIES if include_default_denies else ()) + list(
            denied_patterns or []
        )
        negated = [p for p in patterns if p.lstrip().startswith("!")]
        if negated:
            # A "!pattern" would un-deny what another pattern denies; lists that
            # are merged from several files must only ever add denials.
            raise ValueError(f"denied patterns cannot be negated: {negated}")
        self.denied_patterns = patterns
        # Every path of every call is checked against every pattern: on RE2,
        # in time linear in the path whatever a project's patterns hold
        # (see forj_py.patterns).  Case-insensitive: on macOS, Windows and
        # casefolded volumes ".ENV" is ".env"; elsewhere denying both
        # spellings costs nothing.
        sources: list[str] = []
        owners: list[str] = []
        for pattern in patterns:
            try:
                compiled = gitignore_regexes(pattern)
            except PatternTooComplex:
                raise
            except ValueError as exc:
                raise ValueError(
                    f"{pattern!r} is not a valid gitignore-style pattern: {exc}"
                ) from None
            for source, _ in compiled:
                sources.append(source)
                owners.append(pattern)
        self._denied = RegexSet(sources, ignore_case=True)
        self._denied_owner = owners

    # --- validation (FR-VAL-04) ----------------------------------------------

    def resolve(self, path: str, base: str | None = None, *, for_write: bool = False) -> SafePath:
        """Validate ``path`` (relative to ``base``, default the project root).

        ``for_write`` also applies the write-only denials: ``.git`` (its hooks
        and config run code outside the sandbox) and ``.forj`` (the project's
        own policy) are never written on the model's behalf.
        """
        _check_text(path)
        # Step 1: absolute paths only when the user allowed them.
        if os.path.isabs(path) and not self.allow_absolute:
            raise _violation(
                f"Absolute path {path!r} is not allowed; paths are relative to the project root",
                DenialReason.PATH_OUTSIDE_SANDBOX,
                ["Use a path relative to the project root, e.g. 'src/main.py'"],
                attempted=path,
            )
        # Step 2: no lexical traversal, whatever it would resolve to.
        if ".." in path.replace("\\", "/").split("/"):
            raise _violation(
                f"Path {path!r} contains '..'; paths may not climb out of their directory",
                DenialReason.PATH_OUTSIDE_SANDBOX,
                ["Name the file by its path from the project root, without '..'"],
                attempted=path,
            )
        # Steps 3-5: join with the base, canonicalize the deepest existing
        # ancestor and rebuild the rest under it.  realpath does exactly this,
        # and also follows a dangling final symlink to where it would point,
        # which is what a later create would reach.
        joined = os.path.join(base or self.project_root, path)
        canonical = os.path.realpath(joined)
        # Step 6: containment.
        root = self._containing_root(canonical)
        if root is None:
            raise _violation(
                f"Path {path!r} resolves outside the project (to {canonical})",
                DenialReason.PATH_OUTSIDE_SANDBOX,
                [
                    "Only files inside the project root can be used",
                    "If a symlink led outside, use the file's real location inside the project",
                ],
                attempted=path,
                resolved=canonical,
            )
        rel = "." if canonical == root else canonical[len(root.rstrip(os.sep)) + 1 :]
        if os.sep != "/":  # pragma: no cover - Windows
            rel = rel.replace(os.sep, "/")
        # Step 7: denied patterns, on the canonical path relative to its root
        # and to the project root (an extra nested root must not move where
        # the user's anchored patterns apply), and on the path as written, so
        # a symlink named .env cannot hide what it is.
        candidates = [rel, self.display(canonical)]
        if not os.path.isabs(path):
            candidates.append(os.path.normpath(path).replace(os.sep, "/"))
        try:
            kind: bool | None = stat.S_ISDIR(os.stat(canonical).st_mode)
        except OSError:
            kind = None  # does not exist (yet): could become either
        pattern = next(
            (p for c in candidates if (p := self.denied_pattern(c, kind)) is not None), None
        )
        if pattern is None and for_write:
            pattern = next(
                (p for c in candidates if (p := _write_denied(self.display(canonical), c))), None
            )
            if pattern is not None:
                raise _violation(
                    f"Writing {path!r} is not allowed ({pattern} holds repository or forj "
                    "settings that could run code or loosen the user's policy)",
                    DenialReason.DENIED_PATTERN_MATCHED,
                    [
                        "Do not change version-control internals or forj's own configuration",
                        "Ask the user to make this change themselves if it is needed",
                    ],
                    attempted=path,
                    pattern=pattern,
                )
        if pattern is not None:
            raise _violation(
                f"Access to {path!r} is denied by the pattern {pattern!r} (secrets are off limits)",
                DenialReason.DENIED_PATTERN_MATCHED,
                [
                    "Do not try to read or change credential files",
                    "If the user needs this file, ask them to handle it themselves",
                ],
                attempted=path,
                pattern=pattern,
            )
        try:
            st = os.stat(canonical)
            ident: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            ident = None
        return SafePath(canonical, root, rel, self.display(canonical), ident)

    def _containing_root(self, canonical: str) -> str | None:
        for root in self.allowed_roots:
            if canonical == root or canonical.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    def denied_pattern(self, rel: str, is_dir: bool | None = None) -> str | None:
        """The first denied pattern matching ``rel``.

        A directory (or a path that may be one: ``is_dir`` None) is also
        tried as ``rel/``, so "**/.ssh/**" denies the directory itself.
        """
        if rel in ("", "."):
            return None
        forms = (rel,) if is_dir is False else (rel, rel + "/")
        found = [i for form in forms for i in self._denied.matching(form)]
        return self._denied_owner[min(found)] if found else None

    def denied_inside(self, project_rel: str, is_dir: bool | None = None) -> str | None:
        """The denied pattern matching a project-relative path, checked as resolve does.

        Relative to the project root and to the allowed root that holds it,
        without regard to case: what listing and searching use, so they never
        show what ``read_file`` would refuse.
        """
        pattern = self.denied_pattern(project_rel, is_dir)
        if pattern is not None or self._single_root:
            return pattern
        canonical = os.path.join(self.project_root, project_rel)
        root = self._containing_root(canonical)
        if root is None or root == self.project_root:
            return None
        return self.denied_pattern(canonical[len(root.rstrip(os.sep)) + 1 :], is_dir)

    def display(self, canonical: str) -> str:
        if canonical == self.project_root:
            return "."
        prefix = self.project_root.rstrip(os.sep) + os.sep
        if canonical.startswith(prefix):
            return canonical[len(prefix) :].replace(os.sep, "/")
        return canonical

    # --- symlink-safe I/O (FR-VAL-06) ------------------------------------------

    def open(self, sp: SafePath, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
        """Open ``sp`` without following any symlink; return a raw descriptor.

        Opening an existing file also checks it is the very file validated.
        The caller owns the descriptor.
        """
        if not FD_WALK:  # pragma: no cover - platforms without O_NOFOLLOW/dir_fd
            if os.path.realpath(sp.canonical) != sp.canonical:
                raise _changed(sp)
            fd = _open(sp, sp.canonical, flags | _O_CLOEXEC, mode)
        else:
            with self.open_parent(sp) as (dir_fd, name):
                if name is None:
                    fd = os.dup(dir_fd)
                else:
                    fd = _open(sp, name, flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=dir_fd)
        if sp.ident is not None and not (flags & os.O_CREAT and flags & os.O_EXCL):
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != sp.ident:
                os.close(fd)
                raise _changed(sp)
        return fd

    @contextmanager
    def open_parent(self, sp: SafePath) -> Iterator[tuple[int, str | None]]:
        """Yield (descriptor of ``sp``'s directory, final name) reached without symlinks.

        For the root itself the name is None and the descriptor is the root's.
        """
        fd = _open(sp, sp.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            parts = sp.parts
            for part in parts[:-1]:
                nfd = _open(
                    sp, part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd
                )
                os.close(fd)
                fd = nfd
            yield fd, (parts[-1] if parts else None)
        finally:
            os.close(fd)

    def open_regular(self, sp: SafePath) -> int:
        """Open an existing regular file for reading; refuse FIFOs, devices, directories."""
        if sp.ident is None:
            raise errors.file_error(
                f"File not found: {sp.display}",
                sp.display,
                recovery=[
                    "Check the path; list_files or glob show what exists",
                    "Paths are relative to the project root",
                ],
            )
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = self.open(sp, os.O_RDONLY | _O_NONBLOCK)
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise errors.file_error(
                f"{sp.display} is a directory, not a file",
                sp.display,
                recovery=["Use list_files to see what the directory holds"],
            )
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise errors.file_error(
                f"{sp.display} is not a regular file",
                sp.display,
                recovery=["Only regular files can be read; skip this one"],
            )
        return fd


WRITE_DENIES = (".git", ".forj")


def _write_denied(display: str, candidate: str) -> str | None:
    """The protected directory ``candidate`` lies in, if any."""
    for text in (display, candidate):
        parts = text.lower().split("/")
        for name in WRITE_DENIES:
            if name in parts:
                return name + "/"
    return None


def _check_text(path: object) -> None:
    if not isinstance(path, str):
        raise errors.bad_args("Path must be a string")
    if path == "":
        raise errors.bad_args(
            "Path is empty", recovery=["Pass a path relative to the project root"]
        )
    if "\x00" in path:
        raise errors.bad_args(
            "Path contains a NUL byte", recovery=["Remove the NUL character from the path"]
        )
    if len(path) > MAX_PATH_CHARS:
        raise errors.bad_args(f"Path is longer than {MAX_PATH_CHARS} characters")
    if path.count("/") + path.count("\\") >= MAX_PATH_COMPONENTS:
        # Also what keeps gitignore-style matching of denied patterns fast.
        raise errors.bad_args(f"Path has more than {MAX_PATH_COMPONENTS} components")
    try:
        os.fsencode(path)
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.bad_args(
            "Path is not valid Unicode text (it holds an unpaired surrogate)",
            recovery=["Use the path exactly as list_files or glob printed it"],
        ) from None


def _changed(sp: SafePath) -> ToolFailure:
    return _violation(
        f"{sp.display} changed while it was being opened (a symlink or another file "
        "took its place); nothing was done",
        DenialReason.PATH_OUTSIDE_SANDBOX,
        ["Call the tool again; if this repeats, something is rewriting the project"],
        attempted=sp.display,
    )


def _open(sp: SafePath, path: str, flags: int, mode: int = 0o666, dir_fd: int | None = None) -> int:
    """``os.open`` for ``sp``, with its errors mapped to tool failures."""
    try:
        return os.open(path, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise os_failure(sp, exc) from None


def os_failure(sp: SafePath, exc: OSError) -> ToolFailure:
    """A file-system error on ``sp`` as a tool failure with next steps."""
    code = exc.errno
    if code in (errno.ELOOP, errno.EMLINK) or (code == errno.ENOTDIR and sp.exists):
        return _changed(sp)
    if code == errno.ENOENT:
        return errors.file_error(
            f"File not found: {sp.display}",
            sp.display,
            recovery=["Check the path; list_files or glob show what exists"],
        )
    if code in (errno.EACCES, errno.EPERM):
        return errors.file_error(
            f"Permission denied: {sp.display}",
            sp.display,
            recovery=["Check file permissions", "Try a different file"],
        )
    if code == errno.EISDIR:
        return errors.file_error(
            f"{sp.display} is a directory, not a file",
            sp.display,
            recovery=["Use list_files to see what the directory holds"],
        )
    if code == errno.ENOTDIR:
        return errors.file_error(
            f"A parent of {sp.display} is not a directory",
            sp.display,
            recovery=["Check the path; one of its parents is a file"],
        )
    if code == errno.ENOSPC:
        return errors.file_error(
            f"No space left on the device writing {sp.display}",
            sp.display,
            recovery=["Tell the user the disk is full; nothing was changed"],
        )
    if code == errno.EROFS:
        return errors.file_error(
            f"{sp.display} is on a read-only file system",
            sp.display,
            recovery=["This file cannot be changed here; tell the user"],
        )
    return errors.file_error(
        f"{exc.strerror or 'I/O error'}: {sp.display}",
        sp.display,
        recovery=["Try again; if it repeats, tell the user"],
        errno=code,
    )
