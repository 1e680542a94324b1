"""The rules engine: ``[[rules]]`` and ``[tools.dedupe]``, checked before every call runs.

A violated rule is an error result (``details.kind = "RuleViolation"``, or
``"Deduplicated"``) with the rule and what the model can do instead; it is
never a prompt.  Three kinds of state:

- per turn (a turn starts with each user message, continue or retry; the
  chat sends its id with every plan): which tools ran, how often, which
  tool of each exclusive group was used; ``max_calls``,
  ``exclusive_group``, ``start_constraint``, ``requires_preceding``,
  ``requires_following``, ``required_before_exit`` and ``exit_loop`` read it;
- persistent (the worker's life): when each tool last ran, for
  ``cooldown``, and recent calls per chat, for deduplication;
- static: ``requires_consent`` and ``continue_loop``.

Planning checks a batch against a copy of the turn (so the fifth call of a
batch is refused under ``max = 4`` before the user reviews anything); the
executor checks each call again just before it runs, against what really
ran, and records it.  A call counts for ``max_calls`` and ``cooldown``
once it started, whatever its outcome; ordering rules and deduplication
count only calls that succeeded, so a failed call can be retried.

forj never runs a tool by itself: ``turn_info`` says what the chat must
tell the model (tools to call first, tools to call before finishing,
whether the loop stops here).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import (
    ContinueLoopRule,
    CooldownRule,
    DedupeConfig,
    ExclusiveGroupRule,
    ExitLoopRule,
    MaxCallsRule,
    RequiredBeforeExitRule,
    RequiresConsentRule,
    RequiresFollowingRule,
    RequiresPrecedingRule,
    RuleConfig,
    StartConstraintRule,
)
from .errors import ToolFailure
from .protocol import ErrorKind, ErrorType

# Recent calls remembered for deduplication, per chat.
MAX_DEDUPE_ENTRIES = 4096
MAX_TURNS = 256


def rule_tools(rule: RuleConfig) -> list[str]:
    """Every tool name a rule mentions."""
    names: list[str] = []
    if hasattr(rule, "tool"):
        names.append(rule.tool)
    for attr in ("tools", "after", "before"):
        names.extend(getattr(rule, attr, []) or [])
    return names


def describe(rule: RuleConfig) -> dict[str, Any]:
    return rule.model_dump(mode="json")


@dataclass
class Turn:
    """What happened in one turn of one chat."""

    id: str
    started: dict[str, int] = field(default_factory=dict)  # tool -> calls that started
    succeeded: list[str] = field(default_factory=list)  # tools that ran ok, in order
    exclusive: dict[int, str] = field(default_factory=dict)  # rule index -> tool used
    exit_loop: str | None = None  # the exit_loop tool that ran, if any


@dataclass
class Probe:
    """A batch being planned: a copy of its turn that planned calls are added to."""

    session: str
    turn: Turn
    available: set[str]
    now: float
    last_run: dict[str, float]
    dedupe: dict[str, tuple[float, str]]


def dedupe_key(name: str, args: Any) -> str:
    return name + "|" + json.dumps(args, sort_keys=True, ensure_ascii=True, default=str)


class RulesEngine:
    def __init__(
        self,
        rules: list[RuleConfig],
        dedupe: DedupeConfig,
        available: set[str],
        clock: Callable[[], float],
    ) -> None:
        self.clock = clock
        self.dedupe_window = dedupe.window_seconds
        self.dedupe_tools = set(dedupe.tools)
        self.warnings: list[str] = []
        self.rules: list[RuleConfig] = []
        for rule in rules:
            missing = sorted(set(rule_tools(rule)) - available)
            if missing:
                self.warnings.append(
                    f"[[rules]] type = {rule.type!r} names {', '.join(missing)}, which "
                    "this worker does not have; the rule is inactive"
                )
                continue
            self.rules.append(rule)
        unknown = sorted(self.dedupe_tools - available - {"*"})
        if unknown:
            self.warnings.append(
                f"[tools.dedupe] tools names {', '.join(unknown)}, which this worker does "
                "not have; ignored"
            )
        self._lock = threading.Lock()
        self._turns: dict[str, Turn] = {}
        self._last_run: dict[str, float] = {}
        self._dedupe: dict[str, dict[str, tuple[float, str]]] = {}

    # --- static facts ---------------------------------------------------------------

    def requires_consent(self, tool: str) -> RuleConfig | None:
        for rule in self.rules:
            if isinstance(rule, RequiresConsentRule) and rule.tool == tool:
                return rule
        return None

    def instructions(self, available: set[str]) -> list[str]:
        """Sentences for the model's instructions: what every turn must do."""
        out: list[str] = []
        for rule in self.rules:
            if isinstance(rule, StartConstraintRule):
                tools = [t for t in rule.tools if t in available]
                if tools:
                    out.append(f"Start every turn by calling {_names(tools, 'and')}.")
            elif isinstance(rule, RequiredBeforeExitRule):
                tools = [t for t in rule.tools if t in available]
                if tools:
                    out.append(f"Before you finish a turn, call {_names(tools, 'and')}.")
            elif isinstance(rule, ExitLoopRule) and rule.tool in available:
                out.append(f"After {rule.tool}, stop and wait for the user.")
        return out

    def forget(self, session: str, prefix: bool = False) -> None:
        """Drop a closed chat's turn and deduplication (every chat starting so, with ``prefix``)."""
        with self._lock:
            for table in (self._turns, self._dedupe):
                for key in [k for k in table if k == session or (prefix and k.startswith(session))]:
                    del table[key]

    # --- planning -------------------------------------------------------------------

    def probe(self, session: str, turn_id: str, available: set[str]) -> Probe:
        with self._lock:
            turn = self._turn(session, turn_id)
            return Probe(
                session=session,
                turn=copy.deepcopy(turn),
                available=available,
                now=self.clock(),
                last_run=dict(self._last_run),
                dedupe=dict(self._dedupe.get(session, {})),
            )

    def check_planned(self, probe: Probe, name: str, args: Any, call_id: str) -> ToolFailure | None:
        """Check one call of a batch being planned; a call that passes counts as run."""
        key = dedupe_key(name, args)
        failure = self._violation(
            probe.turn, name, key, probe.now, probe.last_run, probe.dedupe, probe.available
        )
        if failure is None:
            _count(probe.turn, self.rules, name, ok=True)
            probe.last_run[name] = probe.now
            if self._deduplicated(name):
                probe.dedupe[key] = (probe.now, call_id)
        return failure

    # --- running --------------------------------------------------------------------

    def check_now(
        self, session: str, turn_id: str, name: str, args: Any, available: set[str]
    ) -> ToolFailure | None:
        """Check a call against what really ran, just before it runs."""
        with self._lock:
            turn = self._turn(session, turn_id)
            return self._violation(
                turn,
                name,
                dedupe_key(name, args),
                self.clock(),
                self._last_run,
                self._dedupe.get(session, {}),
                available,
            )

    def record(
        self, session: str, turn_id: str, name: str, args: Any, call_id: str, ok: bool
    ) -> None:
        with self._lock:
            turn = self._turn(session, turn_id)
            now = self.clock()
            _count(turn, self.rules, name, ok=ok)
            self._last_run[name] = now
            if ok and self._deduplicated(name):
                recent = self._dedupe.setdefault(session, {})
                recent[dedupe_key(name, args)] = (now, call_id)
                if len(recent) > MAX_DEDUPE_ENTRIES:
                    oldest = min(recent, key=lambda k: recent[k][0])
                    del recent[oldest]

    def turn_info(self, session: str, turn_id: str, available: set[str]) -> dict[str, Any]:
        """What the chat must tell the model now (docs/protocol.md, ``turn``)."""
        with self._lock:
            turn = self._turn(session, turn_id)
            return self._info(turn, available)

    def probe_info(self, probe: Probe) -> dict[str, Any]:
        return self._info(probe.turn, probe.available)

    def _info(self, turn: Turn, available: set[str]) -> dict[str, Any]:
        start = self._start_missing(turn, available)
        before_exit = self._exit_missing(turn, available)
        tell: list[str] = []
        if start:
            tell.append(f"Call {_names(start, 'and')} first: it is required before anything else.")
        if before_exit:
            tell.append(
                f"Before you finish this turn, call {_names(before_exit, 'and')} "
                "(a rule requires it)."
            )
        return {
            "id": turn.id,
            "start_with": start,
            "before_exit": before_exit,
            "exit_loop": turn.exit_loop is not None,
            "exit_tool": turn.exit_loop,
            "instructions": tell,
        }

    def continues(self, names: list[str]) -> bool:
        """Whether every tool of a batch has a continue_loop rule."""
        loop = {r.tool for r in self.rules if isinstance(r, ContinueLoopRule)}
        return bool(names) and all(n in loop for n in names)

    # --- the checks -----------------------------------------------------------------

    def _turn(self, session: str, turn_id: str) -> Turn:
        turn = self._turns.get(session)
        if turn is None or turn.id != turn_id:
            # A new turn: every turn-scoped rule starts again.
            turn = Turn(id=turn_id)
            self._turns[session] = turn
            if len(self._turns) > MAX_TURNS:
                self._turns.pop(next(iter(self._turns)))
        return turn

    def _deduplicated(self, name: str) -> bool:
        return name in self.dedupe_tools or "*" in self.dedupe_tools

    def _violation(
        self,
        turn: Turn,
        name: str,
        key: str,
        now: float,
        last_run: dict[str, float],
        dedupe: dict[str, tuple[float, str]],
        available: set[str],
    ) -> ToolFailure | None:
        if self._deduplicated(name):
            earlier = dedupe.get(key)
            if earlier is not None and now - earlier[0] < self.dedupe_window:
                return _deduplicated(name, earlier[1], now - earlier[0], self.dedupe_window)
        start = self._start_missing(turn, available)
        if start and name not in start:
            first = next(r for r in self.rules if isinstance(r, StartConstraintRule))
            return violation(
                first,
                f"{name} cannot run yet: every turn starts with {_names(start, 'and')}",
                [f"Call {_names(start, 'and')} first, then {name}"],
            )
        for index, rule in enumerate(self.rules):
            failure = self._one(rule, index, turn, name, now, last_run)
            if failure is not None:
                return failure
        return None

    def _one(
        self,
        rule: RuleConfig,
        index: int,
        turn: Turn,
        name: str,
        now: float,
        last_run: dict[str, float],
    ) -> ToolFailure | None:
        if isinstance(rule, MaxCallsRule) and rule.tool == name:
            if turn.started.get(name, 0) >= rule.max:
                return violation(
                    rule,
                    f"{name} may run at most {rule.max} time(s) per turn; this turn used them",
                    [
                        f"Do not call {name} again in this turn",
                        "Finish with what you have, or ask the user to continue",
                    ],
                )
        elif isinstance(rule, ExclusiveGroupRule) and name in rule.tools:
            used = turn.exclusive.get(index)
            if used is not None and used != name:
                return violation(
                    rule,
                    f"{name} cannot be used in a turn that already used {used} "
                    f"(only one of {_names(rule.tools, 'or')} per turn)",
                    [f"Keep using {used} in this turn"],
                )
        elif isinstance(rule, RequiresPrecedingRule) and rule.tool == name:
            if not any(t in turn.succeeded for t in rule.after):
                return violation(
                    rule,
                    f"{name} may only run after {_names(rule.after, 'or')} in the same turn",
                    [f"Call {_names(rule.after, 'or')} first, then {name}"],
                )
        elif isinstance(rule, RequiresFollowingRule) and rule.tool == name:
            ran = [t for t in rule.before if t in turn.succeeded]
            if ran:
                return violation(
                    rule,
                    f"{name} must come before {_names(rule.before, 'and')}, and {ran[0]} "
                    "already ran in this turn",
                    [f"Do not call {name} again in this turn, or ask the user to continue"],
                )
        elif isinstance(rule, CooldownRule) and rule.tool == name:
            last = last_run.get(name)
            if last is not None and now - last < rule.seconds:
                wait = rule.seconds - (now - last)
                return violation(
                    rule,
                    f"{name} ran {now - last:.1f} s ago; it may run once every {rule.seconds:g} s",
                    [f"Wait {wait:.1f} s before calling {name} again, or do something else first"],
                    retry_after_seconds=round(wait, 3),
                )
        elif isinstance(rule, ExitLoopRule) and turn.exit_loop is not None:
            return violation(
                rule,
                f"{turn.exit_loop} already ended this turn: no more calls until the user answers",
                ["Stop calling tools and wait for the user's reply"],
            )
        return None

    def _start_missing(self, turn: Turn, available: set[str]) -> list[str]:
        missing: list[str] = []
        for rule in self.rules:
            if isinstance(rule, StartConstraintRule):
                missing += [
                    t
                    for t in rule.tools
                    if t in available and t not in turn.succeeded and t not in missing
                ]
        return missing

    def _exit_missing(self, turn: Turn, available: set[str]) -> list[str]:
        missing: list[str] = []
        for rule in self.rules:
            if isinstance(rule, RequiredBeforeExitRule):
                missing += [t for t in rule.tools if t in available and t not in turn.succeeded]
            elif isinstance(rule, RequiresFollowingRule) and rule.tool in turn.succeeded:
                last = max(i for i, t in enumerate(turn.succeeded) if t == rule.tool)
                later = turn.succeeded[last + 1 :]
                wanted = [t for t in rule.before if t in available]
                if wanted and not any(t in later for t in wanted):
                    missing += [wanted[0]] if len(wanted) == 1 else [" or ".join(wanted)]
        return list(dict.fromkeys(missing))


def _count(turn: Turn, rules: list[RuleConfig], name: str, *, ok: bool) -> None:
    turn.started[name] = turn.started.get(name, 0) + 1
    for index, rule in enumerate(rules):
        if isinstance(rule, ExclusiveGroupRule) and name in rule.tools:
            turn.exclusive.setdefault(index, name)
    if ok:
        turn.succeeded.append(name)
        if any(isinstance(r, ExitLoopRule) and r.tool == name for r in rules):
            turn.exit_loop = name


def violation(rule: RuleConfig, message: str, recovery: list[str], **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorType.PERMISSION,
        message,
        kind=ErrorKind.RULE_VIOLATION,
        recovery=recovery,
        rule=describe(rule),
        **details,
    )


def _deduplicated(name: str, earlier: str, age: float, window: float) -> ToolFailure:
    return ToolFailure(
        ErrorType.PERMISSION,
        f"An identical {name} call ({earlier!r}) ran {age:.0f} s ago; it was not run again",
        kind=ErrorKind.DEDUPLICATED,
        recovery=[
            f"Use the result of call {earlier!r}",
            f"Change the arguments if you need something different, or wait {window:g} s",
        ],
        earlier_call=earlier,
        window_seconds=window,
    )


def _names(names: list[str], joiner: str) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" {joiner} " + names[-1]


@dataclass
class Gate:
    """The rules of one batch's turn, for the executor: check before, record after."""

    engine: RulesEngine
    session: str
    turn: str
    available: set[str]

    def before(self, name: str, args: Any) -> ToolFailure | None:
        return self.engine.check_now(self.session, self.turn, name, args, self.available)

    def after(self, name: str, args: Any, call_id: str, ok: bool) -> None:
        self.engine.record(self.session, self.turn, name, args, call_id, ok)

    def info(self) -> dict[str, Any]:
        return self.engine.turn_info(self.session, self.turn, self.available)
