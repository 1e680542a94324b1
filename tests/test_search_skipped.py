"""A search says which files it did not look into (size cap, binary) and how many."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, run, user_config

from forj_py.tools.search import find_rg


def _search(make_worker: MakeWorker, engine: str, **args: Any) -> dict[str, Any]:
    user_config(f"[tools.search]\nengine = '{engine}'\n[tools.read_file]\nmax_scan_bytes = 4096\n")
    worker = make_worker()
    _, reply = run(worker, [call("s", "search", **args)])
    r = reply["results"][0]
    assert r["ok"], r
    result: dict[str, Any] = r["result"]
    return result


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_search_with_no_match_names_the_huge_and_binary_files_it_skipped(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    (project / "huge.log").write_text("needle\n" + "x" * 10_000)
    (project / "blob.dat").write_bytes(b"\x00\x01needle")
    (project / "small.txt").write_text("nothing here\n")
    r = _search(make_worker, engine, query="needle")
    assert r["matches"] == []
    assert r["skipped"]["too_large"] == 1
    assert r["skipped"]["binary"] == 1
    assert r["skipped"]["examples"] == {"too_large": ["huge.log"], "binary": ["blob.dat"]}
    assert "huge.log" in r["note"] and "blob.dat" in r["note"]
    assert "4096-byte size cap" in r["note"]


def test_search_that_skipped_nothing_says_nothing_about_skipping(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "small.txt").write_text("needle\n")
    r = _search(make_worker, "python", query="needle")
    assert "skipped" not in r
    assert "Not searched" not in r.get("note", "")


def test_search_skipped_files_respect_include_paths(make_worker: MakeWorker, project: Path) -> None:
    (project / "src").mkdir(exist_ok=True)
    (project / "huge.log").write_text("x" * 10_000)
    (project / "src" / "huge.py").write_text("x" * 10_000)
    r = _search(make_worker, "python", query="needle", include_paths=["src/**"])
    assert r["skipped"]["examples"]["too_large"] == ["src/huge.py"]
