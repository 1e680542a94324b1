"""Seed 000 FR-REG-04b and FR-OUT-04: the context budget belongs to the batch.

The capacity Emacs sends with ``execute`` is what the model's context has
left for every result of the batch together; each result spends from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import MakeWorker, call, run

KB = 1000


def _size(result: dict) -> int:
    return len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode())


def _four_files(project: Path) -> list[dict]:
    for n in range(4):
        # Distinct lines, so a cut is visible in the content itself.
        lines = "".join(f"file {n} line {i:05d} " + "x" * 80 + "\n" for i in range(1, 1100))
        (project / f"big{n}.txt").write_text(lines[: 100 * KB])
    return [call(f"r{n}", "read_file", path=f"big{n}.txt") for n in range(4)]


def test_fr_reg_04b_four_large_reads_share_one_budget(
    make_worker: MakeWorker, project: Path
) -> None:
    calls = _four_files(project)
    _, reply = run(make_worker(), calls, capacity_bytes=150 * KB)
    results = reply["results"]
    assert [r["id"] for r in results] == ["r0", "r1", "r2", "r3"]
    assert all(r["ok"] for r in results)
    # Together they fit the budget the batch was given, not four times it.
    assert sum(_size(r) for r in results) <= 150 * KB
    # The first read is whole; the budget runs out on the second.
    first = results[0]["result"]
    assert first["truncated"] is False
    assert len(first["content"]) == 100 * KB
    assert results[1]["result"]["truncated"] is True
    assert results[1]["result"]["content"].startswith("file 1 line 00001")
    # Later calls still get a result that says it was cut, never nothing.
    for later in results[2:]:
        assert later["result"]["truncated"] is True
        assert later["result"]["content"].endswith("... [output truncated]")


def test_fr_reg_04b_ample_budget_cuts_nothing(make_worker: MakeWorker, project: Path) -> None:
    calls = _four_files(project)
    _, reply = run(make_worker(), calls, capacity_bytes=1_000 * KB)
    assert [r["result"]["truncated"] for r in reply["results"]] == [False] * 4
    assert sum(len(r["result"]["content"]) for r in reply["results"]) == 400 * KB


def test_fr_reg_04b_small_results_spend_little(make_worker: MakeWorker, project: Path) -> None:
    """A short result leaves the rest of the budget to the calls after it."""
    calls = _four_files(project)
    (project / "small.txt").write_text("tiny\n")
    batch = [call("s", "read_file", path="small.txt"), calls[0]]
    _, reply = run(make_worker(), batch, capacity_bytes=110 * KB)
    small, big = reply["results"]
    assert small["result"]["content"] == "tiny\n"
    assert big["result"]["truncated"] is False
    assert _size(small) + _size(big) <= 110 * KB


def test_fr_reg_04b_the_journal_holds_what_the_model_got(
    make_worker: MakeWorker, project: Path
) -> None:
    calls = _four_files(project)
    worker = make_worker()
    plan, reply = run(worker, calls, capacity_bytes=150 * KB)
    journaled = worker.journal.batch(plan["batch_id"])
    assert journaled is not None
    assert [c["result"] for c in journaled["calls"]] == reply["results"]
