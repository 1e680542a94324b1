"""Security properties whose first tests exercise one component, proven on the running worker.

Each test here is the sibling of a test that checks a helper on its own
(the sandbox's pattern matcher, the read-only classifier, the permission
rules, the output channel's redaction): the same property, asked of a
real ``python -m forj_py`` over EPC, the way Emacs uses it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import call, user_config

from forj_py.transport.client import Client, WorkerProcess

SECRET = "hunter2-secret-value-9d41"


@pytest.fixture
def start(project: Path) -> Iterator[Any]:
    """Start a worker on ``project`` (after the test has set up config and files)."""
    procs: list[WorkerProcess] = []
    clients: list[Client] = []

    def go(env: dict[str, str] | None = None, events: list[dict[str, Any]] | None = None) -> Client:
        proc = WorkerProcess(project, env=env)
        procs.append(proc)
        client = Client(proc.port, on_event=events.append if events is not None else None)
        clients.append(client)
        client.call("hello", {"token": proc.token})
        return client

    yield go
    for client in clients:
        client.close()
    for proc in procs:
        proc.stop()


def plan_and_run(c: Client, *calls: dict[str, Any], approve: bool = True) -> dict[str, Any]:
    plan = c.call("plan", {"calls": list(calls)})
    approved = [x["id"] for x in calls] if approve else []
    done = c.call("execute", {"batch_id": plan["batch_id"], "approved": approved}, timeout=60)
    return {"plan": plan, "results": done["results"]}


# --- sibling of test_hardening.py::test_denied_patterns_ignore_case --------------------------


@pytest.mark.parametrize("name", [".ENV", ".Env", "Deploy.KEY", "id_RSA"])
def test_attack_denied_files_in_another_case_are_refused_by_the_running_worker(
    project: Path, start: Any, name: str
) -> None:
    """On a case-insensitive volume .ENV is .env: read, list and search all refuse it."""
    (project / name).write_text(f"TOKEN={SECRET}\n")
    c = start()
    out = plan_and_run(
        c,
        call("r", "read_file", path=name),
        call("l", "list_files", directory=".", include_hidden=True),
        call("s", "search", query=SECRET),
        call("g", "glob", patterns=["**/*"], include_hidden=True),
    )
    read, listing, found, globbed = out["results"]
    assert not read["ok"] and "denied" in read["error"]["message"], read
    assert name not in {e["path"] for e in listing["result"]["files"]}
    assert found["result"]["matches"] == []
    assert name not in {e["path"] for e in globbed["result"]["files"]}
    assert SECRET not in json.dumps(out["results"])  # (the plan quotes the query itself)


# --- sibling of test_patterns.py::test_attack_newline_in_a_directory_name_... ------------------


def test_attack_a_newline_in_a_directory_name_does_not_hide_a_denied_file_from_the_worker(
    project: Path, start: Any
) -> None:
    odd = project / "a\nb"
    odd.mkdir()
    (odd / ".env").write_text(f"TOKEN={SECRET}\n")
    (odd / "ok.txt").write_text("visible\n")
    c = start()
    out = plan_and_run(
        c,
        call("r", "read_file", path="a\nb/.env"),
        call("l", "list_files", directory="a\nb", include_hidden=True),
        call("s", "search", query=SECRET),
    )
    read, listing, found = out["results"]
    assert not read["ok"] and "denied" in read["error"]["message"], read
    assert {e["path"] for e in listing["result"]["files"]} == {"a\nb/ok.txt"}
    assert found["result"]["matches"] == []
    assert SECRET not in json.dumps(out["results"])  # (the plan quotes the query itself)


# --- sibling of test_readonly.py::test_attack_read_only_classifier_rejects_... ---------------


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
@pytest.mark.parametrize(
    "argv",
    [
        ["sort", "--files0-from=list", "-o", "out"],
        ["git", "diff", "--ext-diff"],
        ["git", "-c", "diff.external=./x", "diff"],
        ["git", "log", "--output=x"],
        ["find", ".", "-exec", "sh", "-c", "id", ";"],
    ],
)
def test_attack_options_that_read_files_or_run_programs_are_reviewed_by_the_running_worker(
    start: Any, argv: list[str]
) -> None:
    """With read_only_commands = "auto", such a call still waits for the user."""
    user_config("[tools.approval]\nread_only_commands = 'auto'\n")
    c = start()
    plan = c.call("plan", {"calls": [call("1", "run_shell", cmd=argv)]})
    assert plan["items"][0]["disposition"] == "confirm", plan["items"][0]
    done = c.call("execute", {"batch_id": plan["batch_id"], "approved": []}, timeout=60)
    assert done["results"][0]["ok"] is False  # not approved: never ran
    # A plain read-only command still runs unasked: the setting is in effect.
    plan = c.call("plan", {"calls": [call("2", "run_shell", cmd=["ls"])]})
    assert plan["items"][0]["disposition"] == "execute"


# --- sibling of test_permissions.py::test_fr_cns_02_deny_rules_match_any_part_... --------------


@pytest.mark.parametrize(
    "cmd",
    [
        "make && rm -rf build",
        "echo $(rm -rf /)",
        ["/bin/rm", "-rf", "x"],
        ["sh", "-c", "cd x && rm -rf y"],
        "FOO=1 rm -rf y",
    ],
)
def test_attack_a_deny_rule_reaches_into_shell_syntax_on_the_running_worker(
    project: Path, start: Any, cmd: Any
) -> None:
    user_config('[permissions]\nmode = "auto"\ndeny = ["run_shell(rm -rf *)"]\n')
    (project / "build").mkdir()
    (project / "build" / "keep.txt").write_text("kept\n")
    c = start()
    out = plan_and_run(c, call("1", "run_shell", cmd=cmd))
    item = out["plan"]["items"][0]
    assert item["disposition"] == "resolved", item
    assert out["results"][0]["ok"] is False
    assert out["results"][0]["error"]["type"] in ("permission-error", "permission-denied"), out
    assert (project / "build" / "keep.txt").exists()


# --- sibling of test_shell.py::test_streamed_chunks_redact_a_secret_split_between_reads --------


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_attack_a_secret_printed_in_pieces_is_redacted_in_the_stream_and_the_result(
    project: Path, start: Any
) -> None:
    """The worker was started with a secret; a command prints its value in two
    writes a moment apart: no streamed event and no result holds it."""
    (project / "emit.py").write_text(
        textwrap.dedent(
            f"""
            import sys, time
            secret = {SECRET!r}
            sys.stdout.write("password is " + secret[:9]); sys.stdout.flush()
            time.sleep(0.4)
            sys.stdout.write(secret[9:] + ", bye\\n"); sys.stdout.flush()
            """
        )
    )
    events: list[dict[str, Any]] = []
    c = start(env={**os.environ, "DEPLOY_TOKEN": SECRET}, events=events)
    out = plan_and_run(c, call("1", "run_shell", cmd=[sys.executable, "emit.py"]))
    result = out["results"][0]
    assert result["ok"], result
    assert result["result"]["stdout"] == "password is [REDACTED], bye\n"
    streamed = json.dumps(events)
    assert SECRET not in streamed and SECRET[:9] not in streamed and SECRET[9:] not in streamed
    assert "password is" in streamed  # the output did stream


# --- sibling of test_hardening.py::test_a_nested_root_does_not_move_anchored_denied_patterns ---


def test_attack_a_nested_root_does_not_move_anchored_denied_patterns_on_the_running_worker(
    project: Path, start: Any
) -> None:
    (project / "private").mkdir()
    (project / "private" / "secret.txt").write_text(SECRET + "\n")
    (project / "docs").mkdir()
    (project / "docs" / "alias").symlink_to(project / "private")
    user_config(
        '[tools.sandbox]\nallowed_roots = [".", "private"]\ndenied_patterns = ["private/**"]\n'
    )
    c = start()
    out = plan_and_run(
        c,
        call("a", "read_file", path="private/secret.txt"),
        call("b", "read_file", path="docs/alias/secret.txt"),
        call("c", "list_files", directory="docs", follow_symlinks=True),
        call("d", "search", query=SECRET),
    )
    first, second, listing, found = out["results"]
    for r in (first, second):
        assert not r["ok"] and r["error"]["details"]["pattern"] == "private/**", r
    assert "docs/alias/secret.txt" not in {e["path"] for e in listing["result"]["files"]}
    assert found["result"]["matches"] == []
    assert SECRET not in json.dumps(out["results"])


# --- sibling of test_sandbox.py::test_symlinks_out_of_the_root_are_rejected -------------------


def test_attack_links_out_of_the_project_are_refused_by_the_running_worker(
    project: Path, start: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text(SECRET + "\n")
    (project / "out").symlink_to(outside)
    (project / "out-file").symlink_to(outside / "notes.txt")
    (project / "rel").symlink_to("../outside")
    c = start()
    out = plan_and_run(
        c,
        call("a", "read_file", path="out/notes.txt"),
        call("b", "read_file", path="out-file"),
        call("c", "read_file", path="rel/notes.txt"),
        call("d", "write_file", path="out/new.txt", content="x"),
        call("e", "list_files", directory=".", follow_symlinks=True),
        call("f", "search", query=SECRET),
    )
    *refused, listing, found = out["results"]
    for r in refused:
        assert not r["ok"] and "outside the project" in r["error"]["message"], r
    assert not any(e["path"].startswith("out/") for e in listing["result"]["files"])
    assert found["result"]["matches"] == []
    assert SECRET not in json.dumps(out["results"])
    assert not (outside / "new.txt").exists()


# --- sibling of test_permissions.py::test_fr_cns_03_links_are_matched_where_they_lead ---------


def test_attack_permission_rules_match_a_link_where_it_leads_on_the_running_worker(
    project: Path, start: Any
) -> None:
    """allow edit(src/**) does not cover src/link.py -> secrets/key.py; deny edit(secrets/**)
    refuses it."""
    (project / "secrets").mkdir()
    (project / "secrets" / "key.py").write_text("KEY = 1\n")
    (project / "src" / "link.py").symlink_to(project / "secrets" / "key.py")
    user_config(
        '[permissions]\nallow = ["edit(src/**)", "read_file"]\ndeny = ["edit(secrets/**)"]\n'
    )
    c = start()
    reads = plan_and_run(
        c, call("r1", "read_file", path="src/link.py"), call("r2", "read_file", path="src/main.py")
    )
    assert all(r["ok"] for r in reads["results"]), reads
    edit = {"path": "src/link.py", "old_string": "KEY = 1", "new_string": "KEY = 2"}
    out = plan_and_run(c, call("e", "edit", **edit), approve=False)
    item = out["plan"]["items"][0]
    assert item["disposition"] == "resolved", item  # denied, not merely reviewed
    assert out["results"][0]["ok"] is False
    assert (project / "secrets" / "key.py").read_text() == "KEY = 1\n"


# --- sibling of test_permissions.py::test_fr_cns_03_multi_file_calls_need_every_path_... -------


def test_attack_a_multi_file_edit_needs_every_path_allowed_and_any_denied_refuses_it(
    project: Path, start: Any
) -> None:
    (project / "secrets").mkdir()
    (project / "secrets" / "b.py").write_text("B = 1\n")
    (project / "src" / "a.py").write_text("A = 1\n")
    both = [
        {"path": "src/a.py", "start_line": 1, "end_line": 1, "new_content": "A = 2\n"},
        {"path": "secrets/b.py", "start_line": 1, "end_line": 1, "new_content": "B = 2\n"},
    ]
    reads = [call("r1", "read_file", path="src/a.py"), call("r2", "read_file", path="secrets/b.py")]
    user_config('[permissions]\nmode = "ask"\nallow = ["multi_edit(src/**)", "read_file"]\n')
    c = start()
    plan_and_run(c, *reads)
    plan = c.call("plan", {"calls": [call("m", "multi_edit", edits=both)]})
    assert plan["items"][0]["disposition"] == "confirm", plan["items"][0]  # not allowed by src/**
    user_config(
        '[permissions]\nmode = "auto"\nallow = ["read_file"]\ndeny = ["multi_edit(secrets/**)"]\n'
    )
    c = start()
    plan_and_run(c, *reads)
    out = plan_and_run(c, call("m", "multi_edit", edits=both))
    assert out["plan"]["items"][0]["disposition"] == "resolved", out["plan"]["items"][0]
    assert out["results"][0]["ok"] is False
    assert (project / "src" / "a.py").read_text() == "A = 1\n"
    assert (project / "secrets" / "b.py").read_text() == "B = 1\n"
