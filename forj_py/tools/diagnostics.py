"""``diagnostics``: what the user's editor's checkers say of a file.

Only Emacs knows what flymake (with eglot's language server) or flycheck
reports for a buffer, so this tool is the worker's like every other one
(schema, path rules, consent, journal, budget) and asks the connected
Emacs for the answer at execute time, the way a review of an MCP
client's call is put to Emacs.  Emacs answers for a file it already
visits with a checker on; it opens no file for the model (opening one
would run the file's mode hooks and local variables).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import errors
from .registry import Tool, ToolContext

# Emacs bounds its own wait for a fresh check; this much more is allowed
# for its answer to cross the connection.
GRACE_SECONDS = 5.0
DEFAULT_WAIT_SECONDS = 10.0


class DiagnosticsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")


class Diagnostic(BaseModel):
    model_config = ConfigDict(extra="ignore")

    line: int = Field(ge=1)
    column: int = Field(ge=0)
    severity: Literal["error", "warning", "note"]
    message: str = Field(max_length=4000)
    source: str = Field(default="", max_length=200)


class EditorAnswer(BaseModel):
    """What Emacs answers: the checker it asked, and what that reported."""

    model_config = ConfigDict(extra="ignore")

    checker: str | None = Field(default=None, max_length=200)
    diagnostics: list[Diagnostic] = Field(default_factory=list, max_length=2000)
    note: str = Field(default="", max_length=1000)


class Diagnostics(Tool[DiagnosticsArgs]):
    name = "diagnostics"
    description = (
        "The errors and warnings the user's Emacs checkers (flymake, a language server "
        "through eglot, flycheck) report now for a file open in Emacs: {path, checker, "
        "diagnostics: [{line, column, severity, message, source}], note}. checker is null "
        "when no checker runs on the file (it is not open, or no checker is on)."
    )
    Args = DiagnosticsArgs

    def summary(self, args: DiagnosticsArgs) -> str:
        return f"diagnostics of {args.path}"

    def paths(self, args: DiagnosticsArgs) -> list[str]:
        return [args.path]

    def execute(self, args: DiagnosticsArgs, ctx: ToolContext) -> Any:
        sp = ctx.sandbox.resolve(args.path, ctx.working_dir)
        if ctx.editor is None:
            raise errors.process_error(
                "No Emacs is connected to this worker: there is no editor to ask for diagnostics",
                recovery=["Check the file another way (run_tests, validate, run_shell)"],
            )
        limit = ctx.time_limit or DEFAULT_WAIT_SECONDS
        try:
            raw = ctx.editor("diagnostics", {"path": sp.canonical}, limit)
        except TimeoutError:
            raise errors.process_error(
                f"Emacs did not answer for the diagnostics of {sp.display} in {limit:g} s",
                recovery=["Try again later, or check the file another way"],
            ) from None
        except (ConnectionError, RuntimeError) as exc:
            raise errors.process_error(
                f"Emacs could not give the diagnostics of {sp.display} ({exc})",
                recovery=["Check the file another way (run_tests, validate, run_shell)"],
            ) from None
        try:
            answer = EditorAnswer.model_validate(raw)
        except ValidationError:
            raise errors.process_error(
                "Emacs answered with diagnostics forj cannot read",
                recovery=["Check the file another way (run_tests, validate, run_shell)"],
            ) from None
        return {
            "path": sp.display,
            "checker": answer.checker,
            "diagnostics": [d.model_dump() for d in answer.diagnostics],
            "note": answer.note,
        }
