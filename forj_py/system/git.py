"""Running git on the project's repository without running anything the repository names.

The worker runs git itself, outside the command sandbox, with the user's
own (global and system) configuration and credentials.  The repository's
own configuration (``.git/config``, its includes, worktree config) is not
the user's word: a command the model ran, or the repository's author, may
have written it, and several of its keys make git start a program here,
unsandboxed.  Every run therefore gets:

- fixed settings that turn the usual suspects off: no fsmonitor, hooks
  skipped (``core.hooksPath=/dev/null``), no pager, no external diff, no
  submodule recursion, ``ext::`` transports refused;
- for every program-naming key the repository's own configuration sets
  (credential helpers, filter drivers, merge drivers, textconv and diff
  commands, gpg programs, ``remote.*.uploadpack`` / ``receivepack``,
  protocol policies, ...) an override: the value from the user's global or
  system configuration when there is one, else a value that names no
  program (:data:`_PROGRAM_KEYS`).  These overrides go to git as
  ``GIT_CONFIG_COUNT`` / ``GIT_CONFIG_KEY_<n>`` / ``GIT_CONFIG_VALUE_<n>``
  (:func:`config_environment`), never as ``-c key=value``: git cuts a
  ``-c`` at its first ``=``, and a subsection name may hold one
  (``[filter "a=b"]``), so ``-c filter.a=b.clean=`` would set a key
  ``filter.a`` and leave the repository's filter in place;
- for push and pull, ``--receive-pack`` / ``--upload-pack`` given on the
  command line (:data:`TRANSPORT_PROGRAMS`): for these two keys git keeps
  the *first* value it reads, so a ``-c`` would not replace the
  repository's;
- an environment that pins the editor, the askpass program, the ssh
  command and the pager (the environment wins over any configuration), and
  keeps of the worker's ``GIT_*`` variables only the identity and where
  the user's configuration lives.

A repository-local ``core.worktree`` (a work tree somewhere else) is
refused outright.

Which repository: the git directory must be the project's own, the real
``.git`` directory at the top of the work tree, or a linked worktree whose
git directory names this very ``.git`` file back.  A ``.git`` file or link
pointing anywhere else is refused, and so is a git directory other than the
one found when the worker started (:func:`pin`): a command could otherwise
create a ``.git`` (``git init``, a ``gitdir:`` file) that the git tools,
running outside the sandbox with the user's credentials, would then trust.

Network runs (fetch, pull, push) honour, of the repository's own
configuration, only the keys :data:`_LOCAL_NETWORK_KEYS` lists in the
sections that decide where git connects, what it trusts and what it sends
(:data:`_NETWORK_SECTIONS`: proxies, TLS settings, extra headers, URL
rewrites, credentials, ...); any other key there refuses the run
(:meth:`Repo.network_guard`).  The user's own configuration is trusted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..safety.programs import program_path

log = logging.getLogger(__name__)

# How long the status question of plan notes may take.
TIMEOUT_SECONDS = 5.0

_SAFE = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "diff.external=",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "submodule.recurse=false",
    # A submodule's own config is not the one overridden here: never let git
    # step into one (its filters and textconv would run).
    "-c",
    "diff.ignoreSubmodules=all",
    "-c",
    "status.submoduleSummary=false",
    "-c",
    "fetch.recurseSubmodules=false",
    "-c",
    "push.recurseSubmodules=no",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "log.showSignature=false",
    # No gc or maintenance of its own after a commit, merge or fetch: a
    # background process that outlives the call, and one that asks the
    # repository's multi-valued gc.recentObjectsHook (git 2.42), which no
    # later value can take back.
    "-c",
    "maintenance.auto=false",
    "-c",
    "gc.auto=0",
    "--no-pager",
)

# The worker's GIT_* variables that stay: who commits, and where the user's
# own configuration lives.  Everything else (GIT_DIR, GIT_WORK_TREE,
# GIT_CONFIG_PARAMETERS, GIT_INDEX_FILE, ...) could point git elsewhere.
_KEPT_GIT_ENV = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_SSH_COMMAND",
    }
)

# The programs a local (path or file://) remote runs, given as options.
TRANSPORT_PROGRAMS = {
    "push": "--receive-pack=git-receive-pack",
    "pull": "--upload-pack=git-upload-pack",
    "fetch": "--upload-pack=git-upload-pack",
}
# A remote that is a path on this machine runs its receive-pack or
# upload-pack here, with that repository's own configuration, and git hands
# a local transport none of the overrides (it clears GIT_CONFIG_* for it):
# the program names its own settings, each of which switches off a whole
# mechanism, since that repository's driver names are not known here.  No
# hooks, no fsmonitor, no alternate-refs command; a pushed branch that is
# checked out there is refused rather than checked out
# (``receive.denyCurrentBranch = updateInstead`` runs that repository's
# filters); no gc of its own after the push.  (Only for local remotes: a
# server's restricted shell accepts just the plain program name.)
_LOCAL_SIDE = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.alternateRefsCommand="
    " -c receive.denyCurrentBranch=refuse -c receive.autogc=false"
)
LOCAL_TRANSPORT_PROGRAMS = {
    "push": f"--receive-pack={_LOCAL_SIDE} receive-pack",
    "pull": f"--upload-pack={_LOCAL_SIDE} upload-pack",
    "fetch": f"--upload-pack={_LOCAL_SIDE} upload-pack",
}

_RESET = object()  # a multi-valued key: "" empties the list, then the user's values
_REFUSE = object()  # a key the tools do not work with at all

# (key pattern, neutral value): a repository-local key matching the pattern
# is overridden with the user's own value, or with the neutral one.  Keys
# are matched lowercased (git lowercases section and variable names).  A
# subsection may be empty (``[filter ""]`` is the driver of ``filter=``),
# hence ``.*`` there.
_PROGRAM_KEYS: list[tuple[re.Pattern[str], object]] = [
    (re.compile(r"credential(\..*)?\.helper"), _RESET),
    (re.compile(r"core\.fsmonitor"), "false"),
    (re.compile(r"core\.hookspath"), "/dev/null"),
    (re.compile(r"core\.alternaterefscommand"), ""),
    (re.compile(r"core\.worktree"), _REFUSE),
    (re.compile(r"pager\..+"), "false"),
    (re.compile(r"diff\.external"), ""),
    (re.compile(r"diff\..*\.(textconv|command)"), ""),
    (re.compile(r"merge\..*\.driver"), "false"),  # /bin/false: the merge conflicts
    (re.compile(r"filter\..*\.(clean|smudge|process)"), ""),
    (re.compile(r"filter\..*\.required"), "false"),
    (re.compile(r"gpg\.program"), "gpg"),
    (re.compile(r"gpg\.openpgp\.program"), "gpg"),
    (re.compile(r"gpg\.x509\.program"), "gpgsm"),
    (re.compile(r"gpg\.ssh\.program"), "ssh-keygen"),
    (re.compile(r"gpg\.ssh\.defaultkeycommand"), ""),
    (re.compile(r"(commit|tag)\.gpgsign"), "false"),
    (re.compile(r"protocol\.allow"), "user"),
    (re.compile(r"protocol\.ext\.allow"), "never"),
    (re.compile(r"protocol\..*\.allow"), "user"),
    (re.compile(r"uploadpack\.packobjectshook"), ""),
]
# Sections whose keys decide where fetch, pull and push connect, whom they
# trust and what they send: a repository-local key in them must be listed in
# _LOCAL_NETWORK_KEYS, else network runs are refused.  (``core.sshCommand``
# and ``core.gitProxy`` are pinned by the environment instead.)
_NETWORK_SECTIONS = frozenset(
    {"http", "https", "url", "credential", "remote", "ssh", "transfer", "fetch", "push", "protocol"}
)
# Repository-local keys of those sections a network run may see: where a
# remote is and which refs it trades (shown in the review), tuning that
# changes neither the destination nor what is sent, and keys every run
# overrides anyway (_PROGRAM_KEYS: credential helpers, transport programs,
# protocol policies).  Everything else there (http.proxy, http.sslVerify,
# http.extraHeader, http.<url>.*, url.*.insteadOf, credential.username,
# remote.*.proxy, remote.*.vcs, transfer.bundleURI, ...) refuses the run.
_LOCAL_NETWORK_KEYS = re.compile(
    r"credential(\..+)?\.helper|"
    r"remote\..+\.(url|pushurl|fetch|push|tagopt|prune|prunetags|mirror|skipdefaultupdate"
    r"|skipfetchall|promisor|partialclonefilter|uploadpack|receivepack"
    # Data the GitHub CLI keeps beside a remote; git itself never reads it.
    r"|gh-resolved)"
    r"|remote\.pushdefault"
    r"|fetch\.(prune|prunetags|output|showforcedupdates|writecommitgraph|parallel"
    r"|recursesubmodules|fsckobjects|unpacklimit)"
    r"|push\.(default|followtags|autosetupremote|recursesubmodules)"
    r"|transfer\.(fsckobjects|unpacklimit)"
    r"|protocol\.version|protocol\.(.+\.)?allow"
    r"|http\.(postbuffer|lowspeedlimit|lowspeedtime|maxrequests)"
)

# Allowed above because push and pull name the program on the command line;
# a partial clone's own fetches do not.
_LAZY_FETCH_PROGRAMS = re.compile(r"remote\..+\.uploadpack")

# Keys whose program the environment pins instead (the environment wins).
_ENV_PINNED = re.compile(r"core\.(editor|askpass|sshcommand|gitproxy|pager)|sequence\.editor")


class GitError(Exception):
    """git could not be run at all, or the repository cannot be worked with safely.

    A refusal of the safety rules names its ``rule`` and what to do next.
    """

    def __init__(
        self, message: str, *, rule: str | None = None, recovery: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.rule = rule
        self.recovery = recovery


@dataclass(frozen=True)
class GitRun:
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.cancelled

    def out(self) -> str:
        return self.stdout.decode("utf-8", "surrogateescape")

    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace").strip()


def config_environment(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The environment that gives git the settings ``pairs`` (key, value), in order.

    Each key and value travels whole in a variable of its own, so no
    character of a name (``=``, ``.``, quotes, newlines, any Unicode) can
    move the boundary between them, as it can in ``-c key=value``.  git
    reads these after the repository's configuration (scope ``command``),
    and its own child processes inherit them.
    """
    env: dict[str, str] = {}
    count = 0
    for key, value in pairs:
        if "\0" in key or "\0" in value:
            # No environment variable can hold NUL; no git key or value does either.
            raise GitError(f"a git setting holds NUL and cannot be passed: {key!r}")
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


def environment(extra: dict[str, str] | None = None, *, root: str | None = None) -> dict[str, str]:
    """The worker's environment for git: no redirecting GIT_*, programs pinned.

    ``root``: the project, whose directories ``PATH`` loses (see program_path).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEPT_GIT_ENV}
    env["PATH"] = program_path(env.get("PATH", os.defpath), root)
    for name in ("SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "PAGER"):
        env.pop(name, None)
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_ASKPASS"] = ""  # empty: no askpass program (nobody could answer it)
    env["GIT_EDITOR"] = ":"  # messages come with the call; nothing is edited
    env["GIT_SEQUENCE_EDITOR"] = ":"
    env["GIT_PAGER"] = "cat"
    env["GIT_MERGE_AUTOEDIT"] = "no"
    env["LC_ALL"] = "C"
    env.update(extra or {})
    return env


def _run(
    cwd: str,
    argv: list[str],
    env: dict[str, str],
    *,
    timeout: float,
    stdin: bytes | None = None,
    cancel: threading.Event | None = None,
) -> GitRun:
    """Run one git process in its own session; killed (with its children) at the deadline."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise GitError(f"git could not be started: {exc.strerror or exc}") from None
    result: dict[str, bytes] = {}

    def talk() -> None:
        out, err = proc.communicate(stdin)
        result["out"], result["err"] = out, err

    reader = threading.Thread(target=talk, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    timed_out = cancelled = False
    while reader.is_alive():
        reader.join(0.05)
        if cancel is not None and cancel.is_set():
            cancelled = True
        elif time.monotonic() >= deadline:
            timed_out = True
        else:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(5)
        break
    proc.wait()
    return GitRun(
        proc.returncode, result.get("out", b""), result.get("err", b""), timed_out, cancelled
    )


@dataclass(frozen=True)
class Repo:
    """A repository git agreed to work in, with the overrides every run gets."""

    cwd: str  # where commands run: the project root
    toplevel: str  # the work tree's top (the project root or one of its parents)
    git_dir: str
    # (key, value) settings every run gets, after the repository's own
    # configuration (see config_environment).
    overrides: tuple[tuple[str, str], ...]
    env: dict[str, str]
    # Repository-local keys a network run may not honour (see network_guard).
    network_keys: tuple[str, ...] = ()

    def network_guard(self) -> None:
        """Refuse a fetch, pull or push the repository's own configuration could redirect."""
        if not self.network_keys:
            return
        keys = list(self.network_keys)
        shown = ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "")
        raise GitError(
            f"the repository's own configuration sets {shown}; such keys can send the "
            "user's credentials or data elsewhere (a proxy, another TLS trust, extra "
            "headers, rewritten URLs, another credential helper), and the git tools do not "
            "fetch, pull or push (nor, in a partial clone, which fetches during any run, run "
            "at all) while the repository sets them; nothing was sent. The user "
            "may remove them (git config --local --unset KEY) or, if wanted, set them in "
            "their own global configuration instead",
            rule="git.network_config",
            recovery=(
                "Do not retry: tell the user which keys the repository sets, and that forj "
                "fetches, pulls and pushes only once they are gone or moved to the user's "
                "own global git configuration",
            ),
        )

    def run(
        self,
        args: list[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        cancel: threading.Event | None = None,
        config: Iterable[tuple[str, str]] = (),
    ) -> GitRun:
        """Run git with ``args``; ``config``: settings for this run only, after the overrides.

        Settings whose key holds a name (a remote's, a driver's) go in
        ``config``, never as ``-c`` in ``args`` (see config_environment).
        """
        argv = ["git", *_SAFE, *args]
        env = {**self.env, **config_environment([*self.overrides, *config])}
        return _run(self.cwd, argv, env, timeout=timeout, stdin=stdin, cancel=cancel)


def _config_entries(cwd: str, env: dict[str, str], timeout: float) -> list[tuple[str, str, str]]:
    """Every configuration entry git sees here: (scope, lowercased key, value)."""
    done = _run(
        cwd,
        ["git", *_SAFE, "config", "--list", "--show-scope", "--includes", "--null"],
        env,
        timeout=timeout,
    )
    if not done.ok:
        raise GitError(done.err() or "git config failed")
    # --show-scope with --null writes "scope\0key\nvalue\0": pairs of fields.
    fields = done.out().split("\0")
    out: list[tuple[str, str, str]] = []
    for i in range(0, len(fields) - 1, 2):
        scope, item = fields[i], fields[i + 1]
        key, _, value = item.partition("\n")
        out.append((scope, _lower_key(key), value))
    return out


def _lower_key(key: str) -> str:
    """git compares section and variable names without case, subsections with case."""
    first, _, rest = key.partition(".")
    if "." not in rest:
        return f"{first.lower()}.{rest.lower()}"
    sub, _, var = rest.rpartition(".")
    return f"{first.lower()}.{sub}.{var.lower()}"


def network_keys_of(entries: Iterable[tuple[str, str, str]]) -> list[str]:
    """Repository-local keys of the network sections that are not on the allowlist."""
    found: list[str] = []
    for scope, key, _ in entries:
        if scope not in ("local", "worktree"):
            continue
        section = key.partition(".")[0]
        if section in _NETWORK_SECTIONS and not _LOCAL_NETWORK_KEYS.fullmatch(key):
            found.append(key)
    return list(dict.fromkeys(found))


def overrides_for(
    entries: Iterable[tuple[str, str, str]],
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The (key, value) settings and environment that undo the repository's program-naming keys.

    The settings are for :func:`config_environment`, in order: for a
    multi-valued key the empty value first (git then forgets the values
    read so far), then the user's own.
    """
    entries = list(entries)
    local = [key for scope, key, _ in entries if scope in ("local", "worktree")]
    users: dict[str, list[str]] = {}
    for scope, key, value in entries:
        if scope in ("system", "global"):
            users.setdefault(key, []).append(value)
    pairs: list[tuple[str, str]] = []
    env: dict[str, str] = {}
    for key in dict.fromkeys(local):
        if _ENV_PINNED.fullmatch(key):
            if key == "core.sshcommand" and "GIT_SSH_COMMAND" not in os.environ:
                env["GIT_SSH_COMMAND"] = (users.get(key) or ["ssh"])[-1]
            if key == "core.gitproxy":
                env["GIT_PROXY_COMMAND"] = ""
            continue
        neutral = next((value for pattern, value in _PROGRAM_KEYS if pattern.fullmatch(key)), None)
        if neutral is None:
            continue
        if neutral is _REFUSE:
            raise GitError(
                f"the repository's own configuration sets {key}, which points git at a work "
                "tree elsewhere; the git tools do not work in such a repository"
            )
        if neutral is _RESET:
            pairs.append((key, ""))
            pairs += [(key, value) for value in users.get(key, [])]
        elif key in users:
            pairs.append((key, users[key][-1]))
        else:
            assert isinstance(neutral, str)
            pairs.append((key, neutral))
    return pairs, env


# Project root -> the git directory found there when the worker started
# (None: none).  Roots never pinned (a caller outside a worker) are checked
# only for a git directory of their own.
_PINS: dict[str, str | None] = {}
_PINS_LOCK = threading.Lock()


def _locate(root: str, env: dict[str, str], timeout: float) -> tuple[str, str]:
    """git's (work tree top, git directory) for ``root``, both canonical."""
    top = _run(
        root, ["git", *_SAFE, "rev-parse", "--show-toplevel", "--git-dir"], env, timeout=timeout
    )
    if not top.ok:
        message = top.err() or "git rev-parse failed"
        raise GitError(message)
    lines = top.out().splitlines()
    if len(lines) < 2:
        raise GitError("not inside a git work tree")
    return os.path.realpath(lines[0]), os.path.realpath(os.path.join(root, lines[1]))


def pin(root: str, *, timeout: float = TIMEOUT_SECONDS) -> str | None:
    """Record the git directory ``root`` has now; later runs accept no other.

    Called once as the worker starts, before any command could run.
    """
    real_root = os.path.realpath(root)
    git_dir: str | None = None
    if _may_be_in_work_tree(real_root):
        try:
            git_dir = _locate(real_root, environment(root=real_root), timeout)[1]
        except GitError as exc:
            log.debug("git: no repository pinned for %s: %s", real_root, exc)
    with _PINS_LOCK:
        _PINS[real_root] = git_dir
    return git_dir


def _check_git_dir(real_root: str, toplevel: str, git_dir: str) -> None:
    """Refuse a git directory that is not the project's own (see the module's docstring)."""
    dotgit = os.path.join(toplevel, ".git")
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        mode = 0
    if stat.S_ISDIR(mode) and os.path.realpath(dotgit) == git_dir:
        pass  # the work tree's own .git directory
    elif stat.S_ISREG(mode) and _links_back(git_dir, dotgit):
        pass  # a linked worktree: its git directory names this .git file
    else:
        what = (
            "a symbolic link"
            if stat.S_ISLNK(mode)
            else "a file"
            if stat.S_ISREG(mode)
            else "missing"
        )
        raise GitError(
            f"the git directory {git_dir} is not the project's own: {dotgit} is {what} "
            "pointing there, and it is neither the real .git directory nor a linked worktree "
            "of it (git worktree add); the git tools refuse to read or change another "
            "repository through it, and nothing was read. If this .git was planted, remove "
            f"it; the user can check with 'cat {dotgit}'",
            rule="git.own_git_dir",
            recovery=(
                f"Do not retry: tell the user {dotgit} points at another repository; if it "
                "was not meant, they remove it",
            ),
        )
    with _PINS_LOCK:
        if real_root not in _PINS:
            return
        pinned = _PINS[real_root]
    if pinned != git_dir:
        then = f"the repository at {pinned}" if pinned else "no repository"
        raise GitError(
            f"the project's git directory is now {git_dir}, but when forj started it had "
            f"{then}; a .git made or replaced since then (by a command, for instance) is "
            "not trusted with the user's git configuration and credentials. If the user "
            "made it, restart the worker (M-x forj-worker-restart) to use it",
            rule="git.own_git_dir",
            recovery=(
                "Do not create or replace .git with commands; ask the user whether they made "
                "this repository, and if so to restart the worker (M-x forj-worker-restart)",
            ),
        )


def _links_back(git_dir: str, dotgit: str) -> bool:
    """Whether ``git_dir`` is a linked worktree's, recorded for the ``.git`` file ``dotgit``."""
    if not os.path.isfile(os.path.join(git_dir, "commondir")):
        return False
    try:
        with open(os.path.join(git_dir, "gitdir"), encoding="utf-8") as fh:
            back = fh.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(back) and os.path.realpath(os.path.join(git_dir, back)) == os.path.realpath(dotgit)


def open_repo(root: str, *, timeout: float = TIMEOUT_SECONDS) -> Repo:
    """The repository whose work tree holds ``root``, ready for safe runs.

    Raises :class:`GitError` when git is missing, ``root`` is in no
    repository, or the repository cannot be used safely.
    """
    env = environment(root=root)
    toplevel, git_dir = _locate(root, env, timeout)
    real_root = os.path.realpath(root)
    if not (real_root == toplevel or real_root.startswith(toplevel.rstrip(os.sep) + os.sep)):
        raise GitError(f"the work tree {toplevel} does not hold the project {real_root}")
    entries = _config_entries(root, env, timeout)
    pairs, extra_env = overrides_for(entries)  # first: it names a core.worktree elsewhere
    _check_git_dir(real_root, toplevel, git_dir)
    env.update(extra_env)
    repo = Repo(real_root, toplevel, git_dir, tuple(pairs), env, tuple(network_keys_of(entries)))
    if _fetches_lazily(entries):
        # A partial clone fetches missing objects from its promisor remote
        # during any run (a diff, a log, a checkout): every run is a network
        # run, and one without the command-line transport program that push
        # and pull pass, so a repository-set upload-pack would run too.
        programs = [
            key
            for scope, key, _ in entries
            if scope in ("local", "worktree") and _LAZY_FETCH_PROGRAMS.fullmatch(key)
        ]
        keys = tuple(dict.fromkeys([*repo.network_keys, *programs]))
        dataclasses.replace(repo, network_keys=keys).network_guard()
    return repo


def _fetches_lazily(entries: Iterable[tuple[str, str, str]]) -> bool:
    """Whether the repository is a partial clone (git may fetch during any command)."""
    for scope, key, value in entries:
        if scope not in ("local", "worktree"):
            continue
        if key == "extensions.partialclone":
            return True
        promisor = key.startswith("remote.") and key.endswith(".promisor")
        if promisor and value.strip().lower() in ("", "true", "yes", "on", "1"):
            return True
    return False


def _may_be_in_work_tree(root: str) -> bool:
    """Whether git could find a work tree holding ``root``: a ``.git`` in it or above it.

    git looks for nothing else (its environment here has no ``GIT_DIR``);
    without one, ``rev-parse`` could only fail.
    """
    here = os.path.realpath(root)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return True
        parent = os.path.dirname(here)
        if parent == here:
            return False
        here = parent


def uncommitted(root: str, paths: Iterable[str]) -> dict[str, str] | None:
    """Absolute path -> git's two-letter status, for those of ``paths`` that differ from HEAD.

    ``paths`` are absolute (canonical).  None when git cannot tell (no git,
    not a repository, a failure); an empty dict when every path is clean.
    """
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    if not _may_be_in_work_tree(root):
        return None  # asked before every write: spare a git process outside any repository
    try:
        repo = open_repo(root)
    except GitError as exc:
        log.debug("git: %s", exc)
        return None
    toplevel = repo.toplevel
    inside = [p for p in wanted if p == toplevel or p.startswith(toplevel.rstrip("/") + "/")]
    if not inside:
        return {}
    specs = [":(top,literal)" + os.path.relpath(p, toplevel) for p in inside]
    done = repo.run(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--ignore-submodules=all",
            "--untracked-files=all",
            "--no-renames",
            "--",
            *specs,
        ],
        timeout=TIMEOUT_SECONDS,
    )
    if not done.ok:
        return None
    found: dict[str, str] = {}
    for entry in done.out().split("\0"):
        if len(entry) > 3:
            found[os.path.join(toplevel, entry[3:])] = entry[:2]
    return found
