"""The git forj runs itself runs none of the repository's programs, whatever their names.

A cloned repository's ``.git/config`` names programs (filter, merge and
diff drivers, textconv, fsmonitor, ssh, credential helpers, ...) and its
``.gitattributes`` picks which files they run on.  Every git run of the
worker (git_status, git_diff, git_log, the clean-tree check while a write
is planned, merge, rebase, checkout, add, commit) must start none of them.
The names are hostile: ``=`` (git cuts ``-c key=value`` at the first
``=``), dots, quotes, backslashes, Unicode.

The attacks run against a real worker process, spoken to from outside.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forj_py.system import git as sysgit
from forj_py.transport.client import Client, WorkerProcess

# Driver names a repository may give, each one a way to cut or bend a
# ``-c key=value``: an '=' anywhere, a dot, quotes, a backslash, Unicode,
# the driver's own key names inside the name, and no name at all
# (``[filter ""]`` is the driver of ``filter=``).
HOSTILE_NAMES = (
    "a=b",
    "=",
    "==x",
    "x.clean=y",
    "pro.cess=",
    "q\"u'o=te",
    "back\\slash=1",
    "ünï=cödé",
    "UPPER=Case",
    "dot.ted",
    "plain",
    "",
)
HANG = 30.0


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = T\n\temail = t@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(root: Path, *args: str) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_CONFIG_")
        or k
        in (
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
        )
    }
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _quoted(name: str) -> str:
    """``name`` as a config file's subsection: inside quotes, ``\\`` and ``"`` escaped."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Marks:
    """A program that records each time it runs, and the directory it records in."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "marks"
        self.dir.mkdir()
        self.program = tmp_path / "plant"
        self.program.write_text(f'#!/bin/sh\ntouch "{self.dir}/$1"\ncat\n')
        self.program.chmod(0o755)

    def command(self, what: str) -> str:
        """A config value that runs the program (quoted: it holds a space)."""
        return f'"{self.program} {what}"'

    def ran(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir())


def hostile_config(marks: Marks) -> str:
    """Every program-naming key, for every hostile driver name and unnamed."""
    text = ""
    for i, name in enumerate(HOSTILE_NAMES):
        sub = _quoted(name)
        text += (
            f"[filter {sub}]\n"
            f"\tclean = {marks.command(f'filter-clean-{i}')}\n"
            f"\tsmudge = {marks.command(f'filter-smudge-{i}')}\n"
            f"\tprocess = {marks.command(f'filter-process-{i}')}\n"
            f"\trequired = true\n"
            f"[diff {sub}]\n"
            f"\ttextconv = {marks.command(f'textconv-{i}')}\n"
            f"\tcommand = {marks.command(f'diff-command-{i}')}\n"
            f"[merge {sub}]\n"
            f"\tdriver = {marks.command(f'merge-driver-{i}')}\n"
        )
    return text + (
        "[core]\n"
        f"\tfsmonitor = {marks.command('fsmonitor')}\n"
        f"\tsshCommand = {marks.command('ssh')}\n"
        f"\tpager = {marks.command('pager')}\n"
        f"\teditor = {marks.command('editor')}\n"
        f"\taskPass = {marks.command('askpass')}\n"
        f"\thooksPath = {marks.dir.parent / 'hooks'}\n"
        "[diff]\n"
        f"\texternal = {marks.command('diff-external')}\n"
        "[sequence]\n"
        f"\teditor = {marks.command('sequence-editor')}\n"
        "[gpg]\n"
        f"\tprogram = {marks.command('gpg')}\n"
    )


def hostile_repo(root: Path, marks: Marks, *, branches: bool = False) -> list[str]:
    """A repository whose files each run the drivers of one hostile name; the file names.

    With ``branches``, ``other`` changes every file the other way, so merging
    or rebasing conflicts on each (the merge drivers' turn).
    """
    git(root, "init", "-q", "-b", "main")
    files = [f"f{i}.txt" for i in range(len(HOSTILE_NAMES))]
    attributes = "".join(
        f"{f} filter={n} diff={n} merge={n}\n" for f, n in zip(files, HOSTILE_NAMES, strict=True)
    )
    (root / ".gitattributes").write_text(attributes)
    for f in files:
        (root / f).write_text("base\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    if branches:
        git(root, "checkout", "-qb", "other")
        for f in files:
            (root / f).write_text("theirs\n")
        git(root, "commit", "-qam", "theirs")
        git(root, "checkout", "-q", "main")
        for f in files:
            (root / f).write_text("mine\n")
        git(root, "commit", "-qam", "mine")
    hooks = root.parent / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-commit", "post-checkout", "post-merge", "pre-rebase", "commit-msg"):
        (hooks / hook).write_text(f'#!/bin/sh\ntouch "{marks.dir}/hook-{hook}"\n')
        (hooks / hook).chmod(0o755)
    with (root / ".git" / "config").open("a", encoding="utf-8") as fh:
        fh.write(hostile_config(marks))
    return files


@pytest.fixture
def worker(project: Path) -> Iterator[Client]:
    """A real worker process for ``project``, spoken to over its socket."""

    class _Live:
        def __init__(self) -> None:
            self.proc: WorkerProcess | None = None
            self.client: Client | None = None

    live = _Live()

    def start() -> Client:
        live.proc = WorkerProcess(project)
        live.client = Client(live.proc.port)
        live.client.call("hello", {"token": live.proc.token, "client": {"name": "pytest"}})
        return live.client

    yield start  # type: ignore[misc]
    if live.client is not None:
        live.client.close()
    if live.proc is not None:
        live.proc.stop()


def run(client: Client, name: str, **args: Any) -> dict[str, Any]:
    """Plan and execute one call, approving it; its result."""
    plan = client.call("plan", {"calls": [{"id": "c", "name": name, "args": args}]})
    done = client.call("execute", {"batch_id": plan["batch_id"], "approved": ["c"]}, timeout=HANG)
    result: dict[str, Any] = done["results"][0]
    return result


def test_attack_git_driver_name_with_equals_runs_nothing_on_reads_or_planning(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """git_status (no review), git_diff, git_log and the clean-tree check of a planned
    write start none of the repository's programs, for drivers of any name."""
    marks = Marks(tmp_path)
    files = hostile_repo(project, marks)
    # Stat-dirty (git must read each file again, through its clean filter),
    # and one changed file for the diffs to show.
    for f in files:
        os.utime(project / f, (1_000_000_000, 1_000_000_000))
    (project / files[0]).write_text("changed\n")
    client = worker()
    status = run(client, "git_status")
    assert status["ok"], status
    for args in ({}, {"rev": "HEAD"}, {"paths": files[:3]}):
        diff = run(client, "git_diff", **args)
        assert diff["ok"], diff
    log = run(client, "git_log", paths=files[:2])
    assert log["ok"], log
    # Planning a write asks git whether the file holds uncommitted work.
    plan = client.call(
        "plan",
        {
            "calls": [
                {"id": "w", "name": "write_file", "args": {"path": files[1], "content": "x\n"}}
            ]
        },
    )
    assert plan["items"], plan
    assert marks.ran() == []


def test_attack_git_driver_name_with_equals_runs_nothing_on_merge_rebase_checkout_commit(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """Merge and rebase conflict on every file (the merge drivers' turn), checkout
    writes every file (smudge), add and commit read them (clean): nothing runs."""
    marks = Marks(tmp_path)
    files = hostile_repo(project, marks, branches=True)
    client = worker()
    merge = run(client, "git_merge", branch="other")
    assert not merge["ok"] or merge["result"].get("conflicts"), merge
    run(client, "git_merge", abort=True)
    run(client, "git_rebase", onto="other")
    run(client, "git_rebase", action="abort")
    checkout = run(client, "git_checkout", target="other")
    assert checkout["ok"], checkout
    assert (project / files[0]).read_text() == "theirs\n"
    assert run(client, "git_checkout", target="main")["ok"]
    (project / files[0]).write_text("edited\n")
    assert run(client, "git_add", paths=files)["ok"]
    commit = run(client, "git_commit", message="edit")
    assert commit["ok"], commit
    assert marks.ran() == []


def test_attack_git_programs_from_an_include_outside_the_project_do_not_run(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """The repository's config includes a file outside the project that names the
    programs: they are the repository's all the same."""
    marks = Marks(tmp_path)
    files = hostile_repo(project, marks)
    config = project / ".git" / "config"
    outside = tmp_path / "elsewhere" / "evil.cfg"
    outside.parent.mkdir()
    outside.write_text(hostile_config(marks))
    text = config.read_text().split("[filter")[0]  # the repository's own part only
    config.write_text(
        text + f"[include]\n\tpath = {outside}\n"
        f'[includeIf "gitdir:{project}/"]\n\tpath = ../../elsewhere/evil.cfg\n'
    )
    for f in files:
        os.utime(project / f, (1_000_000_000, 1_000_000_000))
    client = worker()
    assert run(client, "git_status")["ok"]
    assert run(client, "git_diff", rev="HEAD")["ok"]
    client.call(
        "plan",
        {
            "calls": [
                {"id": "w", "name": "write_file", "args": {"path": files[1], "content": "x\n"}}
            ]
        },
    )
    assert marks.ran() == []


def test_attack_git_push_to_a_mirror_remote_whose_name_holds_equals_is_not_a_mirror_push(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """remote "x=y" set to mirror: the push override must reach that remote's key."""
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "branch", "keep")
    git(project, "remote", "add", "x=y", str(bare))
    git(project, "push", "-q", "x=y", "main", "keep")
    git(project, "branch", "-D", "keep")
    git(project, "config", "remote.x=y.mirror", "true")
    client = worker()
    result = run(client, "git_push", remote="x=y", refspec="main")
    assert result["ok"], result
    # A mirror push would have deleted the remote's 'keep' (gone here).
    assert "keep" in git(bare, "branch", "--list", "keep")


# --- the override builder -------------------------------------------------------------------

_SECTION = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_VARIABLE = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
# Subsections: anything but NUL, weighted towards what cuts or bends a key.
_SUBSECTION = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("=.\"'\\\n\t ;#[]$`%ü∂🙂")),
        st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
    ),
    max_size=12,
)
_VALUE = st.text(
    alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=16
)


def _seen_by_git(pairs: list[tuple[str, str]], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        **sysgit.config_environment(pairs),
    }
    return subprocess.run(
        ["git", "config", "--list", "--null", "--show-scope"],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    entries=st.lists(
        st.tuples(_SECTION, st.one_of(st.none(), _SUBSECTION), _VARIABLE, _VALUE),
        min_size=1,
        max_size=4,
    )
)
def test_config_override_builder_no_name_can_split_a_setting(
    entries: list[tuple[str, str | None, str, str]], tmp_path: Path
) -> None:
    """Whatever a subsection holds, git sees exactly the keys and values given, in
    order, or (a newline, which no config file can hold) refuses to run at all:
    never a different key."""
    pairs = [
        (f"{sec}.{sub}.{var}" if sub is not None else f"{sec}.{var}", value)
        for sec, sub, var, value in entries
    ]
    done = _seen_by_git(pairs, tmp_path)
    if any("\n" in key for key, _ in pairs):
        assert done.returncode != 0
        return
    assert done.returncode == 0, done.stderr
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    seen = [
        tuple(fields[i + 1].split("\n", 1))
        for i in range(0, len(fields), 2)
        if fields[i] == "command"
    ]
    assert seen == [(key, value) for key, value in pairs]


@given(
    name=_SUBSECTION.filter(lambda s: "\n" not in s),
    kind=st.sampled_from(["clean", "smudge", "process"]),
)
@settings(max_examples=100, deadline=None)
def test_config_override_builder_overrides_a_filter_of_any_name(name: str, kind: str) -> None:
    """The repository's filter program, whatever its driver's name, is overridden
    under that very key, with a value that names no program."""
    key = f"filter.{name}.{kind}"
    pairs, env = sysgit.overrides_for([("local", key, "/tmp/evil")])
    assert pairs == [(key, "")] and env == {}
    built = sysgit.config_environment(pairs)
    assert built == {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": key, "GIT_CONFIG_VALUE_0": ""}


@pytest.mark.parametrize(
    "url",
    ["https://example.com/x.y=z", "https://example.com/a=b", "https://u=v@example.com", "=", ""],
)
def test_attack_git_credential_helper_for_a_url_holding_equals_does_not_run(
    project: Path, tmp_path: Path, url: str
) -> None:
    """A repository-set helper for a URL (a subsection) holding '=': git asked for
    credentials, as a fetch would ask it, runs none of the repository's helpers.
    (A guard: git percent-encodes '=' in the URL it matches, and a split '-c' of
    these names is not a valid key, so here the old '-c' failed closed too.)"""
    marks = Marks(tmp_path)
    git(project, "init", "-q", "-b", "main")
    with (project / ".git" / "config").open("a", encoding="utf-8") as fh:
        fh.write(
            f"[credential {_quoted(url)}]\n\thelper = !{marks.program} helper-url\n"
            f"[credential]\n\thelper = !{marks.program} helper\n\tuseHttpPath = true\n"
        )
    repo = sysgit.open_repo(str(project))
    for path in ("x.y=z", "a=b"):
        query = f"protocol=https\nhost=example.com\npath={path}\nusername=u=v\n\n".encode()
        repo.run(["credential", "fill"], timeout=10, stdin=query)
    assert marks.ran() == []


def test_attack_git_auto_stage_runs_no_program_of_the_repository(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """Emacs's forj-git-auto-stage has the worker stage the files forj wrote
    (``stage``): git add reads each file through its clean filter, and none of the
    repository's runs; a denied file is never staged."""
    marks = Marks(tmp_path)
    files = hostile_repo(project, marks)
    for f in files:
        (project / f).write_text("written by forj\n")
    (project / ".env").write_text("SECRET=1\n")
    client = worker()
    reply = client.call("stage", {"paths": [*files, ".env", "../outside.txt"]})
    assert "error" not in reply, reply
    assert sorted(reply["staged"]) == sorted(files)
    assert {s["path"] for s in reply["skipped"]} == {".env", "../outside.txt"}
    assert marks.ran() == []
    # (The index against HEAD: git reads no file of the work tree for it.)
    staged = git(project, "-c", "core.fsmonitor=false", "diff", "--cached", "--name-only", "-z")
    assert sorted(p for p in staged.split("\0") if p) == sorted(files)


def test_attack_git_push_and_pull_run_none_of_a_local_remotes_programs(
    worker: Any, project: Path, tmp_path: Path
) -> None:
    """A remote that is a path on this machine runs its receive-pack and upload-pack
    here, outside the sandbox, with that repository's own configuration (git hands a
    local transport none of the overrides): its filters (through
    ``receive.denyCurrentBranch = updateInstead``, which checks the pushed branch
    out there) and its ``core.alternateRefsCommand`` must run on neither push nor
    pull, whatever the driver's name."""
    marks = Marks(tmp_path)
    (project / ".gitattributes").write_text(
        "".join(f"f{i}.txt filter={n}\n" for i, n in enumerate(HOSTILE_NAMES))
    )
    for i in range(len(HOSTILE_NAMES)):
        (project / f"f{i}.txt").write_text("base\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "base")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(project), str(other))
    git(other, "branch", "side")
    alternate = tmp_path / "alternate.git"
    git(tmp_path, "init", "-q", "--bare", str(alternate))
    (other / ".git" / "objects" / "info" / "alternates").write_text(f"{alternate}/objects\n")
    drivers = "".join(
        f"[filter {_quoted(n)}]\n"
        f"\tclean = {marks.command(f'clean-{i}')}\n"
        f"\tsmudge = {marks.command(f'smudge-{i}')}\n"
        f"\tprocess = {marks.command(f'process-{i}')}\n"
        for i, n in enumerate(HOSTILE_NAMES)
    )
    with (other / ".git" / "config").open("a", encoding="utf-8") as fh:
        fh.write(
            drivers + "[receive]\n\tdenyCurrentBranch = updateInstead\n"
            # (Its own command: it would read the protocol's stdin to the end.)
            f"[core]\n\talternateRefsCommand = touch {marks.dir / 'alternate-refs'}\n"
        )
    git(project, "remote", "add", "near", str(other))
    for i in range(len(HOSTILE_NAMES)):
        (project / f"f{i}.txt").write_text("pushed\n")
    git(project, "commit", "-qam", "pushed")
    client = worker()
    checked_out = run(client, "git_push", remote="near", refspec="main")
    assert marks.ran() == []
    assert not checked_out["ok"], checked_out  # refused there, not checked out
    side = run(client, "git_push", remote="near", refspec="HEAD:refs/heads/side")
    assert side["ok"], side
    assert marks.ran() == []
    pulled = run(client, "git_pull", remote="near", branch="side")
    assert pulled["ok"], pulled
    assert marks.ran() == []


@pytest.mark.parametrize("line", ["exec", "x", "  exec\t"])
def test_attack_git_rebase_continue_runs_no_exec_line_of_a_pending_rebase(
    worker: Any, project: Path, tmp_path: Path, line: str
) -> None:
    """A repository comes with a rebase stopped half-way whose to-do list holds
    ``exec`` lines (shell commands): ``git_rebase`` with ``action: continue`` would
    run them here, outside the sandbox. It is refused, nothing runs, and the rebase
    stays where it was."""
    marks = Marks(tmp_path)
    git(project, "init", "-q", "-b", "main")
    for i in range(3):
        (project / "f.txt").write_text(f"{i}\n")
        git(project, "add", "-A")
        git(project, "commit", "-qm", f"c{i}")
    editor = tmp_path / "editor"
    editor.write_text(
        f'#!/bin/sh\nsed -i "1i break" "$1"\nprintf "{line} {marks.program} todo-exec\\n" >> "$1"\n'
    )
    editor.chmod(0o755)
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": str(editor)}
    done = subprocess.run(
        ["git", "rebase", "-i", "HEAD~2"], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    todo = project / ".git" / "rebase-merge" / "git-rebase-todo"
    assert "todo-exec" in todo.read_text()
    client = worker()
    result = run(client, "git_rebase", action="continue")
    assert marks.ran() == []
    assert not result["ok"], result
    assert "exec" in result["error"]["message"], result
    assert todo.exists()


@pytest.mark.parametrize("entry", ["bin", "", "."])
def test_attack_git_tools_never_run_a_git_planted_in_the_project(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """The user's PATH names a directory of the project (``PATH_add bin`` of direnv,
    ``./node_modules/.bin``) or the working directory (an empty or ``.`` entry). A
    command writes ``git`` there; the worker's own git (git_status needs no review,
    and runs outside the sandbox; the user's identity asked for a command) must
    still be the system's."""
    marks = Marks(tmp_path)
    git(project, "init", "-q", "-b", "main")
    where = project / entry if entry else project
    where.mkdir(exist_ok=True)
    planted = where / "git"
    planted.write_text(f'#!/bin/sh\ntouch "{marks.dir}/planted-git"\nexec /usr/bin/git "$@"\n')
    planted.chmod(0o755)
    path_entry = str(project / entry) if entry == "bin" else entry
    monkeypatch.setenv("PATH", f"{path_entry}:{os.environ['PATH']}")
    proc = WorkerProcess(project)
    try:
        with Client(proc.port) as client:
            client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
            assert run(client, "git_status")["ok"]
            # A command's environment asks git for the user's identity, outside too.
            assert run(client, "run_shell", cmd=["true"])["ok"]
    finally:
        proc.stop()
    assert marks.ran() == []
