"""A git directory a ``.git`` file or link names is as read-only to commands as ``.git``.

A submodule's or a linked worktree's ``.git`` is a file (``gitdir: PATH``)
and may name a directory anywhere, under any name; a ``.git`` link does the
same, and a git directory's ``commondir`` names where its hooks and
configuration live.  A command that could write there would plant a hook
or a ``core.fsmonitor`` that the user's own next ``git status`` or ``git
commit`` runs.  Each test has a real worker run, through real bubblewrap,
the command that tries it, then runs the user's own git there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import user_config

from forj_py.transport.client import Client, WorkerProcess

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

HANG = 30.0


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(
        '[user]\n\tname = T\n\temail = t@example.com\n[protocol "file"]\n\tallow = always\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert not check or done.returncode == 0, done.stderr
    return done


Shell = Callable[[str], dict[str, Any]]


@pytest.fixture
def shell(project: Path) -> Iterator[Callable[[], Shell]]:
    """Start a real worker for ``project``; each call runs one approved command in it."""
    started: list[tuple[WorkerProcess, Client]] = []

    def start() -> Shell:
        proc = WorkerProcess(project)
        client = Client(proc.port)
        started.append((proc, client))
        client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})

        def run(cmd: str) -> dict[str, Any]:
            calls = [{"id": "1", "name": "run_shell", "args": {"cmd": cmd}}]
            plan = client.call("plan", {"calls": calls})
            done = client.call(
                "execute", {"batch_id": plan["batch_id"], "approved": ["1"]}, timeout=HANG
            )
            result: dict[str, Any] = done["results"][0]
            return result

        return run

    yield start
    for proc, client in started:
        client.close()
        proc.stop()


def output(result: dict[str, Any]) -> str:
    body = result["result"] if result["ok"] else result["error"]["details"]
    return str(body.get("stdout", "")) + str(body.get("stderr", ""))


def repo_with_commit(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "f.txt").write_text("f\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "f")


def plant_attempt(marker: Path, git_dir: str, work_tree: str) -> str:
    """The command: a pre-commit hook, a post-checkout hook and an fsmonitor setting,
    each written in a way of its own (shell redirection, cp, git config)."""
    return (
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > {git_dir}/hooks/pre-commit; "
        f"chmod +x {git_dir}/hooks/pre-commit; "
        f"cp {git_dir}/hooks/pre-commit {git_dir}/hooks/post-checkout; "
        f"git -C {work_tree} config core.fsmonitor 'touch {marker}'; "
        f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> {git_dir}/config; "
        "echo done"
    )


def users_own_git_runs_nothing(work_tree: Path, marker: Path) -> None:
    """The user's next own git there: status (fsmonitor) and a commit (hooks)."""
    git(work_tree, "status", check=False)
    git(work_tree, "commit", "-q", "--allow-empty", "-m", "user", check=False)
    assert not marker.exists(), "a program planted by the command ran with the user's git"


def test_attack_gitfile_pointing_elsewhere_in_the_project_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """``sub/.git`` says ``gitdir: ../meta/sub-repo``: that directory, named nothing
    like .git, is where the user's git in sub/ takes hooks and config from."""
    repo_with_commit(project / "sub")
    (project / "meta").mkdir()
    (project / "sub" / ".git").rename(project / "meta" / "sub-repo")
    (project / "sub" / ".git").write_text("gitdir: ../meta/sub-repo\n")
    git(project / "sub", "status")  # git agrees
    marker = tmp_path / "PLANTED"
    run = shell()
    result = run(plant_attempt(marker, "meta/sub-repo", "sub"))
    assert "Read-only file system" in output(result) or "could not lock" in output(result)
    assert not (project / "meta" / "sub-repo" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "meta" / "sub-repo" / "config").read_text()
    # The rest of the project stays writable.
    assert run("echo ok > meta/note.txt")["ok"]
    assert (project / "meta" / "note.txt").read_text() == "ok\n"
    users_own_git_runs_nothing(project / "sub", marker)


def test_attack_gitfile_with_an_absolute_path_and_odd_spacing_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """An absolute ``gitdir:``, a CRLF line end and a path with spaces: read as git reads it."""
    repo_with_commit(project / "w")
    target = project / "odd dir" / "g it"
    target.parent.mkdir()
    (project / "w" / ".git").rename(target)
    (project / "w" / ".git").write_bytes(f"gitdir: {target}\r\n".encode())
    git(project / "w", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, "'odd dir/g it'", "w"))
    assert not (target / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (target / "config").read_text()
    users_own_git_runs_nothing(project / "w", marker)


def test_attack_dotgit_link_to_a_directory_in_the_project_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    repo_with_commit(project / "lnk")
    (project / "lnk" / ".git").rename(project / "real-git")
    (project / "lnk" / ".git").symlink_to("../real-git")
    git(project / "lnk", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, "real-git", "lnk"))
    assert not (project / "real-git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "real-git" / "config").read_text()
    assert (project / "lnk" / ".git").is_symlink()
    users_own_git_runs_nothing(project / "lnk", marker)


def test_attack_commondir_of_a_worktree_gitdir_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """A linked worktree's git directory takes hooks and config from its
    ``commondir``: here a directory of the project outside any .git."""
    main = project / "mainrepo"
    repo_with_commit(main)
    git(main, "worktree", "add", "-q", "../wt", "-b", "wt")
    (main / ".git").rename(project / "common")
    (main / ".git").write_text("gitdir: ../common\n")
    # The worktree's own git directory now sits under common/, which its
    # commondir (../..) still names.
    (project / "wt" / ".git").write_text("gitdir: ../common/worktrees/wt\n")
    (project / "common" / "worktrees" / "wt" / "gitdir").write_text(f"{project}/wt/.git\n")
    git(project / "wt", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, "common", "wt"))
    assert not (project / "common" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "common" / "config").read_text()
    users_own_git_runs_nothing(project / "wt", marker)


def test_attack_commondir_named_by_a_nested_git_directory_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """A real ``.git`` directory (read-only) whose ``commondir`` names a writable
    directory of the project: git takes hooks and config from there."""
    repo_with_commit(project / "nest")
    shutil.copytree(project / "nest" / ".git", project / "shared")
    (project / "nest" / ".git" / "commondir").write_text("../../shared\n")
    shutil.rmtree(project / "nest" / ".git" / "hooks")
    git(project / "nest", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, "shared", "nest"))
    assert not (project / "shared" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "shared" / "config").read_text()
    users_own_git_runs_nothing(project / "nest", marker)


def test_attack_submodule_git_directory_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """A submodule's git directory under .git/modules: read-only like .git."""
    source = tmp_path / "subsrc"
    repo_with_commit(source)
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sm")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, ".git/modules/sm", "sm"))
    assert not (project / ".git" / "modules" / "sm" / "hooks" / "pre-commit").exists()
    users_own_git_runs_nothing(project / "sm", marker)


def test_attack_gitfile_target_in_a_writable_path_outside_the_project_is_read_only(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """The user lets commands write to a directory outside the project; a
    ``.git`` file in the project names a git directory there."""
    extra = tmp_path / "extra"
    repo_with_commit(project / "x")
    extra.mkdir()
    (project / "x" / ".git").rename(extra / "x.git")
    (project / "x" / ".git").write_text(f"gitdir: {extra}/x.git\n")
    user_config(f'[tools.shell]\nsandbox_write_paths = ["{extra}"]\n')
    marker = tmp_path / "PLANTED"
    run = shell()
    run(plant_attempt(marker, f"{extra}/x.git", "x"))
    assert not (extra / "x.git" / "hooks" / "pre-commit").exists()
    # The rest of that directory stays writable.
    assert run(f"echo ok > {extra}/note.txt")["ok"]
    users_own_git_runs_nothing(project / "x", marker)


def test_attack_gitfile_target_credentials_are_redacted_for_commands(
    shell: Callable[[], Shell], project: Path
) -> None:
    repo_with_commit(project / "sub")
    (project / "sub" / ".git").rename(project / "g")
    (project / "sub" / ".git").write_text("gitdir: ../g\n")
    secret = "hunter2-correct-horse"
    git(project / "sub", "remote", "add", "origin", f"https://me:{secret}@example.com/r.git")
    result = shell()("cat g/config")
    assert result["ok"], result
    assert secret not in output(result) and "example.com" in output(result)


def _gits_own_view(work_tree: Path) -> set[str]:
    done = git(work_tree, "rev-parse", "--git-dir", "--git-common-dir")
    return {os.path.realpath(os.path.join(work_tree, line)) for line in done.stdout.splitlines()}


@pytest.mark.parametrize(
    "variant",
    ["relative", "absolute", "crlf", "nul", "link-to-gitfile", "link-to-dir", "commondir-link"],
)
def test_the_git_directories_protected_are_the_ones_git_uses(tmp_path: Path, variant: str) -> None:
    """For each way to name a git directory, git's own answer (rev-parse) is among
    the directories the sandbox makes read-only."""
    from forj_py.safety.commands import git_dirs_named_by

    work = tmp_path / "w"
    repo_with_commit(work)
    target = tmp_path / "elsewhere" / "gd"
    target.parent.mkdir()
    (work / ".git").rename(target)
    dotgit = work / ".git"
    if variant == "relative":
        dotgit.write_text("gitdir: ../elsewhere/gd\n")
    elif variant == "absolute":
        dotgit.write_text(f"gitdir: {target}\n")
    elif variant == "crlf":
        dotgit.write_bytes(b"gitdir: ../elsewhere/gd\r\n\r\n")
    elif variant == "nul":
        dotgit.write_bytes(b"gitdir: ../elsewhere/gd\0../../decoy\n")
    elif variant == "link-to-gitfile":
        (tmp_path / "gitfile").write_text("gitdir: ../elsewhere/gd\n")
        dotgit.symlink_to(tmp_path / "gitfile")
    elif variant == "link-to-dir":
        dotgit.symlink_to(target)
    elif variant == "commondir-link":
        # A worktree-like git directory whose commondir file is itself a link.
        wt = target / "worktrees" / "w2"
        wt.mkdir(parents=True)
        (tmp_path / "cd").write_text("../..\n")
        (wt / "commondir").symlink_to(tmp_path / "cd")
        (wt / "HEAD").write_text((target / "HEAD").read_text())
        (wt / "gitdir").write_text(f"{dotgit}\n")
        dotgit.write_text(f"gitdir: {wt}\n")
    named = set(git_dirs_named_by(str(dotgit)))
    assert _gits_own_view(work) <= named, (_gits_own_view(work), named)


def test_a_fifo_where_a_gitfile_or_commondir_is_expected_does_not_hang(tmp_path: Path) -> None:
    from forj_py.safety.commands import git_dirs_named_by

    os.mkfifo(tmp_path / ".git")
    assert git_dirs_named_by(str(tmp_path / ".git")) == []
    gd = tmp_path / "gd"
    gd.mkdir()
    os.mkfifo(gd / "commondir")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / ".git").write_text("gitdir: ../gd\n")
    assert git_dirs_named_by(str(tmp_path / "w" / ".git")) == [str(gd)]


def test_attack_dotgit_link_to_a_gitfile_names_a_read_only_directory(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    repo_with_commit(project / "s")
    (project / "s" / ".git").rename(project / "gd")
    (project / "pointer").write_text("gitdir: ../gd\n")
    (project / "s" / ".git").symlink_to("../pointer")
    git(project / "s", "status")
    marker = tmp_path / "PLANTED"
    shell()(plant_attempt(marker, "gd", "s"))
    assert not (project / "gd" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "gd" / "config").read_text()
    users_own_git_runs_nothing(project / "s", marker)


# --- moving the protected directory aside, or repointing what names it ---------------------


def _planted_repo(path: str, marker: Path) -> str:
    """Shell text making ``path`` a git directory with a planted hook and fsmonitor."""
    return (
        f"mkdir -p {path}/hooks {path}/objects {path}/refs && "
        f"echo 'ref: refs/heads/main' > {path}/HEAD && "
        f"printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch {marker}\\n' "
        f"> {path}/config && "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > {path}/hooks/pre-commit && "
        f"chmod +x {path}/hooks/pre-commit"
    )


def test_attack_renaming_a_directory_above_a_gitfile_target_swaps_nothing_in(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """Not the read-only directory itself but its parent is renamed, and a planted
    git directory put at the name the gitfile gives."""
    repo_with_commit(project / "sub")
    (project / "meta" / "deep").mkdir(parents=True)
    (project / "sub" / ".git").rename(project / "meta" / "deep" / "sub-repo")
    (project / "sub" / ".git").write_text("gitdir: ../meta/deep/sub-repo\n")
    marker = tmp_path / "PLANTED"
    run = shell()
    for moved in ("meta/deep", "meta"):
        result = run(f"mv {moved} {moved}.old && {_planted_repo('meta/deep/sub-repo', marker)}")
        assert not result["ok"], result
    assert (project / "meta" / "deep" / "sub-repo" / "objects").is_dir()
    assert run("echo ok > meta/deep/note.txt && echo ok > meta/note.txt")["ok"]
    users_own_git_runs_nothing(project / "sub", marker)


def test_attack_renaming_a_nested_repositorys_directory_swaps_nothing_in(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """A nested repository (its .git a directory, or a gitfile): its directory, or
    one above, moved aside and a planted repository made at its name."""
    repo_with_commit(project / "lib" / "inner")
    repo_with_commit(project / "lib" / "other")
    (project / "lib" / "other" / ".git").rename(project / "lib" / "other.gitdir")
    (project / "lib" / "other" / ".git").write_text("gitdir: ../other.gitdir\n")
    marker = tmp_path / "PLANTED"
    run = shell()
    for moved, work in (
        ("lib/inner", "lib/inner"),
        ("lib", "lib/inner"),
        ("lib/other", "lib/other"),
    ):
        plant = _planted_repo(f"{work}/.git", marker)
        result = run(f"mv {moved} {moved}.old && mkdir -p {work} && {plant}")
        assert not result["ok"], result
    assert run("echo ok > lib/inner/new.txt && echo ok > lib/other/new.txt")["ok"]
    users_own_git_runs_nothing(project / "lib" / "inner", marker)
    users_own_git_runs_nothing(project / "lib" / "other", marker)


def test_attack_repointing_a_dotgit_link_or_a_link_on_the_gitdir_path_fails(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    """A link cannot be made read-only alone: the directory holding it is."""
    repo_with_commit(project / "lnk")
    (project / "lnk" / ".git").rename(project / "real-git")
    (project / "lnk" / ".git").symlink_to("../real-git")
    repo_with_commit(project / "via")
    (project / "store").mkdir()
    (project / "via" / ".git").rename(project / "store" / "gd")
    (project / "links").mkdir()
    (project / "links" / "here").symlink_to("../store")
    (project / "via" / ".git").write_text("gitdir: ../links/here/gd\n")
    git(project / "via", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(_planted_repo("evil", marker))
    assert not run("rm lnk/.git && ln -s ../evil lnk/.git")["ok"]
    assert not run("rm links/here && ln -s ../evil links/here")["ok"]
    assert not run("mv links links.old && mkdir links && ln -s ../evil links/here")["ok"]
    users_own_git_runs_nothing(project / "lnk", marker)
    users_own_git_runs_nothing(project / "via", marker)


def test_attack_rewriting_the_gitfile_a_dotgit_link_points_at_fails(
    shell: Callable[[], Shell], project: Path, tmp_path: Path
) -> None:
    repo_with_commit(project / "s")
    (project / "s" / ".git").rename(project / "gd")
    (project / "pointers").mkdir()
    (project / "pointers" / "p").write_text("gitdir: ../gd\n")
    (project / "s" / ".git").symlink_to("../pointers/p")
    git(project / "s", "status")
    marker = tmp_path / "PLANTED"
    run = shell()
    run(_planted_repo("evil", marker))
    assert not run("echo 'gitdir: ../evil' > pointers/p")["ok"]
    assert (project / "pointers" / "p").read_text() == "gitdir: ../gd\n"
    users_own_git_runs_nothing(project / "s", marker)


def test_attack_a_command_cannot_create_the_projects_forj_config(
    shell: Callable[[], Shell], project: Path
) -> None:
    """A trusted project has no ``.forj`` yet: a command (an approved ``make``, say)
    must not create ``.forj/config.toml``, whose rules a trusted project's worker
    takes at its next start (``allow = ["run_shell"]``: every command unreviewed)."""
    user_config(f'[trust]\nprojects = ["{project}"]\n')
    run = shell()
    planted = run(
        "mkdir -p .forj; printf '[permissions]\\nallow = [\"run_shell\"]\\n' > .forj/config.toml;"
        " mv .forj .forj-old; mkdir .forj && cp .forj-old/config.toml .forj/; true"
    )
    assert planted["ok"], planted
    assert not (project / ".forj" / "config.toml").exists()
    proc = WorkerProcess(project)
    with Client(proc.port) as client:
        client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
        plan = client.call(
            "plan", {"calls": [{"id": "1", "name": "run_shell", "args": {"cmd": "touch x"}}]}
        )
    proc.stop()
    assert plan["items"][0]["disposition"] == "confirm", plan["items"][0]
