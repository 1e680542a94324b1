"""Worker start-up, part of `make bench`.  Reports medians; asserts nothing.

- **Start to ready**: spawn ``python -m forj_py``, read the port it
  prints, connect, and have ``hello`` answered (stopping is not counted).
- **The floor** it is compared with: a Python that only imports pydantic,
  jsonschema and ``epc.server``, the libraries the worker's start-up was
  first built on; the same Python defining and using one pydantic model
  (what importing pydantic leaves to the first model); and a bare
  ``python -c pass``.  They are measured in turn, round after round, so
  they all see the same machine.
- **What remains**: ``python -X importtime`` of a worker start up to its
  hello reply, each module's own time summed per top-level package
  (forj's per module), the median over a few starts.  The interpreter's
  own start-up imports are in it too; importtime's bookkeeping makes every
  figure larger than without it, so read it as shares.

Run alone: ``.venv/bin/python bench/startup.py`` (prints the breakdown too).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from common import ROOT  # noqa: F401 - sets the import path for forj_py

from forj_py.transport.client import Client, WorkerProcess

ROUNDS = 15
IMPORTTIME_RUNS = 5
FLOOR_IMPORTS = "import pydantic, jsonschema, epc.server"
# Importing pydantic defers most of itself (schema generation, the plugin
# loader and importlib.metadata, annotated_types) to the first model a
# program defines: any program built on it pays that too.
FLOOR_ONE_MODEL = (
    FLOOR_IMPORTS + "\nclass M(pydantic.BaseModel):\n    x: int = 0\nM.model_validate({})"
)

_IMPORTTIME_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \| (\s*)(\S+)")


def _start(root: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = WorkerProcess(root, env=env)
    try:
        with Client(proc.port) as client:
            client.call("hello", {"token": proc.token})
        return time.perf_counter() - t0
    finally:
        proc.stop()


def _python(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def measure(root: Path, env: dict[str, str]) -> tuple[float, float, float, float, float]:
    """Medians of (worker start to ready, floor imports, the floor with one model,
    bare Python, start to ready with a secret in the worker's environment), in seconds."""
    samples: list[list[float]] = [[], [], [], [], []]
    for i in range(ROUNDS + 1):
        taken = (
            _start(root, env),
            _python(FLOOR_IMPORTS),
            _python(FLOOR_ONE_MODEL),
            _python("pass"),
            # A provider key Emacs did not filter out: the worker starts itself
            # again without it before importing the rest of itself.
            _start(root, {**env, "INNOCENT_SETTING": "sk-proj-" + "x" * 40}),
        )
        if i:  # the first round warms the file cache
            for kept, value in zip(samples, taken, strict=True):
                kept.append(value)
    start, floor, model, bare, restarted = (statistics.median(s) for s in samples)
    return start, floor, model, bare, restarted


def import_breakdown(root: Path, env: dict[str, str]) -> list[tuple[str, float]]:
    """Import time of a worker start, per package (forj's per module), median of runs, ms."""
    runs: list[Counter[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(IMPORTTIME_RUNS):
            token = secrets.token_hex(16)
            log = Path(tmp) / "importtime.txt"
            with log.open("w") as err:
                proc = subprocess.Popen(
                    [
                        *(sys.executable, "-X", "importtime", "-m", "forj_py"),
                        *("--root", str(root), "--token-stdin"),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=env,
                )
                assert proc.stdout is not None and proc.stdin is not None
                proc.stdin.write(f"{token}\n".encode())  # as Emacs sends it
                proc.stdin.flush()
                port = int(proc.stdout.readline())
                with Client(port) as client:
                    client.call("hello", {"token": token})
                # Killed at once: what the housekeeping thread imports after
                # the hello (the file watcher) is not part of the start.
                proc.kill()
                proc.wait(10)
                proc.stdin.close()
                proc.stdout.close()
            totals: Counter[str] = Counter()
            for line in log.read_text().splitlines():
                m = _IMPORTTIME_LINE.match(line)
                if m:
                    name = m.group(3)
                    key = name if name.startswith("forj_py") else name.split(".")[0]
                    totals[key] += int(m.group(1))
            runs.append(totals)
    names = set().union(*runs)
    medians = {n: statistics.median(r.get(n, 0) for r in runs) / 1000 for n in names}
    return sorted(medians.items(), key=lambda kv: -kv[1])


def rows_for(root: Path, env: dict[str, str]) -> list[tuple[str, str, str]]:
    start, floor, model, bare, restarted = measure(root, env)
    parts = import_breakdown(root, env)
    total = sum(ms for _, ms in parts)
    top = ", ".join(f"{name} {ms:.0f}" for name, ms in parts[:6])
    return [
        (
            "worker start to ready (spawn → port → hello) vs importing pydantic, "
            "jsonschema, epc vs a bare Python",
            f"{start * 1000:.0f} vs {floor * 1000:.0f} vs {bare * 1000:.0f} ms "
            f"({start / floor:.2f}× the imports)",
            "≤ 150 ms; ≤ 1.3×",
        ),
        (
            "worker start to ready vs the same imports and one pydantic model defined and used",
            f"{start * 1000:.0f} vs {model * 1000:.0f} ms ({start / model:.2f}×)",
            "—",
        ),
        (
            "worker start to ready with a secret in its environment (it starts itself "
            "again without it) vs without, vs a bare Python",
            f"{restarted * 1000:.0f} vs {start * 1000:.0f} ms "
            f"(+{(restarted - start) * 1000:.0f} ms; a bare Python: {bare * 1000:.0f} ms)",
            "≤ one bare Python more",
        ),
        (
            "worker start: import time (`-X importtime`, own time summed), largest parts",
            f"{total:.0f} ms: {top} ms",
            "—",
        ),
    ]


@contextlib.contextmanager
def _project() -> Iterator[tuple[Path, dict[str, str]]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        (root / "README.md").write_text("# a project\n")
        config = Path(tmp) / "config.toml"
        config.write_text("")
        yield root, dict(os.environ, FORJ_CONFIG=str(config), FORJ_STATE_DIR=f"{tmp}/state")


def main() -> list[tuple[str, str, str]]:
    with _project() as (root, env):
        return rows_for(root, env)


if __name__ == "__main__":
    with _project() as (root, env):
        for row in rows_for(root, env):
            print(" | ".join(row))
        print("\nimport time of a worker start, own time per package (median ms):")
        for name, ms in import_breakdown(root, env)[:40]:
            print(f"{ms:8.1f}  {name}")
