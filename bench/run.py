"""Worker benchmarks: `make bench`.  Reports medians; asserts nothing.

Measures, on this machine, in one run:
- worker start to ready (spawn, port printed, connected, hello answered)
  beside a Python importing only its first libraries, and what its start
  imports (bench/startup.py);
- no-op round trip (``ping``) from forj's Python client and from python-epc's;
- a 1 MB ``read_file`` round trip (plan + execute) from both clients;
- a small ``read_file`` round trip (plan + execute, journal writes included);
- sandbox validation per path;
- the EPC codec against sexpdata on a megabyte of quotes and backslashes;
- the file tools (bench/tools.py), the same at 1k, 10k and 100k files
  (bench/scale.py; ``FORJ_BENCH_MAX_FILES=10000`` leaves out the 100k
  tree, about a minute to generate), run_shell (bench/shell.py), edits
  (bench/edits.py), the command sandbox's start-up cost (bench/sandbox.py),
  recovery and undo (bench/recovery.py), the AST tools (bench/syntax.py),
  a chat's first request in tokens, to a real llama.cpp server at an 8k
  window when one is installed (bench/prompt.py).

Prints a Markdown table (with machine and date) and writes it to
bench/results/latest.md for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sexpdata
from common import ROOT, median_of  # sets the import path for forj_py
from epc.client import EPCClient

from forj_py.safety.paths import Sandbox
from forj_py.transport import sexp
from forj_py.transport.client import Client, WorkerProcess


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    py = platform.python_version()
    return f"{cpu}, {os.cpu_count()} cores, Python {py}, {platform.system()} {platform.release()}"


def calibration() -> float:
    """A fixed pure-Python loop: how fast this machine was during this run."""

    def spin() -> None:
        total = 0
        for i in range(1_000_000):
            total += i

    return median_of(spin, 7, warmup=1)


def _run_emacs_bench(emacs: str, script: str, env: dict[str, str]) -> str:
    """Run ``bench/SCRIPT`` in batch Emacs with this Python as the worker's; its stdout."""
    out = subprocess.run(
        [emacs, "-Q", "--batch", "-L", str(ROOT / "elisp"), "-l", str(ROOT / "bench" / script)],
        env=dict(env, FORJ_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return out.stdout


def _emacs_flow(emacs: str, env: dict[str, str], tmp: Path) -> list[tuple[str, str, str]]:
    """Render time of an 8-call batch and timer lag while ~10 MB of results arrive."""
    project = tmp / "flow"
    project.mkdir()
    text = ('def f():\n    return "x"\n' * 50000)[:1_250_000]
    for i in range(8):
        (project / f"big{i}.txt").write_text(text)
    cfg = tmp / "flow.toml"
    cfg.write_text(
        "[tools.output]\nmax_bytes = 8000000\n[tools.read_file]\nmax_file_read_bytes = 4000000\n"
    )
    out = _run_emacs_bench(
        emacs, "flow-bench.el", dict(env, FORJ_BENCH_ROOT=str(project), FORJ_CONFIG=str(cfg))
    )
    values = dict(line.split() for line in out.strip().splitlines()[-2:])
    return [
        ("8-call read batch: results received to drawn (Emacs)", f"{values['render']} ms", "—"),
        ("Emacs timer lag while 8 x 1.25 MB of results arrive", f"{values['lag']} ms", "≤ 50 ms"),
    ]


def _emacs_shell(emacs: str, env: dict[str, str], tmp: Path) -> list[tuple[str, str, str]]:
    """``yes | head -c 50M`` through run_shell into a *forj-shell* buffer."""
    project = tmp / "shell"
    (project / ".git").mkdir(parents=True)
    out = _run_emacs_bench(emacs, "shell-bench.el", dict(env, FORJ_BENCH_ROOT=str(project)))
    values = dict(line.split() for line in out.strip().splitlines() if " " in line)
    rows = [
        (
            "run_shell `yes | head -c 50M` into the Emacs shell buffer",
            f"{values['mbps']} MB/s ({int(values['bytes']) >> 20} MB, every byte)",
            "—",
        ),
        ("Emacs timer lag while those 50 MB stream in", f"{values['lag']} ms", "≤ 50 ms"),
    ]
    # Short lines: many small writes, the case where framing costs most.
    out = _run_emacs_bench(
        emacs,
        "shell-bench.el",
        dict(env, FORJ_BENCH_ROOT=str(project), FORJ_BENCH_CMD="seq 1 5000000"),
    )
    values = dict(line.split() for line in out.strip().splitlines() if " " in line)
    forj, ref = float(values["mbps"]), float(values["ref_mbps"])
    rows.append(
        (
            "run_shell `seq 1 5000000` into the Emacs shell buffer vs Emacs running it itself",
            f"{forj:.1f} vs {ref:.1f} MB/s ({forj / ref:.2f}×; {values['bytes']} vs "
            f"{values['ref_bytes']} bytes)",
            "≥ 0.8×",
        )
    )
    return rows


def main() -> None:
    rows: list[tuple[str, str, str]] = []
    rows.append(("CPU reference: 10⁶ Python additions", f"{calibration() * 1000:.0f} ms", "—"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        (root / "src").mkdir(parents=True)
        line = 'say "hi" \\ path\\to\\file and some text é\n'
        (root / "big.txt").write_text(line * (1_000_000 // len(line.encode())))
        # A megabyte of ordinary source code: the standard library's own.
        source = "".join(
            p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(Path(os.__file__).parent.glob("*.py"))
        )
        (root / "code.py").write_text(source[:1_000_000])
        (root / "small.txt").write_text("hello\n" * 20)
        (root / "src" / "deep" / "er").mkdir(parents=True)
        (root / "src" / "deep" / "er" / "mod.py").write_text("x = 1\n")
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(
            "[tools.output]\nmax_bytes = 4000000\n"
            "[tools.read_file]\nmax_file_read_bytes = 4000000\n"
        )
        env = dict(os.environ, FORJ_CONFIG=str(cfg), FORJ_STATE_DIR=str(Path(tmp) / "state"))

        # --- start to ready, beside its floor; what the start imports
        import startup

        rows.extend(startup.rows_for(root, env))

        with WorkerProcess(root, env=env) as proc, Client(proc.port) as c:
            c.call("hello", {"token": proc.token})
            epc = EPCClient(("127.0.0.1", proc.port))
            epc.call_sync("hello", [json.dumps({"token": proc.token})], timeout=10)

            t = median_of(lambda: c.call("ping"), 3000, warmup=100)
            rows.append(("no-op round trip, forj client", f"{t * 1000:.3f} ms", "≤ 0.5 ms"))
            t = median_of(lambda: epc.call_sync("ping", ["{}"], timeout=10), 1000, warmup=50)
            rows.append(("no-op round trip, python-epc client", f"{t * 1000:.3f} ms", "—"))
            emacs = shutil.which("emacs")
            if emacs:
                out = _run_emacs_bench(emacs, "epc-bench.el", dict(env, FORJ_BENCH_ROOT=str(root)))
                values = dict(line.split() for line in out.strip().splitlines() if " " in line)
                rows.append(
                    (
                        "no-op round trip from Emacs, forj-epc.el",
                        f"{float(values['ping']):.3f} ms",
                        "≤ 0.5 ms",
                    )
                )
                for key, what in (("code", "Python source"), ("big", "quotes and backslashes")):
                    mb = int(values[f"{key}_bytes"]) / 1e6
                    json_ms, epc_ms = float(values[f"{key}_json"]), float(values[f"{key}_epc"])
                    ref_ms = float(values[f"{key}_ref"])
                    rows.append(
                        (
                            f"read_file round trip from Emacs, {mb:.1f} MB of {what}: JSON frames "
                            "vs standard frames vs Emacs parsing the reply's JSON "
                            "(json-parse-buffer)",
                            f"{json_ms:.1f} vs {epc_ms:.1f} vs {ref_ms:.1f} ms",
                            "≤ 30 ms",
                        )
                    )
                rows.extend(_emacs_flow(emacs, env, Path(tmp)))
                rows.extend(_emacs_shell(emacs, env, Path(tmp)))

            def read(client_call: Callable[[str, dict], dict], path: str) -> None:
                plan = client_call(
                    "plan",
                    {
                        "calls": [
                            {
                                "id": "1",
                                "name": "read_file",
                                "args": {"path": path, "max_bytes": 4000000},
                            }
                        ]
                    },
                )
                res = client_call(
                    "execute", {"batch_id": plan["batch_id"], "capacity_bytes": 4000000}
                )
                assert res["results"][0]["ok"], res

            def forj_call(method: str, body: dict) -> dict:
                return c.call(method, body)

            def epc_call(method: str, body: dict) -> dict:
                return json.loads(epc.call_sync(method, [json.dumps(body)], timeout=30))

            size = (root / "code.py").stat().st_size
            t = median_of(lambda: read(forj_call, "code.py"), 40)
            rows.append(
                (
                    f"read_file round trip, {size / 1e6:.1f} MB of Python source, forj client",
                    f"{t * 1000:.1f} ms",
                    "≤ 30 ms",
                )
            )
            size = (root / "big.txt").stat().st_size
            t = median_of(lambda: read(forj_call, "big.txt"), 40)
            rows.append(
                (
                    f"read_file round trip, {size / 1e6:.1f} MB of quotes and backslashes, "
                    "forj client",
                    f"{t * 1000:.1f} ms",
                    "≤ 30 ms",
                )
            )
            t = median_of(lambda: read(epc_call, "big.txt"), 10, warmup=1)
            rows.append(
                (
                    f"read_file round trip, {size / 1e6:.1f} MB of quotes and backslashes, "
                    "python-epc client",
                    f"{t * 1000:.0f} ms",
                    "—",
                )
            )
            t = median_of(lambda: read(forj_call, "small.txt"), 300)
            rows.append(
                (
                    "read_file round trip, 120 B (plan + execute + journal)",
                    f"{t * 1000:.2f} ms",
                    "—",
                )
            )
            epc.close()
            epc.socket.close()

    # --- sandbox validation
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src" / "deep" / "er").mkdir(parents=True)
        (root / "src" / "deep" / "er" / "mod.py").write_text("x")
        sb = Sandbox(root)
        for path, label in [
            ("src/deep/er/mod.py", "existing file, 4 deep"),
            ("src/new/file.py", "new file"),
        ]:
            n = 20000
            t0 = time.perf_counter()
            for _ in range(n):
                sb.resolve(path)
            per = (time.perf_counter() - t0) / n
            rows.append((f"sandbox validation, {label}", f"{per * 1e6:.1f} µs", "≤ 50 µs"))

    # --- codec
    payload = json.dumps({"content": 'say "hi" \\ path\\to\n' * 55000})
    message = sexp.dumps([sexp.Symbol("return"), 1, payload])
    ours = median_of(lambda: sexp.loads(message), 20)
    theirs = median_of(lambda: sexpdata.loads(message), 3, warmup=1)
    rows.append(
        (
            f"decode a {len(message) / 1e6:.1f} MB EPC reply: forj_py.transport.sexp vs sexpdata",
            f"{ours * 1000:.1f} ms vs {theirs * 1000:.0f} ms ({theirs / ours:.0f}×)",
            "—",
        )
    )

    import tools  # the file tool benchmarks, beside this file

    rows.extend(tools.main())

    import scale  # listing, glob and search at 1k, 10k, 100k files; worker memory

    rows.extend(scale.main())

    import patterns  # pattern matching on RE2, credential redaction in reads

    rows.extend(patterns.main())

    import shell  # run_shell: streaming throughput, time to kill a group

    rows.extend(shell.main())

    import sandbox  # the command sandbox's start-up cost

    rows.extend(sandbox.main())

    import edits  # the edit corpus table, and matching speed on a 1 MB file

    rows.extend(edits.main())

    import durability  # one durable edit beside the least a durable edit does

    rows.extend(durability.main())

    import recovery  # git notes in plan, undo, hello with batches to recover

    rows.extend(recovery.main())

    import syntax  # the AST tools: cold and incremental index, queries, a rename

    rows.extend(syntax.main())

    import prompt  # a chat's first request: tool schemas and prompt, in tokens

    rows.extend(prompt.main())

    lines = [
        f"Machine: {machine()}  ",
        f"Date: {time.strftime('%Y-%m-%d')}",
        "",
        "| measurement (median) | result | aim |",
        "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text(text)


if __name__ == "__main__":
    main()
