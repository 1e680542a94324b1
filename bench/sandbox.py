"""The command sandbox's start-up cost, part of `make bench`.  Reports medians; asserts nothing.

Runs ``true`` through ``process.run`` (the path every command takes: own
session, pipes, supervision, reaping) plainly and inside bubblewrap (the
argv built by ``CommandSandbox``, many masks made while bubblewrap waits as
``run_shell`` has them made, the block/status handshake, the process
cap), alternating the two so both see the same machine, with 0, 100 and
1,000 denied files to mask.  The added cost is the difference of the
medians.  Also the whole ``run_shell true`` call as a client makes it (a
worker process: plan, execute approved, the reply), alternated with a
bare fork/exec of ``true``, in a project with no denied file and with
1,000 (each beside an ordinary file).

Run alone: ``.venv/bin/python bench/sandbox.py``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from common import ROOT  # noqa: F401 - sets the import path for forj_py

from forj_py.safety.commands import CommandSandbox, ProcessCap, Request, probe
from forj_py.safety.paths import Sandbox
from forj_py.system import process
from forj_py.tools._shell import outside_works
from forj_py.transport.client import Client, WorkerProcess

RUNS = 40


def _spawn_true() -> float:
    """The reference: fork/exec of ``true`` and its exit status, nothing else."""
    t0 = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["true"], {"PATH": "/usr/bin:/bin"})
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def _whole_call(c: Client) -> float:
    """``run_shell true`` as a client makes it: plan, execute (approved), the reply."""
    t0 = time.perf_counter()
    calls = [{"id": "x", "name": "run_shell", "args": {"cmd": ["true"]}}]
    plan = c.call("plan", {"calls": calls})
    reply = c.call("execute", {"batch_id": plan["batch_id"], "approved": ["x"]})
    assert reply["results"][0]["ok"], reply
    return time.perf_counter() - t0


def whole_calls(denied: int) -> tuple[float, float]:
    """Medians of the reference and of the whole call in a worker process, alternated,
    in a project with ``denied`` secrets each beside an ordinary file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        state = Path(tmp) / "state"
        root.mkdir()
        for i in range(denied):
            (root / f"dir{i % 50}").mkdir(exist_ok=True)
            (root / f"dir{i % 50}" / f"secret{i}.key").write_text("x")
            (root / f"dir{i % 50}" / "README").write_text("x")
        with WorkerProcess(root, state_dir=state) as proc, Client(proc.port) as c:
            c.call("hello", {"token": proc.token, "client": {"name": "bench", "version": "0"}})
            refs, calls = [], []
            for i in range(RUNS + 5):
                a = _spawn_true()
                b = _whole_call(c)
                if i >= 5:
                    refs.append(a)
                    calls.append(b)
        return statistics.median(refs), statistics.median(calls)


def _once(
    argv: list[str], cwd: str, bwrap: bool, cap: ProcessCap | None, late: list[str] | None = None
) -> float:
    t0 = time.perf_counter()
    process.run(
        argv,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        timeout=10,
        cancel=threading.Event(),
        bwrap=bwrap,
        on_sandbox_start=(lambda pid: cap.apply(pid, uuid.uuid4().hex[:8])) if cap else None,
        on_sandbox_ready=(
            (
                lambda pid, parent: CommandSandbox.mask_late(
                    pid, late, process.fork_tracked, process.forget, parent
                )
            )
            if late
            else None
        ),
    )
    if cap is not None:
        cap.release()
    return time.perf_counter() - t0


def _measure(denied: int, mixed: bool) -> tuple[float, float, float]:
    """``mixed``: each directory of secrets also holds an ordinary file, so every
    secret is its own mount; otherwise the directories hold only secrets."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        for i in range(denied):
            (root / f"dir{i % 50}").mkdir(exist_ok=True)
            (root / f"dir{i % 50}" / f"secret{i}.key").write_text("x")
            if mixed:
                (root / f"dir{i % 50}" / "README").write_text("x")
        jail = CommandSandbox(Sandbox(root), probe())
        jail.start()
        jail.masks.wait()
        request = Request(str(root), {"PATH": "/usr/bin:/bin"})
        if jail.many_masks():
            outside_works(jail, request)  # as run_shell probes it
        build = []
        plain, boxed = [], []
        for i in range(RUNS + 5):
            t0 = time.perf_counter()
            late: list[str] = []  # as run_shell does: many masks made while bwrap waits
            argv = jail.argv(request, ["true"], late=late)
            build.append(time.perf_counter() - t0)
            a = _once(["true"], str(root), False, None)
            b = _once(argv, str(root), True, ProcessCap(512), late)
            if i >= 5:  # warm-up
                plain.append(a)
                boxed.append(b)
        jail.close()
        return statistics.median(plain), statistics.median(boxed), statistics.median(build)


def main() -> list[tuple[str, str, str]]:
    if shutil.which("bwrap") is None or not probe().sandboxed:
        return [("command sandbox start-up", "bubblewrap unavailable: not measured", "—")]
    process.become_subreaper()
    rows = []
    for denied in (0, 1000):
        ref, whole = whole_calls(denied)
        rows.append(
            (
                f"`run_shell true`, whole call (plan, execute, reply; worker process), "
                f"{denied} denied files beside other files, vs fork/exec of `true`",
                f"{whole * 1000:.1f} ms vs {ref * 1000:.2f} ms: +{(whole - ref) * 1000:.1f} ms",
                "≤ +10 ms" if denied == 0 else "≤ +50 ms over 0 denied",
            )
        )
    for denied, mixed in ((0, True), (10, True), (100, True), (1000, True), (1000, False)):
        plain, boxed, build = _measure(denied, mixed)
        where = "beside other files" if mixed else "in directories of their own"
        rows.append(
            (
                f"`true` plain vs in the sandbox, {denied} denied files masked"
                + (f" ({where})" if denied else ""),
                f"{plain * 1000:.1f} ms vs {boxed * 1000:.1f} ms: +{(boxed - plain) * 1000:.1f} ms "
                f"(argv {build * 1000:.2f} ms)",
                "≤ +10 ms",
            )
        )
    return rows


if __name__ == "__main__":
    for row in main():
        print(" | ".join(row))
