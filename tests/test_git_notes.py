"""Plan items say when a file about to be written holds uncommitted work not made by forj."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call

from forj_py.service import Worker
from forj_py.system import git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def sh_git(root: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL="/dev/null",
    )
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def committed(project: Path) -> Path:
    sh_git(project, "init", "-q")
    sh_git(project, "add", "-A")
    sh_git(project, "commit", "-qm", "start")
    return project


def edit_readme(worker: Worker, text: str = "# changed") -> dict[str, Any]:
    # Read first: a file changed unread is refused before any review.
    reads = [call("r", "read_file", path="README.md"), call("r2", "read_file", path="src/main.py")]
    read = worker.plan({"calls": reads})
    worker.execute({"batch_id": read["batch_id"]}, lambda e: None)
    plan = worker.plan(
        {
            "calls": [
                call("e", "edit", path="README.md", old_string="# demo", new_string=text),
                call("m", "write_file", path="src/main.py", content="x = 1\n"),
                call("n", "write_file", path="brand_new.txt", content="new\n"),
            ]
        }
    )
    return plan


def test_a_file_with_uncommitted_outside_changes_is_noted(
    make_worker: MakeWorker, project: Path
) -> None:
    committed(project)
    (project / "README.md").write_text("# demo\nwork in progress\n")
    worker = make_worker()
    plan = edit_readme(worker)
    readme, main, new = plan["items"]
    assert readme["uncommitted"] == ["README.md"]
    (note,) = readme["notes"]
    assert "README.md has uncommitted changes (M) in git, not made by forj" in note
    # Information only: it does not turn a call into a review by itself.
    assert "warnings" not in readme
    assert "uncommitted" not in main and "notes" not in main
    assert "uncommitted" not in new


def test_forj_own_latest_write_is_not_noted(make_worker: MakeWorker, project: Path) -> None:
    committed(project)
    worker = make_worker()
    first = edit_readme(worker)
    worker.execute({"batch_id": first["batch_id"], "approved": ["e"]}, lambda e: None)
    assert (project / "README.md").read_text() == "# changed\n"
    # Uncommitted now, but what it holds is exactly forj's write.
    plan = worker.plan(
        {"calls": [call("e2", "edit", path="README.md", old_string="# changed", new_string="#")]}
    )
    assert "uncommitted" not in plan["items"][0]
    # Once the user changes it too, it is theirs again.
    (project / "README.md").write_text("# changed by hand\n")
    plan = worker.plan(
        {
            "calls": [
                call("r", "read_file", path="README.md"),
                call("w", "write_file", path="README.md", content="#\n"),
            ]
        }
    )
    assert plan["items"][1]["uncommitted"] == ["README.md"]


def test_untracked_files_are_noted_and_no_repository_means_no_note(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    worker = make_worker()
    plan = edit_readme(worker)
    assert all("uncommitted" not in item for item in plan["items"])
    committed(project)
    (project / "scratch.txt").write_text("mine\n")
    plan = make_worker().plan(
        {
            "calls": [
                call("r", "read_file", path="scratch.txt"),
                call("w", "write_file", path="scratch.txt", content="x\n"),
            ]
        }
    )
    assert plan["items"][1]["uncommitted"] == ["scratch.txt"]
    assert "is untracked in git" in plan["items"][1]["notes"][0]


def test_git_status_runs_no_program_the_repository_names(project: Path, tmp_path: Path) -> None:
    """A command the model ran could have written .git/config: nothing there may run."""
    committed(project)
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    script.chmod(0o755)
    sh_git(project, "config", "core.fsmonitor", str(script))
    sh_git(project, "config", "filter.evil.clean", str(script))
    sh_git(project, "config", "filter.evil.process", str(script))
    (project / ".gitattributes").write_text("* filter=evil\n")
    (project / "README.md").write_text("# demo, changed\n")
    status = git.uncommitted(str(project), [str(project / "README.md"), str(project / "src")])
    assert status is not None
    assert status[str(project / "README.md")].strip() == "M"
    assert not marker.exists()
    # The control: plain git status in the same repository does run them.
    subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True)
    assert marker.exists()


def test_git_answers_nothing_outside_a_repository(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert git.uncommitted(str(tmp_path), [str(tmp_path / "f")]) is None
    assert git.uncommitted(str(tmp_path), []) == {}


def test_outside_any_repository_no_git_process_is_started(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No .git in the project or above it: git could not find a work tree,
    # so none is asked (the check runs before every write).
    if git._may_be_in_work_tree(str(project.parent)):
        pytest.skip("the temporary directory is inside a git work tree")
    started: list[list[str]] = []
    real_run = git._run

    def spy(cwd: str, argv: list[str], *args: Any, **kwargs: Any) -> Any:
        started.append(argv)
        return real_run(cwd, argv, *args, **kwargs)

    monkeypatch.setattr(git, "_run", spy)
    target = str(project / "README.md")
    assert git.uncommitted(str(project), [target]) is None
    assert started == []
    # Inside a repository (from a subdirectory too) git is asked as before.
    committed(project)
    (project / "README.md").write_text("# changed\n")
    assert git.uncommitted(str(project / "src"), [target]) == {target: " M"}
    assert started
