"""Many denied files in one project: the masks made inside the sandbox by one helper
(``forj_py.safety.maskmount``) instead of one bubblewrap mount each.  Real worker, real
bubblewrap."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call

from forj_py.safety import maskmount
from forj_py.safety.commands import MaskIndex, Masks, Request
from forj_py.service import Worker
from forj_py.tools import _shell

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SECRETS = maskmount.HELPER_FROM + 20


def run(worker: Worker, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    plan = worker.plan({"calls": list(calls)})
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": [c["id"] for c in calls]}, lambda e: None
    )
    return list(result["results"])


def sh(id_: str, cmd: str, **args: Any) -> dict[str, Any]:
    return call(id_, "run_shell", cmd=cmd, **args)


def out(result: dict[str, Any]) -> str:
    body = result["result"] if result["ok"] else result["error"]["details"]
    return str(body.get("stdout", "")) + str(body.get("stderr", ""))


@pytest.fixture
def scattered(project: Path) -> Path:
    """Secrets each beside an ordinary file (one mask each), and a secret directory."""
    for i in range(SECRETS):
        where = project / f"d{i}"
        where.mkdir()
        (where / f"secret{i}.key").write_text(f"leak-me-{i}\n")
        (where / "README").write_text(f"readme-ok-{i}\n")
    (project / ".ssh").mkdir()
    (project / ".ssh" / "id_ed25519").write_text("leak-me-ssh\n")
    return project


@pytest.fixture(params=["outside", "helper"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each many-mask test runs both ways: masks made from outside while bubblewrap
    waits, and (where that cannot be done) by the helper inside."""
    if request.param == "helper":
        monkeypatch.setattr(_shell, "outside_works", lambda jail, request: False)
    return str(request.param)


def _made(worker: Worker, how: str) -> None:
    """Assert the masks of a command are made the way ``how`` says (after a first
    command, which probes the way)."""
    (first,) = run(worker, sh("0", "true"))
    assert first["ok"], first
    late: list[str] = []
    request = Request(worker.root, {"PATH": "/usr/bin:/bin"})
    argv = worker.commands.argv(request, ["true"], late=late)
    assert (maskmount.HELPER in argv) == (how == "helper")
    assert bool(late) == (how == "outside")


def _uses_helper(worker: Worker) -> bool:
    argv = worker.commands.argv(Request(worker.root, {"PATH": "/usr/bin:/bin"}), ["true"])
    return maskmount.HELPER in argv


def test_attack_many_secrets_among_other_files_are_all_masked(
    make_worker: MakeWorker, scattered: Path, how: str
) -> None:
    worker = make_worker()
    _made(worker, how)
    (r,) = run(
        worker,
        sh("1", "cat d*/secret*.key .ssh/id_ed25519; ls -a .ssh; grep -r leak-me .; cat d*/README"),
    )
    text = out(r)
    assert "leak-me" not in text
    assert all(f"readme-ok-{i}" in text for i in range(SECRETS))
    assert (scattered / "d0" / "secret0.key").read_text() == "leak-me-0\n"  # intact


def test_attack_the_command_after_the_mask_helper_holds_no_capability(
    make_worker: MakeWorker, scattered: Path, how: str
) -> None:
    """The helper held CAP_SYS_ADMIN to mount; the command gets none, so it cannot
    unmount or remount a mask (nor one made from outside)."""
    worker = make_worker()
    _made(worker, how)
    (r,) = run(
        worker,
        sh(
            "1",
            "grep ^Cap /proc/self/status; umount d0/secret0.key; echo umount=$?; "
            "mount -o remount,bind,rw d1/secret1.key; echo remount=$?; "
            "cat d0/secret0.key d1/secret1.key",
        ),
    )
    text = out(r)
    caps = [line.split() for line in text.splitlines() if line.startswith("Cap")]
    assert len(caps) == 5 and all(int(value, 16) == 0 for _, value in caps), text
    assert "umount=0" not in text and "remount=0" not in text
    assert "leak-me" not in text


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("helper", [True, False], ids=["many-masks", "few-masks"])
def test_attack_loader_variables_of_the_command_reach_neither_bwrap_nor_the_mask_helper(
    make_worker: MakeWorker, scattered: Path, helper: bool
) -> None:
    """LD_PRELOAD given to the command would run its library in bubblewrap (outside the
    sandbox, in the project) or in the helper (before the masks, with capabilities):
    both start without it, and the command gets it."""
    if not helper:
        for i in range(1, SECRETS):
            shutil.rmtree(scattered / f"d{i}")
    source = scattered / "steal.c"
    source.write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void steal(void) {\n"
        '  char b[64]; int fd = open("d0/secret0.key", O_RDONLY);\n'
        "  if (fd >= 0) { ssize_t n = read(fd, b, sizeof b); if (n > 0) write(2, b, n); }\n"
        "}\n"
    )
    library = scattered / "steal.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    worker = make_worker()
    assert _uses_helper(worker) == helper
    (r,) = run(worker, sh("1", "printenv LD_PRELOAD", env={"LD_PRELOAD": str(library)}))
    text = out(r)
    assert "leak-me" not in text
    assert str(library) in text  # given back to the command


def test_the_mask_helper_runs_only_on_an_interpreter_no_command_can_change(
    make_worker: MakeWorker, scattered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose Python lies in the project (writable by commands) leaves the
    masks to bubblewrap: the helper would run code a command could have planted."""
    planted = scattered / "venv" / "bin" / "python3"
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\n")
    monkeypatch.setattr(maskmount, "interpreter", lambda: str(planted))
    worker = make_worker()
    assert not _uses_helper(worker)
    (r,) = run(worker, sh("1", "cat d*/secret*.key; cat d0/README"))
    assert "leak-me" not in out(r) and "readme-ok-0" in out(r)


def test_a_mask_the_helper_cannot_make_stops_the_command(
    make_worker: MakeWorker, scattered: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Fail closed: when one mask cannot be made the command does not run."""
    worker = make_worker()
    worker.commands.start()
    worker.commands.masks.wait()
    real = worker.commands.masks.current()

    def broken() -> Masks:
        # A path under a regular file: it can be neither opened nor masked.
        return Masks([*real.files, "d0/README/x"], real.dirs, real.readonly)

    monkeypatch.setattr(worker.commands.masks, "current", broken)
    (r,) = run(worker, sh("1", "touch ran"))
    assert not r["ok"]
    assert r["error"]["type"] == "process-error", r
    assert "sandbox could not be set up" in r["error"]["message"]
    assert not (scattered / "ran").exists()


def test_a_command_arriving_before_the_mask_index_is_built_waits_for_it(
    make_worker: MakeWorker, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index of denied files is built in the background after start; a command that
    comes first waits for it, and never runs unmasked."""
    (project / ".env").write_text("TOKEN=leak-me-early\n")
    gate = threading.Event()
    build = MaskIndex._build

    def slow_build(self: MaskIndex) -> None:
        gate.wait(30)
        build(self)

    monkeypatch.setattr(MaskIndex, "_build", slow_build)
    worker = make_worker()
    results: list[dict[str, Any]] = []
    thread = threading.Thread(
        target=lambda: results.extend(run(worker, sh("1", "cat .env; touch ran"))), daemon=True
    )
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive() and not (project / "ran").exists()  # waiting, not running
    gate.set()
    thread.join(30)
    (r,) = results
    assert r["ok"], r
    assert "leak-me" not in out(r)
    assert (project / "ran").exists()


@pytest.mark.parametrize("helper", [True, False], ids=["many-masks", "few-masks"])
def test_attack_a_file_denied_after_the_masks_were_computed_is_still_masked(
    make_worker: MakeWorker, scattered: Path, helper: bool
) -> None:
    """The masks computed for one command are kept for the next; a secret that appears
    in between (reported by the watcher) is masked all the same, and one deleted in
    between leaves no empty file behind."""
    if not helper:
        for i in range(1, SECRETS):
            shutil.rmtree(scattered / f"d{i}")
    worker = make_worker()
    assert _uses_helper(worker) == helper
    (first,) = run(worker, sh("1", "true"))
    assert first["ok"], first
    fresh = scattered / "d0" / "fresh.pem"
    fresh.write_text("leak-me-fresh\n")
    worker.commands.masks.changed(str(fresh))  # as the file watcher reports it
    gone = scattered / "d0" / "secret0.key"
    gone.unlink()  # the watcher's event for it not yet in
    (r,) = run(worker, sh("2", "cat d0/fresh.pem; cat d0/README"))
    assert "leak-me" not in out(r) and "readme-ok-0" in out(r), r
    assert not gone.exists()


@pytest.mark.parametrize("count", [0, SECRETS], ids=["few-masks", "many-masks"])
def test_attack_a_directory_renamed_aside_by_one_command_is_masked_for_the_next(
    make_worker: MakeWorker, project: Path, count: int
) -> None:
    """A command renames the directory holding a secret (its mask does not move the
    file: the file is the project's); the next command, started at once, must find it
    masked under the new name, however far the file watcher lags behind."""
    for i in range(count):
        (project / f"k{i}.key").write_text(f"leak-me-{i}\n")
    (project / "config").mkdir()
    (project / "config" / ".env").write_text("leak-me-env\n")
    worker = make_worker()
    (first,) = run(worker, sh("0", "cat config/.env; echo first"))
    assert "leak-me" not in out(first) and "first" in out(first)
    for round_ in range(5):
        old, new = ("config", "cfg") if round_ % 2 == 0 else ("cfg", "config")
        moved, read = run(
            worker, sh("1", f"mv {old} {new} && echo moved"), sh("2", f"cat {new}/.env; echo read")
        )
        assert "moved" in out(moved), moved
        assert "read" in out(read), read
        assert "leak-me" not in out(read), (round_, out(read))


def test_attack_masks_from_outside_never_join_a_process_that_is_not_a_held_sandbox(
    tmp_path: Path,
) -> None:
    """The sandbox's first process gone and its pid taken by another process (or a
    wrong pid): the fork must not join that process's namespaces and mount there,
    nor mount in the worker's own."""
    target = tmp_path / "file"
    target.write_text("visible\n")
    stranger = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sleep", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{stranger.pid}/ns/mnt").resolve() == Path("/proc/self/ns/mnt").resolve():
            assert time.monotonic() < deadline, "unshare did not start"
            time.sleep(0.01)
        for pid in (stranger.pid, os.getpid()):
            why = maskmount.mask_from_outside(pid, [str(target)])
            assert why is not None and "not a sandbox" in why, (pid, why)
        # Nothing was mounted over the file, in either namespace.
        seen = subprocess.run(
            ["nsenter", "-t", str(stranger.pid), "-m", "cat", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert seen.stdout == "visible\n", seen
        assert target.read_text() == "visible\n"
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("count", [0, SECRETS], ids=["few-masks", "many-masks"])
def test_a_secret_written_in_a_new_directory_just_before_a_command_is_masked(
    make_worker: MakeWorker, project: Path, count: int
) -> None:
    """The user (or a build) writes a secret in directories made that instant, and a
    command starts at once: the watcher has not yet told of them, and the command
    waits until it has."""
    for i in range(count):
        (project / f"k{i}.key").write_text(f"leak-me-{i}\n")
    worker = make_worker()
    (first,) = run(worker, sh("0", "true"))
    assert first["ok"], first
    for round_ in range(5):
        deep = project / f"new{round_}" / "deeper"
        deep.mkdir(parents=True)
        (deep / ".env").write_text("leak-me-env\n")
        (read,) = run(worker, sh("1", f"cat new{round_}/deeper/.env; echo read"))
        assert "read" in out(read), read
        assert "leak-me" not in out(read), (round_, out(read))


@pytest.mark.parametrize("count", [0, SECRETS], ids=["few-masks", "many-masks"])
def test_attack_a_hard_link_to_a_masked_file_reads_nothing(
    make_worker: MakeWorker, project: Path, count: int
) -> None:
    """A link made inside the sandbox to a masked file links the mask (or is refused
    across mounts), never the secret; the next command sees no secret under it."""
    for i in range(count):
        (project / f"k{i}.key").write_text(f"leak-me-{i}\n")
    (project / ".env").write_text("leak-me-env\n")
    worker = make_worker()
    linked, read = run(
        worker, sh("1", "ln .env linked; ln k0.key linked2; echo done"), sh("2", "cat linked*")
    )
    assert "done" in out(linked), linked
    assert "leak-me" not in out(linked) + out(read)
    assert (project / ".env").read_text() == "leak-me-env\n"
