"""The core set of tools a chat offers first, and ``load_tools`` for the rest.

A small local model's window (8k tokens) cannot hold every tool's schema
before the user has said anything; a chat asks ``tool_definitions`` for
the core set (``families: []``) and loads a family when the model asks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call

from forj_py.tools import BUILTIN, CORE, FAMILIES, family_of
from forj_py.transport.client import Client, WorkerProcess

CORE_SET = [
    "edit",
    "edit_region",
    "glob",
    "list_files",
    "load_tools",
    "multi_edit",
    "read_file",
    "run_shell",
    "run_tests",
    "search",
    "todo_write",
    "write_file",
]
# The core set's definitions as JSON, at most: about 4k tokens at 4 bytes a
# token (docs/benchmarks.md measures them with a real tokenizer too).
CORE_BYTES = 16_000


def names(reply: dict[str, Any]) -> list[str]:
    return [t["name"] for t in reply["tools"]]


def test_prompt_fits_core_set_is_offered_first_with_load_tools(project: Path) -> None:
    with WorkerProcess(project) as proc, Client(proc.port) as client:
        client.call("hello", {"token": proc.token})
        core = client.call("tool_definitions", {"families": []})
        assert names(core) == CORE_SET
        assert len(json.dumps(core["tools"])) <= CORE_BYTES
        # The index says which family each other tool is in, for a client
        # to load the family of a call it did not offer.
        assert core["families"]["git"][0] == "git_status"
        assert set(core["families"]) == set(FAMILIES)
        (load,) = [t for t in core["tools"] if t["name"] == "load_tools"]
        assert load["parameters"]["properties"]["family"]["enum"] == list(FAMILIES)
        # Every tool, as before, when no family is named: load_tools is not offered.
        everything = client.call("tool_definitions", {})
        assert "load_tools" not in names(everything) and "git_push" in names(everything)
        assert "families" not in everything


def test_prompt_fits_a_loaded_family_is_offered_from_then_on(make_worker: MakeWorker) -> None:
    worker = make_worker()
    git = worker.tool_definitions({"families": ["git"]})
    assert [n for n in names(git) if family_of(n) == "git"] == sorted(FAMILIES["git"])
    assert "load_tools" in names(git) and "curl" not in names(git)
    # With every family loaded there is nothing left to load.
    full = worker.tool_definitions({"families": list(FAMILIES)})
    assert "load_tools" not in names(full)
    assert names(full) == names(worker.tool_definitions({}))


def test_prompt_fits_unknown_family_is_refused_with_the_families(make_worker: MakeWorker) -> None:
    worker = make_worker()
    with pytest.raises(Exception, match="no tool family 'gti'; the families are git, files"):
        worker.tool_definitions({"families": ["gti"]})


def test_prompt_fits_read_only_mode_offers_no_writing_family(make_worker: MakeWorker) -> None:
    worker = make_worker()
    reply = worker.tool_definitions({"permission_mode": "read-only", "families": []})
    assert "write_file" not in names(reply) and "load_tools" in names(reply)
    assert "git_push" not in reply["families"].get("git", [])
    assert "files" not in reply["families"]  # patches, moves, deletes: none is read-only


def test_prompt_fits_load_tools_runs_without_review(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("l", "load_tools", family="git")]})
    assert plan["items"][0]["disposition"] == "execute"
    done = worker.execute({"batch_id": plan["batch_id"], "approved": ["l"]}, lambda event: None)
    (result,) = done["results"]
    assert result["ok"], result
    assert result["result"]["tools"] == list(FAMILIES["git"])
    bad = worker.plan({"calls": [call("b", "load_tools", family="everything")]})
    error = bad["items"][0]["result"]["error"]
    assert error["type"] == "validation-error" and "git" in json.dumps(error)


def test_prompt_fits_a_call_to_a_tool_not_loaded_runs(make_worker: MakeWorker) -> None:
    # A model that calls a tool it was not offered is not refused: the
    # client loads its family for the next step (docs/tools.md).
    worker = make_worker()
    plan = worker.plan({"calls": [call("s", "git_status")]})
    assert plan["items"][0]["disposition"] != "resolved" or plan["items"][0]["result"]["error"][
        "type"
    ] not in ("unknown-tool", "denied-by-policy")


def test_prompt_fits_every_family_tool_exists() -> None:
    for family, tools in FAMILIES.items():
        assert family != CORE
        for tool in tools:
            assert tool in BUILTIN, f"{family}: {tool}"


def test_context_check_leaves_no_unfinished_batch(make_worker: MakeWorker) -> None:
    # Adding a file to a chat's context checks its path with a plan that
    # never runs: it must not look like a batch a crash left unfinished.
    worker = make_worker()
    (Path(worker.root) / "a.txt").write_text("a\n")
    checked = worker.plan({"calls": [call("c", "read_file", path="a.txt")], "check": True})
    assert checked["items"][0]["disposition"] == "execute"
    planned = worker.plan({"calls": [call("p", "read_file", path="a.txt")]})
    waiting = [batch_id for batch_id, _ in worker.journal.recoverable(worker.root)]
    assert checked["batch_id"] not in waiting
    assert planned["batch_id"] in waiting
    with pytest.raises(Exception, match="batch"):
        worker.execute({"batch_id": checked["batch_id"], "approved": ["c"]}, lambda event: None)
