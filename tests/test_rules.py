"""Seed 002's rules engine through the real worker: each rule type, its scope, its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import call, project_config, user_config
from consent_helpers import Clock, Workers, error_of, execute, kinds, plan, workers

from forj_py.service import Worker

__all__ = ["workers"]


def rules(*blocks: str, extra: str = "") -> None:
    user_config(extra + "".join(f"[[rules]]\n{b}\n" for b in blocks))


def read(n: int | str, path: str = "README.md") -> dict[str, Any]:
    return call(f"r{n}", "read_file", path=path)


def lst(n: int | str) -> dict[str, Any]:
    return call(f"l{n}", "list_files", directory=".")


def run_turn(worker: Worker, turn: str, *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    reply = plan(worker, *calls, session="chat-1", turn=turn, **extra)
    done = execute(worker, reply)
    done["plan"] = reply
    return done


def violation(result: dict[str, Any]) -> dict[str, Any]:
    error = error_of(result)
    assert error["details"]["kind"] == "RuleViolation", error
    assert error["type"] == "permission-error"
    assert error["recovery"]
    return error


def test_fr_rule_01_max_calls_counts_per_turn_and_resets_with_a_new_turn(
    workers: Workers,
) -> None:
    rules('type = "max_calls"\ntool = "read_file"\nmax = 2')
    worker = workers()
    first = run_turn(worker, "t1", read(1), read(2), read(3))
    assert kinds(first["plan"]) == ["execute", "execute", "resolved"]
    error = violation(first["results"][2])
    assert error["details"]["rule"] == {"type": "max_calls", "tool": "read_file", "max": 2}
    # Later batches of the same turn (tool-loop iterations) share the count.
    again = run_turn(worker, "t1", read(4))
    violation(again["results"][0])
    # The user speaks: a new turn.
    fresh = run_turn(worker, "t2", read(5))
    assert fresh["results"][0]["ok"]


def test_fr_rule_01_without_a_turn_id_each_batch_is_its_own_turn(workers: Workers) -> None:
    rules('type = "max_calls"\ntool = "read_file"\nmax = 1')
    worker = workers()
    for _ in range(2):
        reply = plan(worker, read(1), read(2))
        assert kinds(reply) == ["execute", "resolved"]
        execute(worker, reply)


def test_fr_rule_02_cooldown_is_persistent_across_turns(workers: Workers) -> None:
    rules('type = "cooldown"\ntool = "list_files"\nseconds = 5')
    clock = Clock()
    worker = workers(clock)
    first = run_turn(worker, "t1", lst(1), lst(2))
    assert [r["ok"] for r in first["results"]] == [True, False]
    clock.advance(3)
    error = violation(run_turn(worker, "t2", lst(3))["results"][0])
    assert error["details"]["retry_after_seconds"] == 2.0
    assert "Wait 2.0 s" in error["recovery"][0]
    clock.advance(2.5)
    assert run_turn(worker, "t3", lst(4))["results"][0]["ok"]


def test_fr_rule_03_exclusive_group_allows_one_tool_of_the_group_per_turn(
    workers: Workers,
) -> None:
    rules('type = "exclusive_group"\ntools = ["read_file", "list_files"]')
    worker = workers()
    done = run_turn(worker, "t1", read(1), read(2), lst(1))
    assert [r["ok"] for r in done["results"]] == [True, True, False]
    assert "already used read_file" in violation(done["results"][2])["message"]
    assert run_turn(worker, "t2", lst(2))["results"][0]["ok"]


def test_fr_rule_04_requires_preceding_wants_the_tool_earlier_in_the_turn(
    workers: Workers,
) -> None:
    rules('type = "requires_preceding"\ntool = "search"\nafter = ["list_files"]')
    worker = workers()
    done = run_turn(worker, "t1", call("s1", "search", query="line"), lst(1))
    assert [r["ok"] for r in done["results"]] == [False, True]
    assert violation(done["results"][0])["recovery"][0] == "Call list_files first, then search"
    # Earlier in the same turn counts, across batches.
    assert run_turn(worker, "t1", call("s2", "search", query="line"))["results"][0]["ok"]
    assert not run_turn(worker, "t2", call("s3", "search", query="line"))["results"][0]["ok"]


def test_fr_rule_04_the_executor_checks_again_against_what_really_ran(
    workers: Workers, project: Path
) -> None:
    """Planning counted the reviewed call; the user denied it, so the next call may not run."""
    rules('type = "requires_preceding"\ntool = "read_file"\nafter = ["write_file"]')
    worker = workers()
    reply = plan(
        worker,
        call("w", "write_file", path="a.txt", content="a\n"),
        read(1, "README.md"),
        session="c",
        turn="t1",
    )
    assert kinds(reply) == ["confirm", "execute"]
    done = execute(worker, reply, denied={"w": "no"})
    assert done["results"][0]["error"]["details"]["kind"] == "UserDenied"
    violation(done["results"][1])


def test_fr_rule_05_requires_following_orders_two_tools_and_reports_what_is_pending(
    workers: Workers,
) -> None:
    rules('type = "requires_following"\ntool = "list_files"\nbefore = ["search"]')
    worker = workers()
    done = run_turn(worker, "t1", lst(1))
    assert done["turn"]["before_exit"] == ["search"]
    assert "call search" in done["turn"]["instructions"][0]
    done = run_turn(worker, "t1", call("s", "search", query="line"), lst(2))
    assert done["results"][0]["ok"]
    assert "must come before search" in violation(done["results"][1])["message"]
    assert done["turn"]["before_exit"] == []


def test_fr_rule_06_required_before_exit_is_reported_until_it_ran(workers: Workers) -> None:
    rules('type = "required_before_exit"\ntools = ["list_files"]')
    worker = workers()
    reply = plan(worker, read(1), session="c", turn="t1")
    assert reply["turn"]["before_exit"] == ["list_files"]
    done = execute(worker, reply)
    assert done["turn"]["before_exit"] == ["list_files"]
    assert done["turn"]["instructions"] == [
        "Before you finish this turn, call list_files (a rule requires it)."
    ]
    done = execute(worker, plan(worker, lst(1), session="c", turn="t1"))
    assert done["turn"]["before_exit"] == []
    assert (
        "Before you finish a turn, call list_files." in worker.tool_definitions({})["instructions"]
    )


def test_fr_rule_07_start_constraint_refuses_other_tools_until_the_start_tools_ran(
    workers: Workers,
) -> None:
    rules('type = "start_constraint"\ntools = ["list_files"]')
    worker = workers()
    reply = plan(worker, read(1), lst(1), read(2), session="c", turn="t1")
    assert kinds(reply) == ["resolved", "execute", "execute"]
    assert reply["turn"]["start_with"] == []  # as planned, list_files will have run
    error = violation(reply["items"][0])
    assert "every turn starts with list_files" in error["message"]
    fresh = plan(worker, read(3), session="c", turn="t2")
    assert fresh["turn"]["start_with"] == ["list_files"]


def test_fr_rule_08_exit_loop_ends_the_turn_and_refuses_later_calls(workers: Workers) -> None:
    rules('type = "exit_loop"\ntool = "list_files"')
    worker = workers()
    done = run_turn(worker, "t1", lst(1), read(1))
    assert done["turn"]["exit_loop"] is True
    assert done["turn"]["exit_tool"] == "list_files"
    assert "wait for the user" in violation(done["results"][1])["recovery"][0]
    assert run_turn(worker, "t2", read(2))["turn"]["exit_loop"] is False


def test_fr_rule_09_continue_loop_is_reported_for_a_batch_of_such_tools(workers: Workers) -> None:
    rules('type = "continue_loop"\ntool = "list_files"')
    worker = workers()
    assert plan(worker, lst(1), session="c", turn="t")["turn"]["continue_loop"] is True
    assert plan(worker, lst(2), read(1), session="c", turn="t")["turn"]["continue_loop"] is False
    # The execute reply says it as well, for the chat that acts on what ran.
    assert run_turn(worker, "t2", lst(3))["turn"]["continue_loop"] is True
    assert run_turn(worker, "t3", lst(4), read(2))["turn"]["continue_loop"] is False


def test_fr_rule_10_requires_consent_reviews_even_read_only_tools(workers: Workers) -> None:
    rules('type = "requires_consent"\ntool = "read_file"', extra='[permissions]\nmode = "auto"\n')
    reply = plan(workers(), read(1))
    assert kinds(reply) == ["confirm"]


def test_fr_rule_11_deduplication_only_for_listed_tools_within_the_window(
    workers: Workers,
) -> None:
    user_config('[tools.dedupe]\nwindow_seconds = 60\ntools = ["list_files"]\n')
    clock = Clock()
    worker = workers(clock)
    done = run_turn(worker, "t1", lst(1), read(1), read(2))
    assert [r["ok"] for r in done["results"]] == [True, True, True]  # reads never deduplicated
    again = run_turn(worker, "t2", lst(2))
    error = error_of(again["results"][0])
    assert error["details"]["kind"] == "Deduplicated"
    assert error["details"]["earlier_call"] == "l1"
    assert "l1" in error["recovery"][0]
    # Another chat did not see that listing.
    other = execute(worker, plan(worker, lst(3), session="chat-2"))
    assert other["results"][0]["ok"]
    clock.advance(61)
    assert run_turn(worker, "t3", lst(4))["results"][0]["ok"]


def test_fr_rule_11_identical_calls_in_one_batch_and_star_for_all(workers: Workers) -> None:
    user_config('[tools.dedupe]\ntools = ["*"]\n')
    worker = workers()
    reply = plan(worker, read(1), read(2), read(3, "src/main.py"), session="c")
    assert kinds(reply) == ["execute", "resolved", "execute"]


def test_fr_rule_12_a_rule_naming_an_unavailable_tool_is_inactive_with_a_warning(
    workers: Workers,
) -> None:
    rules('type = "max_calls"\ntool = "ask_user"\nmax = 1', 'type = "exit_loop"\ntool = "nope"')
    worker = workers()
    warnings = worker.warnings()
    assert any("ask_user" in w and "inactive" in w for w in warnings)
    assert any("nope" in w and "inactive" in w for w in warnings)
    assert worker.consent.engine.rules == []


def test_fr_rule_13_a_project_adds_only_restrictive_rules(workers: Workers, project: Path) -> None:
    user_config('[[rules]]\ntype = "cooldown"\ntool = "run_shell"\nseconds = 1\n')
    project_config(
        project,
        """
        [[rules]]
        type = "max_calls"
        tool = "read_file"
        max = 1
        [[rules]]
        type = "continue_loop"
        tool = "read_file"
        [[rules]]
        type = "start_constraint"
        tools = ["list_files"]
        """,
    )
    worker = workers()
    assert [r.type for r in worker.config.rules] == ["cooldown", "max_calls"]
    ignored = [w for w in worker.warnings() if "[[rules]]" in w]
    assert len(ignored) == 2 and all("[trust] projects" in w for w in ignored)
    reply = plan(worker, read(1), read(2))
    assert kinds(reply) == ["execute", "resolved"]


def test_fr_rule_13_a_rule_violation_comes_before_any_review(workers: Workers) -> None:
    rules(
        'type = "max_calls"\ntool = "write_file"\nmax = 1',
        extra='[permissions]\nask = ["write_file"]\n',
    )
    reply = plan(
        workers(),
        call("a", "write_file", path="a.txt", content="a\n"),
        call("b", "write_file", path="b.txt", content="b\n"),
    )
    assert kinds(reply) == ["confirm", "resolved"]
    violation(reply["items"][1])
