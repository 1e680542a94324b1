"""Writing files: atomically, through the sandbox's symlink-safe path.

:func:`atomic_write` writes a temporary file in the target's own directory
(reached by descriptor, never by name), keeps the original's permission
bits (a new file gets the umask's), fsyncs it, renames it over the target
and fsyncs the directory: after a crash the file is either wholly old or
wholly new.  Just before the rename it checks the call's cancel flag, so a
call that timed out or was cancelled never lands late.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading

from .. import errors
from .paths import SafePath, Sandbox, os_failure

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_EFFECTIVE_IDS = os.access in os.supports_effective_ids


def _cancelled_before_commit(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise errors.cancelled()


def read_bytes(sandbox: Sandbox, sp: SafePath, limit: int | None = None) -> bytes:
    """The whole content of an existing regular file, opened symlink-safely.

    With ``limit``, a larger file is an error before anything is read.
    """
    fd = sandbox.open_regular(sp)
    with os.fdopen(fd, "rb") as fh:
        if limit is not None:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise errors.file_error(
                    f"{sp.display} is {size} bytes; files over {limit} bytes are not edited",
                    sp.display,
                    recovery=["Leave this file to the user, or change a smaller file"],
                )
            data = fh.read(limit + 1)
            if len(data) > limit:
                raise errors.file_error(
                    f"{sp.display} grew past {limit} bytes while being read",
                    sp.display,
                    recovery=["Try again once the file stops changing"],
                )
            return data
        return fh.read()


def ensure_parents(sandbox: Sandbox, sp: SafePath) -> None:
    """Create the missing directories above ``sp``, each by descriptor, no symlinks."""
    fd = os.open(sp.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        for part in sp.parts[:-1]:
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise os_failure(sp, exc) from None
            try:
                nfd = os.open(
                    part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                raise os_failure(sp, exc) from None
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def atomic_write(
    sandbox: Sandbox,
    sp: SafePath,
    data: bytes,
    *,
    cancel: threading.Event | None = None,
) -> None:
    """Replace (or create) ``sp`` with ``data`` so readers see old or new, never half."""
    if not sp.parts:
        raise errors.bad_args("Cannot write to the project root itself")
    with sandbox.open_parent(sp) as (dir_fd, name):
        assert name is not None
        mode = None
        owner = None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise os_failure(sp, exc) from None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise errors.file_error(
                    f"{sp.display} is a directory, not a file",
                    sp.display,
                    recovery=["Choose a file path; list_files shows the directory's contents"],
                )
            if sp.ident is not None and (st.st_dev, st.st_ino) != sp.ident:
                raise errors.file_error(
                    f"{sp.display} was replaced while the call ran; nothing was written",
                    sp.display,
                    recovery=["Read the file again, then repeat the change"],
                )
            # A rename needs only a writable directory: check the file itself,
            # as an editor saving in place would.
            if not os.access(name, os.W_OK, dir_fd=dir_fd, effective_ids=_EFFECTIVE_IDS):
                if os.fstatvfs(dir_fd).f_flag & getattr(os, "ST_RDONLY", 1):
                    raise os_failure(sp, OSError(errno.EROFS, "Read-only file system"))
                raise errors.file_error(
                    f"Permission denied: {sp.display} is read-only",
                    sp.display,
                    recovery=["Leave this file alone, or ask the user to make it writable"],
                )
            if st.st_nlink > 1:
                raise errors.file_error(
                    f"{sp.display} has {st.st_nlink} hard links; replacing it would split them",
                    sp.display,
                    recovery=["Ask the user to change this file; it is shared with other paths"],
                )
            mode = stat.S_IMODE(st.st_mode)
            owner = (st.st_uid, st.st_gid)
        tmp = f".{name}.forj-{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                0o666,  # the umask applies, as for any new file
                dir_fd=dir_fd,
            )
        except OSError as exc:
            raise os_failure(sp, exc) from None
        committed = False
        try:
            try:
                if owner is not None and owner != (os.geteuid(), os.getegid()):
                    with contextlib.suppress(OSError):  # only root may give files away
                        os.fchown(fd, *owner)
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            _cancelled_before_commit(cancel)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            committed = True
            with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
                os.fsync(dir_fd)
        except OSError as exc:
            raise os_failure(sp, exc) from None
        finally:
            if not committed:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
