"""A worker of the host process's own, for the transports that run without Emacs.

``python -m forj_py mcp`` (when no Emacs worker runs for the project) and
``python -m forj_py sdk`` serve forj's tools from a worker they start
themselves: the same configuration, journal, command sandbox and watcher
as the worker Emacs starts, started and stopped the same way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, LoadedConfig, load
from ..safety import secretenv
from ..service import Worker
from ..store.journal import Journal, JournalError, default_state_dir
from ..system import process
from ..tools import builtin_registry

log = logging.getLogger(__name__)


class StartError(Exception):
    """The worker cannot start: the message says why, for stderr."""


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments every such transport takes: root, config, state directory, logging."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--root", required=True, help="the project root every path is confined to")
    p.add_argument("--config", help="the user's config file (default: $FORJ_CONFIG or XDG)")
    p.add_argument("--state-dir", help="where the journal lives (default: $FORJ_STATE_DIR or XDG)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def log_to_stderr(level: str) -> None:
    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )


@dataclass(frozen=True)
class Setup:
    root: Path
    loaded: LoadedConfig
    state_dir: Path


def setup(args: argparse.Namespace) -> Setup:
    """The project root, the configuration and the state directory the arguments name."""
    root = Path(args.root).expanduser()
    if not root.is_dir():
        raise StartError(f"--root {args.root}: not a directory")
    try:
        loaded = load(root, args.config)
    except ConfigError as exc:
        raise StartError(f"configuration error:\n{exc}") from None
    for warning in loaded.warnings:
        log.warning("%s", warning)
    # Secrets only the configuration names: the program starts again without
    # them (the built-in ones are gone already, see __main__.main).
    secretenv.enforce([*secretenv.BUILTIN_ENV_DENYLIST, *loaded.config.tools.environment.denylist])
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    return Setup(root, loaded, state_dir)


@contextmanager
def own_worker(found: Setup) -> Iterator[Worker]:
    """A worker for the project, its housekeeping running; stopped and closed on exit."""
    try:
        journal = Journal(found.state_dir / "journal.sqlite3")
    except JournalError as exc:
        raise StartError(str(exc)) from None
    try:
        if process.become_subreaper():
            process.start_reaper()
        try:
            worker = Worker(found.root, found.loaded, builtin_registry(), journal, found.state_dir)
        except ConfigError as exc:
            raise StartError(f"configuration error:\n{exc}") from None
        worker.commands.start()
        worker.watcher.start()
        try:
            yield worker
        finally:
            worker.watcher.stop()
            worker.cancel_all()
            worker.outside.close()
            worker.commands.close()
    finally:
        journal.close()
