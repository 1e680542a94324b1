"""``load_tools``: the model asks for a family of tools beyond the core set.

A chat offers the core set first (the tools of no family in
:data:`forj_py.tools.FAMILIES`), so a small model's window is not spent
on schemas it never uses.  This tool changes nothing: its result says
which tools the family holds, and the client that offered the core set
adds their definitions to the next request.  A call to a tool of a
family not loaded yet is not refused: it runs as any call does, and the
client loads its family then (a model copes better with a tool that
works than with an error about a list it cannot see).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from . import FAMILIES, FAMILY_PURPOSE
from .registry import Tool, ToolContext

Family = Literal["git", "files", "ast", "tasks", "web", "checks"]


class LoadToolsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: Family = Field(
        description="git: status, diff, log, commit, branches, remotes; "
        "files: patches, move, copy, delete; ast: syntax-tree queries and renames; "
        "tasks: a persistent task list; web: one HTTP request (curl); "
        "checks: validators, processes"
    )


class LoadTools(Tool[LoadToolsArgs]):
    name = "load_tools"
    description = (
        "Add a family of tools to your tool list, from your next step on. "
        "Call it when the core tools cannot do the job."
    )
    Args = LoadToolsArgs

    def summary(self, args: LoadToolsArgs) -> str:
        return f"load the {args.family} tools"

    def execute(self, args: LoadToolsArgs, ctx: ToolContext) -> Any:
        tools = list(FAMILIES[args.family])
        return {
            "family": args.family,
            "tools": tools,
            "purpose": FAMILY_PURPOSE[args.family],
            "note": "Their definitions are in your tool list from your next step on.",
        }
