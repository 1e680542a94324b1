"""Property tests over real files: generated edits are never written wrong.

Files from this repository's history, the standard library and the
languages forj ships grammars for; shapes and ideal outcomes are defined in
``edit_properties.py``.  Every case runs through the real worker.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import edit_properties as props
import pytest
from conftest import MakeWorker, run
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

SOURCES = props.all_sources()
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
    derandomize=True,
)


def _runner(make_worker: MakeWorker) -> Any:
    worker = make_worker()

    def run_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _, result = run(worker, calls, approved=[c["id"] for c in calls], capacity_bytes=1 << 22)
        return list(result["results"])

    return run_calls


def test_sources_cover_history_stdlib_and_grammar_languages() -> None:
    origins = Counter(s.origin for s in SOURCES)
    assert origins["history"] >= 10 and origins["stdlib"] >= 10, origins
    suffixes = {Path(s.name).suffix for s in SOURCES if s.origin == "grammar"}
    assert {".c", ".h", ".js"} <= suffixes, suffixes


@SETTINGS
@given(
    source=st.sampled_from(SOURCES),
    shape=st.sampled_from(props.SHAPES),
    seed=st.integers(0, 2**32 - 1),
)
def test_generated_edits_are_never_written_wrong(
    make_worker: MakeWorker, project: Path, source: props.Source, shape: str, seed: int
) -> None:
    case = props.make_case(source, shape, random.Random(seed))
    assume(case is not None)
    assert case is not None
    outcome = props.run_case(case, project, _runner(make_worker))
    assert outcome.kind != "wrong", (shape, source.origin, source.name, case.args, outcome.detail)
    if shape in props.MUST_REFUSE:
        assert outcome.kind == "refused", (shape, source.name, case.args)


@pytest.mark.parametrize("shape", [*props.LEGIT, "twin"])
def test_legitimate_and_twin_edits_rates(
    make_worker: MakeWorker, project: Path, shape: str
) -> None:
    """A seeded sweep: clean edits always land; noisy ones land or are refused, never wrong."""
    rng = random.Random(20261127)
    run_calls = _runner(make_worker)
    tally: Counter[str] = Counter()
    for source in SOURCES[::2]:  # every other file: the benchmark runs them all
        case = props.make_case(source, shape, rng)
        if case is None:
            continue
        outcome = props.run_case(case, project, run_calls)
        tally[outcome.kind] += 1
        assert outcome.kind != "wrong", (shape, source.name, case.args, outcome.detail)
    assert sum(tally.values()) >= 30, tally
    if shape in ("clean", "region"):
        assert tally["refused"] == 0, tally
    if shape == "twin":
        assert tally["intended"] == 0 or tally["refused"] > 0, tally
