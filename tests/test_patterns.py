"""Gitignore-style matching in linear time (forj_py.patterns), with the same answers.

The attack: a ``.gitignore`` or ``denied_patterns`` line like ``*a*a*a…*b``
(a thousand stars), which Python's backtracking ``re`` takes minutes to
try against one long name.  On RE2 the worker keeps answering and the call
completes.  The property tests check that RE2, the ``re`` fallback and the
matching forj did before (each gitignore rule tried alone on ``re``) agree
on generated patterns and paths.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pathspec
import pytest
from conftest import MakeWorker, call, project_config, run, user_config, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forj_py import patterns
from forj_py.config import ConfigError, load
from forj_py.safety.paths import DEFAULT_DENIES, Sandbox
from forj_py.system.walk import Walker, _compile
from forj_py.tools.search import find_rg
from forj_py.transport.client import Client, WorkerProcess

pytestmark = pytest.mark.skipif(not patterns.HAVE_RE2, reason="google-re2 is not installed")

STARS = "*a" * 1000 + "*b"  # 1,001 stars: exponential on a backtracking engine
# A name that almost matches: many "a", no "b" at the end.
LONG_NAME = "a" * 240 + "c.txt"


@pytest.fixture
def fallback() -> Iterator[None]:
    """Run the ``re`` fallback, as on a platform without a google-re2 wheel."""
    previous = patterns.set_linear(False)
    patterns._state["warned"] = False
    try:
        yield
    finally:
        patterns.set_linear(previous)


# --- the attack, through the real worker --------------------------------------------------


def _stars_project(project: Path) -> Path:
    deep = "/".join(["a" * 200] * 8)  # a path of about 1,900 characters
    write_tree(project, {deep: {LONG_NAME: "needle here\n"}})
    return project


def _ping_while(client: Client, method: str, body: dict[str, Any]) -> tuple[Any, float]:
    """Run ``method`` and ping the worker meanwhile; (its reply, slowest ping in s)."""
    fut = client.call_async(method, body)
    slowest = 0.0
    while not fut.done():
        t0 = time.perf_counter()
        assert client.call("ping", timeout=10) == {}
        slowest = max(slowest, time.perf_counter() - t0)
        time.sleep(0.02)
    return json.loads(fut.result(60)) if isinstance(fut.result(), str) else fut.result(), slowest


def _run_calls(client: Client, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    plan = client.call("plan", {"calls": calls})
    assert all(i["disposition"] == "execute" for i in plan["items"]), plan
    t0 = time.perf_counter()
    reply, slowest = _ping_while(
        client, "execute", {"batch_id": plan["batch_id"], "capacity_bytes": 4_000_000}
    )
    elapsed = time.perf_counter() - t0
    # "Not frozen", with a wide margin: the timings go to the benchmark.
    assert slowest < 2, slowest
    assert elapsed < 20, elapsed
    return list(reply["results"]), elapsed


def _calls(deep_file: str) -> list[dict[str, Any]]:
    return [
        call("l", "list_files", directory=".", max_depth=20),
        call("g", "glob", patterns=["**/*.txt"]),
        call("r", "read_file", path=deep_file),
        call("s", "search", query="needle"),
    ]


@pytest.mark.parametrize("engine", ["python", "ripgrep"])
def test_attack_thousand_star_gitignore_line_does_not_freeze_the_worker(
    project: Path, tmp_path: Path, engine: str
) -> None:
    if engine == "ripgrep" and not find_rg():
        pytest.skip("ripgrep is not installed")
    _stars_project(project)
    (project / ".gitignore").write_text(f"{STARS}\n*.log\n")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"[tools.search]\nengine = '{engine}'\n")
    deep_file = "/".join(["a" * 200] * 8) + "/" + LONG_NAME
    with WorkerProcess(project, config=cfg) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        results, _ = _run_calls(c, _calls(deep_file))
    listed, globbed, read, searched = results
    assert all(r["ok"] for r in results), results
    assert deep_file in [f["path"] for f in listed["result"]["files"]]
    assert [f["path"] for f in globbed["result"]["files"]] == [deep_file]
    assert read["result"]["content"] == "needle here\n"
    assert [m["path"] for m in searched["result"]["matches"]] == [deep_file]


def test_attack_thousand_star_denied_pattern_does_not_freeze_the_worker(
    project: Path, tmp_path: Path
) -> None:
    _stars_project(project)
    project_config(project, f"[tools.sandbox]\ndenied_patterns = ['{STARS}']\n")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[tools.search]\nengine = 'python'\n")
    deep_file = "/".join(["a" * 200] * 8) + "/" + LONG_NAME
    # Only a name of 1,001 characters or more can match: no file system
    # holds one, but a path the model sends is checked all the same.
    matching = "a" * 1000 + "b"
    with WorkerProcess(project, config=cfg) as proc, Client(proc.port) as c:
        hello = c.call("hello", {"token": proc.token})
        assert not [w for w in hello.get("warnings", []) if "denied_patterns" in w], hello
        results, _ = _run_calls(c, _calls(deep_file))
        t0 = time.perf_counter()
        plan = c.call("plan", {"calls": [call("d", "read_file", path=matching)]})
        assert time.perf_counter() - t0 < 5
    listed, _, read, searched = results
    assert all(r["ok"] for r in results), results
    assert deep_file in [f["path"] for f in listed["result"]["files"]]
    assert read["result"]["content"] == "needle here\n"
    assert [m["path"] for m in searched["result"]["matches"]] == [deep_file]
    # The pattern still works: a path it matches is denied.
    (item,) = plan["items"]
    assert STARS in json.dumps(item) and "DeniedPatternMatched" in json.dumps(item), item


# --- the fallback without RE2 ---------------------------------------------------------------


def test_fallback_refuses_patterns_with_many_wildcards_and_says_why(
    project: Path, fallback: None, caplog: pytest.LogCaptureFixture
) -> None:
    project_config(project, "[tools.sandbox]\ndenied_patterns = ['*a*b', 'secrets/*.txt']\n")
    with caplog.at_level(logging.WARNING, logger="forj.patterns"):
        for _ in range(2):
            with pytest.raises(ConfigError, match="at most 2") as exc:
                load(project)
    assert "google-re2" in str(exc.value) and "'*a*b'" in str(exc.value)
    assert len([r for r in caplog.records if "google-re2" in r.getMessage()]) == 1  # once
    with pytest.raises(patterns.PatternTooComplex, match="at most 2"):
        Sandbox(project, denied_patterns=[STARS])
    # The default denies all fit the limit.
    Sandbox(project)


def test_fallback_skips_a_complex_gitignore_line_and_keeps_the_rest(
    make_worker: MakeWorker, project: Path, fallback: None
) -> None:
    write_tree(project, {".gitignore": f"{STARS}\n*.log\n", "x.log": "", "keep.txt": ""})
    paths = [e.rel for e in Walker(Sandbox(project)).walk("")]
    assert "x.log" not in paths and "keep.txt" in paths


def test_fallback_refuses_a_complex_search_glob_with_a_clear_error(
    make_worker: MakeWorker, project: Path, fallback: None
) -> None:
    user_config("[tools.search]\nengine = 'python'\n")
    _, result = run(make_worker(), [call("s", "search", query="x", include_paths=["*a*b*c"])])
    (r,) = result["results"]
    assert not r["ok"]
    assert "too complex" in r["error"]["message"] and "google-re2" in r["error"]["message"]


def test_wildcard_count_ignores_classes_and_escapes() -> None:
    assert patterns.wildcard_count(r"^(?:.+/)?[^/]*\.py(?:/|$)") == 2
    assert patterns.wildcard_count(r"^a[*+]\*\+b$") == 0
    assert patterns.wildcard_count(r"[]*]x*") == 1


def test_attack_newline_in_a_directory_name_does_not_hide_a_denied_file(project: Path) -> None:
    # "." did not match a newline: "**/.env" missed "a\nb/.env".
    sandbox = Sandbox(project)
    assert sandbox.denied_pattern("a\nb/.env") == "**/.env"
    assert sandbox.denied_pattern("x\n/.ssh/id") == "**/.ssh/**"


def test_config_with_re2_accepts_what_the_fallback_refuses(project: Path) -> None:
    project_config(project, "[tools.sandbox]\ndenied_patterns = ['*a*b*c', 'x/**/y']\n")
    loaded = load(project)
    assert loaded.config.tools.sandbox.denied_patterns == ["*a*b*c", "x/**/y"]
    # What the config layer refused before still is: four "**".
    project_config(project, "[tools.sandbox]\ndenied_patterns = ['**/a/**/a/**/a/**/b']\n")
    with pytest.raises(ConfigError, match="at most two"):
        load(project)


# --- the same answers ----------------------------------------------------------------------


def _reference_rules(lines: list[str]) -> list[tuple[re.Pattern[str], bool, bool]]:
    """How the walker matched before: each rule's pathspec regex alone, on ``re``."""
    rules = []
    for line in lines:
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([line], backend="simple")
        except ValueError:
            continue
        for p in spec.patterns:
            if p.regex is None or p.include is None:
                continue
            body = line.rstrip()
            dir_only = body.endswith("/") and not body.endswith("\\/")
            rules.append((re.compile(p.regex.pattern), bool(p.include), dir_only))
    return rules


def _reference_verdict(
    rules: list[tuple[re.Pattern[str], bool, bool]], rel: str, is_dir: bool
) -> bool | None:
    verdict = None
    for regex, ignores, dir_only in rules:
        if dir_only and not is_dir:
            continue
        candidate = rel + "/" if dir_only else rel
        for m in regex.finditer(candidate):
            if "ps_d" not in regex.groupindex or m.group("ps_d") is None:
                verdict = ignores
                break
            if m.end("ps_d") == len(candidate):
                verdict = ignores
                break
    return verdict


_SEGMENTS = ["a", "b", "ab", "ba", "aa", ".a", "a.b", "b-a"]
_PATTERN_PIECES = ["a", "b", "*", "?", "[ab]", "[!a]", ".", "\\*", "a*", "*a", "**"]


@st.composite
def _pattern(draw: st.DrawFn) -> str:
    segments = draw(
        st.lists(
            st.lists(st.sampled_from(_PATTERN_PIECES), min_size=1, max_size=4).map("".join),
            min_size=1,
            max_size=4,
        )
    )
    body = "/".join(segments)
    if draw(st.booleans()):
        body = "/" + body
    if draw(st.booleans()):
        body += "/"
    if draw(st.integers(0, 4)) == 0:
        body = "!" + body
    return body


_paths = st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=5).map("/".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_pattern(), min_size=1, max_size=6), paths=st.lists(_paths, max_size=8))
def test_re2_fallback_and_reference_agree_on_gitignore_rules(
    lines: list[str], paths: list[str]
) -> None:
    reference = _reference_rules(lines)
    on_re2 = _compile(lines)
    previous = patterns.set_linear(False)
    try:
        fits = all(
            patterns.wildcard_count(p.regex.pattern) <= patterns.FALLBACK_MAX_WILDCARDS
            for line in lines
            for p in pathspec.GitIgnoreSpec.from_lines([line], backend="simple").patterns
            if p.regex is not None
        )
        on_re = _compile(lines) if fits else None
    finally:
        patterns.set_linear(previous)
    for rel in paths:
        for is_dir in (False, True):
            want = _reference_verdict(reference, rel, is_dir)
            assert on_re2.verdict(rel, is_dir) == want, (lines, rel, is_dir)
            if on_re is not None:
                assert on_re.verdict(rel, is_dir) == want, (lines, rel, is_dir)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(_pattern(), min_size=1, max_size=6), paths=st.lists(_paths, max_size=8))
def test_pathspec_re2_and_simple_backends_agree(lines: list[str], paths: list[str]) -> None:
    # What search's include/exclude globs use.
    fast = pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    slow = pathspec.GitIgnoreSpec.from_lines(lines, backend="simple")
    for rel in paths:
        assert fast.match_file(rel) == slow.match_file(rel), (lines, rel)


def _reference_denied(patterns_: list[str], rel: str, is_dir: bool | None) -> str | None:
    forms = (rel,) if is_dir is False else (rel, rel + "/")
    for pattern in patterns_:
        spec = pathspec.PathSpec.from_lines("gitignore", [pattern], backend="simple")
        for p in spec.patterns:
            if p.regex is not None and any(
                re.search(p.regex.pattern, f, re.IGNORECASE) for f in forms
            ):
                return pattern
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    denied=st.lists(_pattern().filter(lambda p: not p.startswith("!")), max_size=5),
    paths=st.lists(_paths.map(lambda p: p.upper() if len(p) % 3 == 0 else p), max_size=8),
)
def test_denied_patterns_agree_with_the_reference(
    tmp_path_factory: pytest.TempPathFactory, denied: list[str], paths: list[str]
) -> None:
    root = tmp_path_factory.mktemp("deny")
    sandbox = Sandbox(root, denied_patterns=denied)
    everything = [*DEFAULT_DENIES, *denied]
    for rel in paths:
        for is_dir in (False, True, None):
            assert sandbox.denied_pattern(rel, is_dir) == _reference_denied(
                everything, rel, is_dir
            ), (denied, rel, is_dir)


def test_regex_set_names_every_match_across_chunks() -> None:
    sources = [f"^x{i}(?:/|$)" for i in range(600)] + ["^x"]
    rs = patterns.RegexSet(sources)
    assert rs.matching("x599/y") == [599, 600]
    assert rs.matching("x5") == [5, 600]
    assert rs.matching("y") == []


def test_a_huge_gitignore_compiles_and_matches(project: Path) -> None:
    # RE2 refuses a single program over its memory budget; rules are chunked.
    lines = [f"dir{i}/**/*.x{i}" for i in range(20_000)] + ["!dir7/keep.x7"]
    rules = _compile(lines)
    assert rules.verdict("dir7/a/b.x7", False) is True
    assert rules.verdict("dir7/keep.x7", False) is False
    assert rules.verdict("dir7/a/b.x8", False) is None


@pytest.mark.parametrize("line", ["[[:alpha:]]x", "[S-8]", "a[]b", "x[!]"])
def test_attack_unmatchable_pattern_lines_are_refused_or_skipped_not_crashes(
    make_worker: MakeWorker, project: Path, line: str
) -> None:
    # pathspec turns these into expressions RE2 (or even re) rejects.
    write_tree(project, {".gitignore": f"{line}\n*.log\n", "x.log": "", "keep.txt": "k"})
    worker = make_worker()
    _, result = run(worker, [call("l", "list_files")])
    (r,) = result["results"]
    assert r["ok"], r
    paths = [f["path"] for f in r["result"]["files"]]
    assert "x.log" not in paths and "keep.txt" in paths
    user_config("[tools.search]\nengine = 'python'\n")
    _, result = run(make_worker(), [call("s", "search", query="k", include_paths=[line])])
    (r,) = result["results"]
    assert r["ok"] or r["error"]["type"] == "validation-error", r
    project_config(project, f"[tools.sandbox]\ndenied_patterns = ['{line}']\n")
    try:
        load(project)
    except ConfigError as exc:
        assert line in str(exc)


def test_many_huge_lines_are_compiled_in_chunks_that_fit(project: Path) -> None:
    lines = ["*a" * 1000 + f"*b{i}" for i in range(40)]
    rules = _compile(lines)
    assert rules.verdict("a" * 1000 + "b7", False) is True
    assert rules.verdict("a" * 200 + "b7", False) is None
