"""Pattern matching and credential redaction benchmarks, part of `make bench`.

- one path check against a 1,001-star gitignore line on RE2, and the same
  shape with 3-5 stars on Python's backtracking ``re`` (the fallback, and
  what every check ran on before), against a 100-character name;
- sandbox validation and a walk of the standard library, RE2 beside ``re``;
- ``read_file`` of a megabyte with no URL, and with a credential URL on
  every line (the redactor's worst case), end to end.

Reports medians; asserts nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import median_of  # sets the import path for forj_py

from forj_py import patterns
from forj_py.output import redact_url_credentials
from forj_py.safety.paths import Sandbox
from forj_py.system.walk import Walker, _compile
from forj_py.transport.client import Client, WorkerProcess

NAME = "a" * 240 + "c.txt"


def _stars(k: int) -> str:
    return "*a" * k + "*b"


def _regex_of(line: str) -> str:
    return patterns.gitignore_regexes(line, marks_dirs=True)[0][0]


def _backtracking(rows: list[tuple[str, str, str]]) -> None:
    rules = _compile([_stars(1000)])
    t = median_of(lambda: rules.verdict(NAME, False), 200)
    rows.append(
        (
            f"one path check, 1,001-star .gitignore line, RE2 ({len(NAME)}-char name)",
            f"{t * 1e6:.0f} µs",
            "—",
        )
    )
    name = NAME[:100]  # longer names keep the 5-star check from ending in reasonable time
    for k in (2, 3, 4):
        regex = re.compile(_regex_of(_stars(k)))
        t = median_of(lambda r=regex: r.search(name), 5, warmup=1)
        rows.append(
            (
                f"the same shape with {k + 1} stars on `re` ({len(name)}-char name)",
                f"{t * 1000:.2f} ms",
                "—",
            )
        )


def _tree(tmp: Path) -> Path:
    dst = tmp / "stdlib"
    shutil.copytree(
        Path(os.__file__).parent,
        dst,
        symlinks=True,
        ignore=shutil.ignore_patterns("site-packages", "__pycache__"),
    )
    (dst / ".gitignore").write_text(
        "*.pyc\nbuild/\n*.egg-info/\n!keep.pyc\n/dist\n**/*.tmp\n.venv/\n*.so\n*~\n"
    )
    return dst


def _side_by_side(rows: list[tuple[str, str, str]], root: Path) -> None:
    figures: dict[bool, tuple[float, float]] = {}
    for linear in (True, False):
        previous = patterns.set_linear(linear)
        try:
            sandbox = Sandbox(root)
            resolve = median_of(lambda s=sandbox: s.resolve("json/decoder.py"), 5000, warmup=50)
            walk = median_of(lambda s=sandbox: sum(1 for _ in Walker(s).walk("")), 9, warmup=1)
        finally:
            patterns.set_linear(previous)
        figures[linear] = (resolve, walk)
    (r2, w2), (r1, w1) = figures[True], figures[False]
    rows.append(
        (
            "sandbox validation of an existing file, RE2 vs `re`",
            f"{r2 * 1e6:.1f} vs {r1 * 1e6:.1f} µs ({r2 / r1:.2f}×)",
            "—",
        )
    )
    rows.append(
        (
            "walk of the standard library with a 9-line .gitignore, RE2 vs `re`",
            f"{w2 * 1000:.1f} vs {w1 * 1000:.1f} ms ({w2 / w1:.2f}×)",
            "—",
        )
    )


def _reads(rows: list[tuple[str, str, str]], tmp: Path) -> None:
    root = tmp / "reads"
    root.mkdir()
    source = "".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(Path(os.__file__).parent.glob("*.py"))
    )[:1_000_000]
    plain = source.replace("://", ":/ /")
    line = "url = https://user:tok3nValue42@example.com/a/b\n"
    urls = (line * (1_000_000 // len(line) + 1))[:1_000_000]
    (root / "plain.py").write_text(plain)
    (root / "urls.txt").write_text(urls)
    link = '    "resolved": "https://registry.npmjs.org/@babel/core/-/core-7.1.0.tgz",\n'
    links = (link * (1_000_000 // len(link) + 1))[:1_000_000]
    t_links = median_of(lambda: redact_url_credentials(links), 20)
    rows.append(
        (
            f"URL credential redaction of 1 MB of lock-file lines, {links.count('://'):,} URLs "
            "without credentials",
            f"{t_links * 1000:.2f} ms",
            "—",
        )
    )
    t_plain = median_of(lambda: redact_url_credentials(plain), 20)
    t_urls = median_of(lambda: redact_url_credentials(urls), 5)
    cfg = tmp / "reads.toml"
    cfg.write_text(
        "[tools.output]\nmax_bytes = 4000000\n[tools.read_file]\nmax_file_read_bytes = 4000000\n"
    )
    env = dict(os.environ, FORJ_CONFIG=str(cfg), FORJ_STATE_DIR=str(tmp / "state"))
    with WorkerProcess(root, env=env) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})

        def read(path: str) -> Any:
            calls = [{"id": "1", "name": "read_file", "args": {"path": path, "max_bytes": 4000000}}]
            plan = c.call("plan", {"calls": calls})
            res = c.call("execute", {"batch_id": plan["batch_id"], "capacity_bytes": 4000000})
            assert res["results"][0]["ok"], res
            return res

        e_plain = median_of(lambda: read("plain.py"), 20)
        e_urls = median_of(lambda: read("urls.txt"), 10)
    n = urls.count("://")
    rows.append(
        (
            "URL credential redaction of 1 MB: source without `://` vs a credential URL per line",
            f"{t_plain * 1000:.2f} vs {t_urls * 1000:.0f} ms ({n:,} URLs)",
            "—",
        )
    )
    rows.append(
        (
            "`read_file` round trip of that 1 MB: no URL vs a credential URL per line",
            f"{e_plain * 1000:.1f} vs {e_urls * 1000:.1f} ms",
            "—",
        )
    )


def main() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    if not patterns.HAVE_RE2:
        print("google-re2 not installed: skipping the pattern benchmarks")
        return rows
    _backtracking(rows)
    with tempfile.TemporaryDirectory() as tmp:
        _side_by_side(rows, _tree(Path(tmp)))
        _reads(rows, Path(tmp))
    return rows


if __name__ == "__main__":
    t0 = time.perf_counter()
    for row in main():
        print(" | ".join(row))
    print(f"({time.perf_counter() - t0:.0f} s)")
