"""A command cannot fill the host's memory through the sandbox's tmpfs mounts.

``/tmp``, ``/var/tmp``, ``/dev/shm`` and the private ``$HOME`` are tmpfs:
memory.  Each is capped (``[tools.shell] tmpfs_size_mib``, together
``tmpfs_total_mib``); writing past the cap fails with ENOSPC inside the
sandbox.  The root and ``/dev`` (bwrap's own tmpfs mounts) take no writes.
The attacks run through a real worker process and real bubblewrap.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import project_config, user_config

from forj_py.config import load
from forj_py.safety import bwrap_probe
from forj_py.safety.commands import CommandSandbox, Request, probe
from forj_py.safety.paths import Sandbox
from forj_py.transport.client import Client, WorkerProcess

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

HANG = 60.0
MIB = 1 << 20


@pytest.fixture
def live(project: Path) -> Iterator[Client]:
    """A real worker process, started after the test wrote its config."""
    started: list[tuple[WorkerProcess, Client]] = []

    def start() -> Client:
        proc = WorkerProcess(project)
        client = Client(proc.port)
        started.append((proc, client))
        client.hello = client.call("hello", {"token": proc.token})  # type: ignore[attr-defined]
        return client

    yield start  # type: ignore[misc]
    for proc, client in started:
        client.close()
        proc.stop()


def shell(client: Client, cmd: str) -> dict[str, Any]:
    calls = [{"id": "1", "name": "run_shell", "args": {"cmd": cmd, "timeout": 50}}]
    plan = client.call("plan", {"calls": calls})
    done = client.call("execute", {"batch_id": plan["batch_id"], "approved": ["1"]}, timeout=HANG)
    result: dict[str, Any] = done["results"][0]
    return result


def output(result: dict[str, Any]) -> str:
    body = result["result"] if result["ok"] else result["error"]["details"]
    return str(body.get("stdout", "")) + str(body.get("stderr", ""))


def _fill(path: str, mib: int) -> str:
    """Write ``mib`` MiB of zeros to ``path``, then say how many bytes landed."""
    return (
        f"dd if=/dev/zero of={path} bs=1M count={mib} 2>&1 | grep -o 'No space left on device'; "
        f"echo size=$(stat -c %s {path})"
    )


def _landed(text: str) -> int:
    return int(text.rsplit("size=", 1)[1].split()[0])


def test_attack_filling_the_sandbox_tmpfs_mounts_stops_at_their_cap(
    live: Any, project: Path
) -> None:
    """Each writable tmpfs takes its cap and no more: ENOSPC, inside the sandbox only."""
    user_config("[tools.shell]\ntmpfs_size_mib = 8\n")
    client = live()
    assert client.hello["sandbox"]["tmpfs_capped"] is True
    home = os.path.expanduser("~")
    for path in ("/tmp/fill", "/var/tmp/fill", "/dev/shm/fill", f"{home}/fill"):
        result = shell(client, _fill(path, 64))
        text = output(result)
        assert "No space left on device" in text, (path, text)
        assert 0 < _landed(text) <= 8 * MIB, (path, text)
    # Nothing of it reached the host, and the worker still answers.
    assert not os.path.exists("/tmp/fill") or os.path.getsize("/tmp/fill") == 0
    assert shell(client, "echo alive")["ok"]


def test_attack_the_tmpfs_total_caps_the_mounts_together(live: Any) -> None:
    """The total is shared out: four mounts under a 16 MiB total take 4 MiB each."""
    user_config("[tools.shell]\ntmpfs_size_mib = 64\ntmpfs_total_mib = 16\n")
    client = live()
    script = "; ".join(_fill(p, 32) for p in ("/tmp/a", "/var/tmp/a", "/dev/shm/a", "$HOME/a"))
    text = output(shell(client, script))
    sizes = [int(part.split()[0]) for part in text.split("size=")[1:]]
    assert len(sizes) == 4 and all(0 < size <= 4 * MIB for size in sizes), text
    assert sum(sizes) <= 16 * MIB


def test_attack_the_sandbox_root_and_dev_take_no_writes(live: Any) -> None:
    """bwrap's own tmpfs mounts (the root holding the mount points, and /dev) are
    memory with no cap: read-only, so nothing can be written there at all."""
    client = live()
    script = (
        "for p in /fill /var/fill /dev/fill /run-fill; do "
        "  if (head -c 1048576 /dev/zero > $p) 2>/dev/null; then echo wrote $p; fi; "
        "done; mkdir /newdir 2>/dev/null && echo wrote /newdir; "
        "echo ok > /dev/null && echo devnull-ok; echo ok > /tmp/t && echo tmp-ok"
    )
    text = output(shell(client, script))
    assert "wrote" not in text, text
    assert "devnull-ok" in text and "tmp-ok" in text


def test_attack_python_shared_memory_still_works_in_the_capped_dev_shm(live: Any) -> None:
    """The capped /dev/shm still serves POSIX semaphores (multiprocessing locks)."""
    client = live()
    result = shell(client, "python3 -c 'import multiprocessing as m; m.Lock(); print(\"lock-ok\")'")
    assert "lock-ok" in output(result), output(result)


def test_a_project_may_lower_the_tmpfs_caps_but_not_raise_them(project: Path) -> None:
    user_config("[tools.shell]\ntmpfs_size_mib = 256\ntmpfs_total_mib = 1024\n")
    project_config(project, "[tools.shell]\ntmpfs_size_mib = 100000\ntmpfs_total_mib = 512\n")
    loaded = load(project)
    assert loaded.config.tools.shell.tmpfs_size_mib == 256
    assert loaded.config.tools.shell.tmpfs_total_mib == 512
    assert any("tmpfs_size_mib" in w for w in loaded.warnings)


def test_a_bwrap_without_size_still_sandboxes_and_says_the_tmpfs_is_not_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path
) -> None:
    """An old or setuid bwrap refuses --size: commands stay sandboxed, the caps are
    left out, and the user is told."""
    real = shutil.which("bwrap")
    assert real is not None
    old = tmp_path / "bin" / "bwrap"
    old.parent.mkdir()
    old.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --size ] && { echo "bwrap: Unknown option --size" >&2; '
        "exit 1; }; done\n"
        f'exec {real} "$@"\n'
    )
    old.chmod(old.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(bwrap_probe.shutil, "which", lambda name: str(old))
    available = probe("auto")
    assert available.sandboxed and not available.tmpfs_sizes
    assert available.wire()["tmpfs_capped"] is False
    warning = available.warning()
    assert warning is not None and "--size" in warning
    jail = CommandSandbox(Sandbox(project), available)
    try:
        argv = jail.argv(Request(str(project), {"PATH": os.environ["PATH"]}), ["true"])
    finally:
        jail.close()
    assert "--size" not in argv and "--tmpfs" in argv
    # With --size, each tmpfs mount is capped.
    monkeypatch.undo()
    capped = CommandSandbox(Sandbox(project), probe("auto"), tmpfs_size_mib=3)
    try:
        argv = capped.argv(Request(str(project), {"PATH": os.environ["PATH"]}), ["true"])
    finally:
        capped.close()
    tmpfs = [i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == "/tmp"]
    assert tmpfs and argv[tmpfs[0] - 2 : tmpfs[0]] == ["--size", str(3 * MIB)]
