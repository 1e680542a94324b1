"""The built-in tools' catalog: what the worker offers without importing the tools.

The worker reads every built-in tool's name, flags and schema from
``forj_py/tools/catalog.json`` and imports a tool's module on its first
call; these tests hold the catalog to the code and the lazy registry to the
eager one, byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import call
from jsonschema import Draft202012Validator

from forj_py.tools import BUILTIN, builtin_registry, builtin_tools, tool_class
from forj_py.tools.catalog import CATALOG_PATH, build_catalog, load_catalog, render
from forj_py.tools.registry import Registry, ToolInfo, format_schema_errors
from forj_py.transport.client import Client, WorkerProcess

# Arguments every tool's schema refuses, in different ways.
BAD_ARGS: list[dict[str, Any]] = [
    {},
    {"no_such_argument": 1},
    {"path": 7, "command": ["not", "a", "string"], "edits": "none"},
]


def test_nfr_perf_03_the_catalog_file_is_what_the_tools_generate() -> None:
    # Fails after a tool's Args, description or flags change, or a tool is
    # added to BUILTIN: run `python -m forj_py.tools.catalog` to regenerate.
    assert CATALOG_PATH.read_text(encoding="utf-8") == render(build_catalog())
    assert list(load_catalog()) == list(BUILTIN)


def test_nfr_perf_03_every_catalog_schema_is_a_valid_draft_2020_12_schema() -> None:
    for name, entry in load_catalog().items():
        Draft202012Validator.check_schema(entry["parameters"])
        assert entry["parameters"]["type"] == "object", name


def test_nfr_perf_03_builtin_names_match_their_classes() -> None:
    for name in BUILTIN:
        assert tool_class(name).name == name


def test_nfr_perf_03_lazy_definitions_are_byte_identical_to_generated_ones() -> None:
    lazy, eager = builtin_registry(), Registry(builtin_tools())
    assert lazy.names() == eager.names()
    assert json.dumps(lazy.definitions()) == json.dumps(eager.definitions())
    for name in eager.names():
        lazy_entry, eager_entry = lazy.get(name), eager.get(name)
        assert lazy_entry is not None and eager_entry is not None
        assert lazy_entry.info == eager_entry.info == ToolInfo.of(eager_entry.tool)


def test_nfr_perf_03_lazy_validation_errors_are_identical() -> None:
    lazy, eager = builtin_registry(), Registry(builtin_tools())
    for name in eager.names():
        lazy_entry, eager_entry = lazy.get(name), eager.get(name)
        assert lazy_entry is not None and eager_entry is not None
        for args in BAD_ARGS:
            expected = format_schema_errors(eager_entry.validator, args)
            assert format_schema_errors(lazy_entry.validator, args) == expected


def test_nfr_perf_03_a_tool_is_imported_on_first_use_once() -> None:
    registry = builtin_registry()
    entry = registry.get("read_file")
    assert entry is not None
    tool = entry.tool
    assert type(tool) is tool_class("read_file")
    assert entry.tool is tool
    assert entry.validator is entry.validator


def test_nfr_perf_03_a_tool_missing_from_the_catalog_is_still_served() -> None:
    catalog = load_catalog()
    del catalog["glob"]
    registry = builtin_registry(catalog)
    eager = Registry(builtin_tools())
    assert json.dumps(registry.definitions()) == json.dumps(eager.definitions())


def test_nfr_perf_03_a_catalog_entry_naming_another_class_fails_on_first_use() -> None:
    registry = Registry()
    registry.register_lazy(
        ToolInfo("read_file", "Reads"),
        {"type": "object"},
        lambda: tool_class("search")(),
    )
    entry = registry.get("read_file")
    assert entry is not None
    with pytest.raises(RuntimeError, match="'read_file' was registered, but its class"):
        _ = entry.tool


def test_nfr_perf_03_starting_imports_no_tool_module_nor_rarely_used_library(project: Path) -> None:
    # The worker as __main__ builds it, up to its hello reply, in a fresh Python.
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from forj_py.config import load
        from forj_py.service import Worker
        from forj_py.store.journal import Journal
        from forj_py.tools import builtin_registry
        from forj_py.transport.server import ForjServer

        root, state = Path({str(project)!r}), Path({os.environ["FORJ_STATE_DIR"]!r})
        worker = Worker(
            root, load(root), builtin_registry(), Journal(state / "j.sqlite3"), state
        )
        ForjServer(worker, "token").server_close()
        assert worker.hello_payload({{}})["tools"]
        modules = {{m.split(".")[0] if not m.startswith("forj_py") else m for m in sys.modules}}
        print("\\n".join(sorted(modules)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.split()
    tool_modules = {f"forj_py.tools.{where.partition(':')[0]}" for where in BUILTIN.values()}
    assert "forj_py.tools.registry" in out  # the listing is of the worker as built
    assert sorted(tool_modules & set(out)) == []
    assert [m for m in ("jsonschema", "epc", "xmlrpc", "sexpdata", "regex") if m in out] == []


def test_nfr_perf_03_a_started_worker_offers_the_generated_definitions(project: Path) -> None:
    (project / "a.txt").write_text("hello\n")
    eager = Registry(builtin_tools())
    with WorkerProcess(project) as proc, Client(proc.port) as client:
        hello = client.call("hello", {"token": proc.token})
        # load_tools is offered only with a subset of the families.
        everything = [d for d in eager.definitions() if d["name"] != "load_tools"]
        assert json.dumps(hello["tools"]) == json.dumps(everything)
        # The first call of a tool imports it and runs it as before.
        plan = client.call("plan", {"calls": [call("r", "read_file", path="a.txt")]})
        assert plan["items"][0]["disposition"] == "execute"
        done = client.call("execute", {"batch_id": plan["batch_id"], "approved": ["r"]})
        result = done["results"][0]
        assert result["ok"] and "hello" in result["result"]["content"]
        bad = client.call("plan", {"calls": [call("b", "read_file", bogus=1)]})
        error = bad["items"][0]["result"]["error"]
        assert error["type"] == "validation-error"
        assert "'bogus' was unexpected" in error["message"]
