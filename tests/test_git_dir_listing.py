"""``.git`` is never listed, globbed or searched: docs/tools.md says so, the worker does it.

A real worker process, over EPC, on a project that is a real git
repository with a nested repository, a gitfile (a linked worktree's
``.git``), links to ``.git`` and into it, and a ``.GIT`` (the same
directory on a case-insensitive volume).  Every spelling that names a
``.git`` is refused with an error that points to the git tools; walks that
do not name one never show what is inside one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import call

from forj_py.transport.client import Client, WorkerProcess

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# Text that exists only inside .git directories.
INSIDE_GIT = "only-inside-git-7c1e"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(project: Path) -> Path:
    _git(project, "init", "-q")
    (project / ".git" / "description").write_text(INSIDE_GIT + "\n")
    (project / ".git" / "info").mkdir(exist_ok=True)
    (project / ".git" / "info" / "notes.txt").write_text(INSIDE_GIT + "\n")
    nested = project / "sub"
    nested.mkdir()
    _git(nested, "init", "-q")
    (nested / ".git" / "description").write_text(INSIDE_GIT + "\n")
    (nested / "code.py").write_text("x = 1\n")
    (project / "wt").mkdir()
    (project / "wt" / ".git").write_text(f"gitdir: {project / '.git'}\n")  # a gitfile
    (project / "gitlink").symlink_to(".git")
    (project / "refs").symlink_to(".git/refs")
    (project / ".GIT").mkdir()
    (project / ".GIT" / "notes.txt").write_text(INSIDE_GIT + "\n")
    return project


@pytest.fixture
def client(repo: Path) -> Iterator[Client]:
    with WorkerProcess(repo) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        yield c


def one(c: Client, name: str, **args: Any) -> dict[str, Any]:
    plan = c.call("plan", {"calls": [call("1", name, **args)]})
    done = c.call("execute", {"batch_id": plan["batch_id"]}, timeout=60)
    return dict(done["results"][0])


def refused(r: dict[str, Any]) -> str:
    assert not r["ok"], r
    assert "names .git" in r["error"]["message"], r["error"]
    assert any("git_status" in step for step in r["error"]["recovery"])
    assert r["error"]["details"]["pattern"] == ".git/"
    return str(r["error"]["message"])


def no_git_inside(r: dict[str, Any]) -> None:
    text = json.dumps(r)
    assert INSIDE_GIT not in text
    for entry in r.get("result", {}).get("files", []):
        parts = entry["path"].lower().split("/")
        assert ".git" not in parts, entry
        assert not {"objects", "HEAD", "description", "heads"} & set(entry["path"].split("/"))


@pytest.mark.parametrize(
    "directory",
    [".git", "./.git", ".git/", ".//.git", ".git/refs", ".git/info", "sub/.git", ".GIT", "wt/.git"],
)
def test_attack_list_files_refuses_any_directory_named_git(client: Client, directory: str) -> None:
    r = one(client, "list_files", directory=directory)
    assert repr(directory) in refused(r)
    no_git_inside(r)


def test_attack_list_files_refuses_a_link_to_git_and_a_link_into_it(client: Client) -> None:
    for directory in ("gitlink", "refs", "gitlink/refs"):
        r = one(client, "list_files", directory=directory)
        refused(r)
        no_git_inside(r)


@pytest.mark.parametrize("directory", [".git/..", "sub/.git/../.."])
def test_attack_list_files_dot_dot_through_git_is_refused(client: Client, directory: str) -> None:
    r = one(client, "list_files", directory=directory)
    assert not r["ok"] and "'..'" in r["error"]["message"]
    no_git_inside(r)


def test_list_files_of_the_project_never_shows_inside_a_git(client: Client) -> None:
    """Hidden names asked for, links followed, deep: still nothing of any .git."""
    r = one(
        client, "list_files", directory=".", include_hidden=True, follow_symlinks=True, max_depth=10
    )
    assert r["ok"], r
    paths = {e["path"] for e in r["result"]["files"]}
    assert {"sub/code.py", "wt", "gitlink", "refs"} <= paths
    no_git_inside(r)


@pytest.mark.parametrize(
    "pattern",
    [
        "**/.git/**",
        ".git/*",
        ".git",
        "./.git/**",
        "sub/.git/**",
        "**/.GIT/*",
        "{.git,src}/**",
        "*/.git",
    ],
)
def test_attack_glob_refuses_a_pattern_naming_git(client: Client, pattern: str) -> None:
    r = one(client, "glob", patterns=["*.md", pattern])
    refused(r)
    no_git_inside(r)


def test_glob_that_does_not_name_git_never_matches_inside_one(client: Client) -> None:
    for patterns in (["**/*"], ["**/HEAD", "**/description"], ["refs/**", "gitlink/**"]):
        r = one(client, "glob", patterns=patterns, include_hidden=True)
        assert r["ok"], r
        no_git_inside(r)


@pytest.mark.parametrize(
    "include", [[".git/**"], ["**/.git/**"], ["sub/.git/description"], [".GIT/*"], [".git"]]
)
def test_attack_search_refuses_include_paths_naming_git(client: Client, include: list[str]) -> None:
    r = one(client, "search", query=INSIDE_GIT, include_paths=include)
    refused(r)
    no_git_inside(r)


def test_search_never_finds_text_inside_a_git(client: Client, repo: Path) -> None:
    r = one(client, "search", query=INSIDE_GIT)
    assert r["ok"] and r["result"]["matches"] == [], r
    (repo / "visible.txt").write_text(INSIDE_GIT + "\n")
    r = one(client, "search", query=INSIDE_GIT)
    assert [m["path"] for m in r["result"]["matches"]] == ["visible.txt"]


def test_read_file_still_reads_one_named_file_in_git(client: Client) -> None:
    """Only listing, globbing and searching are refused: reads are not (docs/tools.md)."""
    r = one(client, "read_file", path=".git/HEAD")
    assert r["ok"] and "ref: refs/heads/" in r["result"]["content"], r


def test_attack_sdk_names_fs_list_and_grep_refuse_git_too(client: Client) -> None:
    """The seed 004 names are the same tools: the same refusal."""
    refused(one(client, "fs_list", glob=".git/**"))
    refused(one(client, "grep", pattern=INSIDE_GIT, glob="sub/.git/*"))
    r = one(client, "fs_list", glob="**/*", include_hidden=True)
    assert r["ok"], r
    assert not any(".git" in p.lower().split("/") for p in r["result"]["files"])
    r = one(client, "grep", pattern=INSIDE_GIT)
    assert r["ok"] and r["result"]["matches"] == [], r
