"""Network consent for git_push / git_pull: forced review unless the user's own file says so."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, project_config, user_config
from test_git_tools import sh_git

from forj_py.service import Worker

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

NETWORK_URL = "https://example.invalid/r.git"


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def repo(project: Path) -> Path:
    sh_git(project, "init", "-q", "-b", "main")
    sh_git(project, "add", "-A")
    sh_git(project, "commit", "-qm", "start")
    return project


def item_of(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("c", name, **args)], "session": "s"})
    (item,) = plan["items"]
    return dict(item, batch_id=plan["batch_id"])


def test_fr_cns_06_a_network_rule_lifts_the_forced_review_of_git_push_and_pull(
    make_worker: MakeWorker,
    repo: Path,
) -> None:
    sh_git(repo, "remote", "add", "origin", NETWORK_URL)
    user_config(
        '[permissions]\nnetwork = ["git_push(origin *)", "git_pull(origin)"]\n'
        'allow = ["git_push(origin *)", "git_pull"]\n'
    )
    w = make_worker()
    push = item_of(w, "git_push", remote="origin", refspec="HEAD:refs/heads/main")
    assert push["disposition"] == "execute", push
    assert not push.get("warnings") and push["summary"].startswith("[network]")
    pull = item_of(w, "git_pull", remote="origin")
    assert pull["disposition"] == "execute", pull
    # A branch the rule does not name keeps the forced review, whatever allow says.
    pull = item_of(w, "git_pull", remote="origin", branch="other")
    assert pull["disposition"] == "confirm"
    assert "reaches the network" in pull["warnings"][0]
    # A forced push carries --force among its words: origin * covers it, so
    # only allow_force_push stops it (at run time); a narrower rule would not.
    user_config('[permissions]\nnetwork = ["git_push(origin HEAD)"]\nallow = ["git_push"]\n')
    forced = item_of(make_worker(), "git_push", remote="origin", force=True)
    assert forced["disposition"] == "confirm" and "reaches the network" in forced["warnings"][0]
    plain = item_of(make_worker(), "git_push", remote="origin")
    assert plain["disposition"] == "execute"


def test_fr_cns_09_a_project_file_cannot_give_git_network(
    make_worker: MakeWorker,
    repo: Path,
) -> None:
    sh_git(repo, "remote", "add", "origin", NETWORK_URL)
    user_config(f'[trust]\nprojects = ["{repo}"]\n[permissions]\nallow = ["git_push"]\n')
    project_config(repo, '[permissions]\nnetwork = ["git_push(origin *)"]\n')
    w = make_worker()
    assert w.config.permissions.network == []
    push = item_of(w, "git_push", remote="origin")
    assert push["disposition"] == "confirm" and "reaches the network" in push["warnings"][0]


def test_fr_grant_06_a_git_grant_records_network_and_one_without_never_covers_it(
    make_worker: MakeWorker,
    repo: Path,
    tmp_path: Path,
) -> None:
    bare = tmp_path / "bare.git"
    sh_git(tmp_path, "init", "-q", "--bare", str(bare))
    sh_git(repo, "remote", "add", "origin", str(bare))
    user_config('[permissions]\nnetwork = ["git_push(origin *)"]\n')
    w = make_worker()
    # A local remote: no network; the grant given records that.
    first = item_of(w, "git_push", remote="origin")
    assert first["disposition"] == "confirm" and first["grant_pattern"] == "git_push(origin *)"
    done = w.execute(
        {"batch_id": first["batch_id"], "approved": ["c"], "grants": {"c": {"scope": "session"}}},
        lambda e: None,
    )
    assert done["results"][0]["ok"], done
    assert done["grants"][0]["network"] is False
    assert item_of(w, "git_push", remote="origin")["disposition"] == "execute"
    # The same remote name now reaches the network: the grant does not cover it.
    sh_git(repo, "remote", "set-url", "origin", NETWORK_URL)
    second = item_of(w, "git_push", remote="origin")
    assert second["disposition"] == "confirm", second
    # A grant given for the network call records network and covers it next time.
    w.execute(
        {"batch_id": second["batch_id"], "approved": ["c"], "grants": {"c": {"scope": "session"}}},
        lambda e: None,
    )
    (grant,) = [g for g in w.grants({"session": "s"})["grants"] if g["network"]]
    assert grant["rule"] == "git_push(origin *)"
    assert item_of(w, "git_push", remote="origin")["disposition"] == "execute"


def test_git_network_rules_are_checked_when_the_config_loads(
    make_worker: MakeWorker,
    repo: Path,
) -> None:
    user_config('[permissions]\nnetwork = ["read_file(src/**)"]\n')
    with pytest.raises(Exception, match="git_push"):
        make_worker()
