"""Shared fixtures: temporary projects, isolated config and state, real workers."""

from __future__ import annotations

import os
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from forj_py.config import load
from forj_py.protocol import RiskLevel
from forj_py.service import Worker
from forj_py.store.journal import Journal
from forj_py.tools import builtin_registry
from forj_py.tools.registry import Registry, Tool, ToolContext
from forj_py.transport.client import Client, WorkerProcess


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads the developer's own config or writes their journal."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("FORJ_CONFIG", str(home / "config.toml"))
    monkeypatch.setenv("FORJ_STATE_DIR", str(home / "state"))
    monkeypatch.delenv("FORJ_TOKEN", raising=False)


def write_tree(root: Path, tree: dict[str, Any]) -> None:
    """Build files from a nested dict: str/bytes are file contents, dicts are directories."""
    for name, value in tree.items():
        path = root / name
        if isinstance(value, dict):
            path.mkdir(parents=True, exist_ok=True)
            write_tree(path, value)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value, encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_tree(
        root,
        {
            "README.md": "# demo\n",
            "src": {"main.py": "".join(f"line {i}\n" for i in range(1, 101))},
        },
    )
    return root


def running(*argv: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line is exactly ``argv``.

    Commands in the sandbox have PIDs of their own namespace; tests find
    them from outside by a command line no other process has.
    """
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == want:
                    stat = (entry / "stat").read_text()
                    if stat[stat.rfind(")") + 2] != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def user_config(text: str) -> None:
    Path(os.environ["FORJ_CONFIG"]).write_text(textwrap.dedent(text), encoding="utf-8")


def project_config(root: Path, text: str) -> None:
    (root / ".forj").mkdir(exist_ok=True)
    (root / ".forj" / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")


# --- tools that exist only for the tests: real tools run by the real framework


class SleepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0, le=60)


class Sleep(Tool[SleepArgs]):
    """Waits, checking for cancellation: a stand-in for any slow tool."""

    name = "sleep"
    description = "Sleep for a while."
    Args = SleepArgs

    def summary(self, args: SleepArgs) -> str:
        return f"Sleep {args.seconds}s"

    def execute(self, args: SleepArgs, ctx: ToolContext) -> Any:
        ctx.cancel.wait(args.seconds)
        ctx.check_cancelled()
        return {"slept": args.seconds}


class NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class Note(Tool[NoteArgs]):
    """A side-effecting tool that records every run, so tests can see what ran."""

    name = "note"
    description = "Record a note."
    Args = NoteArgs
    side_effecting = True

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.lock = threading.Lock()

    def summary(self, args: NoteArgs) -> str:
        return f"Note {args.text}"

    def preview(self, args: NoteArgs, ctx: ToolContext) -> str | None:
        return f"would note {args.text!r}"

    def execute(self, args: NoteArgs, ctx: ToolContext) -> Any:
        with self.lock:
            self.runs.append(args.text)
        return {"noted": args.text}


class Boom(Tool[NoteArgs]):
    name = "boom"
    description = "Raise an exception."
    Args = NoteArgs

    def summary(self, args: NoteArgs) -> str:
        return "Boom"

    def execute(self, args: NoteArgs, ctx: ToolContext) -> Any:
        raise RuntimeError("kaboom \x1b[31mred")


class Danger(Tool[NoteArgs]):
    name = "danger"
    description = "A tool that always asks."
    Args = NoteArgs
    requires_approval = True

    def risk(self, args: NoteArgs) -> RiskLevel:
        return RiskLevel.HIGH

    def summary(self, args: NoteArgs) -> str:
        return f"Danger {args.text}"

    def execute(self, args: NoteArgs, ctx: ToolContext) -> Any:
        return {"done": args.text}


MakeWorker = Callable[..., Worker]


def worker_registry(extra_tools: list[Tool[Any]] | None = None) -> Registry:
    """The registry the worker serves (each tool imported on its first call,
    its schema from the catalog), with ``extra_tools`` registered too."""
    registry = builtin_registry()
    for tool in extra_tools or []:
        registry.register(tool)
    return registry


@pytest.fixture
def make_worker(project: Path) -> Iterator[MakeWorker]:
    """Build an in-process worker over ``project`` with the built-in and test tools."""
    journals: list[Journal] = []

    def make(root: Path | None = None, extra_tools: list[Tool[Any]] | None = None) -> Worker:
        root = root or project
        loaded = load(root)
        journal = Journal(Path(os.environ["FORJ_STATE_DIR"]) / "journal.sqlite3")
        journals.append(journal)
        return Worker(
            root, loaded, worker_registry(extra_tools), journal, Path(os.environ["FORJ_STATE_DIR"])
        )

    yield make
    for journal in journals:
        journal.close()


def call(id_: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": id_, "name": name, "args": args}


def run(worker: Worker, calls: list[Any], **execute: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Plan then execute; returns (plan reply, execute reply)."""
    plan = worker.plan({"calls": calls})
    result = worker.execute({"batch_id": plan["batch_id"], **execute}, lambda event: None)
    return plan, result


def run_approved(worker: Worker, *calls: dict[str, Any], **execute: Any) -> list[dict[str, Any]]:
    """Plan ``calls``, approve every one as the user would, execute; the results.

    The context capacity is ample (1 MB) unless ``execute`` says otherwise, so
    results are cut only where a test asks for it.
    """
    execute.setdefault("capacity_bytes", 1_000_000)
    _, result = run(worker, list(calls), approved=[c["id"] for c in calls], **execute)
    results: list[dict[str, Any]] = result["results"]
    return results


@pytest.fixture
def live(project: Path) -> Iterator[tuple[WorkerProcess, Client]]:
    """A real worker subprocess and an authenticated client."""
    with WorkerProcess(project) as proc, Client(proc.port) as client:
        client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
        yield proc, client
