"""Errors a tool call can end in, each with the steps a model can take next.

A tool raises :class:`ToolFailure`; the planner and executor turn it into the
``error`` object of a tool result.  Constructors below exist for every kind
the framework itself produces, so the wording of each error (and above all
its ``recovery`` list) lives in one place.

Protocol errors (a malformed request from the client, a missing ``hello``)
are a different thing: they are :class:`ProtocolError` and answer the method
call itself instead of becoming a tool result.
"""

from __future__ import annotations

from typing import Any

from .output import sanitize_value
from .protocol import DenialReason, ErrorKind, ErrorType, ToolError, ToolResult


class ToolFailure(Exception):
    """A tool call that ends in an error result, never a dead worker."""

    def __init__(
        self,
        type_: ErrorType,
        message: str,
        *,
        kind: ErrorKind,
        recovery: list[str],
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.error = ToolError(
            type=type_,
            message=message,
            details={"kind": kind.value, **details},
            recovery=recovery,
        )


def error_result(call_id: str, name: str, failure: ToolFailure) -> dict[str, Any]:
    """The wire result of call ``call_id`` (tool ``name``) that failed with ``failure``."""
    # Messages quote what the model sent (paths, names): sanitize like any output.
    wire: dict[str, Any] = sanitize_value(
        ToolResult(id=call_id, name=name, ok=False, error=failure.error).wire()
    )
    return wire


class ProtocolError(Exception):
    """A method call that cannot be served; answered as an EPC ``return-error``."""

    def __init__(self, type_: str, message: str, recovery: list[str] | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.recovery = recovery or []

    def wire(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "recovery": self.recovery}


# --- constructors -------------------------------------------------------------


def bad_args(message: str, *, recovery: list[str] | None = None, **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.BAD_ARGS,
        recovery=recovery
        or [
            "Fix the arguments named in the message and call the tool again",
            "Check the tool's parameter schema in the tool definitions",
        ],
        **details,
    )


def unknown_tool(name: str, known: list[str]) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        f"Unknown tool {name!r}",
        kind=ErrorKind.UNKNOWN_TOOL,
        recovery=[
            "Call one of the available tools: " + ", ".join(known),
            "Check the spelling of the tool name",
        ],
        tool=name,
    )


def duplicate_call_id(call_id: str) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        f"Duplicate tool call id {call_id!r} in this batch; only its first call runs",
        kind=ErrorKind.DUPLICATE_TOOL_CALL_ID,
        recovery=["Give every tool call in a message its own unique id"],
        call_id=call_id,
    )


def limits_exceeded(message: str, recovery: list[str], **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.SANDBOX_VIOLATION,
        reason=DenialReason.LIMITS_EXCEEDED.value,
        recovery=recovery,
        **details,
    )


def denied_by_policy(message: str, reason: DenialReason, **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.PERMISSION,
        message,
        kind=ErrorKind.SANDBOX_VIOLATION,
        reason=reason.value,
        recovery=[
            "Do not retry this call: the user's configuration forbids it",
            "Reach the goal with another tool, or ask the user to change the policy",
        ],
        **details,
    )


def user_denied(reason: str | None) -> ToolFailure:
    if reason:
        message = f"The user denied this call: {reason}"
        recovery = [
            "Read the user's reason and change your approach accordingly",
            "Do not repeat the same call unchanged",
        ]
    else:
        message = "The user denied this call"
        recovery = [
            "Do not repeat the same call unchanged",
            "Ask the user what they would like instead",
        ]
    return ToolFailure(
        ErrorType.PERMISSION,
        message,
        kind=ErrorKind.USER_DENIED,
        recovery=recovery,
        user_reason=reason,
    )


def no_reviewer(why: str, how: list[str], rule: str) -> ToolFailure:
    """Not run: the call needs the user's review and nobody was there to give it."""
    return ToolFailure(
        ErrorType.PERMISSION,
        f"Refused: this call needs the user's review and no reviewer is available ({why}). "
        f"Nothing was done. The user can allow it with a [permissions] allow rule in their "
        f"own forj config ({rule}), with [mcp] review_in_emacs = true and forj running in "
        "Emacs on this project, or through an MCP client that supports elicitation",
        kind=ErrorKind.USER_DENIED,
        recovery=[
            *how,
            "Tell the user what you wanted to do; do not repeat the call unchanged",
        ],
        no_reviewer=True,
    )


def timed_out(tool: str, elapsed: float, limit: float) -> ToolFailure:
    return ToolFailure(
        ErrorType.TIMEOUT,
        f"{tool} did not finish within its {limit:g} s time limit",
        kind=ErrorKind.TIMEOUT,
        recovery=[
            "Narrow the request (a smaller range, fewer files, a faster command)",
            "Pass a shorter or longer meta.timeout only within the configured limit",
        ],
        tool=tool,
        elapsed_ms=round(elapsed * 1000),
        timeout_s=limit,
    )


def cancelled() -> ToolFailure:
    return ToolFailure(
        ErrorType.CANCELLED,
        "Cancelled by user",
        kind=ErrorKind.CANCELLED,
        recovery=["Wait for the user's next instruction before calling tools again"],
    )


def tool_crashed(tool: str, exc: BaseException) -> ToolFailure:
    # Only the exception's type and a short message: its text may quote input
    # the model sent, and tracebacks go to the worker log, not to the model.
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return ToolFailure(
        ErrorType.INTERNAL,
        f"{tool} failed: {type(exc).__name__}" + (f": {text}" if text else ""),
        kind=ErrorKind.EXECUTION_FAILED,
        recovery=[
            "This is a fault in forj, not in your call; try a different approach",
            "Tell the user; the worker log (M-x forj-worker-log) has the traceback",
        ],
        tool=tool,
    )


def file_error(message: str, path: str, *, recovery: list[str], **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.FILE,
        message,
        kind=ErrorKind.EXECUTION_FAILED,
        recovery=recovery,
        path=path,
        **details,
    )


def process_error(message: str, *, recovery: list[str], **details: Any) -> ToolFailure:
    """A command that failed, or could not be started (``process-error``)."""
    return ToolFailure(
        ErrorType.PROCESS,
        message,
        kind=ErrorKind.EXECUTION_FAILED,
        recovery=recovery,
        **details,
    )


def command_timed_out(
    tool: str, limit: float, *, recovery: list[str] | None = None, **details: Any
) -> ToolFailure:
    """A command stopped at its own time limit; ``details`` carry what it wrote."""
    return ToolFailure(
        ErrorType.TIMEOUT,
        f"{tool}: the command did not finish within {limit:g} s; its process group was killed",
        kind=ErrorKind.TIMEOUT,
        recovery=recovery
        or [
            "Look at the output so far (stdout, stderr) to see where it got stuck",
            "Run something faster or narrower, or pass a larger timeout within the configured "
            "limit",
            "A command that waits for input gets none: stdin is closed unless given",
        ],
        tool=tool,
        timeout_s=limit,
        **details,
    )
