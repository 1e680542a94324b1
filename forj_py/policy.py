"""The approval policy: may a call run, must a human confirm it, or is it denied?

Seed 000 FR-APR-04 and its precedence (FR-APR-05), for one valid call of a
known tool.  One switch of forj's own, ``read_only_commands = "auto"``,
lets a tool that always asks (``run_shell``) run a call without asking when
the tool classifies that call as read-only; it is ``"prompt"`` unless the
user's own configuration says otherwise.  Validation, limits and the sandbox come before this (the
planner); what is decided here is only the user's standing policy and the
tool's own demand for approval.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from . import errors
from .config import ApprovalConfig
from .errors import ToolFailure
from .protocol import DenialReason
from .tools.registry import Tool


class Outcome(str, Enum):
    EXECUTE = "execute"
    CONFIRM = "confirm"


def globally_disabled(policy: ApprovalConfig) -> ToolFailure | None:
    """FR-APR-04a: ``enabled = false`` resolves every call as an error."""
    if policy.enabled:
        return None
    return errors.denied_by_policy("Tool execution disabled by policy", DenialReason.DISABLED)


def denylisted(policy: ApprovalConfig, name: str) -> ToolFailure | None:
    """FR-APR-04b: the denylist denies whatever the mode."""
    if name not in policy.denylist:
        return None
    return errors.denied_by_policy(
        f"The tool {name!r} is denylisted by the user's configuration",
        DenialReason.DENYLISTED,
        tool=name,
    )


def decide(policy: ApprovalConfig, tool: Tool[Any], args: Any) -> Outcome | ToolFailure:
    """Mode and allowlist (FR-APR-04c/d), then the tool's own flag (FR-APR-04e)."""
    allowlisted = tool.name in policy.allowlist
    if policy.mode == "deny" and not allowlisted:
        return errors.denied_by_policy(
            f"Approval mode is 'deny' and {tool.name!r} is not in the allowlist",
            DenialReason.NOT_ALLOWLISTED,
            tool=tool.name,
        )
    outcome = Outcome.EXECUTE
    if (
        policy.mode == "prompt"
        and policy.prompt_side_effects
        and tool.mutates(args)
        and not allowlisted
    ):
        outcome = Outcome.CONFIRM
    # A tool that demands approval gets it asked for in every mode, unless the
    # user's own config lets calls the tool itself vouches for as read-only
    # run without a prompt (run_shell's read-only command classifier).
    if tool.requires_approval and not (
        policy.read_only_commands == "auto" and read_only_call(tool, args)
    ):
        outcome = Outcome.CONFIRM
    return outcome


def read_only_call(tool: Tool[Any], args: Any) -> bool:
    """Whether ``tool`` classifies this call as only reading (``Tool.read_only_call``)."""
    check = getattr(tool, "read_only_call", None)
    return bool(check(args)) if callable(check) else False
