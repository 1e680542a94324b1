"""The executor: run a planned batch in call order, one result per call, always.

Calls run one at a time in the order the model wrote them (a later call may
depend on an earlier one's effect); a failure does not stop the batch; every
call gets exactly one result, so the model never waits for an answer that
will not come.
Each call runs in its own thread so the executor can stop waiting for it:
at its time limit (the tool's own, or a shorter ``meta.timeout``) the call
ends in a timeout error and the batch goes on; on ``cancel`` the running
call and every later one end as cancelled.  The abandoned thread is told to
stop through ``ctx.cancel``; tools check it between steps and writing tools
check it before they commit, so a call that timed out never lands late.

Every result is sanitized and fitted to the output budget, then journaled
(durably) before the next call starts; the last one together with the
batch's final state.  The budget belongs to the batch: the capacity
the caller gives is what the model's context has left for all the batch's
results together, and each result spends from it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .errors import ToolFailure, error_result
from .output import dumps, fit_json_text, json_has_controls, sanitize_value, utf8_len
from .planner import PlannedCall
from .protocol import Disposition, ErrorKind, ErrorType, Event, ToolError, ToolResult
from .reads import Session
from .rules import Gate
from .safety.commands import CommandSandbox
from .safety.paths import Sandbox
from .store.backups import Backups
from .store.checkpoints import ChangeLog
from .store.journal import Journal
from .tools._edit import apply_user_text
from .tools._hunks import FileDecision, apply_hunks
from .tools.registry import ToolContext

log = logging.getLogger(__name__)

# When the caller cannot say how much room is left in the model's context,
# assume this much: enough for a useful result, small enough not to crowd
# out the conversation.
DEFAULT_CAPACITY_BYTES = 64 * 1024
# All results of one execute reply together, as JSON: an EPC frame holds 16 MiB
# and printing JSON as a Lisp string can double it.
MAX_BATCH_REPLY_BYTES = 7 * 1024 * 1024
MIN_RESULT_BYTES = 1024

EmitFn = Callable[[Event], None]


@dataclass
class Batch:
    batch_id: str
    mode: str
    calls: list[PlannedCall]
    state: str = "planned"  # planned | executing | done | cancelled
    cancel: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    current: ToolContext | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    results: list[Finished] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Consent: the chat's mode, its turn's rules, and when the review was due.
    permission_mode: str = "ask"
    session: str = ""
    # The connection that planned the batch (assigned by the worker at
    # connect), and the read record of its chat on that connection.
    owner: str = ""
    reads: Session = field(default_factory=Session)
    # Standing grants the user gave in Emacs's review of a call of this
    # batch, as Emacs sent them to the worker: call id -> the grant.
    reviewed_grants: dict[str, dict[str, Any]] = field(default_factory=dict)
    gate: Gate | None = None
    planned_at: float = 0.0
    review_timeout: float = 0.0
    review_expired: bool = False

    def request_cancel(self) -> None:
        with self.lock:
            self.cancel.set()
            if self.current is not None:
                self.current.cancel.set()
            self.wake.set()


@dataclass
class Runner:
    sandbox: Sandbox
    config: Any
    journal: Journal
    backups: Backups | None = None
    commands: CommandSandbox | None = None
    # The connected Emacs, for tools only it can answer (set by the transport).
    editor: Callable[[str, dict[str, Any], float], Any] | None = None

    def run(
        self,
        batch: Batch,
        approved: set[str],
        denied: dict[str, str],
        capacity: int | None,
        emit: EmitFn,
        modified: dict[str, dict[str, str]] | None = None,
        unreviewed: dict[str, tuple[str, list[str], str]] | None = None,
        hunks: dict[str, dict[str, FileDecision]] | None = None,
    ) -> list[Finished]:
        per_call = self.config.tools.output.max_bytes
        # The capacity is what is left of the model's
        # context for this whole batch, so every result spends from it: four
        # large reads share it instead of each getting all of it.
        room = capacity or DEFAULT_CAPACITY_BYTES
        # The whole reply must fit one EPC frame, escaping included.
        budget = MAX_BATCH_REPLY_BYTES
        # Flushed before anything runs that changes anything (see store/journal.py).
        effects = any(
            c.tool is not None
            and c.tool.side_effecting
            and c.disposition is not Disposition.RESOLVED
            for c in batch.calls
        )
        self._journal(
            batch, lambda: self.journal.record_state(batch.batch_id, "executing", durable=effects)
        )
        for index, planned in enumerate(batch.calls):
            # Each later call keeps enough room for an error or a short answer.
            reserve = MIN_RESULT_BYTES * (len(batch.calls) - index - 1)
            call_limit = max(min(per_call, room - reserve, budget - reserve), MIN_RESULT_BYTES)
            wire, truncatable, encoded = self._one(
                batch,
                planned,
                approved,
                denied,
                call_limit,
                emit,
                (modified or {}).get(planned.call_id),
                (unreviewed or {}).get(planned.call_id),
                (hunks or {}).get(planned.call_id),
            )
            finished = _finish(wire, call_limit, truncatable, encoded)
            spent = len(finished.text.encode("utf-8"))
            budget -= spent
            room -= spent
            # The batch ends with its last result: one durable commit for both.
            last = index == len(batch.calls) - 1
            final = "cancelled" if batch.cancel.is_set() else "done"
            self._journal(
                batch,
                functools.partial(
                    self.journal.record_result,
                    batch.batch_id,
                    planned.seq,
                    planned.call_id,
                    bool(finished.wire.get("ok")),
                    finished.text,
                    state=final if last else None,
                ),
            )
            batch.results.append(finished)
            if last:
                batch.state = final
        if not batch.calls:
            batch.state = "cancelled" if batch.cancel.is_set() else "done"
            self._journal(batch, lambda: self.journal.record_state(batch.batch_id, batch.state))
        return batch.results

    def _journal(self, batch: Batch, write: Callable[[], None]) -> None:
        """Journal, but never lose results over it: a failure becomes a warning."""
        try:
            write()
        except Exception as exc:
            log.exception("journal write failed for batch %s", batch.batch_id)
            batch.warnings.append(
                f"The journal could not record this batch ({type(exc).__name__}: {exc}); "
                "results are complete but would not survive a crash"
            )

    def _one(
        self,
        batch: Batch,
        planned: PlannedCall,
        approved: set[str],
        denied: dict[str, str],
        limit: int,
        emit: EmitFn,
        user_texts: dict[str, str] | None = None,
        unreviewed: tuple[str, list[str], str] | None = None,
        hunks: dict[str, FileDecision] | None = None,
    ) -> tuple[dict[str, Any], bool, str | None]:
        """The call's result, whether the framework may cut it to fit, and its JSON if known."""
        cid, name = planned.call_id, planned.name
        if planned.disposition is Disposition.RESOLVED:
            assert planned.result is not None
            return planned.result, True, None
        if batch.cancel.is_set():
            # Recovery tells a call that never started from one stopped mid-way.
            failure = errors.cancelled()
            failure.error.details["started"] = False
            return error_result(cid, name, failure), True, None
        # The service refuses to execute parse_only batches, so no MANUAL here.
        assert planned.disposition in (Disposition.CONFIRM, Disposition.EXECUTE)
        if planned.disposition is Disposition.CONFIRM:
            if planned.preview is None and planned.preview_note is not None:
                # The user approved without seeing the change: do not run it.
                return (
                    error_result(
                        cid,
                        name,
                        errors.bad_args(
                            f"No preview could be shown for this call ({planned.preview_note}); "
                            "nothing was done",
                            recovery=["Make the call again on its own, after any reads it needs"],
                        ),
                    ),
                    True,
                    None,
                )
            if batch.review_expired:
                return error_result(cid, name, review_timed_out(batch.review_timeout)), True, None
            if unreviewed is not None:
                return error_result(cid, name, errors.no_reviewer(*unreviewed)), True, None
            if cid in denied:
                return error_result(cid, name, errors.user_denied(denied[cid] or None)), True, None
            if cid not in approved:
                return error_result(cid, name, errors.user_denied(None)), True, None
        gate = batch.gate
        if gate is not None:
            # The rules again, against what really ran: an earlier call of the
            # batch may have been denied or failed since planning.
            violation = gate.before(planned.rule_name or name, planned.raw_args or {})
            if violation is not None:
                return error_result(cid, name, violation), True, None
        emit(Event(batch_id=batch.batch_id, call_id=cid, seq=planned.seq, kind="started"))
        result, truncatable, encoded = self._run_tool(
            batch, planned, limit, emit, user_texts, hunks
        )
        if gate is not None:
            gate.after(
                planned.rule_name or name, planned.raw_args or {}, cid, bool(result.get("ok"))
            )
        emit(
            Event(
                batch_id=batch.batch_id,
                call_id=cid,
                seq=planned.seq,
                kind="finished",
                ok=bool(result.get("ok")),
            )
        )
        return result, truncatable, encoded

    def _run_tool(
        self,
        batch: Batch,
        planned: PlannedCall,
        limit: int,
        emit: EmitFn,
        user_texts: dict[str, str] | None = None,
        hunks: dict[str, FileDecision] | None = None,
    ) -> tuple[dict[str, Any], bool, str | None]:
        assert planned.tool is not None and planned.args is not None
        tool, args = planned.tool, planned.args
        cid = planned.call_id

        def emit_chunk(kind: str, data: str) -> None:
            if kind in ("stdout", "stderr"):
                emit(
                    Event(
                        batch_id=batch.batch_id,
                        call_id=cid,
                        seq=planned.seq,
                        kind=kind,  # type: ignore[arg-type]
                        data=data,
                    )
                )

        ctx = ToolContext(
            sandbox=self.sandbox,
            config=self.config,
            session=batch.reads,
            batch_id=batch.batch_id,
            call_id=cid,
            working_dir=planned.working_dir,
            output_limit=limit,
            emit=emit_chunk,
            backups=self.backups,
            approved_preview=planned.preview
            if planned.disposition is Disposition.CONFIRM
            else None,
            time_limit=planned.timeout or tool.timeout(self.config),
            commands=self.commands,
            # Checkpoints: every file the call writes is journaled as it lands.
            changes=ChangeLog(self.journal, batch.batch_id, planned.seq, cid),
            state_dir=self.journal.path.parent,
            standing_consent=planned.standing and planned.disposition is Disposition.EXECUTE,
            read_only_mode=batch.permission_mode == "read-only",
            editor=self.editor,
        )
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                if hunks:
                    # Approved in part: the user's hunks only, through the same write.
                    box["value"] = apply_hunks(ctx, planned.staged, user_texts or {}, hunks)
                elif user_texts is not None:
                    # The user edited the proposal: write their text, not the tool's.
                    box["value"] = apply_user_text(ctx, planned.staged, user_texts)
                else:
                    box["value"] = tool.execute(args, ctx)
            except ToolFailure as failure:
                box["failure"] = failure
            except BaseException as exc:  # a crash is a result, not a dead worker
                log.exception("tool %s crashed on call %s", tool.name, cid)
                box["failure"] = errors.tool_crashed(tool.name, exc)
            finally:
                done.set()
                batch.wake.set()

        with batch.lock:
            if batch.cancel.is_set():
                return error_result(cid, tool.name, errors.cancelled()), True, None
            batch.current = ctx
            batch.wake.clear()
        timeout = planned.timeout or tool.timeout(self.config)
        started = time.monotonic()
        thread = threading.Thread(target=target, name=f"forj-tool-{tool.name}-{cid}", daemon=True)
        thread.start()
        deadline = started + timeout
        while not done.is_set() and not batch.cancel.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            batch.wake.wait(remaining)
            batch.wake.clear()
        with batch.lock:
            batch.current = None
        if ctx.changes is not None:
            batch.warnings.extend(ctx.changes.warnings)
        if not done.is_set():
            ctx.cancel.set()  # tell the abandoned call to stop at its next check
            if batch.cancel.is_set():
                return error_result(cid, tool.name, errors.cancelled()), True, None
            failure = errors.timed_out(tool.name, time.monotonic() - started, timeout)
            return error_result(cid, tool.name, failure), True, None
        if "failure" in box:
            return error_result(cid, tool.name, box["failure"]), True, None
        value = box.get("value")
        text: str | None
        try:
            # One encode to look for controls beats a walk over every string;
            # a clean result's text is the one journaled and sent.
            text = dumps(value)
            clean = not json_has_controls(text)
        except (TypeError, ValueError):
            text, clean = None, False
        if not clean:
            value = sanitize_value(value)
            text = None
        wire = ToolResult(id=cid, name=tool.name, ok=True, result=value).wire()
        encoded = None
        if text is not None and list(wire)[-1] == "result":
            head = dumps({k: v for k, v in wire.items() if k != "result"})
            encoded = f'{head[:-1]},"result":{text}}}'
        return wire, ctx.allow_truncation, encoded


def review_timed_out(seconds: float) -> ToolFailure:
    return ToolFailure(
        ErrorType.PERMISSION,
        f"Nobody answered the review within {seconds:g} s, so this call was not run; "
        "an unanswered review counts as a denial",
        kind=ErrorKind.USER_DENIED,
        recovery=[
            "Do not repeat the call on your own: the user may be away",
            "Say what you wanted to do and wait for the user",
        ],
        timed_out=True,
        timeout_seconds=seconds,
    )


@dataclass(frozen=True)
class Finished:
    """A final result and its JSON text, encoded once for journal and reply alike."""

    wire: dict[str, Any]
    text: str


_CUT_NOTE = (
    "The result was cut to fit the output limit ({limit} bytes): the longest texts "
    "or lists lost their ends; ask for less at once (a narrower range, fewer results)"
)


def _finish(
    wire: dict[str, Any], limit: int, truncatable: bool, encoded: str | None = None
) -> Finished:
    """Fit a result object into ``limit`` bytes, flagging any cut so the model knows.

    ``encoded`` is ``wire``'s JSON when the caller has it: a result that
    fits is then not encoded again.
    """
    fits = max(limit - 24, 64)  # room for the flag a cut adds
    if encoded is not None and (not truncatable or utf8_len(encoded) <= fits):
        return Finished(wire, encoded)
    if not truncatable:  # the tool limited itself (cut base64 would decode to garbage)
        return Finished(wire, dumps(wire))
    text = encoded if encoded is not None else dumps(wire)
    if utf8_len(text) <= fits:
        return Finished(wire, text)
    # It must be cut: leave room for the note too.
    fitted, text, cut = fit_json_text(wire, max(limit - len(_CUT_NOTE) - 64, 64))
    if not cut:
        return Finished(wire, text)
    if isinstance(fitted, dict):
        body = fitted.get("result")
        if isinstance(body, dict):
            body["truncated"] = True
            # A cut the tool did not make is said, not only flagged.
            note = _CUT_NOTE.format(limit=limit)
            previous = body.get("note")
            body["note"] = f"{previous}. {note}" if isinstance(previous, str) else note
        return Finished(fitted, dumps(fitted))
    # The skeleton alone did not fit: say so instead of sending a broken object.
    failed = {
        "id": wire.get("id"),
        "name": wire.get("name"),
        "ok": False,
        "error": ToolError(
            type=ErrorType.VALIDATION,
            message="The result did not fit into the output limit even when cut",
            details={"kind": ErrorKind.EXECUTION_FAILED.value, "limit": limit},
            recovery=["Ask for less at once (a narrower range, fewer results)"],
        ).model_dump(mode="json"),
    }
    return Finished(failed, dumps(failed))
