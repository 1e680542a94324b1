"""Rows of seed 004 (the Tool Runtime SDK) that no other test proves, on real files.

Each test is named after its row (section and name) and runs the real
worker: plan, review, execute, with the sandbox and the journal.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import Boom, MakeWorker, call, project_config, user_config, write_tree
from conftest import run_approved as _exec

from forj_py import __version__
from forj_py.config import ConfigError, load

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ §3


def test_sdk_3_e_shell_e_timeout_and_e_internal_from_real_calls(make_worker: MakeWorker) -> None:
    """The codes the mapping gives, on calls that really failed that way."""
    worker = make_worker(extra_tools=[Boom()])
    failed, slow, crashed = _exec(
        worker,
        call("f", "shell_exec", cmd="echo no >&2; exit 3"),
        # A limit far below the command's length: the outcome is not a race.
        call("t", "shell_exec", cmd="sleep 60", timeout_ms=1000),
        call("c", "boom", text="x"),
    )
    assert failed["error"]["details"]["code"] == "E_SHELL"
    assert failed["error"]["details"]["exit_code"] == 3
    assert slow["error"]["details"]["code"] == "E_TIMEOUT"
    assert crashed["error"]["details"]["code"] == "E_INTERNAL"


# ------------------------------------------------------------------ §4


def test_sdk_4_a_version_key_is_refused_by_name(project: Path) -> None:
    """forj's registry is TOML without a schema version: `version = 1` is an unknown key."""
    user_config("version = 1\n")
    with pytest.raises(ConfigError) as exc:
        load(project)
    assert os.environ["FORJ_CONFIG"] in str(exc.value)
    assert "version" in str(exc.value)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_sdk_4_require_clean_tree_for_commit_false_is_the_users_choice(
    make_worker: MakeWorker, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "T")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "t@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "T")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@example.com")
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "start")
    (project / "README.md").write_text("# staged\n")
    _git(project, "add", "README.md")
    (project / "README.md").write_text("# staged, then changed again\n")
    # A project file cannot turn the guard off: the commit is still refused.
    project_config(project, "[tools.git]\nrequire_clean_tree_for_commit = false\n")
    (refused,) = _exec(make_worker(), call("c", "git_commit", message="docs: x"))
    assert refused["error"]["details"]["rule"] == "sec.git.clean_tree"
    # The user's own file can: the staged version is committed, the rest stays unstaged.
    (project / ".forj" / "config.toml").unlink()
    user_config("[tools.git]\nrequire_clean_tree_for_commit = false\n")
    (done,) = _exec(make_worker(), call("c", "git_commit", message="docs: x"))
    assert done["ok"], done
    assert _git(project, "show", "HEAD:README.md") == "# staged\n"
    assert (project / "README.md").read_text() == "# staged, then changed again\n"


# ------------------------------------------------------------------ §5.1


def test_sdk_5_1_file_read_max_bytes_cuts_the_content_not_the_hash(
    make_worker: MakeWorker, project: Path
) -> None:
    (r,) = _exec(make_worker(), call("r", "file_read", path="src/main.py", max_bytes=100))
    assert r["ok"], r
    data = (project / "src/main.py").read_bytes()
    assert r["result"]["truncated"] is True
    content = r["result"]["content"]
    assert len(content.encode()) <= 100
    kept, marker, _ = content.partition("\n\n... [output truncated]")
    assert marker and kept.startswith("line 1\n") and data.decode().startswith(kept)
    # The hash is the whole file's, the one the stale-file rule checks.
    assert r["result"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_sdk_5_1_fs_copy_preserve_mode_is_the_default_and_can_be_turned_off(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"bin/run.sh": "echo hi\n"})
    os.chmod(project / "bin/run.sh", 0o750)
    worker = make_worker()
    kept, plain = _exec(
        worker,
        call("k", "fs_copy", src="bin/run.sh", dst="bin/kept.sh"),
        call("p", "fs_copy", src="bin/run.sh", dst="bin/plain.sh", preserve_mode=False),
    )
    assert kept["ok"] and plain["ok"], (kept, plain)
    assert kept["result"]["copied"] is True
    assert os.stat(project / "bin/kept.sh").st_mode & 0o777 == 0o750
    assert os.stat(project / "bin/plain.sh").st_mode & 0o111 == 0
    assert (project / "bin/plain.sh").read_text() == "echo hi\n"


def test_sdk_5_1_fs_delete_safe_defaults(make_worker: MakeWorker, project: Path) -> None:
    """Without `recursive` a directory stays; without `force` a missing path is an error."""
    write_tree(project, {"d/a.txt": "a\n"})
    worker = make_worker()
    tree, missing, forced = _exec(
        worker,
        call("t", "fs_delete", path="d"),
        call("m", "fs_delete", path="gone.txt"),
        call("f", "fs_delete", path="gone.txt", force=True),
    )
    assert not tree["ok"] and "recursive" in tree["error"]["message"]
    assert (project / "d/a.txt").read_text() == "a\n"
    assert not missing["ok"] and missing["error"]["details"]["code"] == "E_FILE_IO"
    assert forced["ok"], forced


def test_sdk_5_1_fs_list_max_results_cuts_and_says_so(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"pkg": {f"m{i}.py": "" for i in range(6)}})
    (r,) = _exec(make_worker(), call("l", "fs_list", glob="pkg/*.py", max_results=4))
    assert r["ok"], r
    assert len(r["result"]["files"]) == 4
    assert set(r["result"]["files"]) < {f"pkg/m{i}.py" for i in range(6)}
    assert r["result"]["truncated"] is True
    assert r["result"]["note"]


def test_sdk_5_1_grep_ignores_case_by_default_and_stops_at_max_results(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"src": {"x.rs": "".join(f"panic!({i});\n" for i in range(5))}})
    worker = make_worker()
    loose, capped = _exec(
        worker,
        call("c", "grep", pattern="PANIC!", glob="src/**"),
        call("m", "grep", pattern="panic", glob="src/**", max_results=2),
    )
    assert [m["line"] for m in loose["result"]["matches"]] == [1, 2, 3, 4, 5]
    assert [m["line"] for m in capped["result"]["matches"]] == [1, 2]
    assert capped["result"]["truncated"] is True


# ------------------------------------------------------------------ §5.2


def test_sdk_5_2_shell_exec_passes_env_and_stdin(make_worker: MakeWorker) -> None:
    (r,) = _exec(
        make_worker(),
        call(
            "s",
            "shell_exec",
            cmd='cat; printf "%s\\n" "$ROW_VALUE"',
            env={"ROW_VALUE": "from-env"},
            stdin="from-stdin\n",
        ),
    )
    assert r["ok"], r
    assert r["result"]["code"] == 0
    assert r["result"]["stdout"] == "from-stdin\nfrom-env\n"


# ------------------------------------------------------------------ §6


def test_sdk_6_git_status_is_read_only_and_runs_unreviewed(
    make_worker: MakeWorker, project: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "add", "README.md"], check=True)
    plan = make_worker().plan(
        {
            "calls": [
                call("s", "git_status", porcelain=True),
                call("c", "git_commit", message="feat: x"),
            ]
        }
    )
    dispositions = {i["id"]: i["disposition"] for i in plan["items"]}
    assert dispositions == {"s": "execute", "c": "confirm"}


def test_sdk_6_fs_move_refuses_a_file_changed_after_review(
    make_worker: MakeWorker, project: Path
) -> None:
    """No lock is held between review and run: the hash taken at review is checked instead."""
    worker = make_worker()
    plan = worker.plan({"calls": [call("m", "fs_move", src="README.md", dst="docs/README.md")]})
    (project / "README.md").write_text("# changed after review\n")
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["m"]}, lambda e: None)
    (res,) = reply["results"]
    assert not res["ok"] and res["error"]["type"] == "stale-file"
    assert (project / "README.md").read_text() == "# changed after review\n"
    assert not (project / "docs/README.md").exists()


# ------------------------------------------------------------------ §11


def test_sdk_11_version_is_semantic_and_the_same_everywhere(make_worker: MakeWorker) -> None:
    assert re.fullmatch(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)", __version__)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'(?m)^version = "([^"]+)"$', pyproject)[1] == __version__  # type: ignore[index]
    elisp = (REPO / "elisp" / "forj.el").read_text(encoding="utf-8")
    assert re.search(r"(?m)^;; Version: (\S+)$", elisp)[1] == __version__  # type: ignore[index]
    assert make_worker().hello_payload({"name": "pytest"})["version"] == __version__
