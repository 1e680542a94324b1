"""Seed 000 section 7.1, the rows about modes, limits, approval, validation,
timeouts and cancellation, against the real planner and executor."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import Boom, Danger, MakeWorker, Note, Sleep, call, run, user_config

from forj_py.tools import builtin_tools
from forj_py.tools.registry import DuplicateToolError, Registry


def _kinds(items: list[dict]) -> list[str]:
    return [i["disposition"] for i in items]


def test_t_mode_01_disabled_mode_rejects_tool_calls(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan({"mode": "disabled", "calls": [call("1", "read_file", path="README.md")]})
    item = plan["items"][0]
    assert item["disposition"] == "resolved"
    assert item["result"]["ok"] is False
    assert item["result"]["error"]["type"] == "permission-error"
    assert item["result"]["error"]["details"]["reason"] == "Disabled"
    assert worker.session.file_reads == {}


def test_t_mode_02_parse_only_surfaces_pending_calls_without_execution(
    make_worker: MakeWorker,
) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    plan = worker.plan(
        {
            "mode": "parse_only",
            "calls": [call("a", "note", text="x"), call("b", "read_file", path="README.md")],
        }
    )
    assert _kinds(plan["items"]) == ["manual", "manual"]
    assert [i["id"] for i in plan["items"]] == ["a", "b"]
    with pytest.raises(Exception, match="parse_only"):
        worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert note.runs == []
    assert worker.session.file_reads == {}


def test_config_mode_caps_the_requested_mode(make_worker: MakeWorker) -> None:
    user_config('[tools]\nmode = "parse_only"\n')
    worker = make_worker()
    plan = worker.plan({"mode": "enabled", "calls": [call("1", "read_file", path="README.md")]})
    assert plan["mode"] == "parse_only"
    assert _kinds(plan["items"]) == ["manual"]


def test_t_lim_01_exceeding_max_calls_per_batch_pre_resolves_extras(
    make_worker: MakeWorker,
) -> None:
    user_config("[tools]\nmax_tool_calls_per_batch = 3\n")
    worker = make_worker()
    calls = [call(str(i), "read_file", path="README.md") for i in range(5)]
    plan, result = run(worker, calls)
    assert _kinds(plan["items"]) == ["execute"] * 3 + ["resolved"] * 2
    assert [r["ok"] for r in result["results"]] == [True, True, True, False, False]
    err = result["results"][3]["error"]
    assert err["details"]["reason"] == "LimitsExceeded"
    assert err["recovery"]


def test_fr_lim_03_oversized_arguments_are_pre_resolved(make_worker: MakeWorker) -> None:
    user_config("[tools]\nmax_tool_args_bytes = 1024\n")
    worker = make_worker()
    plan = worker.plan({"calls": [call("1", "read_file", path="x" * 2000)]})
    err = plan["items"][0]["result"]["error"]
    assert err["type"] == "validation-error"
    assert "limit" in err["message"]


def test_t_apr_01_mixed_batch_prompts_before_any_execution(make_worker: MakeWorker) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    plan = worker.plan(
        {"calls": [call("r", "read_file", path="README.md"), call("n", "note", text="hi")]}
    )
    assert _kinds(plan["items"]) == ["execute", "confirm"]
    confirm = plan["items"][1]
    assert confirm["summary"] == "Note hi"
    assert confirm["risk"] == "medium"
    assert confirm["preview"] == "would note 'hi'"
    # Planning ran nothing: no note taken, no file read.
    assert note.runs == []
    assert worker.session.file_reads == {}


def test_t_apr_02_approve_selected_executes_only_selected(make_worker: MakeWorker) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    calls = [call("a", "note", text="a"), call("b", "note", text="b"), call("c", "note", text="c")]
    plan, result = run(worker, calls, approved=["b"], denied={"c": "use a different name"})
    assert _kinds(plan["items"]) == ["confirm"] * 3
    assert note.runs == ["b"]
    a, b, c = result["results"]
    assert a["ok"] is False and a["error"]["details"]["kind"] == "UserDenied"
    assert b == {"id": "b", "name": "note", "ok": True, "result": {"noted": "b"}}
    assert c["error"]["message"] == "The user denied this call: use a different name"
    assert c["error"]["details"]["user_reason"] == "use a different name"


def test_approval_for_non_confirm_call_cannot_run_a_resolved_call(make_worker: MakeWorker) -> None:
    worker = make_worker()
    _plan, result = run(worker, [call("x", "nope")], approved=["x"])
    assert result["results"][0]["error"]["details"]["kind"] == "UnknownTool"


def test_t_val_01_unknown_tool_pre_resolved_without_prompt(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("1", "write_everything", path="x")]})
    item = plan["items"][0]
    assert item["disposition"] == "resolved"
    err = item["result"]["error"]
    assert err["type"] == "validation-error"
    assert err["details"]["kind"] == "UnknownTool"
    assert any("read_file" in step for step in err["recovery"])


def test_t_val_02_schema_invalid_args_pre_resolved_no_execution(make_worker: MakeWorker) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    bad = [
        call("1", "note", text=5),
        call("2", "note"),
        call("3", "note", text="x", extra="y"),
        {"id": "4", "name": "note", "args": "not an object"},
        call("5", "read_file", path="README.md", start_line=0),
        call("6", "read_file", path="README.md", start_line=9, end_line=2),
    ]
    plan, result = run(worker, bad, approved=["1", "2", "3", "4"])
    assert _kinds(plan["items"]) == ["resolved"] * 6
    assert note.runs == []
    messages = [r["error"]["message"] for r in result["results"]]
    assert "is not of type 'string'" in messages[0]
    assert "'text' is a required property" in messages[1]
    assert "allowed: text" in messages[2]
    assert "Malformed tool call" in messages[3]
    assert "less than the minimum of 1" in messages[4]
    assert "start_line (9) is after end_line (2)" in messages[5]
    assert all(r["error"]["details"]["kind"] == "BadArgs" for r in result["results"])


def test_fr_val_02a_duplicate_call_ids_do_not_execute(make_worker: MakeWorker) -> None:
    note = Note()
    user_config('[tools.approval]\nallowlist = ["note"]\n')
    worker = make_worker(extra_tools=[note])
    plan, result = run(worker, [call("same", "note", text="1"), call("same", "note", text="2")])
    assert _kinds(plan["items"]) == ["execute", "resolved"]
    assert note.runs == ["1"]
    assert result["results"][1]["error"]["details"]["kind"] == "DuplicateToolCallId"


def test_malformed_call_objects_get_positional_ids(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan, result = run(worker, [42, {"name": "read_file"}, {"id": 7, "name": "read_file"}, None])
    assert [i["id"] for i in plan["items"]] == ["#1", "#2", "#3", "#4"]
    assert len(result["results"]) == 4
    assert all(not r["ok"] for r in result["results"])


def test_fr_reg_03_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(DuplicateToolError):
        Registry([*builtin_tools(), *builtin_tools()])


def test_nfr_main_03_definitions_sorted_with_2020_12_schemas(make_worker: MakeWorker) -> None:
    worker = make_worker(extra_tools=[Sleep(), Note(), Boom()])
    names = [d["name"] for d in worker.tool_definitions()["tools"]]
    assert names == sorted(names)
    read = next(d for d in worker.tool_definitions()["tools"] if d["name"] == "read_file")
    params = read["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["path"]
    assert params["additionalProperties"] is False
    assert "title" not in params and "title" not in params["properties"]["path"]


# --- policy (FR-APR-04) -----------------------------------------------------------


def test_fr_apr_04a_policy_disabled_resolves_everything(make_worker: MakeWorker) -> None:
    user_config("[tools.approval]\nenabled = false\n")
    worker = make_worker()
    plan = worker.plan({"calls": [call("1", "read_file", path="README.md")]})
    assert plan["items"][0]["result"]["error"]["message"] == "Tool execution disabled by policy"


def test_fr_apr_04b_denylist_denies_in_any_mode(make_worker: MakeWorker) -> None:
    user_config('[tools.approval]\nmode = "auto"\ndenylist = ["read_file"]\n')
    worker = make_worker()
    err = worker.plan({"calls": [call("1", "read_file", path="README.md")]})["items"][0]["result"][
        "error"
    ]
    assert err["type"] == "permission-error"
    assert err["details"]["reason"] == "Denylisted"


def test_fr_apr_04c_deny_mode_runs_only_allowlisted(make_worker: MakeWorker) -> None:
    user_config('[tools.approval]\nmode = "deny"\nallowlist = ["read_file"]\n')
    worker = make_worker(extra_tools=[Note()])
    plan = worker.plan(
        {"calls": [call("1", "read_file", path="README.md"), call("2", "note", text="x")]}
    )
    assert _kinds(plan["items"]) == ["execute", "resolved"]
    assert plan["items"][1]["result"]["error"]["details"]["reason"] == "NotAllowlisted"


def test_fr_apr_04d_prompt_mode_allowlist_skips_prompt(make_worker: MakeWorker) -> None:
    user_config('[tools.approval]\nallowlist = ["note"]\n')
    worker = make_worker(extra_tools=[Note()])
    assert _kinds(worker.plan({"calls": [call("1", "note", text="x")]})["items"]) == ["execute"]


def test_fr_apr_04d_prompt_side_effects_false_runs_side_effects(make_worker: MakeWorker) -> None:
    user_config("[tools.approval]\nprompt_side_effects = false\n")
    worker = make_worker(extra_tools=[Note()])
    assert _kinds(worker.plan({"calls": [call("1", "note", text="x")]})["items"]) == ["execute"]


def test_fr_apr_04e_requires_approval_prompts_even_in_auto_and_allowlisted(
    make_worker: MakeWorker,
) -> None:
    user_config('[tools.approval]\nmode = "auto"\nallowlist = ["danger"]\n')
    worker = make_worker(extra_tools=[Danger()])
    item = worker.plan({"calls": [call("1", "danger", text="x")]})["items"][0]
    assert item["disposition"] == "confirm"
    assert item["risk"] == "high"


def test_fr_apr_06_summary_is_redacted_and_capped(make_worker: MakeWorker) -> None:
    user_config("[tools.approval]\nmode = 'prompt'\n")
    worker = make_worker(extra_tools=[Note()])
    secret = "sk-" + "a" * 40
    item = worker.plan({"calls": [call("1", "note", text=f"key {secret} " + "x" * 500)]})["items"][
        0
    ]
    assert secret not in item["summary"]
    assert "[REDACTED]" in item["summary"]
    assert len(item["summary"]) <= 200 and "chars⟩" in item["summary"]
    assert item["summary"].endswith("(1 credential hidden)")


# --- execution (FR-EXE) --------------------------------------------------------------


def test_t_tmo_01_timeout_yields_timeout_error_and_batch_continues(
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(extra_tools=[Sleep()])
    calls = [
        {"id": "slow", "name": "sleep", "args": {"seconds": 30}, "meta": {"timeout": 0.3}},
        call("next", "read_file", path="README.md"),
    ]
    started = time.monotonic()
    _, result = run(worker, calls)
    assert time.monotonic() - started < 5
    slow, nxt = result["results"]
    assert slow["error"]["type"] == "timeout-error"
    assert slow["error"]["details"]["kind"] == "Timeout"
    assert nxt["ok"] is True


def test_meta_timeout_cannot_lengthen_the_configured_limit(make_worker: MakeWorker) -> None:
    user_config("[tools.timeouts]\ndefault_seconds = 0.2\n")
    worker = make_worker(extra_tools=[Sleep()])
    calls = [{"id": "s", "name": "sleep", "args": {"seconds": 30}, "meta": {"timeout": 9999}}]
    started = time.monotonic()
    _, result = run(worker, calls)
    assert time.monotonic() - started < 5
    assert result["results"][0]["error"]["details"]["timeout_s"] == 0.2


def test_t_can_01_cancel_mid_execution_marks_remaining_cancelled(
    make_worker: MakeWorker,
) -> None:
    note = Note()
    user_config('[tools.approval]\nallowlist = ["note"]\n')
    worker = make_worker(extra_tools=[Sleep(), note])
    calls = [
        call("first", "note", text="before"),
        call("long", "sleep", seconds=30),
        call("after", "note", text="after"),
    ]
    plan = worker.plan({"calls": calls})
    events: list[dict] = []
    started = threading.Event()

    def emit(event):  # type: ignore[no-untyped-def]
        events.append(event.wire())
        if event.call_id == "long" and event.kind == "started":
            started.set()

    out: dict = {}
    runner = threading.Thread(
        target=lambda: out.update(worker.execute({"batch_id": plan["batch_id"]}, emit))
    )
    runner.start()
    assert started.wait(5)
    t0 = time.monotonic()
    assert worker.cancel({"batch_id": plan["batch_id"]}) == {"cancelled": True}
    runner.join(5)
    assert time.monotonic() - t0 < 2
    first, long_, after = out["results"]
    assert first["ok"] is True
    assert long_["error"]["message"] == "Cancelled by user"
    assert after["error"]["type"] == "cancelled"
    assert note.runs == ["before"]
    assert out["state"] == "cancelled"


def test_cancel_before_execute_cancels_every_runnable_call(make_worker: MakeWorker) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    plan = worker.plan({"calls": [call("1", "note", text="x"), call("2", "nope")]})
    worker.cancel({"batch_id": plan["batch_id"]})
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["1"]}, lambda e: None)
    assert [r["error"]["details"]["kind"] for r in result["results"]] == [
        "Cancelled",
        "UnknownTool",
    ]
    assert note.runs == []


def test_fr_exe_04b_tool_crash_becomes_sanitized_error(make_worker: MakeWorker) -> None:
    worker = make_worker(extra_tools=[Boom()])
    _, result = run(worker, [call("1", "boom", text="x"), call("2", "read_file", path="README.md")])
    err = result["results"][0]["error"]
    assert err["type"] == "internal-error"
    assert err["message"] == "boom failed: RuntimeError: kaboom red"  # the CSI sequence is gone
    assert result["results"][1]["ok"] is True


def test_fr_exe_01_results_in_call_order_one_per_call(make_worker: MakeWorker) -> None:
    worker = make_worker()
    calls = [
        call(str(i), "read_file", path="src/main.py", start_line=i, end_line=i) for i in (3, 1, 2)
    ]
    _, result = run(worker, calls)
    assert [r["id"] for r in result["results"]] == ["3", "1", "2"]
    assert [r["result"]["content"] for r in result["results"]] == [
        "line 3\n",
        "line 1\n",
        "line 2\n",
    ]


def test_a_batch_runs_once(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan, _ = run(worker, [call("1", "read_file", path="README.md")])
    with pytest.raises(Exception, match="already executed"):
        worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)


def test_events_started_precede_finished(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("a", "read_file", path="README.md"), call("b", "nope")]})
    events: list = []
    worker.execute({"batch_id": plan["batch_id"]}, lambda e: events.append((e.call_id, e.kind)))
    assert events == [("a", "started"), ("a", "finished")]


def test_meta_cwd_must_be_a_directory_inside_the_root(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    calls = [
        {"id": "1", "name": "read_file", "args": {"path": "main.py"}, "meta": {"cwd": "src"}},
        {"id": "2", "name": "read_file", "args": {"path": "x"}, "meta": {"cwd": "../.."}},
        {"id": "3", "name": "read_file", "args": {"path": "x"}, "meta": {"cwd": "README.md"}},
    ]
    _, result = run(worker, calls)
    assert result["results"][0]["result"]["path"] == "src/main.py"
    assert result["results"][1]["error"]["details"]["reason"] == "PathOutsideSandbox"
    assert "not a directory" in result["results"][2]["error"]["message"]
