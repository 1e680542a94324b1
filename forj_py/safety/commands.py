"""The OS sandbox every ``run_shell`` and ``run_tests`` command runs in (bubblewrap).

A classifier of command lines cannot be made airtight, so commands are
confined by the kernel instead.  Each one runs under ``bwrap`` with:

- new PID, IPC, UTS, cgroup and (where possible) user namespaces: the
  worker, its ``/proc/<pid>/environ`` and every other process are
  invisible; when the command's first process exits, the namespace's init
  exits and the kernel kills whatever the command left behind;
- a new network namespace with only loopback, unless the call asked for
  network and the user allowed it;
- a filesystem built from nothing: the system directories (``/usr``,
  ``/bin``, ``/lib*``, ``/etc``, ``/opt``, ...) and the toolchains on
  ``PATH`` read-only, a private ``/tmp``, ``/var/tmp``, ``/dev/shm`` and an
  empty private ``$HOME``, the project read-write (read-only for commands
  that run unasked), and nothing else of the user's files.  The private
  directories are tmpfs, which live in memory, so each has a size cap
  (``[tools.shell] tmpfs_size_mib``, all together ``tmpfs_total_mib``):
  a command that fills them gets ENOSPC, and the host's memory, with
  Emacs in it, is not the out-of-memory killer's to reclaim.  The root and
  ``/dev`` (tmpfs too) are read-only;
- inside the project, every ``.git`` and ``.forj`` read-only (hooks and
  configuration are code), and so is every git directory a ``.git`` file
  or link names (a submodule's, a linked worktree's, any ``gitdir:``) and
  the common directory a git directory's ``commondir`` names, when it lies
  in the project or in a writable path (:func:`git_paths`,
  :meth:`CommandSandbox._git_binds`): the user's own git, run there
  later, would run the hooks and the configuration's programs a command
  planted.  The directories above each are bound onto themselves, so that
  none can be renamed and replaced by a planted one.  Each git
  directory's ``config`` is replaced by a copy with its credentials
  redacted, and every denied file (``.env``, keys, ``.ssh/``, the
  configured patterns) masked: an empty file or an empty read-only
  directory, whatever flags the command uses;
- ``--die-with-parent`` and a process cap (a ``pids`` cgroup where one can
  be made, else ``RLIMIT_NPROC``).

Which denied files exist is kept by :class:`MaskIndex` (one walk at start,
then the file watcher's events), so starting a command costs no walk.
Where there are many, they are made in one pass, from outside while
bubblewrap holds the sandbox, or by a helper inside it
(:mod:`forj_py.safety.maskmount`): bubblewrap's own cost grows with the
square of their number.  bubblewrap itself starts without the
variables the dynamic loader obeys (:meth:`CommandSandbox.launch_env`): it
runs unconfined, in the project.

Where bubblewrap is missing or cannot create namespaces, :func:`probe` says
why; commands then run unsandboxed and always go to review (see
``docs/security.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..output import redact, redact_url_credentials
from . import bwrap_probe, maskmount
from .paths import Sandbox

log = logging.getLogger(__name__)

# Read-only from the host, when they exist.  A symlink (merged /usr) is
# recreated as the same symlink inside.
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
)
# System files no command needs to read (root's own shell could).
HIDDEN_SYSTEM_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
HIDDEN_SYSTEM_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d")
# Version managers keep every version beside their shims directory.
SHIM_DIR_NAMES = ("shims",)
# One walk of the index stops after this many entries (logged): a project
# this large is masked as far as the walk reached.  Counted per walk, so
# the walks of new directories over a long session never use it up.
MAX_INDEXED_ENTRIES = 2_000_000

# From this many masked files in one directory with nothing else in it, the
# directory is masked instead (one mount instead of many).
GROUP_MASKS_FROM = 4

SandboxKind = Literal["bwrap", "none"]


@dataclass(frozen=True)
class Availability:
    """Whether commands are confined, and if not, why."""

    kind: SandboxKind
    reason: str = ""
    silenced: bool = False  # the user's own config said sandbox = "none"
    bwrap: str | None = None
    # Whether this bwrap caps a tmpfs's size (--size: bubblewrap 0.7 or
    # later, and not installed setuid).
    tmpfs_sizes: bool = True

    @property
    def sandboxed(self) -> bool:
        return self.kind == "bwrap"

    def wire(self) -> dict[str, object]:
        return {
            "commands": self.kind,
            "network": "off",
            "silenced": self.silenced,
            "reason": self.reason,
            "tmpfs_capped": self.sandboxed and self.tmpfs_sizes,
        }

    def warning(self) -> str | None:
        if self.sandboxed and not self.tmpfs_sizes:
            return (
                "This bubblewrap cannot cap the size of the sandbox's /tmp, /var/tmp, $HOME "
                "and /dev/shm (its --size option needs bubblewrap 0.7 or later, not "
                "installed setuid): a command can fill them until the host runs out of "
                "memory. Upgrade bubblewrap to have [tools.shell] tmpfs_size_mib applied."
            )
        if self.sandboxed or self.silenced:
            return None
        return (
            f"Commands run unsandboxed: {self.reason}. Every run_shell and run_tests call "
            "goes to review. Install bubblewrap (Debian/Ubuntu: apt install bubblewrap) "
            'to confine them, or set [tools.shell] sandbox = "none" in your own config '
            "to accept this."
        )


def probe(setting: str = "auto", started: bwrap_probe.Started | None = None) -> Availability:
    """Find bwrap and check that it can create the namespaces a command needs.

    ``started``: the probe already running since the worker began
    (:func:`forj_py.safety.bwrap_probe.start`); without it the probe runs now.
    """
    if setting == "none":
        return Availability("none", 'your config sets [tools.shell] sandbox = "none"', True)
    if not sys.platform.startswith("linux"):
        return Availability("none", f"bubblewrap needs Linux; this is {sys.platform}")
    path = started.path if started is not None else bwrap_probe.find()
    if path is None:
        return Availability("none", "bubblewrap (bwrap) is not installed")
    done = started.outcome() if started is not None else bwrap_probe.run(path)
    if done is None or isinstance(done, Exception):
        return Availability("none", f"bwrap could not be started: {done}")
    if done.returncode == 0:
        return Availability("bwrap", bwrap=path)
    # Perhaps only --size is refused (an old or setuid bwrap): the sandbox
    # still works, with tmpfs mounts it cannot cap (warned about).
    plain = bwrap_probe.run(path, sizes=False)
    if not isinstance(plain, Exception) and plain.returncode == 0:
        log.warning("bwrap refuses --size: the sandbox's tmpfs mounts are not capped")
        return Availability("bwrap", bwrap=path, tmpfs_sizes=False)
    why = done.stderr.decode("utf-8", "replace").strip().splitlines()
    first = why[-1] if why else f"exit {done.returncode}"
    return Availability("none", f"bwrap cannot create namespaces here ({first})")


# --- what is masked inside the project -----------------------------------------------


@dataclass
class Masks:
    """Project-relative paths: masked files and directories, read-only git/forj entries."""

    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)


class MaskIndex:
    """Which paths of the project a command must not read or change.

    Built by one walk (every directory, ignored ones included: a ``.env``
    under ``node_modules`` is still a secret; symlinks are not followed),
    then kept current from the watcher's change events.  A command waits for
    the first walk to finish.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.root = sandbox.project_root
        self._lock = threading.Lock()
        self._files: set[str] = set()
        self._dirs: set[str] = set()
        self._readonly: set[str] = set()
        self._ready = threading.Event()
        self.entries = 0
        # Set when the watcher cannot keep the index current: then every
        # command indexes the project again before it starts.
        self._unwatched = False
        # What current() last computed, and the index's generation then: any
        # change the watcher reports starts a new generation.
        self._generation = 0
        self._cached: tuple[int, Masks] | None = None
        # Waits until the watcher has told every change made before the call
        # (False: it could not say so in time).  A command must not start
        # with masks from before what the last one did (a directory holding
        # a secret renamed aside): where this cannot be known, the project
        # is indexed again for the command.  None: no watcher keeps this
        # index (its owner calls changed() itself).
        self.settle: Callable[[float], bool] | None = None

    def start(self) -> None:
        threading.Thread(target=self._build, name="forj-masks", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def unwatched(self) -> None:
        """The watcher stopped, or left directories unwatched: a secret written
        there would not reach the index, so each command walks the project first."""
        if not self._unwatched:
            log.warning(
                "the file watcher cannot follow the whole project; every command "
                "indexes denied files again before it starts"
            )
        self._unwatched = True

    def _build(self) -> None:
        try:
            files: set[str] = set()
            dirs: set[str] = set()
            readonly: set[str] = set()
            self._scan("", files, dirs, readonly)
            with self._lock:
                self._files |= files
                self._dirs |= dirs
                self._readonly |= readonly
                self._generation += 1
        except Exception:  # the index is needed; log, and masks still cover what it found
            log.exception("indexing denied files failed")
        finally:
            self._ready.set()

    def _scan(self, rel_dir: str, files: set[str], dirs: set[str], readonly: set[str]) -> None:
        stack = [rel_dir]
        seen = 0
        while stack:
            here = stack.pop()
            try:
                it = os.scandir(os.path.join(self.root, here) if here else self.root)
            except OSError:
                continue
            with it:
                for entry in it:
                    seen += 1
                    self.entries += 1
                    if seen > MAX_INDEXED_ENTRIES:
                        log.warning("more than %d entries; masks index stops", MAX_INDEXED_ENTRIES)
                        return
                    rel = f"{here}/{entry.name}" if here else entry.name
                    kind = self._classify(rel, entry)
                    if kind == "readonly":
                        # Read-only, and what it holds is judged too: a key
                        # kept in a nested repository's .git is still a key.
                        readonly.add(rel)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(rel)
                    elif kind == "dir" or (kind == "descend" and self._too_deep(rel)):
                        dirs.add(rel)
                    elif kind == "file":
                        files.add(rel)
                    elif kind == "descend":
                        stack.append(rel)

    def _classify(self, rel: str, entry: os.DirEntry[str] | None) -> str | None:
        try:
            if entry is not None:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            else:
                st = os.lstat(os.path.join(self.root, rel))
                is_link = stat.S_ISLNK(st.st_mode)
                is_dir = stat.S_ISDIR(st.st_mode)
        except OSError:
            return None
        name = rel.rsplit("/", 1)[-1]
        if is_link:
            # A link is not masked itself: what it points at inside the
            # project is masked under its own name, and outside the project
            # there is nothing to point at.  A .git link is kept: the git
            # directory it names is made read-only.
            return "readonly" if name == ".git" else None
        if name in (".git", ".forj"):
            return "readonly"
        try:
            denied = self.sandbox.denied_inside(_judgeable(rel), is_dir) is not None
        except Exception:  # a name no pattern can be asked about: masked, not shown
            log.warning("cannot judge %r against the denied patterns; masking it", rel)
            denied = True
        if denied:
            return "dir" if is_dir else "file"
        return "descend" if is_dir else None

    def _too_deep(self, rel: str) -> bool:
        """Whether what lies below directory ``rel`` may have paths too long to
        name: neither this index's walk nor bubblewrap's mounts could reach
        it, so the directory is masked whole (logged).  A command can still
        get there, one relative step at a time."""
        length = len(os.fsencode(self.root)) + 1 + len(os.fsencode(rel))
        if length + _NAME_MAX < _PATH_MAX:
            return False
        log.warning("%s is too deep to index for masks; masking it whole", rel)
        return True

    def changed(self, path: str) -> None:
        """A watcher event for ``path`` (absolute): added, modified or deleted."""
        if not path.startswith(self.root.rstrip(os.sep) + os.sep):
            return
        rel = path[len(self.root.rstrip(os.sep)) + 1 :].replace(os.sep, "/")
        kind = self._classify(rel, None)
        if kind == "descend" and self._too_deep(rel):
            kind = "dir"
        with self._lock:
            self._generation += 1
            for bucket in (self._files, self._dirs, self._readonly):
                bucket.discard(rel)
        if kind in ("descend", "readonly"):
            # A new directory: what it holds may have arrived before the
            # watch on it did.
            files: set[str] = set()
            dirs: set[str] = set()
            readonly: set[str] = set()
            if not os.path.islink(path):  # a .git link: what it names is not the project's
                self._scan(rel, files, dirs, readonly)
            if kind == "readonly":
                readonly.add(rel)
            with self._lock:
                self._generation += 1
                self._files |= files
                self._dirs |= dirs
                self._readonly |= readonly
            return
        with self._lock:
            self._generation += 1
            if kind == "file":
                self._files.add(rel)
            elif kind == "dir":
                self._dirs.add(rel)
            elif kind == "readonly":
                self._readonly.add(rel)

    def current(self) -> Masks:
        """What to mask now; entries that no longer exist as indexed are dropped.

        bwrap creates a missing mount point, which on the writable project
        would leave an empty file behind, so every entry is checked.  The
        answer is kept until the watcher reports a change (each command
        would otherwise check every entry again); an entry deleted since
        is the caller's to skip (:meth:`CommandSandbox.argv`).
        """
        full = self._unwatched
        if not full and self.settle is not None and not self.settle(SETTLE_SECONDS):
            log.info("the file watcher is behind; the project is indexed again for this command")
            full = True
        with self._lock:
            cached = self._cached
            generation = self._generation
        if cached is not None and cached[0] == generation and not full:
            return Masks(list(cached[1].files), list(cached[1].dirs), list(cached[1].readonly))
        out = self._compute(full)
        with self._lock:
            self._cached = (generation, out)
        return Masks(list(out.files), list(out.dirs), list(out.readonly))

    def _compute(self, rescan: bool) -> Masks:
        if rescan:
            files_now: set[str] = set()
            dirs_now: set[str] = set()
            readonly_now: set[str] = set()
            self.entries = 0
            self._scan("", files_now, dirs_now, readonly_now)
            with self._lock:
                self._files, self._dirs, self._readonly = files_now, dirs_now, readonly_now
        with self._lock:
            files, dirs, readonly = sorted(self._files), sorted(self._dirs), sorted(self._readonly)
        out = Masks()
        live = [rel for rel in files if _is(os.path.join(self.root, rel), stat.S_ISREG)]
        out.dirs = [rel for rel in dirs if _is(os.path.join(self.root, rel), stat.S_ISDIR)]
        # Each mount costs bubblewrap a pass over the mount table, so a
        # directory that holds nothing but masked files (a folder of test
        # keys) is masked whole, as one mount.
        by_parent: dict[str, list[str]] = {}
        for rel in live:
            by_parent.setdefault(rel.rpartition("/")[0], []).append(rel)
        masked = set(live) | set(out.dirs)
        for parent, members in by_parent.items():
            if parent and len(members) >= GROUP_MASKS_FROM and self._only(parent, masked):
                out.dirs.append(parent)
            else:
                out.files.extend(members)
        out.dirs.sort()
        for rel in readonly:
            full = os.path.join(self.root, rel)
            if _is(full, stat.S_ISDIR) or _is(full, stat.S_ISREG) or _is(full, stat.S_ISLNK):
                out.readonly.append(rel)
        return out

    def _only(self, parent: str, masked: set[str]) -> bool:
        """Whether every entry of ``parent`` is masked already."""
        try:
            with os.scandir(os.path.join(self.root, parent)) as it:
                return all(f"{parent}/{entry.name}" in masked for entry in it)
        except OSError:
            return False


# How long a command waits for the file watcher to tell what changed before it
# (a burst of thousands of files); past it the project is indexed again.
SETTLE_SECONDS = 2.0

# The longest path the system calls take, and the longest name (Linux).
_PATH_MAX = 4096
_NAME_MAX = 255


def _judgeable(rel: str) -> str:
    """``rel`` as the denied patterns can be asked about it.

    A name that is not UTF-8 (its bytes kept as surrogates) is judged with
    each such byte as U+FFFD: ``*.pem`` still matches ``caf\\xe9.pem``.
    """
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return rel


def _is(path: str, test: object) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return bool(test(mode))  # type: ignore[operator]


# --- building the bwrap command line ---------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One command's confinement."""

    cwd: str  # canonical, inside the project
    env: Mapping[str, str]  # the command's environment (PATH decides the toolchains)
    writable: bool = True  # the project read-write; False for commands that run unasked
    network: bool = False
    # Directories outside the project the worker made for this command
    # (a test runner's report directory): bound read-write.
    scratch: tuple[str, ...] = ()


class CommandSandbox:
    """Confines commands of one project: availability, masks, and the bwrap argv."""

    def __init__(
        self,
        sandbox: Sandbox,
        availability: Availability,
        *,
        read_paths: Iterable[str] = (),
        write_paths: Iterable[str] = (),
        max_processes: int = 512,
        state_dir: str | None = None,
        tmpfs_size_mib: int = 512,
        tmpfs_total_mib: int = 2048,
    ) -> None:
        self.sandbox = sandbox
        self.tmpfs_size_mib = tmpfs_size_mib
        self.tmpfs_total_mib = tmpfs_total_mib
        self.root = sandbox.project_root
        self.availability = availability
        self.read_paths = [os.path.realpath(os.path.expanduser(p)) for p in read_paths]
        self.write_paths = [os.path.realpath(os.path.expanduser(p)) for p in write_paths]
        self.max_processes = max_processes
        self.masks = MaskIndex(sandbox)
        self.home = os.path.expanduser("~")
        self._private = tempfile.mkdtemp(prefix="forj-sandbox-", dir=state_dir)
        os.chmod(self._private, 0o700)
        self._configs: dict[str, str] = {}
        self._start_lock = threading.Lock()
        self._started = False
        # Whether many masks are made from outside while bubblewrap waits
        # (mask_late): None until probed, by the layer that runs commands.
        self.outside_masks: bool | None = None
        self.last_base: list[str] = []

    @property
    def sandboxed(self) -> bool:
        return self.availability.sandboxed

    def start(self) -> None:
        """Begin indexing the masks (once); commands wait for the first walk."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        if self.sandboxed:
            self.masks.start()
        else:
            self.masks._ready.set()

    def close(self) -> None:
        shutil.rmtree(self._private, ignore_errors=True)

    def argv(
        self, request: Request, command: list[str], late: list[str] | None = None
    ) -> list[str]:
        """The bwrap command line running ``command`` confined; ``--`` ends the options.

        ``late``: given by a caller that runs the command line through
        :func:`forj_py.system.process.run` and can make masks once the
        sandbox is set up (:meth:`mask_late`); many masks are then left out
        of the command line and added to it.
        """
        assert self.availability.bwrap is not None
        self.start()
        self.masks.wait()
        args: list[str] = [self.availability.bwrap, "--unshare-all"]
        if request.network:
            args.append("--share-net")
        args += ["--die-with-parent", "--cap-drop", "ALL"]
        caps_at = len(args)
        bound: list[str] = []

        def ro(path: str) -> None:
            if not os.path.exists(path) or _covered(path, bound):
                return
            if os.path.islink(path):
                args.extend(["--symlink", os.readlink(path), path])
            else:
                args.extend(["--ro-bind", path, path])
            bound.append(path)

        for path in SYSTEM_DIRS:
            ro(path)
        for path in HIDDEN_SYSTEM_FILES:
            if os.path.isfile(path):
                args.extend(["--ro-bind", "/dev/null", path])
        for path in HIDDEN_SYSTEM_DIRS:
            if os.path.isdir(path) and not os.path.islink(path):
                args.extend(["--tmpfs", path, "--remount-ro", path])
        if request.network:
            # resolv.conf is often a link into /run, which is not shared.
            resolv = os.path.realpath("/etc/resolv.conf")
            if resolv.startswith("/run/") and os.path.isfile(resolv):
                args.extend(["--ro-bind", resolv, resolv])
        # Fresh, private tmpfs mounts inside the sandbox, not the host's /tmp,
        # each capped (see tmpfs_bytes).  /dev is a tmpfs of bwrap's: read-only
        # at the end, with its own capped /dev/shm (POSIX shared memory,
        # semaphores) mounted on it.
        args += ["--proc", "/proc", "--dev", "/dev"]
        scratch = ["/dev/shm", "/tmp", "/var/tmp"]  # noqa: S108
        # An empty private home at the real path: configuration that names
        # $HOME still resolves, and nothing of the user's is there.
        if self.home and self.home != "/" and not _covered(self.home, bound):
            scratch.append(self.home)
        size = self.tmpfs_bytes(len(scratch))
        for path in scratch:
            if self.availability.tmpfs_sizes:
                args += ["--size", str(size)]
            args += ["--tmpfs", path]
        for path in self._toolchains(request.env):
            ro(path)
        for path in self.read_paths:
            ro(path)
        # What a sandbox needs to run the worker's Python: the mask helper's
        # probe runs in it, and the probe of masks made from outside.
        base = args[1:]
        self.last_base = base
        for path in (*self.write_paths, *request.scratch):
            if os.path.isdir(path):
                args += ["--bind", path, path]
        root = self.root
        args += ["--bind" if request.writable else "--ro-bind", root, root]
        masks = self.masks.current()
        self._git_binds(args, request, masks)
        forj = os.path.join(root, ".forj")
        if request.writable and not os.path.lexists(forj):
            # The project's own configuration, whose rules a trusted
            # project's worker takes at its next start: no command may
            # create it either.  bwrap makes the mount point, so an empty
            # .forj directory stays behind (git shows no empty directory).
            args += ["--tmpfs", forj, "--remount-ro", forj]
        many = len(masks.files) + len(masks.dirs) >= maskmount.HELPER_FROM
        if late is not None and many and self.outside_masks:
            # Made from outside while bubblewrap waits (mask_late).
            late.extend(os.path.join(root, rel) for rel in (*masks.files, *masks.dirs))
            for name in maskmount.loader_names(request.env):
                args[caps_at:caps_at] = ["--setenv", name, request.env[name]]
        elif self._helper_masks(request, masks, bound, base):
            # Many masks: made by the helper inside (see maskmount), in one
            # pass, instead of one bubblewrap mount (and mount-table read) each.
            paths = [os.path.join(root, rel) for rel in (*masks.files, *masks.dirs)]
            options, command = maskmount.command(
                maskmount.interpreter(), request.env, paths, command
            )
            args[caps_at:caps_at] = options
        else:
            # bubblewrap runs without them (launch_env): given to the command.
            for name in maskmount.loader_names(request.env):
                args[caps_at:caps_at] = ["--setenv", name, request.env[name]]
            # bubblewrap would create what is gone since the index looked (an
            # empty file left in the project); the helper skips it itself.
            for rel in masks.files:
                full = os.path.join(root, rel)
                if _is(full, stat.S_ISREG):
                    args += ["--ro-bind", "/dev/null", full]
            for rel in masks.dirs:
                full = os.path.join(root, rel)
                if _is(full, stat.S_ISDIR):
                    args += ["--tmpfs", full, "--remount-ro", full]
        # Last, once every mount point exists: the root (bwrap's own tmpfs,
        # which holds the mount points) and /dev read-only, so that nothing
        # but the capped mounts and the bound paths can be written.
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        args += ["--chdir", request.cwd, "--"]
        return args + command

    @staticmethod
    def mask_late(
        init: int,
        paths: list[str],
        fork: Callable[[], int] = os.fork,
        forget: Callable[[int], None] = lambda pid: None,
        parent: int | None = None,
    ) -> str | None:
        """Make the masks :meth:`argv` left out, in the sandbox whose first process is
        ``init`` (set up, its command not started; ``parent``: its bubblewrap);
        None, or why they could not be."""
        return maskmount.mask_from_outside(init, paths, fork, forget, parent)

    def many_masks(self) -> bool:
        """Whether a command now has enough masks to have them made in one pass."""
        self.start()
        self.masks.wait()
        masks = self.masks.current()
        return len(masks.files) + len(masks.dirs) >= maskmount.HELPER_FROM

    @staticmethod
    def launch_env(env: Mapping[str, str]) -> dict[str, str]:
        """The environment to start bubblewrap with: ``env`` without the variables
        the dynamic loader acts on.

        bubblewrap runs outside the sandbox, in the project: an ``LD_PRELOAD``
        naming a library a command wrote there would run it unconfined.
        :meth:`argv` gives those variables to the command inside instead.
        """
        drop = set(maskmount.loader_names(env))
        return {name: value for name, value in env.items() if name not in drop}

    def _helper_masks(
        self, request: Request, masks: Masks, bound: list[str], base: list[str]
    ) -> bool:
        """Whether the mask helper makes this command's masks.

        Only for many masks, and only with an interpreter no command can
        have changed: inside a path bound read-only, outside the project
        and every writable path.
        """
        if len(masks.files) + len(masks.dirs) < maskmount.HELPER_FROM:
            return False
        python = maskmount.interpreter()
        prefix = os.path.realpath(sys.base_prefix)
        writable = [self.root, *self.write_paths, *request.scratch]
        for path in (python, prefix):
            if not _covered(path, bound) or _covered(path, writable):
                return False
        assert self.availability.bwrap is not None
        return maskmount.works(self.availability.bwrap, base)

    def _git_binds(self, args: list[str], request: Request, masks: Masks) -> None:
        """Bind the project's ``.git`` and ``.forj`` entries, and what each ``.git`` names.

        Where a command could write (the project when the call may change
        it, the writable paths), everything deciding which git directory
        git uses is made read-only: each git directory a ``.git`` names,
        its common directory, the gitfile and ``commondir`` files read on
        the way, and the directory holding each symbolic link met on the
        way (a link itself cannot be mounted on, so its directory is; a
        ``.git`` link makes its whole directory read-only).  Each
        directory between a writable path's top and any of these is bound
        onto itself: a mount point cannot be renamed, so no command can
        move one aside and put a planted one at its name.
        """
        root = self.root
        extra = [p for p in (*self.write_paths, *request.scratch) if os.path.isdir(p)]
        writable = ([root] if request.writable else []) + extra
        visible = [root, *extra, *self.read_paths]
        # Read-only: git dirs, the files read on the way, directories of links
        # (dicts: ordered sets).
        wanted: dict[str, None] = {}
        configs: dict[str, None] = {}
        dotgits = [
            os.path.join(root, rel) for rel in masks.readonly if rel.rsplit("/", 1)[-1] == ".git"
        ]
        for dotgit in dotgits:
            found = git_paths(dotgit)
            for path in (*found.dirs, *found.files):
                if _covered(path, writable):
                    wanted[path] = None
            for link in found.links:
                if _covered(link, writable):
                    wanted[os.path.dirname(link)] = None
                    if os.path.dirname(link) == root:
                        log.warning(
                            "%s is a symbolic link: the project is read-only to commands "
                            "(a link cannot be made read-only alone)",
                            link,
                        )
            configs.update((d, None) for d in found.dirs if _covered(d, visible))
        # What lies in a directory bound read-only already needs no bind of its
        # own (a submodule's git directory under .git/modules), nor can it move.
        every = set(wanted)
        frozen = {p: None for p in wanted if not _under_any(p, every)}
        frozen_dirs = set(frozen)
        pinned: set[str] = set()
        tops = sorted(writable, key=len, reverse=True)
        for path in (*frozen, *(d for d in dotgits if _covered(d, writable))):
            if path not in frozen_dirs and _under_any(path, frozen_dirs):
                continue
            top = next(w for w in tops if _covered(path, [w]))
            here = os.path.dirname(path)
            while here != top and here.startswith(top) and here not in pinned:
                pinned.add(here)
                here = os.path.dirname(here)
        # Parents first, so that no bind covers one made after it (the
        # redacted configs and the masks come later still).
        for path in sorted({*pinned, *frozen}, key=lambda p: (p.count("/"), p)):
            args += ["--bind" if path in pinned else "--ro-bind", path, path]
        for rel in masks.readonly:
            full = os.path.join(root, rel)
            if full not in frozen and not os.path.islink(full) and os.path.lexists(full):
                args += ["--ro-bind", full, full]
        for git_dir in configs:
            config = os.path.join(git_dir, "config")
            if _is(config, stat.S_ISREG):
                args += ["--ro-bind", self._redacted_config(config), config]

    def tmpfs_bytes(self, count: int) -> int:
        """The cap of each of ``count`` writable tmpfs mounts: the size setting, or an
        equal share of the total when the sizes would add up to more."""
        each = self.tmpfs_size_mib << 20
        return max(1 << 20, min(each, (self.tmpfs_total_mib << 20) // max(count, 1)))

    def _toolchains(self, env: Mapping[str, str]) -> list[str]:
        """Real paths of the ``PATH`` entries and of Python's base prefix, outside the project."""
        found: list[str] = []
        home = os.path.realpath(self.home) if self.home else None
        entries = (env.get("PATH") or os.defpath).split(os.pathsep)
        candidates = [sys.base_prefix, sys.prefix]
        for entry in entries:
            if not entry or not os.path.isabs(entry):
                continue
            real = os.path.realpath(entry)
            candidates.append(real)
            if os.path.basename(real) in SHIM_DIR_NAMES:
                candidates.append(os.path.dirname(real))
        for path in candidates:
            real = os.path.realpath(path)
            if not os.path.isdir(real) or real == "/":
                continue
            if home and (real == home or home.startswith(real.rstrip("/") + "/")):
                continue  # $HOME itself, or a directory above it: that is everything
            if real == self.root or real.startswith(self.root.rstrip("/") + "/"):
                continue  # the project is bound on its own terms
            if real not in found:
                found.append(real)
        # Parents first, so a directory inside one already bound is skipped.
        return sorted(found, key=lambda p: (p.count("/"), p))

    def _redacted_config(self, path: str) -> str:
        """A read-only copy of a git config with its credentials blanked out."""
        try:
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            data = b""
        text = data.decode("utf-8", "replace")
        # Secret-named keys and tokens first, then the user:secret@ of URLs,
        # so a remote URL reads the same as read_file shows it (``***``).
        text, _ = redact_url_credentials(redact(text))
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
        copy = self._configs.get(digest)
        if copy is None or not os.path.exists(copy):
            copy = os.path.join(self._private, f"gitconfig-{digest}")
            fd, tmp = tempfile.mkstemp(dir=self._private)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o444)
            os.replace(tmp, copy)
            self._configs[digest] = copy
        return copy


@dataclass
class GitPaths:
    """What decides which git directory git uses for one ``.git``; canonical paths."""

    dirs: list[str] = field(default_factory=list)  # the git directory, its common directory
    files: list[str] = field(default_factory=list)  # gitfile and commondir files read
    links: list[str] = field(default_factory=list)  # symbolic links met on the way


def git_paths(dotgit: str) -> GitPaths:
    """The git directories git uses for the ``.git`` at ``dotgit``, and how it gets there.

    ``dotgit`` is canonical but for its last name.  A ``.git`` directory
    (or a link to one) is one itself; a ``.git`` file (or a link to one)
    names one as git reads it: ``gitdir: PATH``, the path relative to the
    directory holding the ``.git``, cut at a NUL, trailing line ends
    dropped.  A git directory with a ``commondir`` file
    (a linked worktree's) takes its hooks and most of its configuration
    from the directory that file names (read the same way, relative to the
    git directory), so that one is listed too.  Only directories are
    listed in ``dirs``.
    """
    found = GitPaths()
    budget = [_MAX_LINKS]
    real = _resolve_in(dotgit, found.links, budget)
    first: str | None = None
    if os.path.isdir(real):
        first = real
    else:
        text = _small_text(real)
        if text is not None:
            found.files.append(real)
            named = _git_path_text(text[len("gitdir: ") :]) if text.startswith("gitdir: ") else ""
            if named:
                where = os.path.join(os.path.dirname(dotgit), named)
                first = _resolve(where, found.links, budget)
    if first is None or not os.path.isdir(first):
        return found
    found.dirs.append(first)
    commondir = _resolve_in(os.path.join(first, "commondir"), found.links, budget)
    text = _small_text(commondir)
    if text is not None:
        found.files.append(commondir)
        named = _git_path_text(text)
        if named:
            other = _resolve(os.path.join(first, named), found.links, budget)
            if os.path.isdir(other) and other != first:
                found.dirs.append(other)
    return found


def git_dirs_named_by(dotgit: str) -> list[str]:
    """The git directories git uses for the ``.git`` at ``dotgit`` (see git_paths)."""
    return git_paths(dotgit).dirs


# How many symbolic links one resolution follows (the kernel's own limit).
_MAX_LINKS = 40


def _resolve_in(path: str, links: list[str], budget: list[int]) -> str:
    """:func:`_resolve` for a name in a canonical directory: only the name can be a link."""
    if not os.path.islink(path):
        return path
    return _resolve(path, links, budget)


def _resolve(path: str, links: list[str], budget: list[int]) -> str:
    """``path`` (absolute) resolved as the kernel would; each link met is added to ``links``.

    ``budget``: links left to follow, shared by the whole resolution; past
    it the rest is taken as it is (git would fail there too).
    """
    here = "/"
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        step = os.path.join(here, part)
        try:
            target = os.readlink(step)
        except OSError:  # not a link, or not there: taken as it is
            here = step
            continue
        if budget[0] <= 0:
            here = step
            continue
        budget[0] -= 1
        links.append(step)
        here = _resolve(os.path.join(here, target), links, budget)
    return here


def _git_path_text(text: str) -> str:
    """A path as git reads it from a gitfile or commondir: up to a NUL, line ends dropped."""
    return text.split("\0", 1)[0].rstrip("\r\n")


def _small_text(path: str) -> str | None:
    """The start of a regular file (links followed, as git does), or None.

    Never a FIFO or a device: reading one could block or never end.
    """
    try:
        # O_NONBLOCK: a FIFO swapped in after any check must not hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _PATH_MAX + 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "surrogateescape")


def _under_any(path: str, dirs: set[str]) -> bool:
    """Whether a directory strictly above ``path`` is one of ``dirs``."""
    here = os.path.dirname(path)
    while True:
        if here in dirs:
            return True
        parent = os.path.dirname(here)
        if parent == here:
            return False
        here = parent


def _covered(path: str, bound: list[str]) -> bool:
    return any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound)


# --- the process cap ---------------------------------------------------------------------


class ProcessCap:
    """Limit how many processes one command may have: a pids cgroup, else RLIMIT_NPROC."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cgroup: str | None = None

    def apply(self, pid: int, tag: str) -> str:
        """Put ``pid`` (not yet forking) under the cap; how it was capped."""
        base = _pids_cgroup_base()
        if base is not None:
            path = os.path.join(base, f"forj-{os.getpid()}-{tag}")
            try:
                os.mkdir(path)
                with open(os.path.join(path, "pids.max"), "w") as fh:
                    fh.write(str(self.limit))
                with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                    fh.write(str(pid))
                self._cgroup = path
                return "cgroup"
            except OSError as exc:
                log.debug("no pids cgroup for the command: %s", exc)
                with contextlib.suppress(OSError):
                    os.rmdir(path)
        try:
            import resource

            count = _processes_of_user()
            resource.prlimit(pid, resource.RLIMIT_NPROC, (count + self.limit,) * 2)
            return "rlimit"
        except (OSError, ValueError, AttributeError) as exc:
            log.debug("no process limit for the command: %s", exc)
            return "none"

    def release(self) -> None:
        if self._cgroup is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._cgroup)
            self._cgroup = None


_cgroup_base: list[str | None] = []


def _pids_cgroup_base() -> str | None:
    """A writable directory of the pids controller holding this process, or None."""
    if _cgroup_base:
        return _cgroup_base[0]
    found: str | None = None
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if "pids" in controllers.split(","):
            candidate = os.path.join("/sys/fs/cgroup/pids", rel.lstrip("/"))
        elif controllers == "":
            candidate = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
            try:
                with open(os.path.join(candidate, "cgroup.subtree_control")) as fh:
                    if "pids" not in fh.read().split():
                        continue
            except OSError:
                continue
        else:
            continue
        procs = os.path.join(candidate, "cgroup.procs")
        if os.access(candidate, os.W_OK) and os.path.isfile(procs):
            found = candidate
            break
    if found is not None:
        _remove_stale_cgroups(found)
    _cgroup_base.append(found)
    return found


def _remove_stale_cgroups(base: str) -> None:
    """Remove the empty cgroups of workers that died before removing them."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "forj" or not parts[1].isdigit():
            continue
        if parts[1] != str(os.getpid()) and os.path.exists(f"/proc/{parts[1]}"):
            continue  # a live worker's
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base, name))  # fails while it still holds a process


def _processes_of_user() -> int:
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count
