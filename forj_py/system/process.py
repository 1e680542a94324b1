"""Running one command: its own session, bounded streaming, time limits, a whole-group kill.

For ``run_shell`` and ``run_tests``:

- **Its own session.**  Every command starts with ``setsid`` (so its process
  group and session ids are its pid), stdin closed unless input is given,
  no controlling terminal (nothing can prompt on ``/dev/tty``), an
  environment the caller has already cleaned.
- **Streaming that never drops a byte.**  Output read from the pipes goes
  into a :class:`Channel` bounded in bytes.  When it is full the reader stops
  reading (the command then blocks on its own writes): it waits, it never
  drops.  The sending thread takes everything queued at once and merges
  neighbouring chunks of the same stream (it coalesces), so a slow
  receiver gets fewer, larger events.
- **Captured output is capped** (:class:`Capture`): the first and the last
  ``limit / 2`` bytes of each stream and the total count, so a 100 MB
  output costs at most ``limit`` bytes of memory.
- **Stopping.**  At the time limit or on cancel: SIGTERM (and SIGCONT) to
  the process group and to every other process of its session, then
  SIGKILL to those and to every descendant after a grace period.  Once the
  command's own process has exited, anything it left behind in its group
  or session is stopped the same way: a command leaves nothing running.
- **Pipes held open** by a process outside the group cannot hang the
  worker: after the command exits the pipes are read for at most
  ``drain_seconds`` more, and after a SIGKILL for at most
  :data:`KILLED_DRAIN_SECONDS`; then the worker closes its ends.
- **Reaping.**  On Linux the worker is a child subreaper
  (:func:`become_subreaper`): processes orphaned by a command are
  re-parented to the worker instead of init, and :func:`reap_orphans`
  collects their exit status.  It reaps only children of the worker's main
  thread (the kernel hands orphans to the first live thread of the
  subreaper; the main thread itself starts nothing), never a child some
  ``Popen`` is waiting for (those belong to the thread that started them).
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..output import REDACTED, sanitize

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20
PIPE_BYTES = 1 << 20  # ask Linux for 1 MiB pipes: fewer wake-ups at high output rates
# After SIGKILL the pipes are read this much longer (a process outside the
# group may still hold them); then the worker closes its ends.
KILLED_DRAIN_SECONDS = 0.5
# How long bubblewrap may take to report the sandbox's init.
SANDBOX_START_SECONDS = 10.0
POLL_SECONDS = 0.05
# The streaming channel: at most this many bytes queued, and events of at
# most this size (coalesced from smaller reads).
CHANNEL_BYTES = 4 << 20
# 128 KiB of escape-heavy output (``yes``) costs Emacs about 12 ms to
# decode; a larger event would stall its timers (bench/shell-bench.el).
EVENT_BYTES = 1 << 17

_PR_SET_CHILD_SUBREAPER = 36
_LINUX = sys.platform.startswith("linux")


# --- captured output ------------------------------------------------------------------


class Capture:
    """The first and last ``limit // 2`` bytes of a stream, and how many there were."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
            if not data:
                return
        self._tail += data
        # Trim in bulk, not on every read: amortized linear.
        if len(self._tail) > 2 * self.tail_limit:
            del self._tail[: len(self._tail) - self.tail_limit]

    @property
    def tail(self) -> bytes:
        return bytes(self._tail[-self.tail_limit :] if self.tail_limit else b"")

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def whole(self) -> bytes | None:
        """Everything, if nothing was dropped."""
        return bytes(self.head) + self.tail if self.omitted == 0 else None


# --- streaming ------------------------------------------------------------------------


class Channel:
    """A bounded, lossless queue of output chunks, sent as text by its own thread.

    ``put`` never blocks; the reader asks :meth:`has_room` first and waits
    with :meth:`wait_room` while the channel is full, which stops it reading
    the pipes: back-pressure reaches the command.  The sender decodes UTF-8
    incrementally (a character split between reads is not broken), redacts
    ``secrets`` (holding back an end that could begin one, so a secret split
    between chunks is still caught), removes terminal controls, and calls
    ``send(kind, text)``.  After :meth:`abandon` nothing more is sent.
    Only text that could be the start of a secret or of an escape sequence
    is held back, so a short line shows at once.
    """

    def __init__(
        self,
        send: Callable[[str, str], None],
        secrets: list[str] | None = None,
        capacity: int = CHANNEL_BYTES,
        event_bytes: int = EVENT_BYTES,
    ) -> None:
        self._send = send
        self._secrets = sorted({s for s in secrets or [] if len(s) >= 4}, key=len, reverse=True)
        self.capacity = capacity
        self.event_bytes = event_bytes
        self._items: deque[tuple[str, bytes]] = deque()
        self._size = 0
        self._cond = threading.Condition()
        self._closed = False
        self._abandoned = False
        self._decoders = {
            kind: codecs.getincrementaldecoder("utf-8")("replace") for kind in ("stdout", "stderr")
        }
        self._carry = {"stdout": "", "stderr": ""}
        self.sent_bytes = 0  # raw bytes handed to send, for the benchmarks
        self._thread = threading.Thread(target=self._pump, name="forj-stream", daemon=True)
        self._thread.start()

    def put(self, kind: str, data: bytes) -> None:
        with self._cond:
            if self._abandoned:
                return
            self._items.append((kind, data))
            self._size += len(data)
            self._cond.notify_all()

    def has_room(self) -> bool:
        return self._size < self.capacity or self._abandoned

    def wait_room(self, timeout: float) -> None:
        with self._cond:
            if self._size >= self.capacity and not self._abandoned:
                self._cond.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """No more input: send what is queued, then stop.

        Waits up to ``timeout`` for the receiver; what it has not taken by
        then is dropped (a receiver that stopped reading must not hold the
        call forever).
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the receiver of streamed output is stuck; dropping the rest")
            self.abandon()

    def abandon(self) -> None:
        """Drop what is queued and send nothing more (the call is over)."""
        with self._cond:
            self._abandoned = True
            self._items.clear()
            self._size = 0
            self._cond.notify_all()

    def _take(self) -> list[tuple[str, bytes]] | None:
        with self._cond:
            while not self._items and not self._closed and not self._abandoned:
                self._cond.wait()
            if self._abandoned or (self._closed and not self._items):
                return None
            out: list[tuple[str, bytearray]] = []
            taken = 0
            while self._items and taken < self.event_bytes:
                kind, data = self._items.popleft()
                room = self.event_bytes - taken
                if len(data) > room:
                    # One read can be larger than an event: a big event costs
                    # Emacs a long pause to decode, so split it.
                    self._items.appendleft((kind, data[room:]))
                    data = data[:room]
                taken += len(data)
                if out and out[-1][0] == kind and len(out[-1][1]) < self.event_bytes:
                    out[-1][1].extend(data)  # coalesce neighbours of one stream
                else:
                    out.append((kind, bytearray(data)))
            self._size -= taken
            self._cond.notify_all()
        return [(kind, bytes(data)) for kind, data in out]

    def _pump(self) -> None:
        try:
            while True:
                batch = self._take()
                if batch is None:
                    break
                for kind, data in batch:
                    self._emit(kind, self._decoders[kind].decode(data), final=False)
                    self.sent_bytes += len(data)
            if not self._abandoned:
                for kind, decoder in self._decoders.items():
                    self._emit(kind, decoder.decode(b"", final=True), final=True)
        except Exception:
            log.exception("streaming output failed; the result is not affected")
            self.abandon()

    def _emit(self, kind: str, text: str, *, final: bool) -> None:
        text = self._carry[kind] + text
        self._carry[kind] = ""
        if not final:
            keep = _secret_prefix_at_end(text, self._secrets)
            # An escape sequence cut in two would lose its head to the
            # sanitizer and show its tail: hold it back for the next chunk.
            esc = text.rfind("\x1b", max(len(text) - 32, 0))
            if esc >= 0:
                keep = max(keep, len(text) - esc)
            if keep:
                keep = min(keep, len(text))
                text, self._carry[kind] = text[: len(text) - keep], text[len(text) - keep :]
        if self._secrets:
            text = redact_values(text, self._secrets)
        text = sanitize(text)
        if text and not self._abandoned:
            self._send(kind, text)


def _secret_prefix_at_end(text: str, secrets: list[str]) -> int:
    """Length of the longest end of ``text`` that begins a secret (to hold back)."""
    keep = 0
    for secret in secrets:
        window = text[-(len(secret) - 1) :] if len(secret) > 1 else ""
        start = window.find(secret[0])
        while start >= 0:
            if secret.startswith(window[start:]):
                keep = max(keep, len(window) - start)
                break
            start = window.find(secret[0], start + 1)
    return keep


def redact_values(text: str, secrets: list[str]) -> str:
    """Replace every occurrence of each secret value (4 characters or more)."""
    for value in secrets:
        if len(value) >= 4 and value in text:
            text = text.replace(value, REDACTED)
    return text


# --- processes ------------------------------------------------------------------------


@dataclass
class Outcome:
    """How a command ended and what it wrote."""

    returncode: int  # negative: killed by that signal (Python's convention)
    stdout: Capture
    stderr: Capture
    duration: float
    timed_out: bool = False
    cancelled: bool = False
    # Processes the command left in its group or session, stopped after it exited.
    leftovers_stopped: bool = False
    # The pipes were still held open when the worker stopped reading them.
    pipes_abandoned: bool = False


_active_lock = threading.Lock()
_active: set[int] = set()  # pids some Popen is waiting for: never reaped by reap_orphans
_subreaper = False
_main_tid: int | None = None


def run(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    stdin: bytes | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    capture_bytes: int = 4 << 20,
    on_output: Channel | None = None,
    kill_grace: float = 2.0,
    drain_seconds: float = 1.0,
    bwrap: bool = False,
    on_sandbox_start: Callable[[int], object] | None = None,
    on_sandbox_ready: Callable[[int, int], object] | None = None,
) -> Outcome:
    """Run ``argv`` to the end, the time limit or ``cancel``; never leave its group behind.

    With ``bwrap``, ``argv`` is a bubblewrap command line (``argv[0]`` is
    bwrap): the sandbox is held before the command starts until
    ``on_sandbox_start`` has been given the pid of the sandbox's init (to
    put it under a process cap); SIGTERM then goes to the command's
    processes but not to bubblewrap's own, so the command's handler gets
    its grace period, and SIGKILL to the init ends the whole namespace.

    Raises ``OSError`` (``FileNotFoundError``, ``PermissionError``, ...) when
    the program cannot be started.
    """
    cancel = cancel or threading.Event()
    started = time.monotonic()
    deadline = started + timeout if timeout is not None else None
    status_r = block_w = -1
    pass_fds: tuple[int, ...] = ()
    if bwrap:
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        argv = [argv[0], "--json-status-fd", str(status_w), "--block-fd", str(block_r), *argv[1:]]
        pass_fds = (status_w, block_r)
    try:
        with _active_lock:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
            _active.add(proc.pid)
    except BaseException:
        for fd in (status_r, block_w, *pass_fds):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        raise
    spare: frozenset[int] = frozenset()
    try:
        if bwrap:
            for fd in pass_fds:
                os.close(fd)
            init = _sandbox_init(status_r, SANDBOX_START_SECONDS)
            if init is not None:
                spare = frozenset({proc.pid, init})
                if on_sandbox_start is not None:
                    on_sandbox_start(init)
                if on_sandbox_ready is not None:
                    # bubblewrap reads the block descriptor once its own
                    # mounts are made: only then is its namespace complete.
                    if _blocked_reading(init, block_r, SANDBOX_START_SECONDS):
                        on_sandbox_ready(init, proc.pid)
                    elif proc.poll() is None:
                        raise OSError(errno.EIO, "the sandbox did not finish setting up")
            elif on_sandbox_ready is not None and proc.poll() is None:
                # What must be done before the command starts could not be.
                raise OSError(errno.EIO, "the sandbox did not report its first process")
            # Let the command start (or, if bwrap failed, let it report why).
            with contextlib.suppress(OSError):
                os.write(block_w, b"1")
            with contextlib.suppress(OSError):
                os.close(block_w)
            block_w = -1
        outcome = _supervise(
            proc,
            stdin,
            started,
            deadline,
            cancel,
            Capture(capture_bytes),
            Capture(capture_bytes),
            on_output,
            kill_grace,
            drain_seconds,
            spare,
            contained=bwrap,
        )
        if bwrap and 128 < outcome.returncode <= 128 + 64:
            # bubblewrap reports a command killed by signal N as exit 128+N,
            # as shells do; report it as the signal, like an unconfined run.
            outcome.returncode = -(outcome.returncode - 128)
        return outcome
    finally:
        if status_r >= 0:
            with contextlib.suppress(OSError):
                os.close(status_r)
        # Whatever happened above, the group is dead and the child reaped.
        if proc.poll() is None:
            _signal_tree(proc.pid, signal.SIGKILL, descendants=True)
            _wait(proc)
        if block_w >= 0:
            # Only now: an end of file would have let a held sandbox start its
            # command (bubblewrap does not tell it from the byte).
            with contextlib.suppress(OSError):
                os.close(block_w)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with _active_lock:
            _active.discard(proc.pid)
        reap_orphans()


def _supervise(
    proc: subprocess.Popen[bytes],
    stdin: bytes | None,
    started: float,
    deadline: float | None,
    cancel: threading.Event,
    out: Capture,
    err: Capture,
    channel: Channel | None,
    kill_grace: float,
    drain_seconds: float,
    spare: frozenset[int] = frozenset(),
    *,
    contained: bool = False,
) -> Outcome:
    """``contained``: ``proc`` is bubblewrap with its own PID namespace."""
    assert proc.stdout is not None and proc.stderr is not None
    pid = proc.pid
    sel = selectors.DefaultSelector()
    captures = {"stdout": out, "stderr": err}
    for kind, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        fd = stream.fileno()
        os.set_blocking(fd, False)
        _widen_pipe(fd)
        sel.register(fd, selectors.EVENT_READ, kind)
    pending = memoryview(stdin or b"")
    if proc.stdin is not None:
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
    outcome = Outcome(0, out, err, 0.0)
    term_at: float | None = None  # SIGTERM sent
    kill_at: float | None = None  # SIGKILL sent
    exited_at: float | None = None
    # Time spent waiting for the receiver (back-pressure) does not count
    # toward the drain limits: a slow Emacs is not a process holding pipes.
    stalled = 0.0
    stalled_at_exit = stalled_at_kill = 0.0
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                stalled_at_exit = stalled
            reading = any(k.data != "stdin" for k in sel.get_map().values())
            if exited_at is not None and not reading:
                break
            if term_at is None:
                # Why we stop it, if we do.
                if cancel.is_set():
                    outcome.cancelled = True
                elif exited_at is None and deadline is not None and now >= deadline:
                    outcome.timed_out = True
                elif exited_at is not None and (
                    now - exited_at - (stalled - stalled_at_exit) >= drain_seconds
                    # A leftover writing without end, to a slow receiver: the
                    # call's own limit still holds.
                    or (deadline is not None and now >= deadline)
                ):
                    outcome.leftovers_stopped = True  # something still holds the pipes
                if outcome.cancelled or outcome.timed_out or outcome.leftovers_stopped:
                    _signal_tree(pid, signal.SIGTERM, spare=spare)
                    term_at = now
            elif kill_at is None and (
                now - term_at >= kill_grace or (exited_at is not None and not _group_alive(pid))
            ):
                _signal_tree(pid, signal.SIGKILL, descendants=True)
                kill_at = now
                stalled_at_kill = stalled
            elif (
                kill_at is not None
                and (since_kill := now - kill_at - (stalled - stalled_at_kill))
                >= KILLED_DRAIN_SECONDS
                and (exited_at is not None or since_kill >= 4 * KILLED_DRAIN_SECONDS)
            ):
                # Killed, and the pipes are still open: a process outside the
                # group holds them.  Stop reading; the worker must not hang.
                outcome.pipes_abandoned = reading
                break
            if channel is not None and not channel.has_room():
                waited = time.monotonic()
                channel.wait_room(POLL_SECONDS)  # back-pressure: stop reading for now
                stalled += time.monotonic() - waited
                if cancel.is_set():
                    channel.abandon()
                continue
            if not sel.get_map():
                # The pipes are closed; usually the exit is a moment behind.
                # Wait for the exit itself rather than a whole poll interval
                # (a short command would otherwise take 50 ms longer).
                if exited_at is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(POLL_SECONDS)
                else:
                    cancel.wait(POLL_SECONDS)
                continue
            for key, _ in sel.select(POLL_SECONDS):
                fd = int(key.fd)
                if key.data == "stdin":
                    pending = _feed(fd, pending)
                    if not pending:
                        sel.unregister(fd)
                        assert proc.stdin is not None
                        with contextlib.suppress(OSError):
                            proc.stdin.close()
                    continue
                try:
                    data = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    log.warning("reading %s of %d: %s", key.data, pid, exc)
                    data = b""
                if not data:
                    sel.unregister(fd)
                    continue
                captures[key.data].add(data)
                if channel is not None:
                    channel.put(key.data, data)
    finally:
        sel.close()
    if proc.poll() is None and kill_at is None:
        # It closed its pipes and runs on past its limit or a cancel.
        _signal_tree(pid, signal.SIGKILL, descendants=True)
    _wait(proc)
    # Whatever its group or session still holds (background jobs that closed
    # their pipes) is stopped too, SIGTERM first; the worker waits until it is gone.
    # bubblewrap that exited by itself waited for its PID namespace's init,
    # and the kernel ends a namespace with its init: nothing of the command
    # is left, and the scan of every process (milliseconds) is spared.
    whole = contained and term_at is None and proc.returncode is not None and proc.returncode >= 0
    if not whole and _group_alive(pid):
        if not (outcome.timed_out or outcome.cancelled):
            outcome.leftovers_stopped = True
        _signal_tree(pid, signal.SIGTERM, spare=spare)
        if not _wait_group_gone(pid, kill_grace, quiet=True):
            _signal_tree(pid, signal.SIGKILL, descendants=True)
            _wait_group_gone(pid, 2.0)
    outcome.returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    outcome.duration = time.monotonic() - started
    return outcome


def _blocked_reading(pid: int, fd: int, limit: float) -> bool:
    """Wait until ``pid`` waits in ``read`` on its descriptor ``fd``; False if it
    ended first or ``limit`` passed."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/syscall") as fh:
                fields = fh.read().split()
        except OSError:
            return False
        if len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == fd:
            return True
        time.sleep(0.0002)
    return False


def _sandbox_init(status_fd: int, limit: float) -> int | None:
    """The pid of the sandbox's init, from bubblewrap's first JSON status line."""
    import json

    buf = b""
    end = time.monotonic() + limit
    with selectors.DefaultSelector() as sel:
        sel.register(status_fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                log.warning("bubblewrap did not report its child within %.0f s", limit)
                return None
            chunk = os.read(status_fd, 4096)
            if not chunk:
                return None  # bwrap exited before starting anything; stderr says why
            buf += chunk
    try:
        pid = json.loads(buf.split(b"\n", 1)[0]).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _feed(fd: int, pending: memoryview) -> memoryview:
    try:
        return pending[os.write(fd, pending[:65536]) :]
    except BlockingIOError:
        return pending
    except OSError:  # the command closed its stdin without reading it all: fine
        return pending[:0]


def _widen_pipe(fd: int) -> None:
    if not _LINUX:
        return
    import fcntl

    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)


def _wait(proc: subprocess.Popen[bytes], limit: float = 5.0) -> None:
    """Reap the command's own process; one stuck in the kernel is left, not waited for."""
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        log.warning("process %d did not exit after SIGKILL; not waiting for it", proc.pid)


# --- process trees (Linux /proc; elsewhere the process group only) ---------------------


@dataclass(frozen=True)
class _Proc:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int


def _snapshot() -> list[_Proc]:
    procs = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and ")".
        rest = raw[raw.rfind(b")") + 2 :].split()
        try:
            procs.append(
                _Proc(int(name), rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3]))
            )
        except (IndexError, ValueError):
            continue
    return procs


def _tree(leader: int, *, descendants: bool) -> list[_Proc]:
    """Processes of the group and session ``leader`` started, and (optionally) their children."""
    procs = _snapshot()
    chosen = {p.pid: p for p in procs if leader in (p.pgrp, p.session)}
    if descendants:
        children: dict[int, list[_Proc]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p)
        stack = list(chosen)
        while stack:
            for child in children.get(stack.pop(), []):
                if child.pid not in chosen and child.pid != os.getpid():
                    chosen[child.pid] = child
                    stack.append(child.pid)
    chosen.pop(os.getpid(), None)
    return list(chosen.values())


def _signal_tree(
    leader: int, sig: int, *, descendants: bool = False, spare: frozenset[int] = frozenset()
) -> None:
    """Signal the process group; on Linux also the rest of the session (and descendants).

    ``spare`` (bubblewrap's own processes) are left out of a SIGTERM: bwrap
    dies of it and takes the command with it before its grace period.
    """
    if spare and sig != signal.SIGKILL and _LINUX:
        for p in _tree(leader, descendants=True):
            if p.pid in spare or p.state == "Z":
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
                if sig == signal.SIGTERM:
                    os.kill(p.pid, signal.SIGCONT)
        return
    try:
        os.killpg(leader, sig)
        if sig == signal.SIGTERM:
            os.killpg(leader, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    except ProcessLookupError:
        pass
    except PermissionError as exc:  # log it: a call must always complete
        log.warning("cannot signal process group %d: %s", leader, exc)
    if not _LINUX:
        return
    for p in _tree(leader, descendants=descendants):
        if p.pgrp == leader or p.state == "Z":
            continue
        try:
            os.kill(p.pid, sig)
            if sig == signal.SIGTERM:
                os.kill(p.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def _group_alive(leader: int) -> bool:
    """Whether a process of the group or session (other than a zombie) is left."""
    if _LINUX:
        return any(p.state != "Z" for p in _tree(leader, descendants=False))
    try:
        os.killpg(leader, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _wait_group_gone(leader: int, limit: float, *, quiet: bool = False) -> bool:
    end = time.monotonic() + limit
    while True:
        reap_orphans()
        if not _group_alive(leader):
            return True
        if time.monotonic() >= end:
            if not quiet:
                log.warning("process group %d still has live processes after SIGKILL", leader)
            return False
        time.sleep(0.01)


def group_members(leader: int) -> list[int]:
    """Pids of every live (non-zombie) process of the group or session ``leader`` began."""
    if _LINUX:
        return sorted(p.pid for p in _tree(leader, descendants=False) if p.state != "Z")
    try:
        os.killpg(leader, 0)
        return [leader]
    except ProcessLookupError:
        return []


# --- the subreaper --------------------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); True if it is.

    Call from the main thread before any command runs: orphans are handed to
    the first live thread, the main one, which is how :func:`reap_orphans`
    tells them from children other threads started.
    """
    global _subreaper, _main_tid
    if not _LINUX:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    _subreaper = True
    _main_tid = threading.main_thread().native_id
    return True


def fork_tracked() -> int:
    """``os.fork``, the child kept from :func:`reap_orphans` until :func:`forget`."""
    with _active_lock:
        pid = os.fork()
        if pid != 0:
            _active.add(pid)
        return pid


def forget(pid: int) -> None:
    """The end of :func:`fork_tracked`'s hold on ``pid`` (reaped by its caller)."""
    with _active_lock:
        _active.discard(pid)


def reap_orphans() -> int:
    """Collect the exit status of orphans re-parented to this process; how many were reaped."""
    if not _subreaper or _main_tid is None:
        return 0
    try:
        with open(f"/proc/self/task/{_main_tid}/children") as fh:
            pids = [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return 0
    reaped = 0
    for pid in pids:
        with _active_lock:
            if pid in _active:
                continue
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
        if done:
            reaped += 1
    return reaped


def start_reaper(interval: float = 1.0) -> threading.Thread | None:
    """Reap orphans every ``interval`` seconds (only when :func:`become_subreaper` worked)."""
    if not _subreaper:
        return None

    def loop() -> None:
        while True:
            time.sleep(interval)
            try:
                reap_orphans()
            except Exception:
                log.exception("reaping orphans failed")

    thread = threading.Thread(target=loop, name="forj-reaper", daemon=True)
    thread.start()
    return thread
