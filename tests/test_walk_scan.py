"""The walk's one-pass-per-directory matching misses nothing a path-by-path check finds."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py import patterns
from forj_py.patterns import LineScan, RegexSet, gitignore_regexes
from forj_py.safety.paths import Sandbox
from forj_py.system import walk
from forj_py.system.walk import Entry, Excludes, Walker

needs_re2 = pytest.mark.skipif(not patterns.HAVE_RE2, reason="google-re2 is not installed")

_PARTS = st.sampled_from(["a", "b", ".env", "x.log", "build", "id_rsa", "é", "k ey", "n\x01"])
_LINES = st.sampled_from(
    [
        "*.log",
        "build/",
        "/a",
        "a/**/b",
        "**/.env",
        "!x.log",
        "id_*",
        "*é*",
        "b/*",
        "k?ey",
        "[ab]",
        "**/build/**",
    ]
)


@needs_re2
@settings(max_examples=300, deadline=None)
@given(
    st.lists(_LINES, min_size=1, max_size=6),
    st.lists(st.lists(_PARTS, min_size=1, max_size=4), min_size=1, max_size=12),
    st.booleans(),
)
def test_line_scan_reports_every_path_a_rule_matches(
    lines: list[str], paths: list[list[str]], ignore_case: bool
) -> None:
    sources = [s for line in lines for s, _ in gitignore_regexes(line, marks_dirs=True)]
    texts = ["/".join(parts) for parts in paths]
    texts += [t + "/" for t in texts]
    one_by_one = RegexSet(sources, ignore_case=ignore_case)
    scan = LineScan(sources, ignore_case=ignore_case)
    hits = scan.hits(texts)
    for n, text in enumerate(texts):
        if one_by_one.matching(text):
            assert n in hits, (text, lines)


@needs_re2
@settings(max_examples=300, deadline=None)
@given(
    st.lists(_LINES, min_size=1, max_size=6),
    st.lists(_PARTS, min_size=1, max_size=3),
    st.lists(_PARTS, min_size=1, max_size=12),
)
def test_line_scan_with_a_directory_prefix_reports_every_path_a_rule_matches(
    lines: list[str], directory: list[str], names: list[str]
) -> None:
    # One directory's names scanned as paths below it: the same verdicts as
    # scanning each whole path, the offsets counted with the prefix.
    sources = [s for line in lines for s, _ in gitignore_regexes(line, marks_dirs=True)]
    prefix = "/".join(directory) + "/"
    texts = names + [name + "/" for name in names]
    one_by_one = RegexSet(sources)
    hits = LineScan(sources).hits(texts, prefix)
    assert hits <= set(range(len(texts)))
    for n, text in enumerate(texts):
        if one_by_one.matching(prefix + text):
            assert n in hits, (prefix + text, lines)


def _random_tree(rng: random.Random, depth: int) -> dict[str, Any]:
    names = ["src", "build", "a", ".env", "x.log", "keep.log", "id_rsa.pub", "n.py", "IMG.PNG"]
    tree: dict[str, Any] = {}
    for name in rng.sample(names, rng.randrange(2, len(names))):
        if depth > 0 and "." not in name:
            tree[name] = _random_tree(rng, depth - 1)
        else:
            tree[name] = "x"
    if rng.random() < 0.5:
        tree[".gitignore"] = rng.choice(["*.log\n!keep.log\n", "build/\n", "/a\nsrc/*.py\n"])
    return tree


@needs_re2
@pytest.mark.parametrize("seed", range(6))
def test_walk_with_one_pass_per_directory_equals_the_path_by_path_walk(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "p"
    write_tree(root, _random_tree(random.Random(seed), 4))
    sandbox = Sandbox(root, denied_patterns=["**/*.pub", "src/n.py"])
    excludes = Excludes(["*.png", "node_modules/"])

    def entries() -> list[Any]:
        walker = Walker(sandbox, include_hidden=True, excludes=excludes)
        return sorted(walker.walk("", max_depth=64))

    fast = entries()
    monkeypatch.setattr(walk, "_denied_scan", lambda sandbox: None)
    assert fast == entries()
    assert not any(e.rel.endswith((".pub", ".env")) for e in fast)


_NAMES = st.sampled_from(
    ["a", "b.py", 'q"uote', "back\\slash", "é.md", "ctl\x01", "t\x7f", "x" * 40]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                _NAMES,
                st.sampled_from(["file", "dir", "symlink", "other"]),
                st.integers(0, 10**12),
                st.integers(0, 4 * 10**9),
            ),
            max_size=8,
        ),
        max_size=8,
    ),
    st.integers(0, 40),
    st.integers(0, 3000),
)
def test_listing_fit_of_a_whole_directory_equals_entry_by_entry(
    batches: list[list[tuple[str, str, int, int]]], cap: int, room: int
) -> None:
    # A directory measured at once keeps exactly the entries, bytes and the
    # reason to stop that adding its entries one by one gives.
    from forj_py.tools.listing import _RESERVED, Fit

    whole, single = Fit(cap, _RESERVED + room), Fit(cap, _RESERVED + room)
    for depth, batch in enumerate(batches, 1):
        entries = [
            Entry(f"d/{name}", kind, size, mtime, depth) for name, kind, size, mtime in batch
        ]
        kept_all = whole.add_all(entries)
        kept_each = all(single.add(e) for e in entries)
        assert kept_all == kept_each
        if not kept_all:
            break
    assert (whole.entries, whole.used, whole.stopped_by) == (
        single.entries,
        single.used,
        single.stopped_by,
    )


_GLOBS = st.sampled_from(
    [
        "**/*.py",
        "*.py",
        "src/**",
        "src/**/test_*.{py,el}",
        "*.[ch]",
        "**/x.py",
        "{a,src}/**/*.py",
        "a]b",
        "**/[x]",
        "*/*",
        "**/?.py",
        "src/",
        "a/**/b",
        "[!a]*",
        "**/é.py",
        "**",
        "x.py/",
    ]
)
_GLOB_PARTS = st.sampled_from(
    ["a", "b", "src", ".h", "x.py", "y.PY", "test_1.el", "a]b", "[x]", "é.py"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_GLOBS, min_size=1, max_size=3), st.lists(_GLOB_PARTS, min_size=1, max_size=4))
def test_glob_matcher_agrees_with_wcmatch(patterns: list[str], parts: list[str]) -> None:
    # The walk's matcher (wcmatch's expressions, after a literal-tail check)
    # says what wcmatch's own matcher says about every path.
    from wcmatch import glob as wcglob

    from forj_py.tools.listing import _matcher

    flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
    rel = "/".join(parts)
    wanted, tails = _matcher(patterns, flags)
    matches = wcglob.compile(patterns, flags=flags).match(rel)
    assert wanted(rel) == matches
    # The tails the walk passes files over by are true of every match.
    if tails is not None and matches:
        assert rel.endswith(tails)


@needs_re2
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("pattern", ["**/*.py", "**/n.py", "src/**/*.{py,log}", "*.log"])
def test_glob_walk_passing_files_over_by_their_tail_equals_the_whole_walk(
    tmp_path: Path, seed: int, pattern: str
) -> None:
    # A glob's walk drops files whose names cannot match before judging
    # them; directories named like matches ("n.py/"), hidden names, ignore
    # files and symlinks are still judged in full, so the entries are the
    # ones the walk without the shortcut gives.
    from wcmatch import glob as wcglob

    from forj_py.tools.listing import _matcher

    rng = random.Random(seed)
    root = tmp_path / "p"
    tree = _random_tree(rng, 4)
    tree["n.py"] = {"inner.py": "x", ".gitignore": "inner.py\n"}
    tree["src"] = {"build": {"x.log": "x"}, "keep.log": "x", "a.py": "x"}
    write_tree(root, tree)
    (root / "link.py").symlink_to(root / "src")
    sandbox = Sandbox(root, denied_patterns=["**/*.pub", "src/n.py"])
    excludes = Excludes(["*.png", "node_modules/"])
    flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
    wanted, tails = _matcher([pattern], flags)
    assert tails is not None

    def entries(**kw: Any) -> list[Entry]:
        walker = Walker(sandbox, include_hidden=True, excludes=excludes)
        return list(walker.walk("", **kw))

    shortcut = entries(wanted=wanted, suffixes=tails)
    assert shortcut == entries(wanted=wanted)
    assert shortcut == [e for e in entries() if wanted(e.rel)]
