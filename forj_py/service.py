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
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from . import __version__
from .config import LoadedConfig, describe
from .errors import ProtocolError
from .executor import DEFAULT_CAPACITY_BYTES, Batch, EmitFn, Runner
from .planner import PlanContext, PlannedCall, identify, plan_batch
from .protocol import (
    PROTOCOL_VERSION,
    CancelRequest,
    Disposition,
    ExecuteRequest,
    PlanRequest,
    ProposalRequest,
    ToolsMode,
)
from .safety.commands import CommandSandbox, probe
from .safety.paths import Sandbox
from .store.backups import Backups
from .store.journal import Journal
from .tools.registry import Registry, Session
from .watcher import Watcher

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)

# A proposal travels as old and new text in one EPC frame (16 MiB, and
# escaping can double it): larger ones are not offered for editing.
MAX_PROPOSAL_BYTES = 6 * 1024 * 1024

# Planned batches nobody executed (the user closed the review) are kept this
# long, counted in batches, then forgotten; the journal still has them.
MAX_BATCHES = 256

_MODE_ORDER = [ToolsMode.DISABLED, ToolsMode.PARSE_ONLY, ToolsMode.ENABLED]


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
    """A reply that also carries its own JSON text, ready for the wire."""

    text: str = ""


class Worker:
    def __init__(
        self,
        root: Path,
        loaded: LoadedConfig,
        registry: Registry,
        journal: Journal,
        state_dir: Path,
    ) -> None:
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
        self.registry = registry
        self.journal = journal
        self.session = Session()
        b = self.config.tools.backups
        self.backups = Backups.for_project(
            state_dir, self.sandbox.project_root, b.max_age_days, b.max_total_mb
        )
        shell = self.config.tools.shell
        self.commands = CommandSandbox(
            self.sandbox,
            probe(shell.sandbox),
            read_paths=shell.sandbox_read_paths,
            write_paths=shell.sandbox_write_paths,
            max_processes=shell.max_processes,
        )
        self.runner = Runner(
            self.sandbox, self.config, self.session, journal, self.backups, self.commands
        )
        self.watcher = Watcher(self.root, self.session, on_change=self.commands.masks.changed)
        self._batches: OrderedDict[str, Batch] = OrderedDict()
        self._lock = threading.Lock()

    # --- methods ---------------------------------------------------------------

    def hello_payload(self, client: dict[str, Any]) -> dict[str, Any]:
        log.info("client %s %s connected", client.get("name"), client.get("version"))
        return {
            "protocol": PROTOCOL_VERSION,
            "version": __version__,
            "root": self.root,
            "config": describe(self.loaded),
            "warnings": self.warnings(),
            "sandbox": self.commands.availability.wire(),
            "journal": str(self.journal.path),
            "tools": self.registry.definitions(),
        }

    def warnings(self) -> list[str]:
        found = list(self.loaded.warnings)
        unsandboxed = self.commands.availability.warning()
        if unsandboxed is not None:
            found.append(unsandboxed)
        return found

    def tool_definitions(self) -> dict[str, Any]:
        return {"tools": self.registry.definitions()}

    def plan(self, body: Any) -> dict[str, Any]:
        req = parse_request(PlanRequest, body)
        mode = min(req.mode, self.config.tools.mode, key=_MODE_ORDER.index)
        batch_id = uuid.uuid4().hex
        idents = [identify(seq, raw) for seq, raw in enumerate(req.calls)]
        # FR-RES-04: the calls are durable before anything is decided about them.
        self.journal.record_batch(
            batch_id,
            self.root,
            mode.value,
            [(cid, name, raw) for (cid, name), raw in zip(idents, req.calls, strict=False)],
        )
        pc = PlanContext(
            registry=self.registry,
            config=self.config,
            sandbox=self.sandbox,
            session=self.session,
            batch_id=batch_id,
            output_limit=min(self.config.tools.output.max_bytes, DEFAULT_CAPACITY_BYTES),
            commands=self.commands,
        )
        calls = plan_batch(pc, mode, req.calls)
        self.journal.record_plan(
            batch_id,
            [c.disposition.value for c in calls],
            {c.seq: c.result for c in calls if c.result is not None},
        )
        batch = Batch(batch_id=batch_id, mode=mode.value, calls=calls)
        with self._lock:
            self._batches[batch_id] = batch
            while len(self._batches) > MAX_BATCHES:
                self._batches.popitem(last=False)
        return {
            "batch_id": batch_id,
            "mode": mode.value,
            "items": [c.item().wire() for c in calls],
        }

    def execute(self, body: Any, emit: EmitFn) -> dict[str, Any]:
        req = parse_request(ExecuteRequest, body)
        batch = self._batch(req.batch_id)
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
        try:
            self._check_modified(batch, req.modified, set(req.approved) & confirm)
        except ProtocolError:
            with batch.lock:
                batch.state = "planned"  # nothing ran: the caller may try again
            raise
        unknown = (set(req.approved) | set(req.denied)) - {c.call_id for c in batch.calls}
        if unknown:
            log.warning("execute %s: decisions for unknown ids ignored: %s", req.batch_id, unknown)
        finished = self.runner.run(
            batch,
            approved=set(req.approved) & confirm,
            denied={k: v for k, v in req.denied.items() if k in confirm},
            capacity=req.capacity_bytes,
            emit=emit,
            modified=req.modified,
        )
        reply = Encoded(
            batch_id=batch.batch_id,
            state=batch.state,
            results=[f.wire for f in finished],
            warnings=batch.warnings,
        )
        # The results are already JSON text: splice them in rather than encode
        # megabytes a second time.
        reply.text = (
            f'{{"batch_id":{json.dumps(batch.batch_id)},"state":{json.dumps(batch.state)},'
            f'"warnings":{json.dumps(batch.warnings, ensure_ascii=False)},'
            f'"results":[{",".join(f.text for f in finished)}]}}'
        )
        return reply

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
