"""What the consent tests share: a settable clock and workers built with it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import worker_registry

from forj_py.config import load
from forj_py.service import Worker
from forj_py.store.journal import Journal
from forj_py.tools.registry import Tool


class Clock:
    """Time the test moves by hand: grants expire and cooldowns pass without waiting."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Workers:
    def __init__(self, project: Path) -> None:
        self.project = project
        self.journals: list[Journal] = []

    def __call__(
        self,
        clock: Clock | None = None,
        extra_tools: list[Tool[Any]] | None = None,
        root: Path | None = None,
    ) -> Worker:
        root = root or self.project
        state = Path(os.environ["FORJ_STATE_DIR"])
        journal = Journal(state / "journal.sqlite3")
        self.journals.append(journal)
        return Worker(
            root,
            load(root),
            worker_registry(extra_tools),
            journal,
            state,
            clock=clock or Clock(),
        )


@pytest.fixture
def workers(project: Path) -> Iterator[Workers]:
    made = Workers(project)
    yield made
    for journal in made.journals:
        journal.close()


def plan(worker: Worker, *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return worker.plan({"calls": list(calls), **extra})


def execute(worker: Worker, planned: dict[str, Any], **decisions: Any) -> dict[str, Any]:
    return worker.execute({"batch_id": planned["batch_id"], **decisions}, lambda event: None)


def kinds(reply: dict[str, Any]) -> list[str]:
    return [item["disposition"] for item in reply["items"]]


def error_of(item_or_result: dict[str, Any]) -> dict[str, Any]:
    result = item_or_result.get("result", item_or_result)
    error: dict[str, Any] = result["error"]
    return error
