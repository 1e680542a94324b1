"""Where bubblewrap is missing: the worker says so, and every command is reviewed.

A real worker started with a PATH that has the few programs the tests run
but no bwrap, as on a machine without bubblewrap.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import call, user_config

from forj_py.transport.client import Client, WorkerProcess

PROGRAMS = ("sh", "ls", "echo", "cat")


@pytest.fixture
def no_bwrap_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in PROGRAMS:
        found = shutil.which(name)
        assert found is not None
        (bin_dir / name).symlink_to(found)
    return dict(os.environ, PATH=str(bin_dir))


def _plan_and_run(
    project: Path, env: dict[str, str], calls: list[dict[str, Any]], approve: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    with WorkerProcess(project, env=env) as proc, Client(proc.port) as c:
        hello = c.call("hello", {"token": proc.token})
        plan = c.call("plan", {"calls": calls})
        ids = [i["id"] for i in plan["items"]] if approve else []
        done = c.call("execute", {"batch_id": plan["batch_id"], "approved": ids}, timeout=30)
        return hello, plan, done


def test_without_bubblewrap_hello_warns_and_every_command_is_reviewed(
    project: Path, no_bwrap_env: dict[str, str]
) -> None:
    # Even a read-only command the user lets run unasked goes to review.
    user_config("[tools.approval]\nread_only_commands = 'auto'\n")
    hello, plan, done = _plan_and_run(
        project, no_bwrap_env, [call("1", "run_shell", cmd=["ls"])], approve=True
    )
    assert hello["sandbox"]["commands"] == "none"
    assert "not installed" in hello["sandbox"]["reason"]
    assert hello["sandbox"]["silenced"] is False
    assert any("unsandboxed" in w for w in hello["warnings"])
    (item,) = plan["items"]
    assert item["disposition"] == "confirm"
    assert "runs unsandboxed" in item["warnings"][0]
    assert item["summary"].startswith("[runs unsandboxed]")
    result = done["results"][0]
    assert result["ok"] is True
    assert result["result"]["sandbox"] == "none"


def test_the_users_own_sandbox_none_silences_the_warning_and_the_forced_review(
    project: Path, no_bwrap_env: dict[str, str]
) -> None:
    user_config("[tools.approval]\nread_only_commands = 'auto'\n[tools.shell]\nsandbox = 'none'\n")
    hello, plan, done = _plan_and_run(
        project, no_bwrap_env, [call("1", "run_shell", cmd=["ls"])], approve=False
    )
    assert hello["sandbox"] == {
        "commands": "none",
        "network": "off",
        "silenced": True,
        "reason": 'your config sets [tools.shell] sandbox = "none"',
        "tmpfs_capped": False,
    }
    assert not any("unsandboxed" in w for w in hello["warnings"])
    assert plan["items"][0]["disposition"] == "execute"
    assert "README.md" in done["results"][0]["result"]["stdout"]


def test_sandbox_bwrap_refuses_to_run_commands_without_it(
    project: Path, no_bwrap_env: dict[str, str]
) -> None:
    user_config("[tools.shell]\nsandbox = 'bwrap'\n")
    _, _, done = _plan_and_run(
        project, no_bwrap_env, [call("1", "run_shell", cmd=["echo", "hi"])], approve=True
    )
    error = done["results"][0]["error"]
    assert "must run in the sandbox" in error["message"]
    assert "nothing was run" in error["message"]
