"""Worker start-up: what runs early, and what waits until the first hello is answered."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from conftest import MakeWorker

from forj_py import __main__ as worker_main
from forj_py.safety import bwrap_probe
from forj_py.safety.commands import probe
from forj_py.transport.server import ForjServer


def _housekeeping(make_worker: MakeWorker) -> tuple[threading.Thread, ForjServer]:
    worker = make_worker()
    server = ForjServer(worker, "token")
    thread = threading.Thread(target=worker_main._housekeeping, args=(worker, server), daemon=True)
    thread.start()
    return thread, server


def test_housekeeping_starts_after_the_first_hello(
    make_worker: MakeWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_main, "HOUSEKEEPING_DELAY_SECONDS", 60.0)
    thread, server = _housekeeping(make_worker)
    worker = server.worker
    try:
        time.sleep(0.2)
        assert thread.is_alive() and not worker.watcher.thread.is_alive()
        worker.hello_payload({"name": "pytest"})
        thread.join(30)
        assert not thread.is_alive()
        assert worker.watcher.thread.is_alive()
        assert worker.commands.masks.wait(30)
    finally:
        worker.watcher.stop()
        worker.watcher.thread.join(5)
        worker.commands.close()
        server.server_close()


def test_housekeeping_starts_without_a_hello_after_the_delay(
    make_worker: MakeWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_main, "HOUSEKEEPING_DELAY_SECONDS", 0.05)
    thread, server = _housekeeping(make_worker)
    worker = server.worker
    try:
        thread.join(30)
        assert worker.watcher.thread.is_alive()
    finally:
        worker.watcher.stop()
        worker.watcher.thread.join(5)
        worker.commands.close()
        server.server_close()


def test_housekeeping_starts_nothing_once_the_worker_is_stopping(
    make_worker: MakeWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_main, "HOUSEKEEPING_DELAY_SECONDS", 60.0)
    worker = make_worker()
    server = ForjServer(worker, "token")
    server.stopping.set()
    worker.greeted.set()
    try:
        worker_main._housekeeping(worker, server)
        assert not worker.watcher.thread.is_alive()
    finally:
        worker.commands.close()
        server.server_close()


def test_the_sandbox_probe_started_early_reads_as_one_run_then() -> None:
    for setting in ("auto", "none"):
        assert probe(setting, bwrap_probe.start()) == probe(setting)


def test_a_bwrap_that_cannot_start_reads_the_same_early_or_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the probe runs bwrap on Linux only")
    monkeypatch.setattr(bwrap_probe.shutil, "which", lambda name: "/nonexistent/bwrap")
    late = probe("auto")
    assert late.kind == "none" and "bwrap could not be started" in late.reason
    assert probe("auto", bwrap_probe.start()) == late
