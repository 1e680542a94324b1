"""The git tools (seed 004 section 5.4) on real temporary repositories."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config

from forj_py.service import Worker
from forj_py.system import git as sysgit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's own git config: an identity, nothing else; no system config."""
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return gitconfig


def sh_git(root: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(done.stderr.decode())
    return done.stdout.decode()


@pytest.fixture
def repo(project: Path) -> Path:
    sh_git(project, "init", "-q", "-b", "main")
    sh_git(project, "add", "-A")
    sh_git(project, "commit", "-qm", "start")
    return project


def run1(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    """Plan and execute one call, approving it; the result entry."""
    plan = worker.plan({"calls": [call("c", name, **args)]})
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    (entry,) = reply["results"]
    return dict(entry)


def ok(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    entry = run1(worker, name, **args)
    assert entry["ok"], entry
    return dict(entry["result"])


def err(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    entry = run1(worker, name, **args)
    assert not entry["ok"], entry
    return dict(entry["error"])


# --- reading --------------------------------------------------------------------------


def test_git_status_reports_branch_changes_and_ahead_behind(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    w = make_worker()
    status = ok(w, "git_status")
    assert status["branch"] == "main" and status["clean"] and status["changes"] == []
    assert status["upstream"] is None
    (repo / "README.md").write_text("# changed\n")
    (repo / "new.txt").write_text("new\n")
    (repo / "src" / "main.py").write_text("x = 1\n")
    sh_git(repo, "add", "src/main.py")
    status = ok(w, "git_status")
    by_path = {c["path"]: c for c in status["changes"]}
    assert by_path["README.md"] == {
        "path": "README.md",
        "status": "M",
        "staged": False,
        "unstaged": True,
    }
    assert by_path["src/main.py"]["staged"] and not by_path["src/main.py"]["unstaged"]
    assert by_path["new.txt"]["status"] == "?"
    assert not status["clean"]
    # ahead / behind against an upstream in a local bare repository.
    bare = tmp_path / "remote.git"
    sh_git(tmp_path, "init", "-q", "--bare", str(bare))
    sh_git(repo, "remote", "add", "origin", str(bare))
    sh_git(repo, "push", "-q", "-u", "origin", "main")
    sh_git(repo, "commit", "-qm", "one more")
    status = ok(w, "git_status", porcelain=False)
    assert (status["upstream"], status["ahead"], status["behind"]) == ("origin/main", 1, 0)
    assert "Your branch is ahead" in status["text"]


def test_git_diff_unstaged_staged_and_rev_leaves_denied_files_out(
    make_worker: MakeWorker, repo: Path
) -> None:
    w = make_worker()
    (repo / "README.md").write_text("# demo\nmore\n")
    diff = ok(w, "git_diff")
    assert diff["files"] == 1 and "+more" in diff["patch"]
    assert ok(w, "git_diff", staged=True)["patch"] == ""
    sh_git(repo, "add", "README.md")
    assert "+more" in ok(w, "git_diff", staged=True)["patch"]
    assert "+more" in ok(w, "git_diff", rev="HEAD", paths=["*.md"])["patch"]
    assert ok(w, "git_diff", rev="HEAD", paths=["src/**"])["patch"] == ""
    # A .env committed by someone: its diff never reaches the model.
    (repo / ".env").write_text("TOKEN=abc\n")
    sh_git(repo, "add", "-f", ".env")
    diff = ok(w, "git_diff", staged=True)
    assert diff["omitted"] == [".env"] and "TOKEN" not in diff["patch"]
    error = err(w, "git_diff", paths=[".env"])
    assert "denied" in error["message"]


def test_git_log_lists_commits_newest_first(make_worker: MakeWorker, repo: Path) -> None:
    (repo / "README.md").write_text("# two\n")
    sh_git(repo, "commit", "-qam", "second")
    commits = ok(make_worker(), "git_log", max_count=5)["commits"]
    assert [c["subject"] for c in commits] == ["second", "start"]
    assert commits[0]["author"] == "Test User" and len(commits[0]["commit"]) == 40
    only_src = ok(make_worker(), "git_log", paths=["src/**"])["commits"]
    assert [c["subject"] for c in only_src] == ["start"]


def test_git_errors_carry_gits_own_text_as_e_git(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    w = make_worker()
    error = err(w, "git_log", rev="no-such-branch")
    assert error["type"] == "process-error" and error["details"]["code"] == "E_GIT"
    assert "no-such-branch" in error["details"]["stderr"]
    assert error["recovery"]
    # Options cannot be smuggled in as names.
    plan = w.plan({"calls": [call("x", "git_checkout", target="--orphan=x")]})
    assert plan["items"][0]["result"]["error"]["type"] == "validation-error"


def test_git_tools_outside_a_repository_say_so(make_worker: MakeWorker, project: Path) -> None:
    error = err(make_worker(), "git_status")
    assert error["details"]["code"] == "E_GIT"
    assert "not a git repository" in error["message"]


# --- add and commit --------------------------------------------------------------------


def test_git_add_stages_globs_and_never_a_denied_file(make_worker: MakeWorker, repo: Path) -> None:
    w = make_worker()
    (repo / "src" / "a.py").write_text("a = 1\n")
    (repo / "src" / "b.py").write_text("b = 1\n")
    (repo / ".env").write_text("SECRET=1\n")
    added = ok(w, "git_add", paths=["src/*.py"])
    assert added["added"] == 2 and sorted(added["paths"]) == ["src/a.py", "src/b.py"]
    (repo / "notes.txt").write_text("notes\n")
    added = ok(w, "git_add", paths=["."])
    assert added["paths"] == ["notes.txt"] and added["skipped"] == [".env"]
    assert ".env" not in sh_git(repo, "diff", "--cached", "--name-only")
    assert err(w, "git_add", paths=[".env"])["details"]["reason"] == "DeniedPatternMatched"
    assert "'..'" in err(w, "git_add", paths=["../x"])["message"]
    error = err(w, "git_add", paths=["nothing-here.txt"])
    assert error["details"]["code"] == "E_GIT" and "did not match" in error["message"]


def test_git_commit_commits_the_staged_changes(make_worker: MakeWorker, repo: Path) -> None:
    w = make_worker()
    (repo / "README.md").write_text("# better\n")
    ok(w, "git_add", paths=["README.md"])
    result = ok(w, "git_commit", message="docs: better readme", signoff=True)
    assert result["branch"] == "main" and result["files"] == 1
    assert result["commit"] == sh_git(repo, "rev-parse", "HEAD").strip()
    body = sh_git(repo, "log", "-1", "--format=%B")
    assert body.startswith("docs: better readme") and "Signed-off-by: Test User" in body
    # Nothing staged: git's own words.
    error = err(w, "git_commit", message="empty")
    assert error["details"]["code"] == "E_GIT" and "nothing" in error["message"]
    assert ok(w, "git_commit", message="chore: empty", allow_empty=True)["files"] == 0


def test_sec_git_clean_tree_commit_refuses_unstaged_changes_in_committed_paths(
    make_worker: MakeWorker, repo: Path
) -> None:
    w = make_worker()
    head = sh_git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("# staged\n")
    sh_git(repo, "add", "README.md")
    (repo / "README.md").write_text("# staged, then changed again\n")
    (repo / "src" / "main.py").write_text("unrelated = 1\n")  # unstaged, not committed
    error = err(w, "git_commit", message="docs: x")
    assert error["details"]["code"] == "E_POLICY"
    assert error["details"]["rule"] == "sec.git.clean_tree"
    assert error["details"]["files"] == ["README.md"]
    assert sh_git(repo, "rev-parse", "HEAD") == head
    # Staging the rest of it makes it clean; the unrelated file does not matter.
    sh_git(repo, "add", "README.md")
    ok(w, "git_commit", message="docs: x")
    # "all": any unstaged change in a tracked file blocks.
    user_config('[tools.git]\nclean_tree_for_commit = "all"\n')
    (repo / "README.md").write_text("# again\n")
    sh_git(repo, "add", "README.md")
    error = err(make_worker(), "git_commit", message="docs: y")
    assert error["details"]["files"] == ["src/main.py"]


def test_hooks_are_skipped_and_the_result_says_so(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    (repo / "README.md").write_text("# hooks\n")
    w = make_worker()
    ok(w, "git_add", paths=["README.md"])
    result = ok(w, "git_commit", message="docs: hooks")
    assert result["hooks_skipped"] == ["pre-commit"]
    assert "did not run" in result["note"]
    assert not marker.exists()


def test_a_booby_trapped_repository_config_runs_nothing(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    """Every program-naming key of .git/config, set by the repository: none of them runs."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    evil.chmod(0o755)
    bare = tmp_path / "remote.git"
    sh_git(tmp_path, "init", "-q", "--bare", str(bare))
    sh_git(repo, "remote", "add", "origin", str(bare))
    sh_git(repo, "push", "-q", "origin", "main")
    for key in (
        "core.fsmonitor",
        "core.pager",
        "core.editor",
        "core.sshCommand",
        "core.askPass",
        "sequence.editor",
        "diff.external",
        "credential.helper",
        "filter.evil.clean",
        "filter.evil.smudge",
        "filter.evil.process",
        "diff.evil.textconv",
        "merge.evil.driver",
        "gpg.program",
        "remote.origin.uploadpack",
        "remote.origin.receivepack",
        "core.hooksPath",
    ):
        sh_git(repo, "config", key, str(evil))
    sh_git(repo, "config", "commit.gpgSign", "true")
    sh_git(repo, "config", "protocol.ext.allow", "always")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    (repo / ".git" / "hooks" / "post-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (repo / ".git" / "hooks" / "post-commit").chmod(0o755)
    w = make_worker()
    (repo / "README.md").write_text("# trapped\n")
    ok(w, "git_status")
    ok(w, "git_diff")
    ok(w, "git_add", paths=["README.md", ".gitattributes"])
    ok(w, "git_diff", staged=True)
    ok(w, "git_log")
    ok(w, "git_commit", message="chore: trapped")
    ok(w, "git_push", remote="origin", refspec="HEAD:refs/heads/main")
    ok(w, "git_pull", remote="origin", branch="main")
    ok(w, "git_checkout", target="feat/other", create=True)
    assert not marker.exists(), marker.read_text()
    # The control: plain git in the same repository runs them.
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=False)
    assert marker.exists()


def test_a_repository_pointing_its_work_tree_elsewhere_is_refused(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    sh_git(repo, "config", "core.worktree", str(tmp_path))
    error = err(make_worker(), "git_status")
    assert error["details"]["code"] == "E_GIT" and "core.worktree" in error["message"]


def test_overrides_keep_the_users_own_helpers() -> None:
    entries = [
        ("global", "credential.helper", "store"),
        ("local", "credential.helper", "/tmp/evil"),
        ("local", "filter.lfs.clean", "/tmp/evil"),
        ("global", "filter.lfs.clean", "git-lfs clean -- %f"),
        ("local", "core.sshcommand", "/tmp/evil"),
        ("local", "user.name", "fine"),
    ]
    pairs, env = sysgit.overrides_for(entries)
    assert pairs == [
        ("credential.helper", ""),
        ("credential.helper", "store"),
        ("filter.lfs.clean", "git-lfs clean -- %f"),
    ]
    assert env == {"GIT_SSH_COMMAND": "ssh"}


# --- checkout, merge, rebase -----------------------------------------------------------


def test_dirty_checkout_is_blocked_with_a_recovery_step(
    make_worker: MakeWorker, repo: Path
) -> None:
    w = make_worker()
    sh_git(repo, "branch", "other")
    (repo / "README.md").write_text("# work in progress\n")
    error = err(w, "git_checkout", target="other")
    assert error["details"]["code"] == "E_POLICY" and error["details"]["files"] == ["README.md"]
    assert any("git_commit" in step for step in error["recovery"])
    assert (repo / "README.md").read_text() == "# work in progress\n"
    assert sh_git(repo, "branch", "--show-current").strip() == "main"
    # Untracked files do not block; committed work does not either.
    sh_git(repo, "commit", "-qam", "wip")
    (repo / "scratch.txt").write_text("x\n")
    result = ok(w, "git_checkout", target="other")
    assert result == {"checked_out": True, "branch": "other", "head": result["head"]}
    assert ok(w, "git_checkout", target="feat/new", create=True)["branch"] == "feat/new"
    error = err(w, "git_checkout", target="bad..name", create=True)
    assert error["details"]["code"] == "E_GIT"


def test_git_merge_merges_and_reports_conflicts(make_worker: MakeWorker, repo: Path) -> None:
    w = make_worker()
    sh_git(repo, "checkout", "-qb", "topic")
    (repo / "topic.txt").write_text("topic\n")
    sh_git(repo, "add", "topic.txt")
    sh_git(repo, "commit", "-qm", "topic")
    sh_git(repo, "checkout", "-q", "main")
    assert ok(w, "git_merge", branch="topic", no_ff=True)["merged"] is True
    assert len(sh_git(repo, "log", "-1", "--format=%P").split()) == 2
    # A conflict: the result lists it; abort goes back.
    sh_git(repo, "checkout", "-qb", "clash")
    (repo / "README.md").write_text("# clash\n")
    sh_git(repo, "commit", "-qam", "clash")
    sh_git(repo, "checkout", "-q", "main")
    (repo / "README.md").write_text("# main\n")
    sh_git(repo, "commit", "-qam", "main")
    result = ok(w, "git_merge", branch="clash")
    assert result["merged"] is False and result["conflicts"] == ["README.md"]
    assert "resolve" in result["note"]
    assert ok(w, "git_merge", abort=True)["aborted"] is True
    assert (repo / "README.md").read_text() == "# main\n"
    # A dirty tree: refused before git is asked.
    (repo / "README.md").write_text("# dirty\n")
    assert err(w, "git_merge", branch="clash")["details"]["rule"] == "sec.git.clean_tree"


def test_git_rebase_needs_a_clean_tree_and_autosquashes(
    make_worker: MakeWorker, repo: Path
) -> None:
    w = make_worker()
    sh_git(repo, "checkout", "-qb", "topic")
    (repo / "a.txt").write_text("a\n")
    sh_git(repo, "add", "a.txt")
    sh_git(repo, "commit", "-qm", "add a")
    (repo / "a.txt").write_text("a fixed\n")
    sh_git(repo, "commit", "-qam", "fixup! add a")
    sh_git(repo, "checkout", "-q", "main")
    (repo / "b.txt").write_text("b\n")
    sh_git(repo, "add", "b.txt")
    sh_git(repo, "commit", "-qm", "add b")
    sh_git(repo, "checkout", "-q", "topic")
    (repo / "README.md").write_text("# dirty\n")
    assert err(w, "git_rebase", onto="main")["details"]["rule"] == "sec.git.clean_tree"
    sh_git(repo, "checkout", "--", "README.md")
    assert ok(w, "git_rebase", onto="main", autosquash=True)["rebased"] is True
    subjects = sh_git(repo, "log", "--format=%s").split("\n")
    assert subjects[:3] == ["add a", "add b", "start"]
    assert (repo / "a.txt").read_text() == "a fixed\n"


# --- push and pull -------------------------------------------------------------------


@pytest.fixture
def remote(repo: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    sh_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    sh_git(repo, "remote", "add", "origin", "file://" + str(bare))
    sh_git(repo, "push", "-q", "-u", "origin", "main")
    return bare


def test_push_and_pull_against_a_local_bare_repository(
    make_worker: MakeWorker, repo: Path, remote: Path, tmp_path: Path
) -> None:
    w = make_worker()
    (repo / "README.md").write_text("# pushed\n")
    sh_git(repo, "commit", "-qam", "to push")
    plan = w.plan({"calls": [call("p", "git_push", remote="origin")]})
    item = plan["items"][0]
    # Always reviewed; a file:// remote is no network, so no network warning.
    assert item["disposition"] == "confirm" and "warnings" not in item
    assert "network: no" in item["preview"]
    assert ok(w, "git_push", remote="origin")["pushed"] is True
    assert sh_git(remote, "log", "-1", "--format=%s").strip() == "to push"
    # Someone else pushes; pull brings it.
    other = tmp_path / "other"
    sh_git(tmp_path, "clone", "-q", str(remote), str(other))
    (other / "theirs.txt").write_text("theirs\n")
    sh_git(other, "add", "theirs.txt")
    sh_git(other, "commit", "-qm", "theirs")
    sh_git(other, "push", "-q")
    assert ok(w, "git_pull", remote="origin")["pulled"] is True
    assert (repo / "theirs.txt").read_text() == "theirs\n"
    # Only configured remotes; no URLs.
    error = err(w, "git_push", remote="file:///tmp/elsewhere")
    assert "not a remote" in error["message"]


def test_a_network_remote_is_reviewed_with_a_network_warning(
    make_worker: MakeWorker, repo: Path
) -> None:
    sh_git(repo, "remote", "add", "origin", "https://example.invalid/r.git")
    user_config('[permissions]\nallow = ["git_pull", "git_push"]\n')
    plan = make_worker().plan({"calls": [call("p", "git_pull", remote="origin")]})
    item = plan["items"][0]
    assert item["disposition"] == "confirm"
    assert "reaches the network" in item["warnings"][0]


def test_force_push_is_denied_unless_the_users_own_file_allows_it(
    make_worker: MakeWorker, repo: Path, remote: Path
) -> None:
    w = make_worker()
    sh_git(repo, "commit", "-q", "--amend", "-m", "rewritten")
    for args in ({"force": True}, {"refspec": "+HEAD:refs/heads/main"}, {"refspec": ":main"}):
        error = err(w, "git_push", remote="origin", **args)
        assert error["type"] == "permission-error" and error["details"]["code"] == "E_POLICY"
        assert "allow_force_push" in error["message"]
    # Without force, git refuses the rewritten history in its own words.
    error = err(w, "git_push", remote="origin")
    assert error["details"]["code"] == "E_GIT" and "rejected" in error["message"]
    # A project cannot allow it, even a trusted one.
    (repo / ".forj").mkdir()
    (repo / ".forj" / "config.toml").write_text("[tools.git]\nallow_force_push = true\n")
    user_config(f'[trust]\nprojects = ["{repo}"]\n')
    assert "allow_force_push" in err(make_worker(), "git_push", force=True)["message"]
    user_config("[tools.git]\nallow_force_push = true\n")
    assert ok(make_worker(), "git_push", remote="origin", force=True)["forced"] is True
    assert sh_git(remote, "log", "-1", "--format=%s").strip() == "rewritten"


def test_push_can_be_turned_off(make_worker: MakeWorker, repo: Path, remote: Path) -> None:
    (repo / ".forj").mkdir()
    (repo / ".forj" / "config.toml").write_text("[tools.git]\nallow_push = false\n")
    error = err(make_worker(), "git_push")
    assert "allow_push = false" in error["message"]
