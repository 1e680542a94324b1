"""What the benchmark scripts share: the import path and a median timer."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def median_of(fn: Callable[[], object], runs: int, warmup: int = 3) -> float:
    """The median wall time of ``fn`` over ``runs`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)
