"""What ``run_shell`` and ``run_tests`` share: environment, working directory, limits, output.

- **Environment**: the worker's own, minus every
  variable whose name matches the denylist (the built-in patterns of
  ``safety/secretenv.py`` plus ``[tools.environment] denylist``), matched
  without regard to case on every platform, or whose value is a credential.
  The worker dropped those it was started with (it starts itself again
  without them); they are still named as removed.  Values of removed
  variables (8 characters or more) are redacted wherever they show up in
  the output, streamed or final.
- **Working directory**: through the sandbox, and inside the project root,
  like every path the model names.
- **Time limits**: the command's own limit stays inside the executor's, so a
  command that runs too long ends in a result that still carries its exit
  status and output; the executor's deadline remains the backstop.
- **Output**: what the model gets is the head and the tail of each stream
  with a marker saying how many bytes were left out, fitted (JSON escaping
  included) into the call's effective output limit.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..output import sanitize
from ..safety import secretenv
from ..safety.commands import CommandSandbox, ProcessCap, Request
from ..safety.paths import SafePath
from ..safety.programs import program_path
from ..system import process
from ..system.process import Capture, Channel, Outcome, redact_values
from .registry import ToolContext

# What counts as a secret in an environment lives with the worker's start-up,
# which removes them from its own before anything else is imported.
BUILTIN_ENV_DENYLIST = secretenv.BUILTIN_ENV_DENYLIST
ENV_ALLOWED_NAMES = secretenv.ENV_ALLOWED_NAMES
is_secret = secretenv.is_secret
MIN_REDACTED_VALUE = secretenv.MIN_REDACTED_VALUE
# Room left in a result for its JSON skeleton beyond what is measured.
SLACK_BYTES = 96
# The executor's own reserve when it fits a result (executor._finish).
EXECUTOR_RESERVE = 24
SNIFF_BYTES = 8192
HEAD_SHARE = 0.4  # of a cut stream, the head gets this much and the tail the rest
# How long the last streamed chunks may take to reach Emacs before the result goes.
CLOSE_SECONDS = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanEnv:
    env: dict[str, str]
    removed: list[str]  # names
    secrets: list[str]  # values to redact from output


def denylist(ctx: ToolContext) -> list[str]:
    return [*BUILTIN_ENV_DENYLIST, *ctx.config.tools.environment.denylist]


def clean_environment(
    patterns: list[str],
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> CleanEnv:
    """``base`` (default: the worker's environment) without denied names, plus ``extra``."""
    source = dict(os.environ if base is None else base)
    extra = extra or {}
    env: dict[str, str] = {}
    # The worker's own secrets left its environment at start: still removed,
    # as the review says, and their values still redacted.
    removed: list[str] = [] if base is not None else secretenv.held_names()
    secrets: list[str] = [] if base is not None else secretenv.held_values()
    for name, value in source.items():
        if is_secret(name, value, patterns):
            removed.append(name)
            if len(value) >= MIN_REDACTED_VALUE:
                secrets.append(value)
        else:
            env[name] = value
    env.update(extra)
    # A value the caller set on purpose is not a secret to hide from it.
    secrets = [s for s in secrets if s not in extra.values()]
    return CleanEnv(env, sorted(set(removed)), secrets)


def resolve_cwd(ctx: ToolContext, path: str | None, base: str | None = None) -> SafePath:
    """The command's working directory: a directory inside the project root.

    ``path`` is relative to ``base``, by default the call's working directory.
    """
    sp = ctx.sandbox.resolve(path or ".", base or ctx.working_dir)
    root = ctx.sandbox.project_root
    if sp.canonical != root and not sp.canonical.startswith(root.rstrip(os.sep) + os.sep):
        raise errors.bad_args(
            f"cwd {path!r} is outside the project root; commands run in the project",
            recovery=["Use '.' (the project root) or one of its subdirectories as cwd"],
            cwd=path,
        )
    if not sp.exists or not os.path.isdir(sp.canonical):
        raise errors.bad_args(
            f"cwd {sp.display!r} is not a directory"
            if sp.exists
            else f"cwd {sp.display!r} does not exist",
            recovery=["Use '.' (the project root) or an existing subdirectory as cwd"],
            cwd=path,
        )
    return sp


def which(program: str, env: Mapping[str, str], cwd: str) -> str | None:
    """Where ``program`` would be found, as the command itself would look it up."""
    if "/" in program:
        path = os.path.join(cwd, program)
        return os.path.realpath(path) if os.path.isfile(path) else None
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        return None
    return os.path.realpath(found if os.path.isabs(found) else os.path.join(cwd, found))


@dataclass(frozen=True)
class Limits:
    timeout: float  # the command's own limit
    grace: float  # SIGTERM to SIGKILL
    drain: float


def limits(ctx: ToolContext, requested: float | None) -> Limits:
    """The command's own time limit, inside the executor's deadline for the tool.

    The executor stops waiting at ``shell_commands_seconds`` (or a shorter
    ``meta.timeout``); the command is stopped early enough before that for
    the grace period and the last reads, so its result can say how it ended.
    """
    shell = ctx.config.tools.shell
    budget = ctx.time_limit or ctx.config.tools.timeouts.shell_commands_seconds
    grace = min(shell.kill_grace_seconds, budget / 4)
    reserve = min(grace + process.KILLED_DRAIN_SECONDS + 0.5, budget / 2)
    own = budget - reserve
    if requested is not None:
        own = min(own, requested)
    return Limits(own, grace, min(shell.drain_seconds, budget / 4))


def run(
    ctx: ToolContext,
    tool: str,
    argv: list[str],
    cwd: str,
    env: CleanEnv,
    *,
    stdin: bytes | None,
    lim: Limits,
    writable: bool = True,
    network: bool = False,
    scratch: tuple[str, ...] = (),
) -> Outcome:
    """Run with streaming to Emacs; a cancel ends in ``cancelled``, a start failure in a
    ``process-error``.

    Inside the command sandbox when there is one (``ctx.commands``): the
    project read-only unless ``writable``, no network unless ``network``,
    ``scratch`` directories outside the project read-write.
    """
    jail = ctx.commands
    sandboxed = jail is not None and jail.sandboxed
    if jail is not None and not sandboxed and ctx.config.tools.shell.sandbox == "bwrap":
        raise errors.process_error(
            f"{tool}: commands must run in the sandbox ([tools.shell] sandbox = "
            f'"bwrap"), but {jail.availability.reason}; nothing was run',
            recovery=["Install bubblewrap, or ask the user to change the setting"],
        )
    channel = Channel(ctx.emit, env.secrets)
    cap: ProcessCap | None = None
    late: list[str] = []  # masks made once the sandbox is set up
    run_argv, run_env = argv, env.env
    if sandboxed:
        assert jail is not None
        run_env = {**env.env, "TMPDIR": "/tmp"}  # noqa: S108 - the sandbox's private tmpfs
        run_env.setdefault("HOME", jail.home)
        for name, value in git_identity(ctx.sandbox.project_root).items():
            run_env.setdefault(name, value)
        request = Request(cwd, run_env, writable=writable, network=network, scratch=scratch)
        if jail.outside_masks is None and jail.many_masks():
            jail.outside_masks = outside_works(jail, request)
        run_argv = jail.argv(request, argv, late=late)
        run_env = jail.launch_env(run_env)
        cap = ProcessCap(jail.max_processes)
    tag = uuid.uuid4().hex[:12]
    try:
        outcome = process.run(
            run_argv,
            cwd=cwd,
            env=run_env,
            stdin=stdin,
            timeout=lim.timeout,
            cancel=ctx.cancel,
            capture_bytes=ctx.config.tools.shell.max_capture_bytes,
            on_output=channel,
            kill_grace=lim.grace,
            drain_seconds=lim.drain,
            bwrap=sandboxed,
            on_sandbox_start=(lambda pid: cap.apply(pid, tag)) if cap is not None else None,
            on_sandbox_ready=(
                (lambda pid, parent: _mask_late(jail, pid, parent, late)) if late else None
            ),
        )
    except OSError as exc:
        channel.abandon()
        raise start_failure(tool, argv, exc, env) from None
    except errors.ToolFailure:
        channel.abandon()
        raise
    finally:
        if cap is not None:
            cap.release()
    if ctx.cancel.is_set() or outcome.cancelled:
        channel.abandon()  # the executor has answered already; nothing is shown late
        raise errors.cancelled()
    channel.close(CLOSE_SECONDS)
    if sandboxed:
        _sandbox_start_failure(tool, argv, outcome, env)
    return outcome


_outside_lock = threading.Lock()


def outside_works(jail: CommandSandbox, request: Request) -> bool:
    """Whether masks can be made from outside a sandbox here: one masked file, probed
    once per worker (a bubblewrap that cannot, or a kernel that refuses, leaves them
    to the helper)."""
    with _outside_lock:
        if jail.outside_masks is not None:
            return jail.outside_masks
        bwrap = jail.availability.bwrap
        assert bwrap is not None
        jail.argv(request, [])  # the options every sandbox here has (last_base)
        ok = False
        with tempfile.TemporaryDirectory(prefix="forj-maskprobe-") as tmp:
            secret = os.path.join(tmp, "secret")
            with open(secret, "w") as fh:
                fh.write("probe-secret\n")
            probe = ["sh", "-c", 'cat "$1" 2>/dev/null; echo ran', "sh", secret]
            try:
                done = process.run(
                    [bwrap, *jail.last_base, "--bind", tmp, tmp, "--", *probe],
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin"},
                    timeout=10,
                    bwrap=True,
                    on_sandbox_ready=lambda pid, parent: _mask_late(jail, pid, parent, [secret]),
                )
                ok = done.returncode == 0 and bytes(done.stdout.head) == b"ran\n"
            except (OSError, errors.ToolFailure) as exc:
                log.info("masks are not made from outside the sandbox: %s", exc)
        jail.outside_masks = ok
        return ok


def _mask_late(jail: CommandSandbox | None, init: int, parent: int, paths: list[str]) -> None:
    """Make the masks left to after the sandbox's setup; the command never starts without them."""
    assert jail is not None
    why = jail.mask_late(init, paths, process.fork_tracked, process.forget, parent)
    if why is not None:
        raise errors.process_error(
            f"the command sandbox could not be set up: {why}; nothing was run",
            recovery=["Tell the user; the sandbox's setup failed, not the command"],
        )


def confinement(ctx: ToolContext, writable: bool = True) -> str:
    """How a command of this call runs: "sandbox", "read-only sandbox" or "none"."""
    if ctx.commands is None or not ctx.commands.sandboxed:
        return "none"
    return "sandbox" if writable else "read-only sandbox"


def _sandbox_start_failure(tool: str, argv: list[str], outcome: Outcome, env: CleanEnv) -> None:
    """bubblewrap says why it could not start the command: report that, not exit 1."""
    if outcome.returncode != 1 or outcome.stdout.total:
        return
    first = bytes(outcome.stderr.head[:4096]).split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.startswith("bwrap: "):
        return
    if first.startswith("bwrap: execvp "):
        if first.endswith("No such file or directory"):
            raise start_failure(tool, argv, FileNotFoundError(), env)
        if first.endswith("Permission denied"):
            raise start_failure(tool, argv, PermissionError(), env)
    raise errors.process_error(
        f"{tool}: the command sandbox could not be set up: {sanitize(first[7:])}; nothing was run",
        recovery=["Tell the user; the sandbox's setup failed, not the command"],
    )


_GIT_IDENTITY: list[dict[str, str]] = []


def git_identity(root: str) -> dict[str, str]:
    """The user's git name and e-mail as environment variables (~/.gitconfig is hidden).

    git runs here outside the sandbox: never one found in the project ``root``.
    """
    if _GIT_IDENTITY:
        return _GIT_IDENTITY[0]
    found: dict[str, str] = {}
    git = shutil.which("git", path=program_path(os.environ.get("PATH", os.defpath), root))
    for key, names in (
        ("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
        ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")),
    ):
        if git is None:
            break
        try:
            done = subprocess.run(
                [git, "config", "--global", "--get", key],
                capture_output=True,
                timeout=5,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        value = done.stdout.decode("utf-8", "replace").strip()
        if done.returncode == 0 and value:
            for name in names:
                found[name] = value
    _GIT_IDENTITY.append(found)
    return found


def start_failure(tool: str, argv: list[str], exc: OSError, env: CleanEnv) -> errors.ToolFailure:
    program = argv[0]
    if isinstance(exc, FileNotFoundError):
        return errors.process_error(
            f"{tool}: program not found: {program!r}",
            recovery=[
                "Check the program's name; it is looked up on PATH: "
                + env.env.get("PATH", os.defpath),
                "Give it as a path relative to cwd if it lives in the project (e.g. './run.sh')",
                "Shell features (pipes, globs, variables) need the command as a string, which "
                "runs through sh -c",
            ],
            program=program,
        )
    if isinstance(exc, PermissionError):
        return errors.process_error(
            f"{tool}: {program!r} cannot be run: permission denied",
            recovery=[
                "Make sure it is an executable file (chmod +x), or run it through its "
                "interpreter (e.g. ['sh', 'script.sh'])",
            ],
            program=program,
        )
    return errors.process_error(
        f"{tool}: {program!r} could not be started: {exc.strerror or exc}",
        recovery=["Check the program and its arguments", "Try a simpler command first"],
        program=program,
        errno=exc.errno,
    )


def exit_status(returncode: int) -> dict[str, Any]:
    """``{exit_code}`` and, for a process killed by a signal, ``signal`` (its name)."""
    out: dict[str, Any] = {"exit_code": returncode}
    if returncode < 0:
        try:
            out["signal"] = signal.Signals(-returncode).name
        except ValueError:
            out["signal"] = f"signal {-returncode}"
    return out


# --- fitting output into the limit -------------------------------------------------------------


def json_len(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def omitted_marker(count: int) -> str:
    return f"\n[... {count} bytes omitted ...]\n"


def decode_output(data: bytes, secrets: list[str], *, skip_partial: bool = False) -> str:
    """Output bytes as clean text: invalid UTF-8 replaced, secrets redacted, controls removed."""
    if skip_partial:
        # A tail cut may start inside a character: drop its continuation bytes.
        k = 0
        while k < min(3, len(data)) and 0x80 <= data[k] < 0xC0:
            k += 1
        data = data[k:]
    text = data.decode("utf-8", "replace")
    return sanitize(redact_values(text, secrets)) if secrets else sanitize(text)


def _cut_bytes_text(text: str, max_bytes: int, *, from_end: bool) -> str:
    """At most ``max_bytes`` of UTF-8 from the start (or the end) of ``text``, at a line
    boundary when one is near."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    if max_bytes <= 0:
        return ""
    if from_end:
        piece = data[len(data) - max_bytes :]
        nl = piece.find(b"\n", 0, max(len(piece) // 5, 1))
        if nl >= 0:
            piece = piece[nl + 1 :]
        return _decode_lenient(piece, skip_partial=True)
    piece = data[:max_bytes]
    nl = piece.rfind(b"\n", len(piece) - max(len(piece) // 5, 1))
    if nl >= 0:
        piece = piece[: nl + 1]
    return piece.decode("utf-8", "ignore")


def _decode_lenient(data: bytes, *, skip_partial: bool) -> str:
    k = 0
    if skip_partial:
        while k < min(3, len(data)) and 0x80 <= data[k] < 0xC0:
            k += 1
    return data[k:].decode("utf-8", "ignore")


def fit_text(
    head: str, tail: str, dropped: int, budget: int, head_share: float = HEAD_SHARE
) -> tuple[str, int]:
    """``head`` + (marker) + ``tail`` in at most ``budget`` bytes of JSON string.

    ``dropped`` bytes already lie between head and tail (the capture's cap);
    whatever is cut here is added to the count in the marker.  Returns the
    text and the number of bytes left out.
    """
    if dropped == 0:
        head, tail = head + tail, ""
    whole = head + (omitted_marker(dropped) if dropped else "") + tail
    if json_len(whole) <= budget:
        return whole, dropped
    total_bytes = len(head.encode("utf-8")) + len(tail.encode("utf-8"))
    ratio = max(json_len(head + tail) / max(total_bytes, 1), 1.0)
    room = budget - json_len(omitted_marker(dropped + total_bytes)) - 2
    target = int(room / ratio)
    for _ in range(20):
        if target <= 0:
            break
        head_bytes = int(target * head_share)
        tail_bytes = target - head_bytes
        if tail:
            tail_len = len(tail.encode("utf-8"))
            head_len = len(head.encode("utf-8"))
            # Give a short side's unused share to the other.
            if tail_len < tail_bytes:
                head_bytes += tail_bytes - tail_len
                tail_bytes = tail_len
            elif head_len < head_bytes:
                tail_bytes += head_bytes - head_len
                head_bytes = head_len
            first = _cut_bytes_text(head, head_bytes, from_end=False)
            last = _cut_bytes_text(tail, tail_bytes, from_end=True)
        else:
            first = _cut_bytes_text(head, head_bytes, from_end=False)
            last = _cut_bytes_text(head, tail_bytes, from_end=True)
        kept = len(first.encode("utf-8")) + len(last.encode("utf-8"))
        out = first + omitted_marker(dropped + total_bytes - kept) + last
        if json_len(out) <= budget:
            return out, dropped + total_bytes - kept
        target = int(target * 0.9)
    return omitted_marker(dropped + total_bytes).strip()[: max(budget - 2, 0)], (
        dropped + total_bytes
    )


@dataclass
class Rendered:
    fields: dict[str, Any]
    omitted: dict[str, int]


def _stream_text(cap: Capture, secrets: list[str]) -> tuple[str, str, int]:
    whole = cap.whole()
    if whole is not None:
        return decode_output(whole, secrets), "", 0
    return (
        decode_output(bytes(cap.head), secrets),
        decode_output(cap.tail, secrets, skip_partial=True),
        cap.omitted,
    )


def render_streams(streams: dict[str, Capture], secrets: list[str], budget: int) -> Rendered:
    """Each stream as text (or base64 when it is binary), all of them within ``budget``."""
    fields: dict[str, Any] = {}
    omitted: dict[str, int] = {}
    binary = {name: b"\0" in bytes(cap.head[:SNIFF_BYTES]) for name, cap in streams.items()}
    texts = {name: _stream_text(cap, secrets) for name, cap in streams.items() if not binary[name]}

    def full_size(name: str) -> int:
        cap = streams[name]
        if binary[name]:
            return 4 * (len(cap.head) + 2) // 3 + 2
        head, tail, dropped = texts[name]
        return json_len(head + (omitted_marker(dropped) if dropped else "") + tail)

    sizes = {name: full_size(name) for name in streams}
    shares = _shares(sizes, max(budget, 0))
    for name, cap in streams.items():
        share = shares[name]
        if binary[name]:
            keep = max((share - 2) // 4 * 3, 0)  # base64 of it: at most share - 2
            data = bytes(cap.head[:keep])
            fields[name] = base64.b64encode(data).decode("ascii")
            fields[f"{name}_encoding"] = "base64"
            if cap.total > len(data):
                omitted[name] = cap.total - len(data)
            continue
        head, tail, dropped = texts[name]
        text, left_out = fit_text(head, tail, dropped, share)
        fields[name] = text
        if left_out:
            omitted[name] = left_out
    return Rendered(fields, omitted)


def _shares(sizes: dict[str, int], budget: int) -> dict[str, int]:
    """Split ``budget`` so a small stream keeps all it needs and the rest goes to the others."""
    shares: dict[str, int] = {}
    left = budget
    order = sorted(sizes, key=lambda n: sizes[n])
    for i, name in enumerate(order):
        fair = left // (len(order) - i)
        shares[name] = min(sizes[name], fair)
        left -= shares[name]
    return shares


def budget_for(ctx: ToolContext, tool: str, skeleton: Any) -> int:
    """Bytes of JSON left for output strings once ``skeleton`` (the result without them)
    and the tool-result envelope are counted."""
    envelope = {"id": ctx.call_id, "name": tool, "ok": False, "error": skeleton}
    used = len(json.dumps(envelope, ensure_ascii=False).encode("utf-8"))
    return ctx.output_limit - EXECUTOR_RESERVE - SLACK_BYTES - used
