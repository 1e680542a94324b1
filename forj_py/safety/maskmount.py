"""Masking many denied files at once, without bubblewrap's per-mount cost.

Two ways, the first where it works (probed once): from outside
(:func:`mask_from_outside`: a fork of the worker joins the sandbox's
namespaces while bubblewrap, its own mounts made, waits on its block
descriptor; nothing of the command has started), else by a helper run as
the sandbox's first process (below).

bubblewrap reads the whole mount table again after each mount it makes,
so masking N files one ``--ro-bind`` at a time costs the square of N: a
thousand secrets scattered among other files took seconds per command.
From :data:`HELPER_FROM` masks on, the masks are made instead by a small
program run as the sandbox's first process: the worker's own Python
interpreter, isolated (``-I -S``: no environment variable, no ``site``, no
current directory on its path), with ``CAP_SYS_ADMIN`` and ``CAP_SETPCAP``
kept in the sandbox's user namespace for the purpose.  It makes each mask
with direct ``mount`` calls (a bind of ``/dev/null`` made read-only, or a
read-only empty tmpfs for a directory), then drops every capability
(bounding set, ambient set, then its own), sets ``no_new_privs``, checks in
``/proc/self/status`` that nothing is left, and only then executes the
command in its place.  Any failure before that ends the run with a
``bwrap:`` message, as bubblewrap's own setup failures do: the command
never runs with a mask missing.

The interpreter is used only where a command cannot have changed it (read-
only in the sandbox, outside every writable path), and the variables the
dynamic loader obeys (``LD_PRELOAD``, ...) are taken out of the helper's
environment and given back to the command, so no code of the command's
choosing runs while the capabilities are held.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

# From this many mask mounts on, the helper makes them: its start (an
# interpreter's, ~20 ms on a quiet machine) is then less than what
# bubblewrap spends on this many mounts (~0.3 ms each at this count, more
# for each one after).
HELPER_FROM = 64

# Variables the dynamic loader and C library act on at a program's start:
# taken out of the helper's environment (and restored for the command).
LOADER_NAMES = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_ARENA_MAX",
        "MALLOC_ARENA_TEST",
        "MALLOC_PERTURB_",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
    }
)

# Run as ``python -I -S -c HELPER [NAME=VALUE ...] -- MASK ... -- COMMAND ...``.
HELPER = r"""
import ctypes, errno, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
text = ctypes.c_char_p
libc.mount.argtypes = (text, text, text, ctypes.c_ulong, text)
RDONLY, NOSUID, NODEV, REMOUNT, BIND = 1, 2, 4, 32, 4096
KEEP = 1 | 2 | 4 | 8 | 1024 | 2048 | 4096

def die(text):
    os.write(2, b"bwrap: " + text.encode("utf-8", "surrogateescape") + b"\n")
    os._exit(1)

def mount(src, where, kind, flags, data, path):
    if libc.mount(src, where.encode(), kind, flags, data) != 0:
        die("cannot mask %s: %s" % (path, os.strerror(ctypes.get_errno())))

args = sys.argv[1:]
first = args.index("--")
second = args.index("--", first + 1)
restore, masks, command = args[:first], args[first + 1:second], args[second + 1:]
null = os.stat("/dev/null")
# The first file's mask, read-only: each later one is a bind of it, which
# keeps its flags (one mount call each).
template = None
for path in masks:
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        continue
    except OSError as exc:
        die("cannot mask %s: %s" % (path, exc.strerror))
    mode = os.fstat(fd).st_mode
    where = "/proc/self/fd/%d" % fd
    if stat.S_ISLNK(mode):
        pass
    elif stat.S_ISDIR(mode):
        mount(b"tmpfs", where, b"tmpfs", RDONLY | NOSUID | NODEV, b"mode=0755,size=4k", path)
    elif template is not None:
        mount(template, where, None, BIND, None, path)
    else:
        mount(b"/dev/null", where, None, BIND, None, path)
        top = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        st = os.fstat(top)
        if (st.st_dev, st.st_ino) != (null.st_dev, null.st_ino):
            die("cannot mask %s: it moved while being masked" % path)
        where = "/proc/self/fd/%d" % top
        flags = os.statvfs(where).f_flag & KEEP
        mount(None, where, None, BIND | REMOUNT | flags | RDONLY | NOSUID | NODEV, None, path)
        template = where.encode()
    os.close(fd)
for cap in range(64):
    if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
        die("cannot drop capability %d: %s" % (cap, os.strerror(ctypes.get_errno())))
if libc.prctl(47, 4, 0, 0, 0) != 0:
    die("cannot clear the ambient capabilities")
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]
if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
    die("cannot drop capabilities: %s" % os.strerror(ctypes.get_errno()))
if libc.prctl(38, 1, 0, 0, 0) != 0:
    die("cannot set no_new_privs")
with open("/proc/self/status") as fh:
    for line in fh:
        kind = line.split(":")[0]
        if kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") and int(line.split()[1], 16):
            die("capabilities left after dropping them: " + line.strip())
for item in restore:
    name, _, value = item.partition("=")
    os.environ[name] = value
try:
    os.execvp(command[0], command)
except OSError as exc:
    die("execvp %s: %s" % (command[0], exc.strerror))
"""


def interpreter() -> str:
    """The Python the helper runs on: the worker's own, links resolved."""
    return os.path.realpath(sys.executable)


def loader_names(env: Mapping[str, str]) -> list[str]:
    """Names in ``env`` the dynamic loader or the C library act on at start."""
    return sorted(n for n in env if n.startswith("LD_") or n in LOADER_NAMES)


def command(
    python: str, env: Mapping[str, str], masks: list[str], argv: list[str]
) -> tuple[list[str], list[str]]:
    """(bubblewrap options, the command line) that run ``argv`` after the helper masked ``masks``.

    The options keep the two capabilities the helper needs.  bubblewrap
    itself is started without the loader's variables (see
    :meth:`~forj_py.safety.commands.CommandSandbox.launch_env`); the
    command line gives those of ``env`` to the command alone.
    """
    options = ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
    restore = [f"{name}={env[name]}" for name in loader_names(env)]
    return options, [python, "-I", "-S", "-c", HELPER, *restore, "--", *masks, "--", *argv]


_works: dict[str, bool] = {}
_works_lock = threading.Lock()


def works(bwrap: str, base: list[str]) -> bool:
    """Whether this bubblewrap lets the helper mask a file (asked once per process).

    ``base``: bubblewrap options that give a working sandbox (system
    directories, ``/proc``, ``/dev``).  A bubblewrap that refuses
    ``--cap-add`` (installed setuid, no user namespaces) leaves the masks to
    bubblewrap itself.
    """
    python = interpreter()
    with _works_lock:
        known = _works.get(python)
        if known is not None:
            return known
        with tempfile.TemporaryDirectory(prefix="forj-maskprobe-") as tmp:
            secret = os.path.join(tmp, "secret")
            with open(secret, "w") as fh:
                fh.write("probe-secret\n")
            # The masked file reads as nothing (a device node on a nodev
            # mount cannot be opened, as with bubblewrap's own masks); "ran"
            # says the command started after the helper.
            probe = ["sh", "-c", 'cat "$1" 2>/dev/null; echo ran', "sh", secret]
            options, cmd = command(python, {}, [secret], probe)
            try:
                done = subprocess.run(
                    [bwrap, *base, *options, "--bind", tmp, tmp, "--", *cmd],
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
                ok = done.returncode == 0 and done.stdout == b"ran\n"
                if not ok:
                    log.info(
                        "masks are made by bubblewrap itself: the helper failed (%s)",
                        done.stderr.decode("utf-8", "replace").strip()[:300],
                    )
            except (OSError, subprocess.SubprocessError) as exc:
                log.info("masks are made by bubblewrap itself: %s", exc)
                ok = False
        _works[python] = ok
        return ok


# --- masks made from outside, through the sandbox's namespaces -------------------------


def _ppid(proc_fd: int | None, pid: int | None) -> int:
    """The parent pid in a ``/proc/<pid>/status`` (by descriptor, or by pid)."""
    where = (
        os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
        if pid is None
        else (os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC))
    )
    with os.fdopen(where, "rb") as fh:
        for line in fh:
            if line.startswith(b"PPid:"):
                return int(line.split()[1])
    raise OSError(0, "no parent")


_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 32, 4096
_KEEP = 1 | 2 | 4 | 8 | 1024 | 2048 | 4096


def mask_from_outside(
    init: int,
    paths: list[str],
    fork: Callable[[], int] = os.fork,
    forget: Callable[[int], None] = lambda pid: None,
    parent: int | None = None,
) -> str | None:
    """Make the masks for ``paths`` in the sandbox whose first process is ``init``,
    while bubblewrap waits on its block descriptor (its own mounts made, the command
    not started); None, or why it failed.

    A fork of the worker joins the sandbox's user and mount namespaces
    (``setns``: its owner's processes have every capability in the user
    namespace bubblewrap made), takes the sandbox's root as its own and
    makes each mask as the in-sandbox helper does, without an
    interpreter's start.  Nothing of the command runs before it is done.

    ``init`` is trusted only while it is what it should be: a child of
    ``parent`` (the bubblewrap that reported it; without ``parent``, a
    grandchild of this process), in a mount namespace other than this
    process's.  Its namespaces are opened through one descriptor of its
    ``/proc`` directory, which fails once that process is gone: a pid
    reused meanwhile is never joined.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    mount = libc.mount
    mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_char_p)
    targets = [os.fsencode(p) for p in paths]
    user_fd = mnt_fd = root_fd = -1
    try:
        own_user = os.stat("/proc/self/ns/user").st_ino
        own_mnt = os.stat("/proc/self/ns/mnt").st_ino
        proc_fd = os.open(f"/proc/{init}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            user_fd = os.open("ns/user", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
            mnt_fd = os.open("ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
            root_fd = os.open("root", os.O_PATH | os.O_CLOEXEC, dir_fd=proc_fd)
            # Read after the opens, through the same descriptor: the same process.
            ppid = _ppid(proc_fd, None)
        finally:
            os.close(proc_fd)
        expected = parent
        if expected is None:
            expected = ppid if _ppid(None, ppid) == os.getpid() else -1
    except OSError as exc:
        for fd in (user_fd, mnt_fd, root_fd):
            if fd >= 0:
                os.close(fd)
        return f"cannot reach the sandbox's namespaces: {exc.strerror}"
    if ppid != expected or os.fstat(mnt_fd).st_ino == own_mnt:
        for fd in (user_fd, mnt_fd, root_fd):
            os.close(fd)
        return f"process {init} is not a sandbox waiting to start (it ended, or its pid is reused)"
    join_user = os.fstat(user_fd).st_ino != own_user
    read_r, read_w = os.pipe()
    try:
        # ``fork``: one that keeps the child from a reaper of orphans.
        pid = fork()
        if pid == 0:  # the child: system calls only, then _exit
            code = 1
            try:
                os.close(read_r)
                fds = os.open(b"/proc/self/fd", os.O_PATH | os.O_DIRECTORY)
                if join_user and libc.setns(user_fd, _CLONE_NEWUSER) != 0:
                    raise OSError(ctypes.get_errno(), "setns user")
                if libc.setns(mnt_fd, _CLONE_NEWNS) != 0:
                    raise OSError(ctypes.get_errno(), "setns mount")
                os.fchdir(root_fd)
                os.chroot(".")
                template: bytes | None = None
                null = os.stat(b"/dev/null")
                for target in targets:
                    try:
                        fd = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                    except FileNotFoundError:
                        continue
                    mode = os.fstat(fd).st_mode
                    # Mount through the descriptor, named in this process's
                    # own /proc (the sandbox's /proc does not show it).
                    os.fchdir(fds)
                    where = b"%d" % fd
                    if stat.S_ISLNK(mode):
                        pass
                    elif stat.S_ISDIR(mode):
                        flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                        if mount(b"tmpfs", where, b"tmpfs", flags, b"mode=0755,size=4k") != 0:
                            raise OSError(ctypes.get_errno(), target.decode(errors="replace"))
                    elif template is not None:
                        if mount(template, where, None, _MS_BIND, None) != 0:
                            raise OSError(ctypes.get_errno(), target.decode(errors="replace"))
                    else:
                        if mount(b"/dev/null", where, None, _MS_BIND, None) != 0:
                            raise OSError(ctypes.get_errno(), target.decode(errors="replace"))
                        os.chdir(b"/")
                        top = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                        st = os.fstat(top)
                        if (st.st_dev, st.st_ino) != (null.st_dev, null.st_ino):
                            raise OSError(0, "moved while being masked")
                        os.fchdir(fds)
                        flags = os.statvfs(b"%d" % top).f_flag & _KEEP
                        flags |= _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                        if mount(None, b"%d" % top, None, flags, None) != 0:
                            raise OSError(ctypes.get_errno(), target.decode(errors="replace"))
                        # Later masks bind this one (named, like them, from
                        # this process's descriptor directory).
                        template = b"%d" % top
                    os.chdir(b"/")
                    os.close(fd)
                code = 0
            except BaseException as exc:
                with contextlib.suppress(BaseException):
                    os.write(read_w, f"{exc}".encode("utf-8", "replace")[:500])
            finally:
                os._exit(code)
        os.close(read_w)
        read_w = -1
        _, status = os.waitpid(pid, 0)
        forget(pid)
        why = os.read(read_r, 4096).decode("utf-8", "replace")
        if os.waitstatus_to_exitcode(status) != 0:
            return f"cannot make the masks: {why or 'the helper failed'}"
        return None
    finally:
        for fd in (read_r, read_w, user_fd, mnt_fd, root_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
