"""The planner: one disposition for every call of a batch, before anything runs.

Per call, in this order, the first that applies wins (cheap checks that
need nothing first, so a bad call is never shown to the user):

 1. tools mode ``disabled``, or policy ``enabled = false``  → resolved
 2. a call object that is not ``{id, name, args?, meta?}`` → resolved
 3. a ``deny`` rule naming the whole tool                   → resolved
 4. the tool is unknown                                     → resolved
 5. the call id repeats an earlier one in the batch         → resolved
 6. limits: calls per batch, argument bytes                 → resolved
 7. JSON Schema validation of ``args``                      → resolved
 8. typed parse into the tool's ``Args`` model              → resolved
 9. sandbox preflight of ``meta.cwd`` and every path arg    → resolved
10. consent (:mod:`forj_py.consent`): mode, permission rules,
    ``[[rules]]``, forced review, grants                    → execute / confirm / resolved

Failures become ready error results and never prompt.  A confirm item
carries its summary, risk, the reason consent gave, a proposed grant
pattern and (where the tool can make one) a preview.  In ``parse_only``
mode a valid call gets ``manual`` instead: nothing runs it and the user
supplies its result.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from . import errors
from .config import Config
from .consent import Consent, Facts, subject_of
from .errors import ToolFailure, error_result
from .output import count_marks, sanitize, short_summary, visible_controls
from .protocol import (
    DenialReason,
    Disposition,
    ErrorType,
    PlanItem,
    RiskLevel,
    ToolCall,
    ToolsMode,
)
from .reads import Session
from .rules import Probe
from .safety.commands import CommandSandbox
from .safety.paths import Sandbox
from .safety.permissions import Subject
from .tools import _edit, _hunks
from .tools.registry import Registry, Staged, Tool, ToolContext, format_schema_errors

log = logging.getLogger(__name__)


@dataclass
class PlannedCall:
    seq: int
    call_id: str
    name: str
    raw: Any
    disposition: Disposition
    summary: str
    risk: RiskLevel
    tool: Tool[Any] | None = None
    args: BaseModel | None = None
    working_dir: str = ""
    timeout: float | None = None
    preview: str | None = None
    preview_note: str | None = None  # why there is no preview
    warnings: list[str] = field(default_factory=list)  # shown first in the review
    result: dict[str, Any] | None = None  # the ready result of a resolved call
    # What a reviewed writing call proposes, file by file (for edit before approve).
    staged: list[Staged] = field(default_factory=list)
    # The consent stage's word: why, and whether the user said yes in advance.
    reason: str | None = None
    # Which consent step decided (mode, deny, rule, ask, grant, allow, default, ...).
    step: str | None = None
    standing: bool = False
    grant_pattern: str | None = None
    subject: Subject | None = None
    # The arguments as sent (nulls dropped): what rules and deduplication
    # compare.  For another name of a tool, its forj tool's arguments and name,
    # so a rule written for the tool cannot be dodged by the other name.
    raw_args: dict[str, Any] | None = None
    rule_name: str | None = None

    def item(self) -> PlanItem:
        return PlanItem(
            id=self.call_id,
            name=self.name,
            disposition=self.disposition,
            summary=self.summary,
            risk=self.risk,
            preview=self.preview,
            preview_note=self.preview_note,
            warnings=self.warnings or None,
            result=self.result,
            reason=self.reason,
            grant_pattern=self.grant_pattern,
            hunk_files=self._hunk_files(),
        )

    def _hunk_files(self) -> list[dict[str, Any]] | None:
        """The files the review may decide hunk by hunk: those of a reviewed
        call's proposal that change (a call that moves or deletes files stages
        none, and is decided whole)."""
        if self.disposition is not Disposition.CONFIRM or self.preview is None:
            return None
        changed = [(s, n) for s in self.staged if (n := _hunks.count(s.old, s.new)) > 0]
        if not changed or not _hunks.shown_as_staged(self.preview, [s for s, _ in changed]):
            return None
        return [{"path": s.display, "hunks": n} for s, n in changed]

    def hunks_decidable(self) -> bool:
        """The review may approve this call in part (it offered ``hunk_files``)."""
        return self._hunk_files() is not None


@dataclass
class PlanContext:
    registry: Registry
    config: Config
    sandbox: Sandbox
    session: Session
    batch_id: str
    output_limit: int
    seen_ids: set[str] = field(default_factory=set)
    # What earlier previewed calls of this batch will have written, by
    # canonical path: later previews of the same file start from there, so
    # two edits of one file in one batch each show (and apply) their own diff.
    overlay: dict[str, str] = field(default_factory=dict)
    # The files earlier calls of this batch read (display paths): an edit of
    # one of them may be stale now and fine once that read has run.
    read_in_batch: set[str] = field(default_factory=set)
    commands: CommandSandbox | None = None
    consent: Consent | None = None
    permission_mode: str = "ask"
    chat: str = ""  # the chat session (grants, deduplication)
    # The connection the plan came over (assigned by the worker): session
    # and timed grants hold for one chat of one connection.
    owner: str = ""
    probe: Probe | None = None
    # The worker's state directory, for tools that keep state beside the journal.
    state_dir: Path | None = None


def identify(seq: int, raw: Any) -> tuple[str, str]:
    """The id and name to answer a call with, even when the call is malformed."""
    call_id = f"#{seq + 1}"
    name = ""
    if isinstance(raw, dict):
        if isinstance(raw.get("id"), str) and raw["id"]:
            call_id = sanitize(raw["id"][:256])
        if isinstance(raw.get("name"), str):
            name = sanitize(raw["name"][:128])
    return call_id, name


def plan_batch(pc: PlanContext, mode: ToolsMode, raw_calls: list[Any]) -> list[PlannedCall]:
    return [plan_call(pc, mode, seq, raw) for seq, raw in enumerate(raw_calls)]


def plan_call(pc: PlanContext, mode: ToolsMode, seq: int, raw: Any) -> PlannedCall:
    call_id, name = identify(seq, raw)
    planned = PlannedCall(
        seq=seq,
        call_id=call_id,
        name=name,
        raw=raw,
        disposition=Disposition.RESOLVED,
        summary=_raw_summary(name, raw),
        risk=RiskLevel.LOW,
    )
    # Every call's id counts for duplicates, even a call resolved early: two
    # results must never share an id, and an approval names exactly one call.
    duplicate = call_id in pc.seen_ids
    pc.seen_ids.add(call_id)
    try:
        _plan(pc, mode, planned, duplicate)
    except _Refused as refused:
        planned.disposition = Disposition.RESOLVED
        planned.preview = None
        planned.reason = refused.reason
        planned.step = refused.step
        planned.result = error_result(call_id, name, refused.failure)
    except ToolFailure as failure:
        planned.disposition = Disposition.RESOLVED
        planned.preview = None
        planned.result = error_result(call_id, name, failure)
    except Exception as exc:  # a bug in a tool's summary/preview must not sink the batch
        log.exception("planning %s failed", name)
        planned.disposition = Disposition.RESOLVED
        planned.preview = None
        planned.result = error_result(call_id, name, errors.tool_crashed(name or "tool", exc))
    return planned


def _plan(pc: PlanContext, mode: ToolsMode, planned: PlannedCall, duplicate: bool) -> None:
    approval = pc.config.tools.approval
    # 1. global switches
    if mode is ToolsMode.DISABLED:
        raise errors.denied_by_policy(
            "Tools are disabled in this conversation; no tool call can run",
            DenialReason.DISABLED,
        )
    if not approval.enabled:  # FR-APR-04a
        raise errors.denied_by_policy("Tool execution disabled by policy", DenialReason.DISABLED)
    # 2. the call object itself
    call = _parse_call(planned.raw)
    # 3. a deny rule for the whole tool (whatever the arguments), 4. unknown tool
    _denied_tool(pc, call.name)
    entry = pc.registry.get(call.name)
    if entry is None:
        raise errors.unknown_tool(call.name, pc.registry.names())
    tool = entry.tool
    planned.tool = tool
    # Another name (file_read, shell_exec...) is its forj tool to every
    # rule: a deny rule for run_shell also refuses shell_exec.
    if tool.alias_of is not None:
        _denied_tool(pc, tool.alias_of)
    # 5. duplicate ids: the first call with an id runs, later ones do not.
    if duplicate:
        raise errors.duplicate_call_id(call.id)
    # 6. limits
    limits = pc.config.tools
    if planned.seq >= limits.max_tool_calls_per_batch:
        raise errors.limits_exceeded(
            f"Too many tool calls in one message: at most {limits.max_tool_calls_per_batch} "
            f"run; this is call {planned.seq + 1}",
            [
                "Wait for these results, then make the remaining calls in your next message",
            ],
            limit=limits.max_tool_calls_per_batch,
        )
    args_bytes = len(json.dumps(call.args, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if args_bytes > limits.max_tool_args_bytes:
        raise errors.limits_exceeded(
            f"Arguments are {args_bytes} bytes, over the {limits.max_tool_args_bytes}-byte limit",
            ["Split the work into several smaller calls"],
            size=args_bytes,
            limit=limits.max_tool_args_bytes,
        )
    # 7. schema, 8. typed parse.  A null argument counts as omitted: models
    # often spell "not given" that way.
    raw_args = {k: v for k, v in call.args.items() if v is not None}
    where = _lone_surrogate(raw_args, "args")
    if where is not None:
        raise errors.bad_args(
            f"{where} is not valid Unicode text (it holds an unpaired surrogate escape)",
            recovery=["Send text as plain UTF-8; copy paths exactly as list_files printed them"],
        )
    problems = format_schema_errors(entry.validator, raw_args)
    if problems:
        raise errors.bad_args(
            f"Invalid arguments for {call.name}: " + "; ".join(problems[:5]),
            problems=problems[:20],
        )
    try:
        args = tool.parse(raw_args)
    except ValidationError as exc:
        messages = [_pydantic_message(e) for e in exc.errors()]
        raise errors.bad_args(
            f"Invalid arguments for {call.name}: " + "; ".join(messages[:5]),
            problems=messages[:20],
        ) from None
    planned.args = args
    planned.raw_args = raw_args
    planned.summary = short_summary(tool.summary(args))
    planned.risk = tool.risk(args)
    # 9. sandbox preflight
    cwd = pc.sandbox.resolve(call.meta.cwd)
    if not cwd.exists or not _is_dir(cwd.canonical):
        raise errors.bad_args(
            f"meta.cwd {call.meta.cwd!r} is not a directory inside the project",
            recovery=["Use '.' (the project root) or one of its subdirectories as meta.cwd"],
        )
    planned.working_dir = cwd.canonical
    links: list[str] = []
    for path in tool.paths(args):
        sp = pc.sandbox.resolve(path, planned.working_dir, for_write=tool.mutates(args))
        given = os.path.normpath(os.path.join(planned.working_dir, path))
        if tool.mutates(args) and given != sp.canonical:
            # The name the model used is a link (or runs through one): the
            # review names the file that will really change.
            shown = os.path.relpath(given, pc.sandbox.project_root)
            links.append(f"{shown} → {sp.display}")
    if (tool.alias_of or tool.name) == "read_file":
        for path in tool.paths(args):
            pc.read_in_batch.add(pc.sandbox.resolve(path, planned.working_dir).display)
    limit = tool.timeout(pc.config)
    planned.timeout = min(call.meta.timeout, limit) if call.meta.timeout else limit
    if mode is ToolsMode.PARSE_ONLY:
        planned.disposition = Disposition.MANUAL
        return
    # 10. consent: one stage decides, with the tool's review notes (network,
    # no sandbox) and writes through links as forced-review reasons.
    ctx = _preview_context(pc, planned)
    notes = [short_summary(n, limit=400) for n in tool.review_notes(args, ctx)]
    if links:
        notes.append(
            "Writes through a link: " + "; ".join(links) + " (the file on the right changes)"
        )
        planned.summary = short_summary(
            tool.summary(args) + " (through a link: " + "; ".join(links) + ")"
        )
    tags = tool.summary_tags(args, ctx)
    if tags:
        # First, so no cut of a long summary can drop them.
        planned.summary = short_summary(f"[{', '.join(tags)}] " + tool.summary(args))
    planned.warnings = notes
    assert pc.consent is not None
    rule_tool, rule_args, rule_raw = tool.as_rules_see_it(args, raw_args)
    # The rules are asked again when the call runs, and count it after: as
    # the tool they judged it to be.
    planned.rule_name, planned.raw_args = rule_tool.name, rule_raw
    subject = subject_of(
        rule_tool,
        rule_args,
        pc.sandbox,
        planned.working_dir,
        rule_tool.network_access(rule_args, ctx),
    )
    planned.subject = subject
    decision = pc.consent.decide(
        Facts(
            call_id=planned.call_id,
            tool=rule_tool,
            args=rule_args,
            raw_args=rule_raw,
            subject=subject,
            mode=pc.permission_mode,
            notes=notes,
            session=pc.chat,
            owner=pc.owner,
            probe=pc.probe,
        )
    )
    planned.reason = decision.reason
    planned.step = decision.step
    if decision.failure is not None:
        raise _Refused(decision.reason, decision.failure, decision.step)
    _read_first(pc, tool, args, ctx)
    planned.standing = decision.standing
    if decision.outcome == "confirm":
        planned.disposition = Disposition.CONFIRM
        # A grant cannot lift a forced review, an ask rule or requires_consent
        # (they come first), so only the mode's own question offers one.
        if decision.step == "default":
            planned.grant_pattern = pc.consent.propose(subject)
        try:
            preview = tool.preview(args, ctx)
            planned.preview = None if preview is None else visible_controls(preview)
            planned.staged = ctx.staged or []
        except ToolFailure as failure:
            if failure.error.type is not ErrorType.STALE_FILE:
                raise
            # An earlier call of this batch reads the file first; the
            # stale-file rule is applied again when the call runs.
            planned.preview = None
            planned.preview_note = sanitize(failure.error.message)
        marked = count_marks(planned.summary) + count_marks(planned.preview or "")
        if marked:
            planned.warnings.append(
                f"The text holds {marked} invisible or format character(s), shown as "
                "⟨U+XXXX⟩: check what they hide."
            )
    else:
        planned.disposition = Disposition.EXECUTE


# The tools that change an existing file only after it was read, unchanged
# since (the stale-file rule); their previews do not apply the rule.
_READ_FIRST = frozenset({"edit", "multi_edit", "edit_region", "write_file"})


def _read_first(pc: PlanContext, tool: Tool[Any], args: BaseModel, ctx: ToolContext) -> None:
    """Refuse now a call the stale-file rule would refuse when it runs.

    Otherwise the user reviews (and approves) a diff that can never be
    applied.  A file an earlier call of the batch reads, or writes, is
    left to the rule at run time.
    """
    if (tool.alias_of or tool.name) not in _READ_FIRST or getattr(args, "dry_run", False):
        return
    if getattr(args, "stop_on_error", True) is False:
        return  # a multi_edit that applies what it can: each file is judged when it runs
    for path in tool.paths(args):
        try:
            sp = pc.sandbox.resolve(path, ctx.working_dir, for_write=True)
            if sp.display in pc.read_in_batch or sp.canonical in pc.overlay:
                continue
            if not os.path.isfile(sp.canonical):
                continue  # a new file needs no read; a directory is the tool's to refuse
            _edit.load(ctx, path, must_exist=False)
        except ToolFailure as failure:
            if failure.error.type is ErrorType.STALE_FILE:
                raise
            # Anything else is the preview's (or the run's) to report.


class _Refused(Exception):
    """The consent stage refused a call: its error, and the reason to show and journal."""

    def __init__(self, reason: str, failure: ToolFailure, step: str = "deny") -> None:
        super().__init__(reason)
        self.reason = reason
        self.failure = failure
        self.step = step


def _denied_tool(pc: PlanContext, name: str) -> None:
    """A deny rule without a pattern refuses the tool before its arguments are looked at."""
    if pc.consent is None:
        return
    for rule in pc.consent.policy.deny:
        if rule.pattern is None and rule.tool == name:
            reason = (
                DenialReason.DENYLISTED
                if "denylist" in rule.source
                else (DenialReason.DENIED_BY_RULE)
            )
            raise _Refused(
                f"denied by {rule.source} {rule.text!r}",
                errors.denied_by_policy(
                    f"The tool {name!r} is denied by the user's configuration "
                    f"({rule.source} {rule.text!r})",
                    reason,
                    tool=name,
                ),
            )


def _lone_surrogate(value: Any, where: str) -> str | None:
    """Where in ``value`` a string holds a lone surrogate, if anywhere."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        label = f"{where}[{key!r}]" if isinstance(key, str) else f"{where}[{key}]"
        found = _lone_surrogate(key, label) if isinstance(key, str) else None
        found = found or _lone_surrogate(item, label)
        if found:
            return found
    return None


def _is_dir(path: str) -> bool:
    return os.path.isdir(path)


def _parse_call(raw: Any) -> ToolCall:
    if not isinstance(raw, dict):
        raise errors.bad_args(
            f"A tool call must be a JSON object, not {type(raw).__name__}",
            recovery=['Write each call as {"id": "...", "name": "...", "args": {...}}'],
        )
    try:
        call = ToolCall.model_validate(raw)
    except ValidationError as exc:
        messages = [_pydantic_message(e, prefix="") for e in exc.errors()]
        raise errors.bad_args(
            "Malformed tool call: " + "; ".join(messages[:5]),
            recovery=[
                'Write each call as {"id": "...", "name": "...", "args": {...}}',
                "id and name are required strings; args must be an object",
            ],
        ) from None
    for field_name, value in (("id", call.id), ("name", call.name)):
        if sanitize(value) != value:
            # The id shown to the user and matched against approvals must be
            # exactly the id the model sent.
            raise errors.bad_args(
                f"The call's {field_name} contains control or invisible formatting characters",
                recovery=[f"Use a plain {field_name} made of letters, digits, '-' and '_'"],
            )
    return call


def _pydantic_message(err: Any, prefix: str = "args") -> str:
    loc = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in err["loc"])
    where = (prefix + loc) or "call"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}" if loc or prefix else msg


def _raw_summary(name: str, raw: Any) -> str:
    args = raw.get("args") if isinstance(raw, dict) else raw
    try:
        text = json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(args)
    return short_summary(f"{name or '(no name)'} {text}")


def _preview_context(pc: PlanContext, planned: PlannedCall) -> ToolContext:
    return ToolContext(
        sandbox=pc.sandbox,
        config=pc.config,
        session=pc.session,
        batch_id=pc.batch_id,
        call_id=planned.call_id,
        working_dir=planned.working_dir,
        output_limit=pc.output_limit,
        cancel=threading.Event(),
        overlay=pc.overlay,
        staged=[],
        time_limit=planned.timeout,
        commands=pc.commands,
        state_dir=pc.state_dir,
    )
