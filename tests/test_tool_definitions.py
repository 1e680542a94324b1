"""``[[tools.definitions]]``: tools the model is told about and the user runs by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import MakeWorker, call, project_config, user_config

from forj_py.config import ConfigError, load
from forj_py.transport.client import Client, WorkerProcess

# Seed 000's own example, and a tool forj does not have.
DEFINITIONS = """
[[tools.definitions]]
name = "read_file"
description = "Read file contents"
parameters = { "type"="object", "properties"={ "path"={ "type"="string" } }, "required"=["path"] }

[[tools.definitions]]
name = "deploy"
description = "Deploy the site to a stage"
[tools.definitions.parameters]
type = "object"
required = ["stage"]
additionalProperties = false
[tools.definitions.parameters.properties.stage]
enum = ["test", "prod"]
"""


def test_cfg_tools_02_the_worker_starts_with_definitions_and_advertises_them(
    project: Path,
) -> None:
    user_config('[tools]\nmode = "parse_only"\n' + DEFINITIONS)
    with (
        WorkerProcess(project, config=os.environ["FORJ_CONFIG"]) as proc,
        Client(proc.port) as client,
    ):
        hello = client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
        assert [t["name"] for t in hello["tools"]] == ["deploy", "read_file"]
        assert hello["tools_source"] == "config"
        read = next(t for t in hello["tools"] if t["name"] == "read_file")
        assert read == {
            "name": "read_file",
            "description": "Read file contents",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }
        defs = client.call("tool_definitions", {})
        assert (defs["tools"], defs["tools_source"]) == (hello["tools"], "config")
        plan = client.call(
            "plan",
            {
                "mode": "parse_only",
                "calls": [
                    call("a", "deploy", stage="test"),
                    call("b", "deploy", stage="moon"),
                    call("c", "list_files"),
                ],
            },
        )
    manual, bad, unknown = plan["items"]
    assert manual["disposition"] == "manual" and manual["summary"] == 'deploy {"stage": "test"}'
    assert bad["disposition"] == "resolved"
    assert bad["result"]["error"]["type"] == "validation-error"
    assert "'moon' is not one of ['test', 'prod']" in bad["result"]["error"]["message"]
    assert unknown["result"]["error"]["details"]["kind"] == "UnknownTool"
    assert "deploy, read_file" in unknown["result"]["error"]["recovery"][0]


def test_cfg_tools_02a_enabled_mode_advertises_the_registry_unless_configured(
    make_worker: MakeWorker,
) -> None:
    user_config(DEFINITIONS)
    worker = make_worker()
    registry_names = [n for n in worker.registry.names() if n != "load_tools"]
    hello = worker.hello_payload({})
    assert [t["name"] for t in hello["tools"]] == registry_names
    assert hello["tools_source"] == "registry"
    assert worker.tool_definitions()["tools_source"] == "registry"
    # A chat in parse_only mode gets the configured ones.
    manual = worker.tool_definitions({"tools_mode": "parse_only"})
    assert [t["name"] for t in manual["tools"]] == ["deploy", "read_file"]
    # Enabled mode still plans against the tools that run.
    plan = worker.plan({"calls": [call("a", "deploy", stage="test")]})
    assert plan["items"][0]["result"]["error"]["details"]["kind"] == "UnknownTool"


def test_cfg_tools_02a_advertise_definitions_config_in_enabled_mode(
    make_worker: MakeWorker,
) -> None:
    user_config('[tools]\nadvertise_definitions = "config"\n' + DEFINITIONS)
    worker = make_worker()
    hello = worker.hello_payload({})
    assert [t["name"] for t in hello["tools"]] == ["deploy", "read_file"]
    assert hello["tools_source"] == "config"
    (warning,) = hello["warnings"]
    assert "deploy" in warning and "read_file" not in warning and "unknown-tool" in warning


def test_cfg_tools_02_without_definitions_parse_only_advertises_the_registry(
    make_worker: MakeWorker,
) -> None:
    user_config('[tools]\nmode = "parse_only"\n')
    worker = make_worker()
    defs = worker.tool_definitions()
    assert defs["tools_source"] == "registry"
    offered = [n for n in worker.registry.names() if n != "load_tools"]
    assert [t["name"] for t in defs["tools"]] == offered
    plan = worker.plan({"mode": "parse_only", "calls": [call("a", "list_files")]})
    assert plan["items"][0]["disposition"] == "manual"


def test_tool_definitions_request_is_checked(make_worker: MakeWorker) -> None:
    worker = make_worker()
    with pytest.raises(Exception, match="tools_mode"):
        worker.tool_definitions({"tools_mode": "sometimes"})
    with pytest.raises(Exception, match="mood: Extra inputs are not permitted"):
        worker.tool_definitions({"mood": "enabled"})


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (
            'name = "x"\ndescription = "d"\nparameters = { "type"="string" }',
            "definitions.0.parameters: got {'type': 'string'}; Value error, must be a JSON",
        ),
        (
            'name = "x"\ndescription = "d"\n'
            'parameters = { "type"="object", "properties"={ "p"={ "type"="strang" } } }',
            "not a valid JSON Schema (Draft 2020-12) at properties/p/type",
        ),
        (
            'name = "x"\ndescription = "d"\n'
            'parameters = { "type"="object", "properties"={ "p"={ "$ref"="https://e.com/s" } } }',
            "$ref 'https://e.com/s' points outside this schema",
        ),
        (
            'name = "x y"\ndescription = "d"\nparameters = { "type"="object" }',
            "tools.definitions.0.name: got 'x y'; String should match pattern",
        ),
        (
            'name = "x"\nparameters = { "type"="object" }',
            "tools.definitions.0.description: missing; this key is required",
        ),
        (
            'name = "x"\ndescription = "d"\nparameters = { "type"="object" }\nhandler = "sh"',
            "tools.definitions.0.handler: unknown key; allowed here: description, name, parameters",
        ),
    ],
)
def test_cfg_tools_02_bad_definitions_stop_the_worker_with_the_key(
    project: Path, definition: str, expected: str
) -> None:
    user_config("[[tools.definitions]]\n" + definition + "\n")
    with pytest.raises(ConfigError) as info:
        load(project)
    assert expected in str(info.value)
    assert os.environ["FORJ_CONFIG"] in str(info.value)


def test_cfg_tools_02_a_name_defined_twice_is_an_error(project: Path) -> None:
    one = '[[tools.definitions]]\nname = "x"\ndescription = "d"\nparameters = { "type"="object" }\n'
    user_config(one + one)
    with pytest.raises(ConfigError, match="tool 'x' is defined twice"):
        load(project)


def test_cfg_tools_02_a_bad_definition_stops_a_real_worker(project: Path) -> None:
    user_config('[[tools.definitions]]\nname = "x"\ndescription = "d"\nparameters = {}\n')
    with pytest.raises(RuntimeError, match=r"tools\.definitions\.0\.parameters"):
        WorkerProcess(project, config=os.environ["FORJ_CONFIG"])


@pytest.mark.parametrize("trusted", [False, True])
def test_cfg_tools_02_definitions_are_the_users_own_even_for_a_trusted_project(
    project: Path, trusted: bool
) -> None:
    user_config(f"[trust]\nprojects = [{str(project)!r}]\n" if trusted else "")
    project_config(project, '[tools]\nadvertise_definitions = "config"\n' + DEFINITIONS)
    loaded = load(project)
    assert loaded.config.tools.definitions == []
    assert loaded.config.tools.advertise_definitions == "registry"
    assert sum("Only your own config file" in w for w in loaded.warnings) == 2
    assert any("tools.definitions = ['read_file', 'deploy']" in w for w in loaded.warnings)
