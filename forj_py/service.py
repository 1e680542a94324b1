"""The worker's methods, free of any transport: JSON-like dicts in and out.

:mod:`forj_py.transport.server` puts these on the EPC socket; tests and other
programs can drive them directly.  Each method validates its request body
with a pydantic model and raises :class:`ProtocolError` for a request it
cannot serve (unknown batch, a batch run twice); tool failures are never
protocol errors, they are results.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from . import __version__
from .audit import row as audit_row
from .config import PERMISSION_MODES, LoadedConfig, describe
from .consent import Consent, build_policy
from .errors import ProtocolError, ToolFailure
from .executor import DEFAULT_CAPACITY_BYTES, Batch, EmitFn, Finished, Runner
from .mcp_servers import Servers, outside_tool
from .mcp_servers.tools import checked
from .metrics import CallSample, Metrics
from .planner import PlanContext, PlannedCall, identify, plan_batch
from .protocol import (
    PROTOCOL_VERSION,
    AuditEntryRequest,
    AuditRequest,
    CancelRequest,
    CheckpointsRequest,
    Disposition,
    EditorTabWidth,
    ErrorKind,
    ErrorType,
    Event,
    ExecuteRequest,
    GrantsRequest,
    JournalCallsRequest,
    MetricsRequest,
    PlanItem,
    PlanRequest,
    ProposalRequest,
    ResolveBatchRequest,
    RevokeGrantRequest,
    RewindRequest,
    StageRequest,
    ToolDefinitionsRequest,
    ToolError,
    ToolResult,
    ToolsMode,
    UndoRequest,
)
from .reads import Conversations, Session
from .rules import Gate, RulesEngine
from .safety import bwrap_probe
from .safety.commands import CommandSandbox, probe
from .safety.files import sha256
from .safety.paths import Sandbox
from .safety.permissions import parse_rule
from .store.backups import Backups
from .store.grants import GrantStore
from .store.journal import FileChange, Journal, alive_elsewhere, worker_identity
from .system import git
from .tools import CORE, FAMILIES, _hunks, family_of
from .tools.manual import manual_registry
from .tools.registry import Registry
from .undo import Undo
from .watcher import Watcher

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)

# A proposal travels as old and new text in one EPC frame (16 MiB, and
# escaping can double it): larger ones are not offered for editing.
MAX_PROPOSAL_BYTES = 6 * 1024 * 1024

# Planned batches nobody executed (the user closed the review) are kept this
# long, counted in batches, then forgotten; the journal still has them.
MAX_BATCHES = 256
# Journaled batches kept in memory with their credentials, waiting to be planned.
MAX_UNREDACTED = 64
# How long hello waits for outside MCP servers that are still starting.
HELLO_WAITS_SECONDS = 8.0

_MODE_ORDER = [ToolsMode.DISABLED, ToolsMode.PARSE_ONLY, ToolsMode.ENABLED]


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, as the worker knows it: never as the client says.

    ``kind`` is what the connection proved at ``hello``: ``emacs`` (the
    token the worker was started with: the user), ``mcp`` (forj's MCP
    server, by the rendezvous secret) or ``sdk``; ``connection`` is the id
    the worker (or the host serving MCP or SDK in its own process) gave the
    connection when it opened.  Session grants and read records belong to
    one chat of one connection; only the user gives project grants.
    """

    kind: Literal["emacs", "mcp", "sdk"]
    connection: str

    @property
    def user(self) -> bool:
        return self.kind == "emacs"


# Calls made in this process without naming a caller (tests, scripts)
# speak for the user; the MCP and SDK hosts name theirs.
IN_PROCESS = Caller("emacs", "in-process")


def parse_request(model: type[R], body: Any) -> R:
    if not isinstance(body, dict):
        raise ProtocolError(
            "bad-request",
            f"the request body must be a JSON object, not {type(body).__name__}",
        )
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ProtocolError("bad-request", f"invalid request: {problems}") from None


class Encoded(dict[str, Any]):
    """A reply that also carries its own JSON text, ready for the wire.

    ``on_sent``, if set, runs once the transport has handed the reply to
    the client's socket.
    """

    text: str = ""
    on_sent: Callable[[], None] | None = None


class Worker:
    def __init__(
        self,
        root: Path,
        loaded: LoadedConfig,
        registry: Registry,
        journal: Journal,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        bwrap: bwrap_probe.Started | None = None,
    ) -> None:
        """``bwrap``: the sandbox probe started earlier, if any (else it runs now)."""
        self.loaded = loaded
        self.config = loaded.config
        sb = self.config.tools.sandbox
        self.sandbox = Sandbox(
            root,
            sb.allowed_roots,
            sb.denied_patterns,
            allow_absolute=sb.allow_absolute,
            include_default_denies=sb.include_default_denies,
        )
        self.root = self.sandbox.project_root
        # Before any command can run: the git tools accept this git directory
        # only (a command could plant another).
        git.pin(self.root, timeout=self.config.tools.git.timeout_seconds)
        self.registry = registry
        # Outside MCP servers (the user's own config only): started in the
        # background now; their tools join the registry once listed.
        self.outside = Servers(self.config.mcp.servers, Path(self.root))
        self.outside.start()
        self._outside_warnings: dict[str, None] = {}
        # [[tools.definitions]]: what the model is told in parse_only mode (and
        # in enabled mode when the user's file asks for it).
        self.configured = manual_registry(self.config.tools.definitions)
        self.journal = journal
        # What each conversation (one chat of one connection) read: the
        # stale-file rule holds per conversation.
        self.reads = Conversations()
        b = self.config.tools.backups
        self.backups = Backups.for_project(
            state_dir, self.sandbox.project_root, b.max_age_days, b.max_total_mb
        )
        shell = self.config.tools.shell
        self.commands = CommandSandbox(
            self.sandbox,
            probe(shell.sandbox, bwrap),
            read_paths=shell.sandbox_read_paths,
            write_paths=shell.sandbox_write_paths,
            max_processes=shell.max_processes,
            tmpfs_size_mib=shell.tmpfs_size_mib,
            tmpfs_total_mib=shell.tmpfs_total_mib,
        )
        self.runner = Runner(self.sandbox, self.config, journal, self.backups, self.commands)
        self.watcher = Watcher(
            self.root,
            self.reads,
            on_change=self.commands.masks.changed,
            on_incomplete=self.commands.masks.unwatched,
        )
        # A command starts only once the watcher has told what changed before it.
        self.commands.masks.settle = self.watcher.settle
        self._batches: OrderedDict[str, Batch] = OrderedDict()
        self._lock = threading.Lock()
        # Journaled batches a plan has taken up: each is planned once.
        self._claimed: set[str] = set()
        # Per-session counters of what ran, which a chat, the MCP client or an
        # SDK session reads back to see what its calls cost.
        self.metrics_store = Metrics()
        # Journaled calls whose credentials the journal holds redacted, as
        # sent, until they are planned (the newest few only).
        self._unredacted: dict[str, list[Any]] = {}
        # Tells this worker's batches in the shared journal from those of
        # workers that died (recovery) or still run elsewhere.
        self.identity = worker_identity(uuid.uuid4().hex[:8])
        self.undoer = Undo(
            self.sandbox, journal, self.backups, self.reads, self.root, self.identity
        )
        # Set once the first hello is answered: start-up housekeeping waits for it.
        self.greeted = threading.Event()
        # Consent: one stage decides (forj_py/consent.py); clock injectable for tests.
        self.clock = clock
        self.consent = Consent(
            build_policy(self.config, registry),
            RulesEngine(self.config.rules, self.config.tools.dedupe, set(registry.names()), clock),
            GrantStore(state_dir, self.sandbox.project_root, clock),
            registry,
            clock,
        )

    @property
    def session(self) -> Session:
        """The read record of the in-process caller's default chat."""
        return self.reads.of(IN_PROCESS.connection, "")

    def forget_connection(self, connection: str, chat: str | None = None) -> None:
        """A connection (or one chat of it) closed: its session grants and reads end."""
        if chat is None:
            self.consent.grants.forget_owner(connection)
            self.consent.engine.forget(_conversation(connection, ""), prefix=True)
        else:
            self.consent.engine.forget(_conversation(connection, chat))
        self.reads.forget(connection, chat)

    # --- methods ---------------------------------------------------------------

    def outside_tools(self, at_most: float | None = None) -> None:
        """Register the tools of the outside MCP servers, once they started (or failed).

        ``at_most``: how long to wait for the servers still starting (None:
        as long as each one's start may take).
        """
        if not self.outside:
            return
        self.outside.wait_started(at_most)
        with self._lock:
            for listed in self.outside.tools():
                found = checked(listed)
                if isinstance(found, str):
                    self._outside_warnings[found] = None
                    continue
                name, description, schema = found
                if self.registry.get(name) is None:
                    self.registry.register(
                        outside_tool(self.outside, listed.server, listed.name, name, description),
                        parameters=schema,
                    )

    def mcp_servers(self, body: Any = None) -> dict[str, Any]:
        """The outside MCP servers: each one's state, target and tools (for the menu)."""
        self.outside_tools()
        return {"servers": self.outside.status()}

    def hello_payload(self, client: dict[str, Any]) -> dict[str, Any]:
        log.info("client %s %s connected", client.get("name"), client.get("version"))
        # Not longer than this: Emacs gives the whole start a limit of its
        # own.  A server still starting is named in the reply; its tools come
        # with tool_definitions once it is up.
        self.outside_tools(HELLO_WAITS_SECONDS)
        payload = {
            "protocol": PROTOCOL_VERSION,
            "version": __version__,
            "root": self.root,
            "config": describe(self.loaded),
            "warnings": self.warnings(),
            "sandbox": self.commands.availability.wire(),
            "journal": str(self.journal.path),
            **self._definitions(self.config.tools.mode, self.consent.policy.mode),
            "unfinished": self.unfinished(),
            "permissions": self.permissions_summary(),
        }
        if self.outside.starting():
            payload["mcp_starting"] = self.outside.starting()
        self.greeted.set()
        return payload

    def permissions_summary(self) -> dict[str, Any]:
        policy = self.consent.policy
        return {
            "mode": policy.mode,
            "modes": list(PERMISSION_MODES),
            "auto_allowed": policy.auto_allowed,
            "permission_timeout_seconds": policy.timeout,
            "instructions": self.consent.engine.instructions(
                self.consent.available_names(policy.mode)
            ),
        }

    def warnings(self) -> list[str]:
        found = list(self.loaded.warnings)
        found += self.consent.policy.warnings + self.consent.engine.warnings
        found += self.outside.problems() + list(self._outside_warnings)
        tools = self.config.tools
        if tools.advertise_definitions == "config" and tools.mode is ToolsMode.ENABLED:
            strangers = [n for n in self.configured.names() if self.registry.get(n) is None]
            if strangers:
                found.append(
                    f"[[tools.definitions]] {', '.join(strangers)}: not tools forj can run; "
                    "in enabled mode a call to them is an unknown-tool error (parse_only "
                    "mode hands them to you)"
                )
        unsandboxed = self.commands.availability.warning()
        if unsandboxed is not None:
            found.append(unsandboxed)
        return found

    def tool_definitions(self, body: Any = None) -> dict[str, Any]:
        req = parse_request(ToolDefinitionsRequest, {} if body is None else body)
        self.outside_tools()
        tools_mode = self.config.tools.mode
        if req.tools_mode is not None:
            tools_mode = min(req.tools_mode, tools_mode, key=_MODE_ORDER.index)
        mode, note = self.consent.mode_for(req.permission_mode)
        offered = self._definitions(tools_mode, mode)
        reply: dict[str, Any] = {
            **offered,
            **self._only_families(offered, req.families),
            "permission_mode": mode,
            "instructions": self.consent.engine.instructions(self.consent.available_names(mode)),
        }
        if note:
            reply["mode_note"] = note
        return reply

    def _definitions(self, mode: ToolsMode, permission_mode: str) -> dict[str, Any]:
        """The tools the model is told about: the configured ones, or forj's in this mode.

        ``load_tools`` is left out here: it is offered only with a subset of
        the families (:func:`_only_families`), when there is something to load.
        """
        if self._from_config(mode):
            return {"tools": self.configured.definitions(), "tools_source": "config"}
        tools = [d for d in self.consent.definitions(permission_mode) if d["name"] != "load_tools"]
        return {"tools": tools, "tools_source": "registry"}

    def _only_families(self, offered: dict[str, Any], families: list[str] | None) -> dict[str, Any]:
        """The core set and ``families`` of the ``offered`` tools, and what the others are.

        The reply's ``families`` maps each family to its tools offered in this
        mode, so a client knows which family a call it did not offer belongs to.
        Configured definitions (``tools_source`` config) are offered whole.
        """
        if families is None or offered["tools_source"] != "registry":
            return {}
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ProtocolError(
                "bad-request",
                f"tool_definitions: no tool family {', '.join(map(repr, unknown))}; "
                f"the families are {', '.join(FAMILIES)} (the core set is always offered)",
            )
        tools: list[dict[str, Any]] = offered["tools"]
        names = {d["name"] for d in tools}
        members = {f: [n for n in FAMILIES[f] if n in names] for f in FAMILIES}
        wanted = {CORE, *families}
        kept = [d for d in tools if family_of(d["name"]) in wanted]
        load = self.registry.get("load_tools")
        if load is not None and any(members[f] for f in FAMILIES if f not in wanted):
            kept.append(load.definition)
            kept.sort(key=lambda d: str(d["name"]))
        return {"tools": kept, "families": {f: m for f, m in members.items() if m}}

    def _from_config(self, mode: ToolsMode) -> bool:
        """Whether the configured definitions, not the registry's, are the ones advertised."""
        tools = self.config.tools
        if not tools.definitions:
            return False
        return mode is ToolsMode.PARSE_ONLY or tools.advertise_definitions == "config"

    def _planning_registry(self, mode: ToolsMode) -> Registry:
        # In parse_only mode the calls are to the tools the model was told
        # about; otherwise to the tools that run.
        if mode is ToolsMode.PARSE_ONLY and self._from_config(mode):
            return self.configured
        return self.registry

    def journal_calls(self, body: Any) -> dict[str, Any]:
        """Journal a complete message's calls before any planning, so a crash loses none."""
        req = parse_request(JournalCallsRequest, body)
        batch_id = uuid.uuid4().hex
        self._record_calls(batch_id, ToolsMode.ENABLED, req.calls, req.turn)
        redacted = [self._journal_form(name, raw) for (_, name), raw in _named(req.calls)]
        if redacted != req.calls:
            with self._lock:
                self._unredacted[batch_id] = req.calls
                while len(self._unredacted) > MAX_UNREDACTED:
                    del self._unredacted[next(iter(self._unredacted))]
        return {"batch_id": batch_id}

    def _record_calls(
        self,
        batch_id: str,
        mode: ToolsMode,
        calls: list[Any],
        turn: str | None,
        durable: bool = True,
    ) -> None:
        idents = [identify(seq, raw) for seq, raw in enumerate(calls)]
        # The calls are recorded before anything is decided about them: a crash
        # during planning still leaves the record of what the model asked.
        # Planned at once, they are flushed with the plan, before its answer.
        self.journal.record_batch(
            batch_id,
            self.root,
            mode.value,
            [
                (cid, name, self._journal_form(name, raw))
                for (cid, name), raw in zip(idents, calls, strict=False)
            ],
            turn=turn,
            worker=self.identity,
            durable=durable,
        )

    def _journal_form(self, name: str, raw: Any) -> Any:
        """A call as the journal keeps it: credentials its tool knows of redacted.

        The calls as sent stay in memory until planned (``_unredacted``), so a
        journaled batch still runs with them; after a restart the redacted
        form is all there is, and the tool refuses to send a redaction marker.
        """
        entry = self.registry.get(name)
        if entry is None or not isinstance(raw, dict) or not isinstance(raw.get("args"), dict):
            return raw
        shown = entry.tool.journal_args(raw["args"])
        return raw if shown is raw["args"] else {**raw, "args": shown}

    def _journaled_calls(self, batch_id: str, calls: list[Any] | None) -> list[Any]:
        """The calls ``journal_calls`` recorded under ``batch_id``, ready to plan once."""
        meta = self.journal.batch_meta(batch_id)
        if meta is None or meta["root"] != self.root or meta["worker"] != self.identity:
            raise ProtocolError(
                "unknown-batch",
                f"no journaled batch {batch_id!r} in this worker",
                ["Journal the calls with journal_calls first, or plan them with 'calls'"],
            )
        recorded = self.journal.batch(batch_id)
        assert recorded is not None
        with self._lock:
            sent = self._unredacted.get(batch_id)
        journaled = sent if sent is not None else [c["call"] for c in recorded["calls"]]
        if calls is not None and calls != journaled:
            raise ProtocolError(
                "bad-request",
                f"the calls differ from those journaled as batch {batch_id}",
                ["Send no 'calls' with 'batch_id': the journaled ones are planned"],
            )
        with self._lock:
            claimed = batch_id in self._claimed
            self._claimed.add(batch_id)
        if claimed or meta["state"] != "received":
            raise ProtocolError(
                "bad-request",
                f"batch {batch_id} was already planned; a batch is planned once",
                ["Journal the calls again to plan them again"],
            )
        with self._lock:
            self._unredacted.pop(batch_id, None)
        return journaled

    def _note_tab_widths(self, reads: Session, hints: list[EditorTabWidth]) -> None:
        """Keep the editor's tab widths for this chat, by canonical path."""
        root = self.sandbox.project_root
        widths = {os.path.realpath(os.path.join(root, h.path)): h.width for h in hints}
        with reads.lock:
            reads.editor_tab_widths = widths

    def plan(self, body: Any, caller: Caller = IN_PROCESS) -> dict[str, Any]:
        req = parse_request(PlanRequest, body)
        self.outside_tools()
        mode = min(req.mode, self.config.tools.mode, key=_MODE_ORDER.index)
        permission_mode, mode_note = self.consent.mode_for(req.permission_mode)
        session = req.session or ""
        # Turn rules and deduplication, session grants and the read record
        # belong to this chat on this connection: another client naming
        # the same chat id gets its own.
        conversation = _conversation(caller.connection, session)
        reads = self.reads.of(caller.connection, session)
        if req.tab_widths is not None:
            self._note_tab_widths(reads, req.tab_widths)
        if req.batch_id is not None:
            if not caller.user:
                # journal_calls is Emacs's: another client planning a batch it
                # journaled would take the chat's calls over (and from it).
                raise ProtocolError(
                    "not-allowed",
                    "planning a journaled batch is for the user's Emacs; send the calls",
                    ["Plan with 'calls' instead of 'batch_id'"],
                )
            batch_id = req.batch_id
            raw_calls = self._journaled_calls(batch_id, req.calls)
            if req.turn is not None:
                self.journal.record_turn(batch_id, req.turn)
        elif req.calls is None:
            raise ProtocolError(
                "bad-request",
                "invalid request: calls: Field required",
                ["Send the calls, or the batch_id journal_calls returned"],
            )
        else:
            batch_id = uuid.uuid4().hex
            raw_calls = req.calls
            self._record_calls(batch_id, mode, raw_calls, req.turn, durable=False)
        # Without a turn id every batch is a turn of its own.
        turn = req.turn or f"batch:{batch_id}"
        available = self.consent.available_names(permission_mode)
        probe = self.consent.engine.probe(conversation, turn, available)
        pc = PlanContext(
            registry=self._planning_registry(mode),
            config=self.config,
            sandbox=self.sandbox,
            session=reads,
            batch_id=batch_id,
            output_limit=min(self.config.tools.output.max_bytes, DEFAULT_CAPACITY_BYTES),
            commands=self.commands,
            consent=self.consent,
            permission_mode=permission_mode,
            chat=session,
            owner=caller.connection,
            probe=probe,
            state_dir=self.journal.path.parent,
        )
        calls = plan_batch(pc, mode, raw_calls)
        # The reasons first: the plan's own commit flushes them with it.
        self._journal_consent(
            batch_id,
            "plan",
            {c.seq: f"[{permission_mode}] {c.reason}" for c in calls if c.reason is not None},
            {c.seq: c.step for c in calls if c.reason is not None and c.step is not None},
        )
        self.journal.record_plan(
            batch_id,
            [c.disposition.value for c in calls],
            {c.seq: c.result for c in calls if c.result is not None},
        )
        if req.check:
            # A check (a file the user adds to a chat's context): nothing will
            # run, so recovery must never offer it as an unfinished batch.
            self.journal.record_resolution(batch_id, "checked")
            with self._lock:
                self._claimed.discard(batch_id)
            return {
                "batch_id": batch_id,
                "mode": mode.value,
                "permission_mode": permission_mode,
                "items": [c.item().wire() for c in calls],
            }
        gate = Gate(self.consent.engine, conversation, turn, available)
        batch = Batch(
            batch_id=batch_id,
            mode=mode.value,
            calls=calls,
            permission_mode=permission_mode,
            session=session,
            owner=caller.connection,
            reads=reads,
            gate=gate,
            planned_at=self.clock(),
            review_timeout=self.consent.policy.timeout,
        )
        with self._lock:
            self._claimed.discard(batch_id)  # the journal says "planned" from now on
            self._batches[batch_id] = batch
            while len(self._batches) > MAX_BATCHES:
                self._batches.popitem(last=False)
        items = [c.item() for c in calls]
        self._note_uncommitted(calls, items)
        turn_info = self.consent.engine.probe_info(probe)
        turn_info["continue_loop"] = self.consent.engine.continues(
            [c.name for c in calls if c.disposition is not Disposition.RESOLVED]
        )
        reply: dict[str, Any] = {
            "batch_id": batch_id,
            "mode": mode.value,
            "permission_mode": permission_mode,
            "items": [item.wire() for item in items],
            "turn": turn_info,
        }
        if self.consent.policy.timeout and any(c.disposition is Disposition.CONFIRM for c in calls):
            reply["review_timeout_seconds"] = self.consent.policy.timeout
        if mode_note:
            reply["mode_note"] = mode_note
        return reply

    def _journal_consent(
        self,
        batch_id: str,
        stage: str,
        reasons: dict[int, str],
        steps: dict[int, str] | None = None,
    ) -> None:
        if not reasons:
            return
        try:
            self.journal.record_consent(batch_id, stage, reasons, steps)
        except Exception:  # the decision stands; the audit line is lost, and logged
            log.exception("journal: consent of batch %s not recorded", batch_id)

    def _note_uncommitted(self, calls: list[PlannedCall], items: list[PlanItem]) -> None:
        """Say which files a writing call targets hold uncommitted work not made by forj."""
        targets: dict[int, list[tuple[str, str]]] = {}
        for index, planned in enumerate(calls):
            tool, args = planned.tool, planned.args
            if tool is None or args is None or not tool.mutates(args):
                continue
            if planned.disposition not in (Disposition.EXECUTE, Disposition.CONFIRM):
                continue
            for path in tool.paths(args):
                try:
                    sp = self.sandbox.resolve(path, planned.working_dir, for_write=True)
                except ToolFailure:
                    continue
                if sp.exists and os.path.isfile(sp.canonical):
                    targets.setdefault(index, []).append((sp.canonical, sp.display))
        if not targets:
            return
        status = git.uncommitted(self.root, [c for pairs in targets.values() for c, _ in pairs])
        if not status:
            return
        for index, pairs in targets.items():
            flagged = []
            for canonical, display in pairs:
                code = status.get(canonical)
                if code is None or self._last_written_by_forj(canonical):
                    continue
                flagged.append(display)
                what = (
                    "is untracked" if code == "??" else f"has uncommitted changes ({code.strip()})"
                )
                items[index].notes = (items[index].notes or []) + [
                    f"{display} {what} in git, not made by forj: commit or stash them first "
                    "to keep that work apart from this change"
                ]
            if flagged:
                items[index].uncommitted = flagged

    def _last_written_by_forj(self, canonical: str) -> bool:
        """The file holds exactly what forj last wrote there."""
        last = self.journal.last_write(canonical)
        if last is None or last.hash_after is None:
            return False
        try:
            with open(canonical, "rb") as fh:
                return sha256(fh.read()) == last.hash_after
        except OSError:
            return False

    def execute(self, body: Any, emit: EmitFn, caller: Caller = IN_PROCESS) -> dict[str, Any]:
        req = parse_request(ExecuteRequest, body)
        batch = self._batch(req.batch_id)
        if not caller.user and batch.owner != caller.connection:
            raise ProtocolError(
                "not-allowed",
                "that batch was planned by another client; an MCP or SDK client executes its own",
                ["Plan the calls first, then execute the batch_id that plan returned"],
            )
        with batch.lock:
            if batch.state != "planned":
                raise ProtocolError(
                    "bad-request",
                    f"batch {req.batch_id} was already executed ({batch.state}); a batch runs once",
                    ["Plan the calls again to run them again"],
                )
            if batch.mode == ToolsMode.PARSE_ONLY.value:
                raise ProtocolError(
                    "bad-request",
                    "this batch was planned in parse_only mode; nothing in it executes",
                    ["Supply the results by hand, or plan again in enabled mode"],
                )
            batch.state = "executing"
        confirm = {c.call_id for c in batch.calls if c.disposition is Disposition.CONFIRM}
        timeout = batch.review_timeout
        if confirm and timeout and self.clock() - batch.planned_at > timeout:
            # permission_timeout_seconds: an answer that comes too late is a denial.
            batch.review_expired = True
        try:
            self._check_modified(batch, req.modified, set(req.approved) & confirm)
            hunks = self._check_hunks(batch, req, set(req.approved) & confirm)
            given = self._check_grants(batch, req, set(req.approved) & confirm, caller)
        except ProtocolError:
            with batch.lock:
                batch.state = "planned"  # nothing ran: the caller may try again
            raise
        approvals = self._record_approvals(batch, req, confirm, given, hunks)
        unknown = (set(req.approved) | set(req.denied)) - {c.call_id for c in batch.calls}
        if unknown:
            log.warning("execute %s: decisions for unknown ids ignored: %s", req.batch_id, unknown)
        if req.turn is not None:
            self.journal.record_turn(batch.batch_id, req.turn)
        times: dict[int, tuple[float, float | None]] = {}

        def timed(event: Event) -> None:
            # Each executed call is framed by its started and finished events.
            if event.kind == "started":
                times[event.seq] = (time.time(), None)
            elif event.kind == "finished" and event.seq in times:
                times[event.seq] = (times[event.seq][0], time.time())
            emit(event)

        finished = self.runner.run(
            batch,
            approved=set(req.approved) & confirm,
            denied={k: v for k, v in req.denied.items() if k in confirm},
            capacity=req.capacity_bytes,
            emit=timed,
            modified=req.modified,
            hunks=hunks,
            unreviewed={
                c.call_id: (
                    req.unreviewed[c.call_id],
                    _how_to_allow(c.grant_pattern),
                    _allow_rule(c.grant_pattern),
                )
                for c in batch.calls
                if c.call_id in confirm and c.call_id in req.unreviewed
            },
        )
        self._count(batch, finished, times)
        turn_info = batch.gate.info() if batch.gate is not None else {}
        if batch.gate is not None:
            # The chat decides from the execute reply whether the batch counts
            # as an iteration: say it here too, not only when planning.
            turn_info["continue_loop"] = self.consent.engine.continues(
                [c.name for c in batch.calls if c.disposition is not Disposition.RESOLVED]
            )
        reply = Encoded(
            batch_id=batch.batch_id,
            state=batch.state,
            results=[f.wire for f in finished],
            warnings=batch.warnings,
            turn=turn_info,
            grants=approvals,
        )
        # The results are already JSON text: splice them in rather than encode
        # megabytes a second time.
        reply.text = (
            f'{{"batch_id":{json.dumps(batch.batch_id)},"state":{json.dumps(batch.state)},'
            f'"warnings":{json.dumps(batch.warnings, ensure_ascii=False)},'
            f'"turn":{json.dumps(turn_info, ensure_ascii=False)},'
            f'"grants":{json.dumps(approvals, ensure_ascii=False)},'
            f'"results":[{",".join(f.text for f in finished)}]}}'
        )
        batch_id = batch.batch_id
        # The journal has the results and the reply carries them; a batch kept
        # in memory for later questions needs only its state.
        batch.results = []
        reply.on_sent = lambda: self._delivered(batch_id, times)
        return reply

    def _delivered(
        self, batch_id: str, times: dict[int, tuple[float, float | None]] | None = None
    ) -> None:
        try:
            self.journal.record_delivered(batch_id, times)
        except Exception:
            log.exception("journal: could not record the delivery of %s", batch_id)

    # --- metrics and the audit timeline ----------------------------------------------

    def _count(
        self,
        batch: Batch,
        finished: list[Finished],
        times: dict[int, tuple[float, float | None]],
    ) -> None:
        """Feed the batch's session counters; counting never fails a batch."""
        try:
            touched: dict[int, list[str]] = {}
            for change in self.journal.file_changes([batch.batch_id]):
                paths = touched.setdefault(change.seq, [])
                if change.path not in paths:
                    paths.append(change.path)
            samples = []
            for planned, done in zip(batch.calls, finished, strict=False):
                started, ended = times.get(planned.seq, (None, None))
                duration = (
                    (ended - started) * 1000 if started is not None and ended is not None else None
                )
                samples.append(
                    CallSample(
                        name=planned.name,
                        ok=bool(done.wire.get("ok")),
                        duration_ms=duration,
                        result_bytes=len(done.text.encode("utf-8")),
                        files=touched.get(planned.seq, []),
                    )
                )
            self.metrics_store.record(batch.session, samples, self.clock())
        except Exception:
            log.exception("metrics: batch %s not counted", batch.batch_id)

    def metrics(self, body: Any = None) -> dict[str, Any]:
        """The counters of one session (``session``), or of every session this worker saw."""
        req = parse_request(MetricsRequest, {} if body is None else body)
        if req.session is not None:
            return {"session": self.metrics_store.session(req.session)}
        return {"sessions": self.metrics_store.all()}

    def audit(self, body: Any = None) -> dict[str, Any]:
        """One page of this project's journaled calls, newest first, with who decided each."""
        req = parse_request(AuditRequest, {} if body is None else body)
        rows, more = self.journal.audit(
            self.root,
            limit=req.limit,
            offset=req.offset,
            tool=req.tool,
            outcome=req.outcome,
            text=req.text,
        )
        return {
            "rows": [audit_row(r) for r in rows],
            "offset": req.offset,
            "more": more,
            "next_offset": req.offset + len(rows) if more else None,
        }

    def audit_entry(self, body: Any) -> dict[str, Any]:
        """One journaled call as received and its result as sent back."""
        req = parse_request(AuditEntryRequest, body)
        found = self.journal.audit_entry(self.root, req.batch_id, req.seq)
        if found is None:
            raise ProtocolError(
                "unknown-batch",
                f"no call {req.seq} of batch {req.batch_id!r} in this project's journal",
                ["Use a batch_id and seq from a row of the audit method"],
            )
        return {"batch_id": req.batch_id, "seq": req.seq, **found}

    # --- grants -------------------------------------------------------------------

    def _check_grants(
        self, batch: Batch, req: ExecuteRequest, approved: set[str], caller: Caller
    ) -> dict[str, tuple[str, str]]:
        """Each standing grant asked for, checked before anything runs: id -> (rule, scope).

        A grant from an MCP or SDK connection holds for that connection's
        chat only: one for every chat of the project ("always") is the
        user's word, refused unless the user gave exactly it in Emacs's
        review of that call (the worker heard that answer from Emacs itself).
        """
        given: dict[str, tuple[str, str]] = {}
        if batch.review_expired:
            return given
        by_id = {c.call_id: c for c in batch.calls}
        for call_id, grant in req.grants.items():
            if call_id not in approved:
                raise ProtocolError(
                    "bad-request",
                    f"a grant for call {call_id!r}, which is not an approved reviewed call",
                    ["Give grants only with the approval of a call awaiting review"],
                )
            if grant.scope == "once":
                continue  # the approval itself; never remembered
            if grant.scope == "minutes" and grant.minutes is None:
                raise ProtocolError(
                    "bad-request",
                    f"the grant for call {call_id!r} has scope 'minutes' but no minutes",
                    ['Send {"scope": "minutes", "minutes": 30}'],
                )
            if grant.scope == "project" and not caller.user:
                said = batch.reviewed_grants.get(call_id)
                if said != grant.model_dump(exclude_none=True):
                    raise ProtocolError(
                        "not-allowed",
                        f"a grant for every chat of the project (call {call_id!r}) is the "
                        f"user's to give, in Emacs; an {caller.kind.upper()} connection may "
                        "give grants for its own chat only",
                        [
                            'Give {"scope": "session"} or {"scope": "minutes", ...}: it '
                            "holds for this connection until it closes",
                            "Or approve the call once",
                        ],
                    )
            planned = by_id[call_id]
            rule = grant.pattern or planned.grant_pattern
            if rule is None:
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} has no proposed grant pattern; send one in 'pattern'",
                    ["Approve it once, or give a pattern such as run_shell(make test *)"],
                )
            try:
                parsed = parse_rule(rule, "grant")
                parsed.check(
                    planned.tool is not None
                    and (planned.tool.runs_commands or planned.tool.matches_words)
                )
                covers = planned.subject is not None and parsed.matches(
                    planned.subject, strict=True
                )
            except ValueError as exc:
                raise ProtocolError("bad-request", f"grant pattern: {exc}") from None
            if not covers:
                raise ProtocolError(
                    "bad-request",
                    f"the grant pattern {rule!r} does not cover call {call_id!r} it approves",
                    ["Widen the pattern so it matches the reviewed call"],
                )
            given[call_id] = (rule, grant.scope)
        return given

    def _record_approvals(
        self,
        batch: Batch,
        req: ExecuteRequest,
        confirm: set[str],
        given: dict[str, tuple[str, str]],
        hunks: dict[str, dict[str, _hunks.FileDecision]],
    ) -> list[dict[str, Any]]:
        """Store the grants, and journal each reviewed call's answer."""
        granted: list[dict[str, Any]] = []
        reasons: dict[int, str] = {}
        for planned in batch.calls:
            cid = planned.call_id
            if cid not in confirm:
                continue
            if batch.review_expired:
                reasons[planned.seq] = f"review unanswered after {batch.review_timeout:g} s: denied"
            elif cid in req.unreviewed:
                reasons[planned.seq] = f"refused: no reviewer available ({req.unreviewed[cid]})"
            elif cid in req.denied:
                reasons[planned.seq] = "denied by the user" + (
                    f": {req.denied[cid]}" if req.denied[cid] else ""
                )
            elif cid not in req.approved:
                reasons[planned.seq] = "not approved: denied"
            elif cid in given:
                rule, scope = given[cid]
                request = req.grants[cid]
                network = bool(planned.subject and planned.subject.network)
                grant = self.consent.grants.add(
                    rule, scope, batch.session, request.minutes, network, owner=batch.owner
                )
                granted.append({"call_id": cid, **grant.wire()})
                reasons[planned.seq] = f"approved by the user; grant {grant.id} {rule!r} ({scope})"
            elif cid in hunks:
                # The audit must not read as a whole approval.
                reasons[planned.seq] = "approved in part by the user (once): " + "; ".join(
                    f"{path}: hunks {sorted(d.approved)} of {len(d.approved) + len(d.dropped)}"
                    for path, d in hunks[cid].items()
                )
            else:
                reasons[planned.seq] = "approved by the user (once)"
        self._journal_consent(batch.batch_id, "approval", reasons)
        return granted

    def grants(self, body: Any) -> dict[str, Any]:
        req = parse_request(GrantsRequest, {} if body is None else body)
        return {"grants": [g.wire() for g in self.consent.grants.active(req.session)]}

    def revoke_grant(self, body: Any) -> dict[str, Any]:
        req = parse_request(RevokeGrantRequest, body)
        if not self.consent.grants.revoke(req.id):
            raise ProtocolError(
                "bad-request",
                f"no grant {req.id!r} in force for this project",
                ["List them with the grants method; expired grants are gone already"],
            )
        return {"revoked": True}

    def proposal(self, body: Any) -> dict[str, Any]:
        """The full old and proposed text of each file a reviewed call would write."""
        req = parse_request(ProposalRequest, body)
        planned = self._planned(self._batch(req.batch_id), req.call_id)
        size = sum(len(s.old.encode("utf-8")) + len(s.new.encode("utf-8")) for s in planned.staged)
        if size > MAX_PROPOSAL_BYTES:
            raise ProtocolError(
                "too-large",
                f"the proposal of call {req.call_id!r} is {size} bytes, over the "
                f"{MAX_PROPOSAL_BYTES}-byte limit for editing in Emacs",
                ["Approve or deny it as proposed, or deny it with a reason"],
            )
        return {
            "files": [
                {"path": s.display, "old": s.old, "new": s.new, "existed": s.existed}
                for s in planned.staged
            ]
        }

    def note_reviewed_grant(self, batch_id: str, call_id: str, grant: dict[str, Any]) -> None:
        """The user gave ``grant`` in Emacs's review of this call: the one a client may forward."""
        self._batch(batch_id).reviewed_grants[call_id] = grant

    def batch_owner(self, batch_id: str) -> str | None:
        """The connection a live batch was planned over; None for one this worker does not hold."""
        with self._lock:
            batch = self._batches.get(batch_id)
        return None if batch is None else batch.owner

    def review_item(self, batch_id: str, call_id: str) -> dict[str, Any]:
        """The plan item of a call awaiting review, as the worker planned it."""
        batch = self._batch(batch_id)
        for planned in batch.calls:
            if planned.call_id == call_id and planned.disposition is Disposition.CONFIRM:
                if batch.state != "planned":
                    raise ProtocolError(
                        "bad-request",
                        f"batch {batch_id} was already executed; its review is over",
                        ["Plan the call again"],
                    )
                item = planned.item().wire()
                if batch.review_timeout:
                    item["review_timeout_seconds"] = batch.review_timeout
                return item
        raise ProtocolError(
            "bad-request",
            f"batch {batch_id} has no call {call_id!r} awaiting review",
            ["Use an id from the plan's confirm items"],
        )

    def _planned(self, batch: Batch, call_id: str) -> PlannedCall:
        for planned in batch.calls:
            if planned.call_id == call_id and planned.disposition is Disposition.CONFIRM:
                if not planned.staged:
                    raise ProtocolError(
                        "bad-request",
                        f"call {call_id!r} proposes no file content that could be edited",
                        ["Only reviewed writing calls with a preview can be edited first"],
                    )
                return planned
        raise ProtocolError(
            "bad-request",
            f"batch {batch.batch_id} has no call {call_id!r} awaiting review",
            ["Use an id from the plan's confirm items"],
        )

    def _check_modified(
        self, batch: Batch, modified: dict[str, dict[str, str]], approved: set[str]
    ) -> None:
        for call_id, texts in modified.items():
            known = {s.display for s in self._planned(batch, call_id).staged}
            if call_id not in approved:
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} is modified but not approved; a modified call must be "
                    "approved too",
                    ["Add the id to 'approved', or drop it from 'modified'"],
                )
            strange = sorted(set(texts) - known)
            if strange:
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} does not write {', '.join(strange)}",
                    [f"Modify only the files of its proposal: {', '.join(sorted(known))}"],
                )

    def _check_hunks(
        self, batch: Batch, req: ExecuteRequest, approved: set[str]
    ) -> dict[str, dict[str, _hunks.FileDecision]]:
        """The calls approved in part, checked; a call with every hunk dropped
        becomes a denial (with the user's reasons) before anything is recorded."""
        out: dict[str, dict[str, _hunks.FileDecision]] = {}
        for call_id, files in req.hunks.items():
            planned = next(
                (
                    c
                    for c in batch.calls
                    if c.call_id == call_id and c.disposition is Disposition.CONFIRM
                ),
                None,
            )
            if planned is None:
                raise ProtocolError(
                    "bad-request",
                    f"batch {batch.batch_id} has no call {call_id!r} awaiting review",
                    ["Decide hunks only of the plan's confirm items"],
                )
            if call_id not in approved:
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} has hunk decisions but is not approved; a call approved "
                    "in part must be in 'approved' too",
                    ["Add the id to 'approved', or drop it from 'hunks' (a denial needs none)"],
                )
            grant = req.grants.get(call_id)
            if grant is not None and grant.scope != "once":
                # A grant lets later calls like this run unreviewed and whole:
                # "only these hunks" must not become "all of it, from now on".
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} is approved in part ('hunks') and given a standing "
                    "grant; a grant covers whole calls, so it needs a whole approval",
                    [
                        "Approve the call in part without a grant",
                        "Or approve it whole to give the grant",
                    ],
                )
            if not planned.staged or not planned.hunks_decidable():
                raise ProtocolError(
                    "bad-request",
                    f"call {call_id!r} cannot be approved in part: it moves or deletes files, "
                    "proposes no text, or its preview is not the diff its hunks are counted on",
                    ["Approve or deny it whole"],
                )
            decisions = _hunks.check_decisions(
                call_id, planned.staged, files, set(req.modified.get(call_id, {}))
            )
            reason = _hunks.all_dropped(planned.staged, decisions)
            if reason is not None:
                # Every hunk dropped: the user said no to the whole call.
                req.approved = [c for c in req.approved if c != call_id]
                req.denied[call_id] = reason or req.denied.get(call_id, "")
                req.modified.pop(call_id, None)
                req.grants.pop(call_id, None)
                continue
            out[call_id] = decisions
        return out

    def cancel(self, body: Any) -> dict[str, Any]:
        req = parse_request(CancelRequest, body)
        # A batch cancelled before it runs still answers execute: every call
        # that would have run comes back cancelled (one result per call).
        self._batch(req.batch_id).request_cancel()
        return {"cancelled": True}

    def cancel_all(self) -> None:
        with self._lock:
            batches = list(self._batches.values())
        for batch in batches:
            if batch.state == "executing":
                batch.request_cancel()

    def _batch(self, batch_id: str) -> Batch:
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            raise ProtocolError(
                "unknown-batch",
                f"no batch {batch_id!r} in this worker",
                ["Plan the calls again; batches do not survive a worker restart"],
            )
        return batch

    # --- recovery ---------------------------------------------------------------------

    def unfinished(self) -> list[dict[str, Any]]:
        """Batches a stopped worker or client left without an outcome the client saw."""
        with self._lock:
            live = set(self._batches)
        reports = []
        for batch_id, owner in self.journal.recoverable(self.root):
            if batch_id in live or owner == self.identity or alive_elsewhere(owner):
                continue
            report = self._recovery_report(batch_id)
            if report is not None:
                reports.append(report)
        return reports

    def _recovery_report(self, batch_id: str) -> dict[str, Any] | None:
        recorded = self.journal.batch(batch_id)
        meta = self.journal.batch_meta(batch_id)
        if recorded is None or meta is None:
            return None
        running = None
        if recorded["state"] == "executing":
            # Each result is journaled before the next call starts: the first
            # call without one is the one that was running.
            running = next((c["seq"] for c in recorded["calls"] if c["result"] is None), None)
        changes: dict[int, list[FileChange]] = {}
        for change in self.journal.file_changes([batch_id]):
            changes.setdefault(change.seq, []).append(change)
        calls = []
        for c in recorded["calls"]:
            entry: dict[str, Any] = {"seq": c["seq"], "id": c["id"], "name": c["name"]}
            entry["call"] = c["call"]
            result = c["result"]
            if result is not None and not _cancelled_before_start(result):
                entry["state"] = "completed"
                entry["result"] = result
            elif c["seq"] == running:
                entry["state"] = "running"
                entry["result"] = _interrupted(c["id"], c["name"], changes.get(c["seq"], []))
            else:
                entry["state"] = "never-started"
            if c["seq"] in changes:
                entry["files_changed"] = [ch.path for ch in changes[c["seq"]]]
            calls.append(entry)
        return {
            "batch_id": batch_id,
            "turn": meta["turn"],
            "time": meta["created_at"],
            "state": recorded["state"],
            "reason": _REASONS.get(recorded["state"], _REASONS["done"]),
            "calls": calls,
        }

    def resolve_batch(self, body: Any) -> dict[str, Any]:
        """Close an unfinished batch: resume (its never-started calls come back to be
        planned anew) or discard (they are answered as not run).  Nothing runs here."""
        req = parse_request(ResolveBatchRequest, body)
        report = next((r for r in self.unfinished() if r["batch_id"] == req.batch_id), None)
        if report is None:
            raise ProtocolError(
                "unknown-batch",
                f"batch {req.batch_id!r} is not an unfinished batch of this project",
                ["Use a batch id from hello's 'unfinished'; it may be resolved already"],
            )
        results = []
        remaining = []
        for entry in report["calls"]:
            if entry["state"] != "never-started":
                results.append(entry["result"])
            elif req.action == "resume":
                remaining.append(entry["call"])
            else:
                results.append(_discarded(entry["id"], entry["name"]))
        self.journal.record_resolution(
            req.batch_id, "resumed" if req.action == "resume" else "discarded"
        )
        reply: dict[str, Any] = {
            "batch_id": req.batch_id,
            "action": req.action,
            "turn": report["turn"],
            "results": results,
        }
        if req.action == "resume":
            reply["remaining"] = remaining
        return reply

    # --- checkpoints, undo, rewind -------------------------------------------------

    def checkpoints(self, body: Any) -> dict[str, Any]:
        req = parse_request(CheckpointsRequest, body)
        batches = self.journal.changing_batches(self.root, turn=req.turn)[-req.limit :]
        by_batch: dict[str, list[FileChange]] = {}
        for change in self.journal.file_changes([b["batch_id"] for b in batches]):
            by_batch.setdefault(change.batch_id, []).append(change)
        out = []
        for b in reversed(batches):
            out.append(
                {
                    "batch_id": b["batch_id"],
                    "turn": b["turn"],
                    "kind": b["kind"],
                    "time": b["created_at"],
                    "undone_by": b["undone_by"],
                    "files": _summarize(by_batch.get(b["batch_id"], [])),
                }
            )
        return {"checkpoints": out}

    def stage(self, body: Any) -> dict[str, Any]:
        """``git add -A`` of files forj changed (Emacs's ``forj-git-auto-stage``).

        git runs as every git of the worker does (:mod:`forj_py.system.git`):
        none of the repository's programs (filters, fsmonitor, hooks) runs.
        A path outside the project or denied (``.env``) is not staged.
        """
        req = parse_request(StageRequest, body)
        specs: list[str] = []
        staged: list[str] = []
        skipped: list[dict[str, str]] = []
        for path in req.paths:
            try:
                safe = self.sandbox.resolve(path)
            except ToolFailure as failure:
                skipped.append({"path": path, "reason": failure.error.message})
                continue
            if safe.root != self.sandbox.project_root or safe.rel == ".":
                skipped.append({"path": path, "reason": "not a file of the project"})
                continue
            specs.append(":(literal)" + safe.rel)
            staged.append(safe.display)
        if not specs:
            return {"staged": [], "skipped": skipped}
        timeout = self.config.tools.git.timeout_seconds
        try:
            repo = git.open_repo(self.root, timeout=timeout)
            done = repo.run(["add", "-A", "--", *specs], timeout=timeout)
        except git.GitError as exc:
            return {"staged": [], "skipped": skipped, "error": str(exc)}
        if not done.ok:
            why = "timed out" if done.timed_out else done.err() or f"exit {done.returncode}"
            return {"staged": [], "skipped": skipped, "error": f"git add failed: {why}"}
        return {"staged": staged, "skipped": skipped}

    def _idle(self) -> None:
        """Undo only between batches: a running call may be writing the same files."""
        with self._lock:
            busy = [b.batch_id for b in self._batches.values() if b.state == "executing"]
        if busy:
            raise ProtocolError(
                "bad-request",
                f"batch {busy[0]} is running; undo and rewind wait until it ends",
                ["Wait for the batch's results (or cancel it), then undo"],
            )

    def undo(self, body: Any) -> dict[str, Any]:
        req = parse_request(UndoRequest, body)
        self._idle()
        if (req.batch_id is None) == (req.turn is None):
            raise ProtocolError(
                "bad-request",
                "undo takes exactly one of batch_id and turn",
                ["Name the batch (from checkpoints) or the turn to undo"],
            )
        if req.batch_id is not None:
            batches = self.undoer.select_batch(req.batch_id)
        else:
            assert req.turn is not None
            batches = self.undoer.select_turn(req.turn)
        return self.undoer.run(batches, req.force, req.dry_run)

    def rewind(self, body: Any) -> dict[str, Any]:
        req = parse_request(RewindRequest, body)
        self._idle()
        batches = self.undoer.select_rewind(req.turn)
        reply = self.undoer.run(batches, req.force, req.dry_run)
        reply["turn"] = req.turn
        return reply


def _allow_rule(pattern: str | None) -> str:
    return f'this call: allow = ["{pattern}"]' if pattern else "one that covers this call"


def _how_to_allow(pattern: str | None) -> list[str]:
    """The ways a user can let a call that needs review run from an MCP client."""
    rule = f'allow = ["{pattern}"]' if pattern else "an allow rule covering it"
    return [
        f"To let such calls run unasked, the user adds to their own forj config: "
        f"[permissions] {rule}",
        "Or the user sets [mcp] review_in_emacs = true in their own forj config and runs "
        "forj in Emacs on this project: the review then opens there",
        "Or use an MCP client that supports elicitation: forj then asks the user through it",
    ]


_REASONS = {
    "received": "the calls were journaled, then forj stopped before planning them",
    "planned": "the calls were planned, then forj stopped before they were executed",
    "executing": "forj stopped while the batch was running",
    "done": "the batch finished, but its results never reached the client",
}


def _cancelled_before_start(result: dict[str, Any]) -> bool:
    error = result.get("error")
    return (
        not result.get("ok")
        and isinstance(error, dict)
        and error.get("type") == ErrorType.CANCELLED.value
        and error.get("details", {}).get("started") is False
    )


def _interrupted(call_id: str, name: str, changes: list[FileChange]) -> dict[str, Any]:
    files = [c.path for c in changes]
    written = f"; it had written {', '.join(files)}" if files else ""
    return ToolResult(
        id=call_id,
        name=name,
        ok=False,
        error=ToolError(
            type=ErrorType.CANCELLED,
            message=(
                "Interrupted: forj stopped while this call was running" + written + ". "
                "It may have done part of its work; it was not run again"
            ),
            details={"kind": ErrorKind.CANCELLED.value, "interrupted": True, "files": files},
            recovery=[
                "Check what it did (read the files it touches, list the output) before "
                "repeating it",
                "Ask the user before running it again",
            ],
        ),
    ).wire()


def _discarded(call_id: str, name: str) -> dict[str, Any]:
    return ToolResult(
        id=call_id,
        name=name,
        ok=False,
        error=ToolError(
            type=ErrorType.CANCELLED,
            message=(
                "Not run: forj stopped before this call started, and the user chose not to "
                "run the rest of the batch"
            ),
            details={"kind": ErrorKind.CANCELLED.value, "discarded": True},
            recovery=["Ask the user before making this call again"],
        ),
    ).wire()


def _summarize(changes: list[FileChange]) -> list[dict[str, Any]]:
    """Per file of one batch: created, modified or deleted, and whether it has a backup."""
    first: dict[str, FileChange] = {}
    last: dict[str, FileChange] = {}
    for change in changes:
        first.setdefault(change.canonical, change)
        last[change.canonical] = change
    out = []
    for canonical, f in first.items():
        gone = last[canonical].hash_after is None
        kind = (
            ("created" if not gone else "unchanged")
            if not f.existed
            else ("deleted" if gone else "modified")
        )
        out.append(
            {
                "path": f.path,
                "change": kind,
                "backup": f.backup is not None or not f.existed,
            }
        )
    return out


def _named(calls: list[Any]) -> list[tuple[tuple[str, str], Any]]:
    return [(identify(seq, raw), raw) for seq, raw in enumerate(calls)]


def _conversation(connection: str, chat: str) -> str:
    """One chat of one connection, as the rules engine keys its turns."""
    return f"{connection}\x1f{chat}"
