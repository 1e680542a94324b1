"""A hostile repository or a sly call cannot make the git tools run a program or leak a file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config

from forj_py.service import Worker


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(
        '[user]\n\tname = T\n\temail = t@example.com\n[protocol "file"]\n\tallow = always\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def run_one(worker: Worker, name: str, **args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = worker.plan({"calls": [call("c", name, **args)]})
    done = worker.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    result: dict[str, Any] = done["results"][0]
    return plan, result


def test_sec_git_01_a_submodules_filter_does_not_run_on_git_status(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    source = tmp_path / "subsrc"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / "f.txt").write_text("x\n")
    (source / ".gitattributes").write_text("* filter=evil\n")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "s")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    git(project, "commit", "-qm", "sub")
    marker = tmp_path / "PWNED"
    config = project / ".git" / "modules" / "sub" / "config"
    config.write_text(config.read_text() + f'[filter "evil"]\n\tclean = touch {marker} && cat\n')
    os.utime(project / "sub" / "f.txt", (1_000_000_000, 1_000_000_000))  # stat-dirty
    worker = make_worker()
    for tool in ("git_status", "git_diff"):
        _, result = run_one(worker, tool)
        assert result["ok"], result
    assert not marker.exists()


def test_sec_git_02_a_local_remotes_hooks_do_not_run_on_push(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    marker = tmp_path / "HOOKRAN"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(project, "remote", "add", "origin", str(bare))
    _, result = run_one(make_worker(), "git_push", refspec="main")
    assert result["ok"], result
    assert git(bare, "rev-parse", "main") == git(project, "rev-parse", "main")
    assert not marker.exists()


def test_sec_git_03_the_repositorys_config_cannot_force_a_plain_push(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", str(bare))
    git(project, "push", "-q", "origin", "main")
    git(project, "commit", "-q", "--allow-empty", "-m", "remote-only")
    git(project, "push", "-q", "origin", "main")
    git(project, "reset", "-q", "--hard", "HEAD~1")
    git(project, "commit", "-q", "--allow-empty", "-m", "local")
    before = git(bare, "rev-parse", "main")
    git(project, "config", "remote.origin.push", "+refs/heads/*:refs/heads/*")
    _, result = run_one(make_worker(), "git_push")
    assert not result["ok"]  # git refuses the non-fast-forward push
    assert git(bare, "rev-parse", "main") == before


def test_sec_git_04_a_glob_never_matches_a_path_scoped_allow_rule(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config('[permissions]\nallow = ["git_add(src/**)"]\n')
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    (project / "deploy.sh").write_text("evil\n")
    (project / "src" / "main.py").write_text("x\n")
    worker = make_worker()
    plan = worker.plan({"calls": [call("c", "git_add", paths=["src/main.py", "*"])]})
    assert plan["items"][0]["disposition"] == "confirm"
    only = worker.plan({"calls": [call("d", "git_add", paths=["src/main.py"])]})
    assert only["items"][0]["disposition"] == "execute"


def test_sec_git_05_a_rename_into_a_denied_file_is_left_out_of_git_diff(
    make_worker: MakeWorker, project: Path
) -> None:
    git(project, "init", "-q", "-b", "main")
    body = "".join(f"setting_{i} = {i}\n" for i in range(20))
    (project / "settings.txt").write_text(body)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "mv", "settings.txt", ".env")
    (project / ".env").write_text(body + "STRIPE_ACCT=acct_correcthorsebattery\n")
    git(project, "add", "-f", "-A")
    git(project, "commit", "-qm", "b")
    _, result = run_one(make_worker(), "git_diff", rev="HEAD~1")
    assert result["ok"], result
    assert "correcthorse" not in str(result)
    assert ".env" in result["result"]["omitted"]
