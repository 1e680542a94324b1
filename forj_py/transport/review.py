"""Reviews of an MCP client's calls in the user's Emacs.

forj's MCP server, connected to the project's worker through the
rendezvous, plans a call; when the call needs review it asks the worker
(method ``review``) to put it to the Emacs connected to the same worker.
The worker sends Emacs a ``review`` call carrying the plan item exactly as
the worker planned it (never text from the MCP side), and Emacs answers
as for its own batches: approve (perhaps with edited text or a standing
grant) or deny with a reason.  The answer goes back to the MCP server,
which executes the batch with it; a standing grant the user gave is also
kept by the worker, which takes a project-wide one from the MCP server
only when it is the one the user gave.

When the user's own config does not set ``[mcp] review_in_emacs``, when
no Emacs is connected, or when Emacs does not answer in time, the answer
is ``unavailable`` with the reason, and the MCP server falls back to its
client's way of asking, or refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..service import Worker, parse_request

log = logging.getLogger(__name__)

# Emacs closes an unanswered review itself at the limit; this much more is
# allowed for its answer to arrive before the worker stops waiting.
GRACE_SECONDS = 10.0


class ReviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_id: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=256)
    client: str = Field(default="an MCP client", min_length=1, max_length=200)


class GrantAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    scope: Literal["once", "session", "minutes", "project"]
    pattern: str | None = Field(default=None, max_length=2000)
    minutes: float | None = Field(default=None, gt=0)


class Asker(Protocol):
    """A connection that can put a question to its peer: the Emacs one."""

    def ask(self, method: str, body: Any, timeout: float) -> Any: ...


class EmacsAnswer(BaseModel):
    """What Emacs answers to a review."""

    model_config = ConfigDict(extra="ignore")

    decision: Literal["approve", "deny", "unanswered"]
    reason: str = Field(default="", max_length=4000)
    # Edit before approve: path -> the text the user wants written instead.
    modified: dict[str, str] = Field(default_factory=dict)
    grant: GrantAnswer | None = None


def review_in_emacs(
    worker: Worker, reviewer: Callable[[], Asker | None], body: Any
) -> dict[str, Any]:
    """Put one planned call to the connected Emacs; return the user's answer.

    ``reviewer`` gives the Emacs connection that answers reviews, or None
    when none is connected; asked only once a review is due, so this module
    needs nothing of the server's.

    ``{"outcome": "approved", "modified": {...}, "grant": {...}?}``,
    ``{"outcome": "denied", "reason": "..."}`` or
    ``{"outcome": "unavailable", "why": "..."}``.
    """
    req = parse_request(ReviewRequest, body)
    settings = worker.config.mcp
    if not settings.review_in_emacs:
        return _unavailable("[mcp] review_in_emacs is not set in the user's own forj config")
    item = worker.review_item(req.batch_id, req.call_id)
    emacs = reviewer()
    if emacs is None:
        return _unavailable("no Emacs is connected to this project's forj worker")
    limit = settings.review_timeout_seconds
    question = {
        "batch_id": req.batch_id,
        "client": req.client,
        "item": item,
        "timeout_seconds": limit,
    }
    try:
        raw = emacs.ask("review", question, limit + GRACE_SECONDS)
    except TimeoutError:
        return _unavailable(f"the review in Emacs went unanswered for {limit:g} s")
    except (ConnectionError, RuntimeError) as exc:
        log.warning("review in Emacs failed: %s", exc)
        return _unavailable(f"Emacs could not show the review ({exc})")
    try:
        answer = EmacsAnswer.model_validate(raw)
    except ValueError as exc:
        log.warning("unusable review answer from Emacs: %s", exc)
        return _unavailable("Emacs answered the review with something forj cannot read")
    if answer.decision == "unanswered":
        return _unavailable(f"the review in Emacs went unanswered for {limit:g} s")
    if answer.decision == "deny":
        return {"outcome": "denied", "reason": answer.reason.strip()}
    reply: dict[str, Any] = {"outcome": "approved", "modified": answer.modified}
    if answer.grant is not None and answer.grant.scope != "once":
        reply["grant"] = answer.grant.model_dump(exclude_none=True)
        # The worker keeps what the user said: the MCP server forwards the
        # grant with its execute, and a project grant is taken from it only
        # when it is exactly this one.
        worker.note_reviewed_grant(req.batch_id, req.call_id, reply["grant"])
    return reply


def _unavailable(why: str) -> dict[str, Any]:
    return {"outcome": "unavailable", "why": why}
