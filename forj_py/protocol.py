"""The shapes that cross the EPC seam, as pydantic models.

Everything here is data: the tool-call and tool-result objects of the
fenced-block protocol, the planner's dispositions, and the request/response
bodies of each worker method.  Nothing here does I/O.

Tool-call objects arrive from a language model, so they are parsed
leniently (unknown fields ignored: models add their own) and a broken one turns
into an error result instead of failing its whole batch; the method request
bodies come from our own Emacs client and are parsed strictly.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PROTOCOL_VERSION = 1


class ErrorType(str, Enum):
    """The fixed set of ``error.type`` values a tool result can carry.

    Validation, file and process errors cover most failures; the rest split
    out cases a model should react to differently (read the file again, ask
    the user, wait).
    """

    VALIDATION = "validation-error"  # bad arguments, unknown tool, path outside the root
    FILE = "file-error"  # the file system said no
    PROCESS = "process-error"  # a command failed or could not start
    PERMISSION = "permission-error"  # policy or the user denied the call
    TIMEOUT = "timeout-error"  # the call ran past its time limit
    CANCELLED = "cancelled"  # the user cancelled the batch
    STALE_FILE = "stale-file"  # the file changed since the model last read it
    INTERNAL = "internal-error"  # a bug in forj; the message says what broke


class ErrorKind(str, Enum):
    """What went wrong, finer than the type, carried as ``error.details.kind``."""

    BAD_ARGS = "BadArgs"
    TIMEOUT = "Timeout"
    SANDBOX_VIOLATION = "SandboxViolation"
    EXECUTION_FAILED = "ExecutionFailed"
    CANCELLED = "Cancelled"
    UNKNOWN_TOOL = "UnknownTool"
    DUPLICATE_TOOL = "DuplicateTool"
    DUPLICATE_TOOL_CALL_ID = "DuplicateToolCallId"
    PATCH_FAILED = "PatchFailed"
    STALE_FILE = "StaleFile"
    # forj's own additions: a human said no, or the batch mode forbids running.
    USER_DENIED = "UserDenied"
    # The user's [[rules]] refused the call, or an identical call ran so recently
    # that running it again would only repeat it.
    RULE_VIOLATION = "RuleViolation"
    DEDUPLICATED = "Deduplicated"


class DenialReason(str, Enum):
    """Why a call was refused before it ran, carried as ``error.details.reason``."""

    DENYLISTED = "Denylisted"
    DISABLED = "Disabled"
    PATH_OUTSIDE_SANDBOX = "PathOutsideSandbox"
    DENIED_PATTERN_MATCHED = "DeniedPatternMatched"
    LIMITS_EXCEEDED = "LimitsExceeded"
    NOT_ALLOWLISTED = "NotAllowlisted"
    DENIED_BY_RULE = "DeniedByRule"  # a [permissions] deny rule
    NOT_IN_MODE = "NotInMode"  # the permission mode does not offer the tool


class RiskLevel(str, Enum):
    LOW = "low"  # reads only
    MEDIUM = "medium"  # edits files
    HIGH = "high"  # runs commands or destroys data


class Disposition(str, Enum):
    EXECUTE = "execute"
    CONFIRM = "confirm"
    RESOLVED = "resolved"
    # Only in parse_only mode: the call is valid, nothing will run it, and the
    # user is expected to supply its result by hand.
    MANUAL = "manual"


class ToolsMode(str, Enum):
    DISABLED = "disabled"
    PARSE_ONLY = "parse_only"
    ENABLED = "enabled"


# --- tool calls and results -------------------------------------------------


class _Model(BaseModel):
    # Each model's validator is built when it first validates, not at import:
    # starting the worker needs only a few of them.
    model_config = ConfigDict(defer_build=True)


class CallMeta(_Model):
    model_config = ConfigDict(extra="ignore")

    cwd: str = "."
    timeout: float | None = Field(default=None, gt=0)


class ToolCall(_Model):
    """One call as the model wrote it: ``{id, name, args, meta}``."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)
    meta: CallMeta = Field(default_factory=CallMeta)


class ErrorCode(str, Enum):
    """The coarse error codes hosts of several tool runtimes share, in ``error.details.code``.

    Coarser than ``type`` and ``kind``: one code per subsystem, so a host that
    embeds forj beside other tool runtimes can sort failures without knowing
    forj's own vocabulary.
    """

    FILE_IO = "E_FILE_IO"
    AST_PARSE = "E_AST_PARSE"
    AST_EDIT = "E_AST_EDIT"
    VALIDATION_FAIL = "E_VALIDATION_FAIL"
    GIT = "E_GIT"
    HTTP = "E_HTTP"
    SHELL = "E_SHELL"
    POLICY = "E_POLICY"
    TIMEOUT = "E_TIMEOUT"
    INTERNAL = "E_INTERNAL"


_CODES = frozenset(c.value for c in ErrorCode)

_CODE_OF_TYPE: dict[ErrorType, ErrorCode] = {
    ErrorType.VALIDATION: ErrorCode.VALIDATION_FAIL,
    ErrorType.FILE: ErrorCode.FILE_IO,
    ErrorType.PROCESS: ErrorCode.SHELL,
    ErrorType.PERMISSION: ErrorCode.POLICY,
    ErrorType.TIMEOUT: ErrorCode.TIMEOUT,
    # A person stopped the batch: a decision about the call, like a denial.
    ErrorType.CANCELLED: ErrorCode.POLICY,
    # The file is not what the model read: a file-state problem, fixed by reading.
    ErrorType.STALE_FILE: ErrorCode.FILE_IO,
    ErrorType.INTERNAL: ErrorCode.INTERNAL,
}


def error_code(type_: ErrorType, details: dict[str, Any]) -> ErrorCode:
    """The canonical code of an error: the one a tool set itself, else the mapping.

    The mapping goes by ``type``, with two exceptions: a sandbox violation (a
    path outside the root, a denied pattern, a limit) is a policy refusal even
    where its type says validation, and a call forj itself stopped mid-way
    (``interrupted``) is forj's fault, not the user's cancel.
    """
    own = details.get("code")
    if isinstance(own, str) and own in _CODES:
        return ErrorCode(own)
    if details.get("kind") == ErrorKind.SANDBOX_VIOLATION.value:
        return ErrorCode.POLICY
    if details.get("interrupted") is True:
        return ErrorCode.INTERNAL
    return _CODE_OF_TYPE[type_]


class ToolError(_Model):
    type: ErrorType
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    recovery: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _with_code(self) -> ToolError:
        # Every error result carries its canonical code, however it was built.
        self.details["code"] = error_code(self.type, self.details).value
        return self


class ToolResult(_Model):
    """``{id, name, ok, result}`` or ``{id, name, ok: false, error}``."""

    id: str
    name: str
    ok: bool
    result: Any = None
    error: ToolError | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON object the model reads, with only the fields that apply."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "ok": self.ok}
        if self.ok:
            out["result"] = self.result
        else:
            assert self.error is not None
            out["error"] = self.error.model_dump(mode="json")
        return out


# --- worker method bodies (docs/protocol.md) ---------------------------------


class _Strict(_Model):
    model_config = ConfigDict(extra="forbid")


class ClientInfo(_Model):
    model_config = ConfigDict(extra="ignore")

    name: str = "unknown"
    version: str = "unknown"


class HelloRequest(_Strict):
    token: str
    client: ClientInfo = Field(default_factory=ClientInfo)


PermissionMode = Literal["read-only", "ask", "accept-edits", "auto"]
# A chat session or turn id: plain text, short.
SessionId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


class EditorTabWidth(_Strict):
    """The ``tab-width`` of an editor buffer visiting a file: how the user sees its tabs."""

    # Relative to the project root, as the editor names the file.
    path: str = Field(min_length=1, max_length=4096, strict=True)
    width: int = Field(ge=1, le=32, strict=True)


class PlanRequest(_Strict):
    mode: ToolsMode = ToolsMode.ENABLED
    # Raw objects: each is parsed on its own so one bad call cannot sink the batch.
    # Optional only with ``batch_id``: then the journaled calls are planned.
    calls: list[Any] | None = Field(default=None, max_length=10_000)
    # A batch ``journal_calls`` recorded: plan those calls under that id.
    batch_id: str | None = None
    # The client's turn id: opaque text naming the user message the batch
    # answers (turn-scoped rules reset when it changes; absent: each batch is
    # a turn of its own).
    turn: str | None = Field(default=None, min_length=1, max_length=256)
    # The chat's permission mode; absent: the configured default.
    permission_mode: PermissionMode | None = None
    # The chat (session grants, deduplication); absent: one shared chat.
    session: SessionId | None = None
    # Only check the calls (path rules, policy) and run none: the batch is
    # journaled as checked, never left looking unfinished, and cannot be executed.
    check: bool = False
    # The editor's tab width for files it visits: a hint the writing tools
    # weigh after the file's and the project's own declarations.
    # Absent: the chat keeps what its last request with them sent.
    tab_widths: list[EditorTabWidth] | None = Field(default=None, max_length=1024)


class JournalCallsRequest(_Strict):
    """The calls of a complete model message, journaled before anything else happens."""

    calls: list[Any] = Field(max_length=10_000)
    turn: str | None = Field(default=None, min_length=1, max_length=256)


class ResolveBatchRequest(_Strict):
    batch_id: str
    action: Literal["resume", "discard"]


class CheckpointsRequest(_Strict):
    turn: str | None = Field(default=None, min_length=1, max_length=256)
    limit: int = Field(default=100, ge=1, le=10_000)


class StageRequest(_Strict):
    """Files forj changed, to stage (``git add -A``): project paths, as results name them."""

    paths: list[str] = Field(min_length=1, max_length=10_000)


class UndoRequest(_Strict):
    batch_id: str | None = None
    turn: str | None = Field(default=None, min_length=1, max_length=256)
    dry_run: bool = False
    # Paths (as the dry run shows them) to overwrite although they changed
    # since forj wrote them.
    force: list[str] = Field(default_factory=list)


class RewindRequest(_Strict):
    turn: str = Field(min_length=1, max_length=256)
    dry_run: bool = False
    force: list[str] = Field(default_factory=list)


class ToolDefinitionsRequest(_Strict):
    permission_mode: PermissionMode | None = None
    # The tools mode the definitions are for (plan's "mode"); absent: the
    # configured one.  The stricter of it and the configured mode applies.
    tools_mode: ToolsMode | None = None
    # The families of tools to offer besides the core set (forj_py.tools.FAMILIES);
    # absent: every tool.  Given, load_tools is offered to load the others.
    families: list[str] | None = Field(default=None, max_length=64)


class GrantRequest(_Strict):
    """A standing grant given with an approval."""

    scope: Literal["once", "session", "minutes", "project"]
    minutes: float | None = Field(default=None, gt=0, le=7 * 24 * 60)
    # A permission rule; absent: the pattern the plan item proposed.
    pattern: str | None = Field(default=None, min_length=1, max_length=2000)


class GrantsRequest(_Strict):
    session: SessionId | None = None


class RevokeGrantRequest(_Strict):
    id: str = Field(min_length=1, max_length=100)


class PlanItem(_Model):
    id: str
    name: str
    disposition: Disposition
    summary: str
    risk: RiskLevel
    preview: str | None = None
    preview_note: str | None = None
    # Sentences the review shows first: network, no sandbox, writes through
    # links, invisible characters.
    warnings: list[str] | None = None
    result: dict[str, Any] | None = None
    # Files the call writes that hold uncommitted changes not made by forj
    # (git), and sentences saying so; information, not a reason to confirm.
    uncommitted: list[str] | None = None
    notes: list[str] | None = None
    # Why the call runs, is reviewed or is refused: the consent stage's reason.
    reason: str | None = None
    # For a reviewed call: the narrowest rule a standing grant could use.
    grant_pattern: str | None = None
    # For a reviewed call that can be approved in part: each file whose hunks
    # (the '@@' pieces of its diff in preview) can be approved or dropped one
    # by one, with how many it has.
    hunk_files: list[dict[str, Any]] | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class DroppedHunk(_Strict):
    index: int = Field(ge=0)
    # Why the user dropped it: the model reads this.
    reason: str = Field(default="", max_length=4000)


class FileHunks(_Strict):
    """One file's hunks of a reviewed call, as the user decided them.

    Indexes count the file's ``@@`` hunks in the call's preview from 0;
    every hunk is in exactly one of ``approved`` and ``dropped``.
    """

    approved: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    dropped: list[DroppedHunk] = Field(default_factory=list)


class ExecuteRequest(_Strict):
    batch_id: str
    approved: list[str] = Field(default_factory=list)
    denied: dict[str, str] = Field(default_factory=dict)
    # What the caller can still fit into the model's context, in bytes
    # so results never crowd out the conversation.  Absent means "unknown": a
    # conservative cap applies.
    capacity_bytes: int | None = Field(default=None, ge=1024)
    # Edit before approve: call id -> {path: the text the user wants written
    # instead of the proposal}.  Only for approved calls that had a proposal.
    modified: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Approved in part: call id -> {path: which of its hunks the user
    # approved and dropped}.  Files left out are written as proposed.
    hunks: dict[str, dict[str, FileHunks]] = Field(default_factory=dict)
    turn: str | None = Field(default=None, min_length=1, max_length=256)
    # Calls refused because they need review and nobody could review them
    # (an MCP client that cannot ask): call id -> why.  Not run, like denied.
    unreviewed: dict[str, str] = Field(default_factory=dict)
    # Standing grants given with approvals: call id -> grant.
    grants: dict[str, GrantRequest] = Field(default_factory=dict)


class ProposalRequest(_Strict):
    batch_id: str
    call_id: str


class CancelRequest(_Strict):
    batch_id: str


class MetricsRequest(_Strict):
    # One session's counters; absent: every session's.
    session: SessionId | None = None


AuditOutcome = Literal["ok", "error", "refused", "none"]


class AuditRequest(_Strict):
    limit: int = Field(default=100, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=10_000_000)
    tool: str | None = Field(default=None, min_length=1, max_length=128)
    outcome: AuditOutcome | None = None
    text: str | None = Field(default=None, min_length=1, max_length=500)


class AuditEntryRequest(_Strict):
    batch_id: str = Field(min_length=1, max_length=100)
    seq: int = Field(ge=0)


class EmptyRequest(_Strict):
    pass


EventKind = Literal["started", "stdout", "stderr", "finished"]


class Event(_Model):
    """A streamed notice from the worker to Emacs; for display only."""

    batch_id: str
    call_id: str
    seq: int
    kind: EventKind
    data: str | None = None
    ok: bool | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
