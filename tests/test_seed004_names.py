"""Seed 004's tool names (file_read, file_write, fs_list, grep, shell_exec) on real files.

Each is its forj tool under another name: the same sandbox, review,
stale-file rule and permission rules, with the SDK's argument and result
shapes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config, write_tree
from conftest import run_approved as _exec

from forj_py.errors import ToolFailure
from forj_py.reads import Session
from forj_py.service import Worker
from forj_py.tools.compat_names import FileWrite, FileWriteArgs
from forj_py.tools.registry import ToolContext


def test_sdk_fs_read_file_read_returns_content_and_the_files_sha256(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (r,) = _exec(worker, call("r", "file_read", path="src/main.py"))
    assert r["ok"], r
    data = (project / "src/main.py").read_bytes()
    assert r["result"]["content"] == data.decode()
    assert r["result"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert r["name"] == "file_read"


def test_sdk_fs_read_file_read_stays_in_the_sandbox(make_worker: MakeWorker) -> None:
    worker = make_worker()
    (r,) = _exec(worker, call("r", "file_read", path="../outside.txt"))
    assert not r["ok"]
    assert r["error"]["details"]["code"] == "E_POLICY"


def test_sdk_fs_write_file_write_needs_the_read_and_reports_bytes(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (stale,) = _exec(worker, call("w", "file_write", path="README.md", content="# new\n"))
    assert not stale["ok"]
    assert stale["error"]["type"] == "stale-file"
    _exec(worker, call("r", "file_read", path="README.md"))
    (w,) = _exec(
        worker,
        call("w2", "file_write", path="README.md", content="# new\n", attribution={"task_id": 42}),
    )
    assert w["ok"], w
    assert w["result"]["written"] is True
    assert w["result"]["bytes"] == 6
    assert (project / "README.md").read_text() == "# new\n"
    assert Path(w["result"]["backup_path"]).read_text() == "# demo\n"


def test_sdk_fs_write_mode_octal_and_create_dirs(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    (w,) = _exec(
        worker, call("w", "file_write", path="bin/run.sh", content="echo hi\n", mode_octal="0750")
    )
    assert w["ok"], w
    assert (os.stat(project / "bin/run.sh").st_mode & 0o7777) == 0o750
    (no_dir,) = _exec(
        worker, call("n", "file_write", path="nodir/x.txt", content="x\n", create_dirs=False)
    )
    assert not no_dir["ok"]
    assert "create_dirs" in no_dir["error"]["message"]
    assert not (project / "nodir").exists()
    (setuid,) = _exec(
        worker, call("s", "file_write", path="bin/x.sh", content="x\n", mode_octal="4755")
    )
    assert not setuid["ok"]
    assert setuid["error"]["type"] == "validation-error"


def test_sdk_fs_list_gives_paths(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"pkg": {"a.py": "", "b.py": "", "c.txt": ""}, ".env": "K=1\n"})
    worker = make_worker()
    (r,) = _exec(worker, call("l", "fs_list", glob="pkg/*.py"))
    assert r["ok"], r
    assert r["result"] == {"files": ["pkg/a.py", "pkg/b.py"], "truncated": False}
    (hidden,) = _exec(worker, call("h", "fs_list", glob="*", include_hidden=True))
    assert ".env" not in hidden["result"]["files"]  # denied files are never listed


def test_sdk_grep_gives_file_line_col_snippet(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"src": {"x.rs": 'fn a() {\n    panic!("no");\n}\n'}})
    worker = make_worker()
    (r,) = _exec(worker, call("g", "grep", pattern=r"panic!", glob="src/**"))
    assert r["ok"], r
    assert r["result"]["matches"] == [
        {"file": "src/x.rs", "line": 2, "col": 5, "snippet": '    panic!("no");'}
    ]
    (case,) = _exec(worker, call("c", "grep", pattern="PANIC", case_sensitive=True))
    assert case["result"]["matches"] == []


def test_sdk_shell_exec_gives_code_stdout_stderr(make_worker: MakeWorker) -> None:
    worker = make_worker()
    (r,) = _exec(
        worker,
        call("s", "shell_exec", cmd="echo out; echo err >&2; exit 0", timeout_ms=30_000),
    )
    assert r["ok"], r
    assert (r["result"]["code"], r["result"]["stdout"], r["result"]["stderr"]) == (
        0,
        "out\n",
        "err\n",
    )


def test_sdk_names_are_judged_as_their_tools_by_permission_rules(make_worker: MakeWorker) -> None:
    user_config(
        """
        [permissions]
        deny = ["run_shell(rm *)", "write_file(README.md)"]
        allow = ["run_shell(echo *)"]
        """
    )
    worker = make_worker()
    plan = worker.plan(
        {
            "calls": [
                call("rm", "shell_exec", cmd="rm -rf src"),
                call("w", "file_write", path="README.md", content="x\n"),
                call("echo", "shell_exec", cmd=["echo", "hi"]),
                call("new", "file_write", path="new.txt", content="x\n"),
            ]
        }
    )
    items = {i["id"]: i for i in plan["items"]}
    assert items["rm"]["disposition"] == "resolved"
    assert items["rm"]["result"]["error"]["type"] == "permission-error"
    assert items["w"]["disposition"] == "resolved"
    assert items["w"]["result"]["error"]["type"] == "permission-error"
    assert items["echo"]["disposition"] == "execute"
    assert items["new"]["disposition"] == "confirm"


def test_sdk_a_deny_of_the_whole_tool_covers_its_sdk_name(make_worker: MakeWorker) -> None:
    user_config('[permissions]\ndeny = ["run_shell"]\n')
    worker = make_worker()
    plan = worker.plan({"calls": [call("s", "shell_exec", cmd=["true"])]})
    (item,) = plan["items"]
    assert item["disposition"] == "resolved"
    assert "run_shell" in item["result"]["error"]["message"]


def test_sdk_names_are_accepted_but_not_offered(make_worker: MakeWorker) -> None:
    worker = make_worker()
    offered = {t["name"] for t in worker.tool_definitions({})["tools"]}
    assert {"read_file", "write_file", "glob", "search", "run_shell"} <= offered
    assert not offered & {"file_read", "file_write", "fs_list", "grep", "shell_exec"}
    (bad,) = _exec(worker, call("b", "grep", pattern="x", bogus=1))
    assert bad["error"]["type"] == "validation-error"
    assert "bogus" in bad["error"]["message"]


def _turn(worker: Worker, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    reply = worker.plan({"calls": list(calls), "session": "chat-1", "turn": "t1"})
    done = worker.execute(
        {
            "batch_id": reply["batch_id"],
            "approved": [c["id"] for c in calls],
            "capacity_bytes": 1_000_000,
        },
        lambda event: None,
    )
    return list(done["results"])


def test_sdk_seed_002_rules_count_sdk_names_as_their_tools_when_they_run(
    make_worker: MakeWorker,
) -> None:
    user_config('[[rules]]\ntype = "max_calls"\ntool = "read_file"\nmax = 2\n')
    worker = make_worker()
    # One turn, several batches (tool-loop iterations) sharing the count.
    assert [r["ok"] for r in _turn(worker, call("a", "file_read", path="README.md"))] == [True]
    assert [r["ok"] for r in _turn(worker, call("b", "read_file", path="README.md"))] == [True]
    (third,) = _turn(worker, call("c", "file_read", path="README.md"))
    assert not third["ok"]
    assert third["error"]["details"]["kind"] == "RuleViolation"


def test_sdk_a_rule_written_for_an_sdk_name_is_read_as_its_forj_tool(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"secrets": {"k.txt": "TOPSECRET\n"}})
    user_config(
        """
        [permissions]
        mode = "accept-edits"
        deny = ["file_read(secrets/**)"]
        ask = ["file_write"]
        """
    )
    worker = make_worker()
    warnings = " ".join(worker.hello_payload({})["warnings"])
    assert "read as 'read_file(secrets/**)'" in warnings
    plan = worker.plan(
        {
            "calls": [
                call("r", "file_read", path="secrets/k.txt"),
                call("rr", "read_file", path="secrets/k.txt"),
                call("w", "write_file", path="new.txt", content="x\n"),
            ]
        }
    )
    items = {i["id"]: i for i in plan["items"]}
    assert items["r"]["result"]["error"]["type"] == "permission-error"
    assert items["rr"]["result"]["error"]["type"] == "permission-error"
    assert items["w"]["disposition"] == "confirm"


def test_sdk_file_read_gives_no_hash_of_a_redacted_or_binary_file(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(
        project,
        {
            "deploy.cfg": "remote = https://bot:pw1234@git.example.com/r.git\n",
            "logo.bin": b"\x89PNG\x00\x01\x02",
        },
    )
    worker = make_worker()
    (cfg, binary) = _exec(
        worker,
        call("c", "file_read", path="deploy.cfg"),
        call("b", "file_read", path="logo.bin"),
    )
    assert "pw1234" not in cfg["result"]["content"]
    assert cfg["result"]["sha256"] is None
    assert "redacted" in cfg["result"]["sha256_note"]
    assert binary["result"]["binary"] is True
    assert binary["result"]["sha256"] is None


def test_sdk_fs_write_mode_is_always_reviewed_and_never_world_writable(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config('[permissions]\nmode = "accept-edits"\n')
    worker = make_worker()
    plan = worker.plan(
        {
            "calls": [
                call("m", "file_write", path="run.sh", content="x\n", mode_octal="0755"),
                call("p", "file_write", path="plain.txt", content="x\n"),
                call("w", "file_write", path="open.sh", content="x\n", mode_octal="0777"),
            ]
        }
    )
    items = {i["id"]: i for i in plan["items"]}
    assert items["m"]["disposition"] == "confirm"
    assert any("0755" in w for w in items["m"]["warnings"])
    assert items["p"]["disposition"] == "execute"
    assert items["w"]["result"]["error"]["type"] == "validation-error"
    assert "every user" in items["w"]["result"]["error"]["message"]


def test_sdk_fs_write_mode_goes_through_no_link(make_worker: MakeWorker, project: Path) -> None:
    outside = project.parent / "outside.txt"
    outside.write_text("mine\n")
    outside.chmod(0o600)
    worker = make_worker()
    (w,) = _exec(worker, call("w", "file_write", path="link.sh", content="x\n", mode_octal="0755"))
    assert w["ok"], w
    assert (os.stat(project / "link.sh").st_mode & 0o777) == 0o755
    # A link swapped in for the written file before its mode is set: the
    # mode is set through a descriptor of what is there, never through it.
    (project / "link.sh").unlink()
    (project / "link.sh").symlink_to(outside)
    ctx = ToolContext(
        sandbox=worker.sandbox,
        config=worker.config,
        session=Session(),
        batch_id="b",
        call_id="c",
        working_dir=str(project),
        output_limit=1_000_000,
    )
    args = FileWriteArgs(path="link.sh", content="x\n", mode_octal="0755")
    with pytest.raises(ToolFailure) as refused:
        FileWrite()._set_mode(args, ctx, 0o755)
    assert refused.value.error.details["code"] == "E_POLICY"
    assert (outside.stat().st_mode & 0o777) == 0o600
