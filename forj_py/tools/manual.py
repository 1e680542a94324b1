"""Tools defined in the user's configuration, which the user runs by hand.

``[[tools.definitions]]`` describes tools to the model in ``parse_only``
mode: the model calls them, the worker checks each call against the
definition's JSON Schema and hands it to the user as ``manual``, and the
user supplies the result.  Nothing here ever runs.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..config import ToolDefinition
from ..errors import ToolFailure
from ..protocol import ErrorKind, ErrorType
from .registry import Registry, Tool, ToolContext


class ManualArgs(BaseModel):
    # The definition's JSON Schema has already judged the arguments.
    model_config = ConfigDict(extra="allow")


class ManualTool(Tool[ManualArgs]):
    Args = ManualArgs

    def summary(self, args: ManualArgs) -> str:
        return f"{self.name} {json.dumps(args.model_dump(), ensure_ascii=False, sort_keys=True)}"

    def execute(self, args: ManualArgs, ctx: ToolContext) -> Any:
        # The service refuses to execute parse_only batches; this is the
        # answer should one of these ever reach the executor some other way.
        raise ToolFailure(
            ErrorType.VALIDATION,
            f"{self.name} is defined in the configuration for the user to run by hand; "
            "forj cannot run it",
            kind=ErrorKind.BAD_ARGS,
            recovery=["Wait for the user to supply its result"],
        )


def manual_registry(definitions: list[ToolDefinition]) -> Registry:
    """A registry of the configured definitions, each as its own manual tool."""
    registry = Registry()
    for definition in definitions:
        tool_class = type(
            f"Manual_{definition.name}",
            (ManualTool,),
            {"name": definition.name, "description": definition.description},
        )
        registry.register(tool_class(), parameters=definition.parameters)
    return registry
