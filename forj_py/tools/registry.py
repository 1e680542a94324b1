"""Tools, their contexts, and the registry that holds them.

A tool is a class: a pydantic ``Args`` model (the only parse boundary; its
JSON Schema is what the model sees), a few flags, ``summary`` (pure, no
I/O), optional ``preview`` (a dry run for the approval view) and
``execute``.  Adding a tool is one module and one line in
:data:`forj_py.tools.BUILTIN`.

A tool's schema is generated from its ``Args``: pydantic emits Draft
2020-12; we inline ``$ref``s and drop ``title`` noise so every provider's
function-calling dialect can take them as they are.  The worker does not
generate them when it starts: the built-in tools' names, flags and schemas
are read from ``catalog.json`` (see :mod:`forj_py.tools.catalog`), and a
tool's module is imported, and its schema validator built, on the first
call that needs it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel

from .. import errors
from ..config import Config
from ..protocol import RiskLevel
from ..reads import Session
from ..safety.commands import CommandSandbox
from ..safety.paths import Sandbox
from ..store.backups import Backups
from ..store.checkpoints import ChangeLog

if TYPE_CHECKING:
    # jsonschema is imported on the first call to validate, not at start-up.
    from jsonschema import Draft202012Validator

A = TypeVar("A", bound=BaseModel)


class DuplicateToolError(ValueError):
    """Two tools registered under one name: the model could not tell which it calls."""


@dataclass(frozen=True)
class Staged:
    """One file a reviewed call proposes to write, as planning computed it.

    Kept with the planned call so the user can change the proposed text
    before approving (``proposal`` and ``execute``'s ``modified``).
    """

    display: str
    canonical: str
    old: str  # the text the diff starts from (disk, or an earlier call's proposal)
    new: str  # the proposed text
    existed: bool
    # The tool's stale-file rule: the model must have read the file first.
    read_first: bool = True


@dataclass
class ToolContext:
    """Built fresh for every call, so no call sees another's state."""

    sandbox: Sandbox
    config: Config
    session: Session
    batch_id: str
    call_id: str
    working_dir: str
    # min(configured max output, caller's remaining capacity): a result must
    # fit what the model can still take in.
    output_limit: int
    cancel: threading.Event = field(default_factory=threading.Event)
    # A tool that limits its own output (binary reads) turns this off.
    allow_truncation: bool = True
    emit: Callable[[str, str], None] = field(default=lambda kind, data: None)
    # Where writing tools keep copies of files before changing them.
    backups: Backups | None = None
    # The diff the user approved, if any: a writing tool refuses to apply
    # anything else (the file may have changed between review and run).
    approved_preview: str | None = None
    # Planning only: canonical path -> the text earlier calls of the batch
    # will have written there (see PlanContext.overlay).
    overlay: dict[str, str] | None = None
    # Planning only: the files this call proposes to write, in order.
    staged: list[Staged] | None = None
    # How long the executor waits for this call (the tool's limit, or a
    # shorter meta.timeout): tools that can stop themselves earlier, with a
    # result saying so, plan within it.
    time_limit: float | None = None
    # The OS sandbox commands run in (None: a context without commands).
    commands: CommandSandbox | None = None
    # Where writing tools journal each file they change (checkpoints, undo).
    changes: ChangeLog | None = None
    # The worker's state directory (journal, plan store); None: the default.
    state_dir: Path | None = None
    # The call runs unreviewed because the user said so in advance (an allow
    # rule, a standing grant, the auto mode), not because it only reads.
    standing_consent: bool = False
    # Asks the connected editor (method, body, timeout) and returns its answer;
    # None when no editor is connected (the diagnostics tool).
    editor: Callable[[str, dict[str, Any], float], Any] | None = None
    # The chat is in read-only mode: commands get the project read-only even
    # after a review.
    read_only_mode: bool = False

    def check_cancelled(self) -> None:
        """Long-running tools call this between steps."""
        if self.cancel.is_set():
            raise errors.cancelled()


class Tool(ABC, Generic[A]):
    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    side_effecting: ClassVar[bool] = False
    requires_approval: ClassVar[bool] = False
    # Which [tools.timeouts] entry applies: "file", "shell" or "default".
    timeout_kind: ClassVar[str] = "default"
    # Runs a command: permission patterns match its command line, not paths.
    runs_commands: ClassVar[bool] = False
    # Another name for a tool (file_read for read_file): accepted,
    # not offered to the model, and judged by every rule as that tool.
    alias_of: ClassVar[str | None] = None

    def mutates(self, args: A) -> bool:
        """Whether this call changes anything (a dry run does not)."""
        return self.side_effecting

    def risk(self, args: A) -> RiskLevel:
        return RiskLevel.MEDIUM if self.mutates(args) else RiskLevel.LOW

    def parse(self, raw: dict[str, Any]) -> A:
        return cast(A, self.Args.model_validate(raw, strict=True))

    @abstractmethod
    def summary(self, args: A) -> str:
        """One line for the approval view; no I/O, secrets redacted by the caller."""

    def as_rules_see_it(
        self, args: A, raw: dict[str, Any]
    ) -> tuple[Tool[Any], Any, dict[str, Any]]:
        """The tool, arguments and raw arguments that consent judges (an alias: its tool's)."""
        return self, args, raw

    def paths(self, args: A) -> list[str]:
        """Path arguments to check in the sandbox at planning time."""
        return []

    def path_globs(self, args: A) -> list[str]:
        """Globs among the call's path arguments: files known only when it runs."""
        return []

    def command(self, args: A) -> list[str] | str | None:
        """The command line permission rules match (tools that run commands)."""
        return None

    # TOOL(PATTERN) rules match this tool's rule_words (a command pattern,
    # word by word) instead of its paths: git_push's remote, curl's host.
    matches_words: ClassVar[bool] = False

    def rule_words(self, args: A) -> list[str] | None:
        """The words a ``TOOL(PATTERN)`` rule is matched against, for ``matches_words`` tools."""
        return None

    def network_access(self, args: A, ctx: ToolContext) -> bool:
        """Whether the call reaches the network (a grant must have covered network)."""
        return bool(getattr(args, "allow_network", False))

    @classmethod
    def journal_args(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the journal keeps them: credentials the call carries redacted."""
        return raw

    def preview(self, args: A, ctx: ToolContext) -> str | None:
        """What the call would do, without doing it (a diff for edits)."""
        return None

    def review_notes(self, args: A, ctx: ToolContext) -> list[str]:
        """Sentences the review shows before anything else (network, no sandbox).

        A tool that returns any is reviewed whatever the approval policy says.
        """
        return []

    def summary_tags(self, args: A, ctx: ToolContext) -> list[str]:
        """Short words the summary starts with, in brackets ("network", "runs unsandboxed")."""
        return []

    @abstractmethod
    def execute(self, args: A, ctx: ToolContext) -> Any:
        """Do the work; return a JSON-able result or raise :class:`ToolFailure`."""

    def timeout(self, config: Config) -> float:
        t = config.tools.timeouts
        return {
            "file": t.file_operations_seconds,
            "shell": t.shell_commands_seconds,
        }.get(self.timeout_kind, t.default_seconds)


@dataclass(frozen=True)
class ToolInfo:
    """What the worker knows of a tool before importing it: enough to offer it.

    The flags are the tool class's own; consent and the tool list read
    them here, so offering a tool never imports its module.
    """

    name: str
    description: str
    side_effecting: bool = False
    requires_approval: bool = False
    runs_commands: bool = False
    matches_words: bool = False
    alias_of: str | None = None

    @classmethod
    def of(cls, tool: Tool[Any] | type[Tool[Any]]) -> ToolInfo:
        return cls(
            tool.name,
            tool.description,
            tool.side_effecting,
            tool.requires_approval,
            tool.runs_commands,
            tool.matches_words,
            tool.alias_of,
        )


class Entry:
    """One registered tool: its definition now, its code and validator on first use."""

    def __init__(
        self,
        info: ToolInfo,
        parameters: dict[str, Any],
        load: Callable[[], Tool[Any]],
    ) -> None:
        self.info = info
        self.definition: dict[str, Any] = {
            "name": info.name,
            "description": info.description,
            "parameters": parameters,
        }
        self._load = load
        self._tool: Tool[Any] | None = None
        self._validator: Draft202012Validator | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def tool(self) -> Tool[Any]:
        """The tool itself; its module is imported the first time."""
        tool = self._tool
        if tool is None:
            with self._lock:
                if self._tool is None:
                    loaded = self._load()
                    if loaded.name != self.info.name:
                        raise RuntimeError(
                            f"tool {self.info.name!r} was registered, "
                            f"but its class is named {loaded.name!r}"
                        )
                    self._tool = loaded
                tool = self._tool
        return tool

    @property
    def validator(self) -> Draft202012Validator:
        """The schema's validator, built the first time a call is checked against it."""
        validator = self._validator
        if validator is None:
            from jsonschema import Draft202012Validator

            with self._lock:
                if self._validator is None:
                    self._validator = Draft202012Validator(self.definition["parameters"])
                validator = self._validator
        return validator


class Registry:
    def __init__(self, tools: list[Tool[Any]] | None = None) -> None:
        self._entries: dict[str, Entry] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool[Any], parameters: dict[str, Any] | None = None) -> None:
        """Add ``tool``; ``parameters``, when given, is its schema as written (not generated)."""
        from jsonschema import Draft202012Validator

        schema = schema_of(tool) if parameters is None else parameters
        Draft202012Validator.check_schema(schema)
        self._add(Entry(ToolInfo.of(tool), schema, lambda: tool))

    def register_lazy(
        self, info: ToolInfo, parameters: dict[str, Any], load: Callable[[], Tool[Any]]
    ) -> None:
        """Add a tool known by its ``info`` and schema; ``load`` makes it on first use.

        The schema must be the one the tool's ``Args`` generate (the
        built-in catalog is tested for it); it is not checked here.
        """
        self._add(Entry(info, parameters, load))

    def _add(self, entry: Entry) -> None:
        if entry.name in self._entries:
            raise DuplicateToolError(f"tool {entry.name!r} is registered twice")
        self._entries[entry.name] = entry

    def get(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        """The offered tools' names, sorted; aliases are found by :meth:`get` only.

        A model told of both names has two tools for one job, and a rule
        names the tool an alias stands for.
        """
        return sorted(n for n, e in self._entries.items() if e.info.alias_of is None)

    def definitions(self) -> list[dict[str, Any]]:
        """Every offered tool's definition, sorted by name: the same tools give the same prompt."""
        return [self._entries[name].definition for name in self.names()]


def schema_of(tool: Tool[Any] | type[Tool[Any]]) -> dict[str, Any]:
    """The JSON Schema the model sees for a tool's arguments."""
    return clean_schema(tool.Args.model_json_schema())


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$defs`` references and drop ``title`` annotations."""
    defs = schema.get("$defs", {})

    def walk(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            node = _drop_null_branch(node)
            if "$ref" in node and isinstance(node["$ref"], str):
                target = defs[node["$ref"].split("/")[-1]]
                merged = {**walk(target), **{k: v for k, v in node.items() if k != "$ref"}}
                return walk(merged)
            out = {}
            for key, value in node.items():
                if key == "$defs" or (key == "title" and not in_properties):
                    continue
                out[key] = walk(value, in_properties=(key == "properties"))
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


def _drop_null_branch(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` with default null becomes plain X.

    An omitted argument and a null one mean the same to the planner (it drops
    nulls before validating), and a plain type is what every provider's
    function-calling dialect understands.
    """
    branches = node.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches):
        return node
    other = next(b for b in branches if b != {"type": "null"})
    rest = {k: v for k, v in node.items() if k != "anyOf" and not (k == "default" and v is None)}
    return {**other, **rest}


def format_schema_errors(validator: Draft202012Validator, args: Any) -> list[str]:
    """Readable messages for every schema violation, most specific first."""
    from jsonschema.exceptions import best_match

    messages = []
    for top in sorted(validator.iter_errors(args), key=lambda e: (list(e.path), e.message)):
        # For anyOf/oneOf failures the sub-error says what was actually wrong.
        err = best_match(top.context) if top.context else top
        where = "args" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in err.path)
        if err.validator == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            messages.append(f"{where}: {err.message}; allowed: {', '.join(allowed)}")
        else:
            messages.append(f"{where}: {err.message}")
    return messages
