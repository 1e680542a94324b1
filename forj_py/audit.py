"""The audit timeline's rows, shaped from what the journal recorded about each call.

Pure functions over the journal's rows: who decided a call and how, a short
summary of its arguments, how long it ran and how it ended.
"""

from __future__ import annotations

import json
from typing import Any

# An argument summary is cut here; the detail view shows the whole call.
SUMMARY_CHARS = 120

# The consent steps (consent.py) grouped by who decided.
_DECIDER_OF_STEP = {
    "grant": "grant",  # a standing grant the user gave earlier
    "allow": "rule",  # the user's allow rules
    "deny": "rule",
    "rule": "rule",  # a [[rules]] rule or deduplication
    "mode": "mode",  # the permission mode ruled the tool out
    "default": "mode",  # the mode's default for such a call
}

# Steps that send a call to review: the user's answer decides it.
_REVIEW_STEPS = {"ask", "requires-consent", "forced-review", "default"}


def decided_by(
    disposition: str | None, step: str | None, plan_reason: str | None, approval: str | None
) -> str:
    """review, grant, rule, mode, validation (refused before consent) or none (not planned)."""
    if approval is not None or (disposition == "confirm" and step in _REVIEW_STEPS):
        return "review"
    if step is not None:
        return _DECIDER_OF_STEP.get(step, "rule")
    if disposition is None:
        return "none"
    if plan_reason is None and disposition == "resolved":
        return "validation"
    return "mode"


def summarize_args(raw: Any) -> str:
    """The call's arguments as one short line of JSON."""
    args = raw.get("args") if isinstance(raw, dict) else raw
    if isinstance(args, dict) and "path" in args and isinstance(args["path"], str):
        rest = {k: v for k, v in args.items() if k != "path"}
        text = args["path"] + (" " + _compact(rest) if rest else "")
    else:
        text = _compact(args)
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def row(entry: dict[str, Any]) -> dict[str, Any]:
    """One journal row as the audit shows it."""
    started, finished = entry.get("started_at"), entry.get("ran_until") or entry.get("finished_at")
    duration = (
        round((finished - started) * 1000, 1)
        if isinstance(started, float) and isinstance(finished, float)
        else None
    )
    how = entry.get("approval_reason") or entry.get("plan_reason")
    if how and how.startswith("[") and "] " in how and entry.get("approval_reason") is None:
        how = how.split("] ", 1)[1]  # the mode prefix is shown as the decider
    out: dict[str, Any] = {
        "batch_id": entry["batch_id"],
        "seq": entry["seq"],
        "call_id": entry["call_id"],
        "time": entry["time"],
        "turn": entry.get("turn"),
        "tool": entry["name"],
        "summary": summarize_args(entry.get("raw")),
        "decided_by": decided_by(
            entry.get("disposition"),
            entry.get("step"),
            entry.get("plan_reason"),
            entry.get("approval_reason"),
        ),
        "decision": how or "",
        "duration_ms": duration,
        "outcome": entry["outcome"],
        "files": entry.get("files") or [],
    }
    if entry["outcome"] in ("error", "refused"):
        out["code"] = entry.get("code")
        out["error"] = (entry.get("error_message") or "")[:300]
    return out
