"""Seed 004's canonical error codes: every error result carries one in ``details.code``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import call
from pydantic import BaseModel, ConfigDict

from forj_py import errors
from forj_py.errors import ToolFailure
from forj_py.protocol import DenialReason, ErrorCode, ErrorKind, ErrorType, ToolError
from forj_py.rules import violation
from forj_py.service import Worker
from forj_py.tools.registry import Tool, ToolContext

# Every constructor the framework uses, and the code its errors carry.
CONSTRUCTED: list[tuple[str, Callable[[], ToolFailure], ErrorCode]] = [
    ("bad_args", lambda: errors.bad_args("x"), ErrorCode.VALIDATION_FAIL),
    ("unknown_tool", lambda: errors.unknown_tool("nope", ["read_file"]), ErrorCode.VALIDATION_FAIL),
    ("duplicate_call_id", lambda: errors.duplicate_call_id("c1"), ErrorCode.VALIDATION_FAIL),
    ("limits_exceeded", lambda: errors.limits_exceeded("too big", ["less"]), ErrorCode.POLICY),
    (
        "denied_by_policy",
        lambda: errors.denied_by_policy("no", DenialReason.DENIED_BY_RULE),
        ErrorCode.POLICY,
    ),
    ("user_denied", lambda: errors.user_denied("not now"), ErrorCode.POLICY),
    ("timed_out", lambda: errors.timed_out("read_file", 11.0, 10.0), ErrorCode.TIMEOUT),
    ("command_timed_out", lambda: errors.command_timed_out("run_shell", 5), ErrorCode.TIMEOUT),
    ("cancelled", errors.cancelled, ErrorCode.POLICY),
    ("tool_crashed", lambda: errors.tool_crashed("t", KeyError("k")), ErrorCode.INTERNAL),
    ("file_error", lambda: errors.file_error("gone", "a.txt", recovery=["r"]), ErrorCode.FILE_IO),
    ("process_error", lambda: errors.process_error("exit 2", recovery=["r"]), ErrorCode.SHELL),
]


@pytest.mark.parametrize(("name", "make", "code"), CONSTRUCTED, ids=[c[0] for c in CONSTRUCTED])
def test_fr_err_01_each_constructor_maps_to_its_code(
    name: str, make: Callable[[], ToolFailure], code: ErrorCode
) -> None:
    error = make().error
    assert error.details["code"] == code.value
    # Beside seed 001's type and seed 000's kind, never instead of them.
    assert error.type in ErrorType
    assert error.details["kind"] in {k.value for k in ErrorKind}
    assert error.model_dump(mode="json")["details"]["code"] == code.value


def test_fr_err_01_every_type_has_a_code() -> None:
    expected = {
        ErrorType.VALIDATION: ErrorCode.VALIDATION_FAIL,
        ErrorType.FILE: ErrorCode.FILE_IO,
        ErrorType.PROCESS: ErrorCode.SHELL,
        ErrorType.PERMISSION: ErrorCode.POLICY,
        ErrorType.TIMEOUT: ErrorCode.TIMEOUT,
        ErrorType.CANCELLED: ErrorCode.POLICY,
        ErrorType.STALE_FILE: ErrorCode.FILE_IO,
        ErrorType.INTERNAL: ErrorCode.INTERNAL,
    }
    assert set(expected) == set(ErrorType)
    for type_, code in expected.items():
        error = ToolError(type=type_, message="m", details={"kind": "Whatever"}, recovery=["r"])
        assert error.details["code"] == code.value, type_


def test_fr_err_01_rule_violations_and_interruptions() -> None:
    from forj_py.config import MaxCallsRule

    rule = MaxCallsRule(type="max_calls", tool="read_file", max=1)
    assert violation(rule, "too many", ["stop"]).error.details["code"] == "E_POLICY"
    interrupted = ToolError(
        type=ErrorType.CANCELLED,
        message="forj stopped",
        details={"kind": "Cancelled", "interrupted": True},
        recovery=["check"],
    )
    assert interrupted.details["code"] == "E_INTERNAL"


def test_fr_err_02_a_code_the_tool_set_wins() -> None:
    git = errors.process_error("merge conflict", recovery=["resolve it"], code="E_GIT")
    assert git.error.details["code"] == "E_GIT"
    assert git.error.type is ErrorType.PROCESS  # the type stays what it was
    # Only canonical codes win; anything else is replaced by the mapping.
    odd = errors.file_error("x", "a", recovery=["r"], code="E_MADE_UP")
    assert odd.error.details["code"] == "E_FILE_IO"


class _GitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _FailingGit(Tool[_GitArgs]):
    """A tool that fails the way the git tools do: a process error marked E_GIT."""

    name = "fake_git"
    description = "Fails like a git command"
    Args = _GitArgs

    def summary(self, args: _GitArgs) -> str:
        return "fake git"

    def execute(self, args: _GitArgs, ctx: ToolContext) -> Any:
        raise errors.process_error("git: not a repository", recovery=["init"], code="E_GIT")


def _errors(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r["error"] for r in reply["results"] if not r["ok"]}


def test_fr_err_03_results_from_the_worker_carry_codes(
    make_worker: Callable[..., Worker], project: Path
) -> None:
    worker = make_worker(extra_tools=[_FailingGit()])
    calls = [
        call("unknown", "no_such_tool"),
        call("schema", "read_file", path=7),
        call("outside", "read_file", path="../x"),
        call("missing", "read_file", path="nope.txt"),
        call("stale", "edit", path="README.md", old_string="demo", new_string="x"),
        call("git", "fake_git"),
    ]
    plan = worker.plan({"calls": calls})
    # The edit and the tool of unknown effects wait for review; approve them.
    confirm = [i["id"] for i in plan["items"] if i["disposition"] == "confirm"]
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": confirm}, lambda e: None)
    found = _errors(reply)
    assert found["unknown"]["details"]["code"] == "E_VALIDATION_FAIL"
    assert found["schema"]["details"]["code"] == "E_VALIDATION_FAIL"
    assert found["outside"]["details"]["code"] == "E_POLICY"
    assert found["missing"]["details"]["code"] == "E_FILE_IO"
    assert found["stale"]["details"]["code"] == "E_FILE_IO"
    assert found["git"]["details"]["code"] == "E_GIT"
    # The journal keeps what was sent, codes included.
    journaled = worker.journal.batch(reply["batch_id"])
    assert journaled is not None
    codes = {
        c["id"]: c["result"]["error"]["details"]["code"]
        for c in journaled["calls"]
        if c["result"] and not c["result"]["ok"]
    }
    assert codes == {k: v["details"]["code"] for k, v in found.items()}


def test_fr_err_03_a_denied_call_carries_e_policy(make_worker: Callable[..., Worker]) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("w", "write_file", path="new.txt", content="x\n")]})
    assert plan["items"][0]["disposition"] == "confirm"
    reply = worker.execute(
        {"batch_id": plan["batch_id"], "denied": {"w": "no"}}, lambda event: None
    )
    assert reply["results"][0]["error"]["details"]["code"] == "E_POLICY"
