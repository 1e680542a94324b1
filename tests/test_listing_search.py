"""list_files, glob and search on real trees."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, run, user_config, write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.service import Worker
from forj_py.tools.search import find_rg


def _one(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    _, result = run(worker, [call("x", name, **args)], capacity_bytes=8_000_000)
    r = result["results"][0]
    return r


def _paths(r: dict[str, Any]) -> list[str]:
    assert r["ok"], r
    return [f["path"] for f in r["result"]["files"]]


IGNORE_TREE = {
    ".gitignore": "*.log\nbuild/\n!keep.log\n/top-only.txt\ndocs/*.tmp\n",
    "keep.log": "k",
    "drop.log": "d",
    "top-only.txt": "t",
    "build": {"out.bin": "b", "nested": {"x.py": "x"}},
    "src": {
        ".gitignore": "generated/\n*.py[co]\n!important.pyc\n",
        "main.py": "m",
        "main.pyc": "c",
        "important.pyc": "i",
        "top-only.txt": "nested copy is not ignored",
        "generated": {"g.py": "g"},
        "deep": {"secret1.txt": "s", "open.txt": "o", "x.log": "l"},
    },
    "docs": {"a.tmp": "a", "b.md": "b", "sub": {"c.tmp": "c"}},
    ".hidden": {"h.txt": "h"},
    ".env": "SECRET=1",
    "conf": {"id_rsa": "key", "ok.cfg": "fine"},
}


NO_DEFAULT_EXCLUDES = "[tools.listing]\ndefault_excludes = []\n"


def _git_visible(root: Path) -> set[str]:
    """Every file git does not ignore, by asking git itself."""
    env = dict(
        os.environ,
        HOME=str(root.parent),
        XDG_CONFIG_HOME=str(root.parent / "xdg"),
        GIT_CONFIG_NOSYSTEM="1",
    )
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    out = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "-z"],
        cwd=root,
        check=True,
        env=env,
        capture_output=True,
    ).stdout.decode()
    return {p for p in out.split("\0") if p}


def test_list_files_gitignore_semantics_match_git_check_ignore(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, IGNORE_TREE)
    user_config(NO_DEFAULT_EXCLUDES)  # ignore files alone, as git sees them
    expected = _git_visible(project)
    # What forj never shows, whatever git says: hidden names and secrets.
    expected = {p for p in expected if not any(part.startswith(".") for part in p.split("/"))}
    expected -= {"conf/id_rsa"}
    r = _one(make_worker(), "list_files", max_depth=10)
    files = {f["path"] for f in r["result"]["files"] if f["type"] == "file"}
    assert files == expected
    assert "src/top-only.txt" in files and "top-only.txt" not in files
    assert "keep.log" in files and "src/important.pyc" in files


@pytest.mark.skipif(find_rg() is None, reason="ripgrep is not installed")
def test_list_files_matches_rg_files_with_ignore_and_rgignore(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, IGNORE_TREE)
    write_tree(
        project,
        {
            "src": {"deep": {".ignore": "secret*.txt\n!x.log\n"}},
            "docs": {".rgignore": "b.md\n", ".ignore": "!b.md\n*.md\n"},
        },
    )
    rg = find_rg()
    assert rg is not None
    user_config(NO_DEFAULT_EXCLUDES)
    out = subprocess.run(
        [
            rg,
            "--files",
            "--no-config",
            "--no-ignore-global",
            "--no-ignore-parent",
            "--no-require-git",
            "--glob",
            "!**/id_rsa*",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    r = _one(make_worker(), "list_files", max_depth=10)
    files = {f["path"] for f in r["result"]["files"] if f["type"] == "file"}
    assert files == set(out)
    assert "src/deep/secret1.txt" not in files and "src/deep/x.log" in files
    assert "docs/b.md" not in files


def test_list_files_hidden_depth_and_entry_shape(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, IGNORE_TREE)
    worker = make_worker()
    shallow = _one(worker, "list_files", max_depth=1)
    assert set(_paths(shallow)) == {"README.md", "conf", "docs", "keep.log", "src"}
    entry = next(f for f in shallow["result"]["files"] if f["path"] == "README.md")
    assert entry["type"] == "file" and entry["size"] == 7 and isinstance(entry["mtime"], int)
    hidden = _paths(_one(worker, "list_files", include_hidden=True, max_depth=2))
    assert ".hidden/h.txt" in hidden and ".gitignore" in hidden
    assert ".env" not in hidden
    assert not any(p == ".git" or p.startswith(".git/") for p in hidden)
    sub = _paths(_one(worker, "list_files", directory="src", max_depth=1))
    assert "src/main.py" in sub and "src/generated" not in sub and "src/main.pyc" not in sub


def test_list_files_caps_and_says_so(make_worker: MakeWorker, project: Path) -> None:
    user_config("[tools.listing]\nmax_entries = 10\n")
    write_tree(project, {"many": {f"f{i:03}.txt": "x" for i in range(50)}})
    r = _one(make_worker(), "list_files")
    assert r["result"]["truncated"] is True and len(r["result"]["files"]) == 10
    assert r["result"]["shown"] == 10
    assert "Listed 10 entries breadth-first, the entry limit (10)" in r["result"]["note"]


def _deep_tree(levels: int, per_dir: int, width: int, name: str = "f") -> dict[str, Any]:
    tree: dict[str, Any] = {f"{name}{i:03}_{'x' * 40}.txt": "x" for i in range(per_dir)}
    if levels > 1:
        for d in range(width):
            tree[f"d{d}"] = _deep_tree(levels - 1, per_dir, width, name)
    return tree


def _depth(path: str) -> int:
    return path.count("/") + 1


def test_list_files_stopped_by_the_output_limit_says_so_truthfully(
    make_worker: MakeWorker, project: Path
) -> None:
    # 4 levels of 30 files and 3 subdirectories: 1,200 entries of ~90
    # bytes each, more than the default 100 KiB output limit holds.
    write_tree(project, {"tree": _deep_tree(4, 30, 3)})
    _, reply = run(make_worker(), [call("x", "list_files", max_depth=64)])
    r = reply["results"][0]["result"]
    files = [f["path"] for f in r["files"]]
    assert r["truncated"] is True and r["shown"] == len(files)
    assert (
        f"Listed {len(files)} entries breadth-first, as many as fit the output limit" in (r["note"])
    )
    # The walk stopped where the output limit would have: nothing was cut
    # after it (no marker, no second note).
    assert "cut to fit" not in r["note"]
    assert 500 < len(files) < 1200
    # Breadth first: everything above the deepest level shown is there.
    deepest = max(_depth(p) for p in files)
    every = [p.relative_to(project).as_posix() for p in project.rglob("*")]
    shallower = {p for p in every if _depth(p) < deepest and not p.startswith(".")}
    assert shallower <= set(files)
    claimed = int(r["note"].split("down to depth ")[1].split()[0])
    assert claimed == deepest - 1
    assert files == sorted(files)


def test_list_files_complete_listing_has_no_note(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"tree": _deep_tree(3, 5, 2)})
    r = _one(make_worker(), "list_files", max_depth=64)["result"]
    assert r["truncated"] is False and "note" not in r and "shown" not in r
    every = {p.relative_to(project).as_posix() for p in project.rglob("*")}
    assert {f["path"] for f in r["files"]} == {p for p in every if not p.startswith(".")}


def test_glob_stopped_by_the_output_limit_says_so_truthfully(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"tree": _deep_tree(4, 30, 3)})
    _, reply = run(make_worker(), [call("x", "glob", patterns=["**/*.txt"], max_results=5000)])
    r = reply["results"][0]["result"]
    assert r["truncated"] is True and r["shown"] == len(r["files"]) > 500
    assert (
        f"Listed {len(r['files'])} matches breadth-first, as many as fit the output" in (r["note"])
    )
    assert "cut to fit" not in r["note"]


def test_a_result_cut_only_by_the_output_limit_says_so(
    make_worker: MakeWorker, project: Path
) -> None:
    # search returns match lines the tool does not budget: the executor cuts them.
    write_tree(project, {f"m{i}.txt": ("needle " + "y" * 200 + "\n") * 20 for i in range(60)})
    user_config("[tools.output]\nmax_bytes = 8192\n")
    _, reply = run(make_worker(), [call("x", "search", query="needle", max_results=1000)])
    r = reply["results"][0]
    assert r["ok"], r
    assert r["result"]["truncated"] is True
    assert "cut to fit the output limit (8192 bytes)" in r["result"]["note"]


def test_list_files_symlinks_stay_inside(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write_tree(outside, {"secret.txt": "s"})
    (project / "out").symlink_to(outside)
    (project / "inner").symlink_to(project / "src")
    (project / "loop").symlink_to(project)
    worker = make_worker()
    plain = _one(worker, "list_files")["result"]["files"]
    assert {f["path"]: f["type"] for f in plain if f["path"] in ("out", "inner")} == {
        "out": "symlink",
        "inner": "symlink",
    }
    followed = _paths(_one(worker, "list_files", follow_symlinks=True, max_depth=4))
    assert "inner/main.py" in followed
    assert not any(p.startswith("out/") for p in followed)
    assert not any(p.startswith("loop/") for p in followed)


def test_list_files_errors(make_worker: MakeWorker) -> None:
    worker = make_worker()
    assert _one(worker, "list_files", directory="README.md")["error"]["type"] == "file-error"
    assert _one(worker, "list_files", directory="missing")["error"]["message"].startswith("No such")
    assert (
        _one(worker, "list_files", directory="..")["error"]["details"]["kind"] == "SandboxViolation"
    )


def test_glob_patterns(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, IGNORE_TREE)
    worker = make_worker()
    assert _paths(_one(worker, "glob", patterns=["**/*.py"])) == ["src/main.py"]
    assert _paths(_one(worker, "glob", patterns=["*.md"])) == ["README.md"]
    assert _paths(_one(worker, "glob", patterns=["docs/**", "./src/*.pyc"])) == [
        "docs/b.md",
        "docs/sub",
        "docs/sub/c.tmp",
        "src/important.pyc",
    ]
    assert _paths(_one(worker, "glob", patterns=["src/**/*.{txt,log}"])) == [
        "src/deep/open.txt",
        "src/deep/secret1.txt",
        "src/top-only.txt",
    ]
    assert ".hidden/h.txt" in _paths(
        _one(worker, "glob", patterns=["**/*.txt"], include_hidden=True)
    )
    capped = _one(worker, "glob", patterns=["**"], max_results=2)
    assert capped["result"]["truncated"] is True and len(capped["result"]["files"]) == 2
    assert _one(worker, "glob", patterns=["../*"])["error"]["type"] == "validation-error"


# --- search ---------------------------------------------------------------------------

needs_rg = pytest.mark.skipif(find_rg() is None, reason="ripgrep is not installed")


def _search(worker: Worker, **args: Any) -> dict[str, Any]:
    r = _one(worker, "search", **args)
    assert r["ok"], r
    return r["result"]


def _engines(make_worker: MakeWorker) -> tuple[Worker, Worker]:
    user_config("[tools.search]\nengine = 'ripgrep'\n")
    rg = make_worker()
    user_config("[tools.search]\nengine = 'python'\n")
    py = make_worker()
    return rg, py


def _generated_tree(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    words = [
        "alpha",
        "Beta",
        "gamma",
        "delta",
        "TODO",
        "fixme",
        "naïve",
        "café",
        "x",
        "(paren)",
        "a.b",
        "tab\there",
        "ÉCOLE",
        "foo_bar",
        "foobar",
        "FooBar",
    ]
    tree: dict[str, Any] = {".gitignore": "ignored/\n*.tmp\n"}
    for d in range(6):
        sub: dict[str, Any] = {}
        for f in range(8):
            lines = [
                " ".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
                for _ in range(rng.randint(0, 30))
            ]
            ext = rng.choice([".py", ".txt", ".md", ".tmp", ".el"])
            sub[f"file{f}{ext}"] = "\n".join(lines) + rng.choice(["", "\n"])
        tree[f"dir{d}"] = sub
    tree["ignored"] = {"hit.txt": "alpha TODO\n"}
    tree["bin.dat"] = b"alpha\x00TODO\x00binary"
    tree[".hidden.txt"] = "alpha hidden\n"
    tree[".env"] = "alpha=secret\n"
    tree["crlf.txt"] = "alpha\r\nTODO\r\n"
    write_tree(root, tree)


@needs_rg
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_search_ripgrep_and_fallback_agree_on_a_generated_tree(
    make_worker: MakeWorker, project: Path, seed: int
) -> None:
    _generated_tree(project, seed)
    rg, py = _engines(make_worker)
    queries: list[dict[str, Any]] = [
        {"query": "alpha"},
        {"query": "todo"},
        {"query": "TODO", "case_sensitive": True},
        {"query": "(paren)"},
        {"query": "a.b"},
        {"query": "foo_?bar", "is_regex": True},
        {"query": "^Beta", "is_regex": True},
        {"query": "é", "case_sensitive": False},
        {"query": "école"},
        {"query": "alpha", "include_paths": ["dir1/**", "*.md"]},
        {"query": "alpha", "exclude_paths": ["*.py", "dir2/"]},
        {"query": "gamma", "max_results": 7},
        {"query": "x", "max_results": 3},
    ]
    for q in queries:
        a, b = _search(rg, **q), _search(py, **q)
        assert a["engine"] == "ripgrep" and b["engine"] == "python"
        assert a["matches"] == b["matches"], q
        assert a["truncated"] == b["truncated"], q
        paths = {m["path"] for m in a["matches"]}
        assert not paths & {"ignored/hit.txt", "bin.dat", ".hidden.txt", ".env"}, q


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_forj_test_tools_search_matches_capped(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    user_config(f"[tools.search]\nengine = '{engine}'\n")
    r = _search(make_worker(), query="line", max_results=5)
    assert len(r["matches"]) == 5 and r["truncated"] is True
    first = r["matches"][0]
    assert first == {
        "path": "src/main.py",
        "line": 1,
        "column": 1,
        "match_text": "line",
        "before": "",
        "after": " 1",
    }


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_search_bad_regex_quotes_the_engine(make_worker: MakeWorker, engine: str) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    user_config(f"[tools.search]\nengine = '{engine}'\n")
    r = _one(make_worker(), "search", query="(unclosed", is_regex=True)
    assert r["error"]["type"] == "validation-error"
    assert "Invalid regex" in r["error"]["message"]
    assert ("unclosed" in r["error"]["message"].lower()) or (
        "missing" in r["error"]["message"].lower()
    )


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_search_skips_huge_files(make_worker: MakeWorker, project: Path, engine: str) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    user_config(f"[tools.search]\nengine = '{engine}'\n[tools.read_file]\nmax_scan_bytes = 4096\n")
    (project / "huge.txt").write_text("needle\n" + "x" * 10_000)
    (project / "small.txt").write_text("needle\n")
    r = _search(make_worker(), query="needle")
    assert [m["path"] for m in r["matches"]] == ["small.txt"]


def test_search_columns_count_characters(make_worker: MakeWorker, project: Path) -> None:
    (project / "u.txt").write_text("café naïve target\n")
    rg, py = _engines(make_worker)
    for worker in (rg, py):
        (m,) = _search(worker, query="target")["matches"]
        assert m["column"] == 12 and m["before"] == "café naïve "


_GI_POOL = [
    "*",
    "!*/",
    "!*.py",
    "*.log",
    "!keep.log",
    "build/",
    "/a",
    "!a/**",
    "a/**",
    "foo/**",
    "!foo/keep",
    "docs/*",
    "!docs/b.md",
    "src/",
    "!src/",
    "*.txt",
    "/top.txt",
    "deep/",
    "**/x.py",
    "!**/x.py",
    "foo",
    "!foo/",
    "*/",
    "sub/*.log",
]
_GI_TREE = {
    "a": {"c.txt": "c", "d.py": "d"},
    "b.py": "b",
    "top.txt": "t",
    "keep.log": "k",
    "drop.log": "d",
    "build": {"out.o": "o", "x.py": "x"},
    "foo": {"keep": "k", "other": "o", "x.py": "x"},
    "docs": {"b.md": "b", "c.md": "c", "sub": {"e.md": "e"}},
    "src": {"x.py": "x", "deep": {"y.txt": "y", "z.py": "z"}, "sub": {"l.log": "l"}},
}


@pytest.mark.parametrize("seed", range(40))
def test_list_files_agrees_with_git_on_random_ignore_files(
    make_worker: MakeWorker, project: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for child in project.iterdir():
        if child.is_dir():
            import shutil

            shutil.rmtree(child)
        else:
            child.unlink()
    write_tree(project, _GI_TREE)
    lines = [rng.choice(_GI_POOL) for _ in range(rng.randint(1, 5))]
    (project / ".gitignore").write_text("\n".join(lines) + "\n")
    user_config(NO_DEFAULT_EXCLUDES)
    expected = {p for p in _git_visible(project) if p != ".gitignore"}
    r = _one(make_worker(), "list_files", max_depth=10)
    files = {f["path"] for f in r["result"]["files"] if f["type"] == "file"}
    assert files == expected, lines


# --- default excludes: vendored trees and binaries by extension -------------------------

VENDORED_TREE = {
    "node_modules": {"react": {"index.js": "alpha react\n", "logo.png": "alpha"}},
    "src": {"app.js": "alpha app\n", "node_modules": {"dep.js": "alpha nested dep\n"}},
    "assets": {"logo.png": "alpha png\n", "IMG.PNG": "alpha upper\n", "icon.svg": "alpha svg\n"},
    "lisp": {"forj.el": "alpha el\n", "forj.elc": "alpha elc\n"},
}


def test_seed001_default_excludes_keep_vendored_trees_and_binaries_out_of_listings(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, VENDORED_TREE)
    worker = make_worker()
    listed = _one(worker, "list_files", max_depth=10)
    paths = set(_paths(listed))
    assert {"src/app.js", "assets/icon.svg", "lisp/forj.el"} <= paths
    assert not {p for p in paths if "node_modules" in p or p.lower().endswith((".png", ".elc"))}
    # It says what it left out and how to see it.
    assert listed["result"]["excluded"] == 5
    assert "node_modules/" in listed["result"]["note"]
    assert "'node_modules/**'" in listed["result"]["note"]
    # Named, it is listed: the directory, and what lies below it.
    assert _paths(_one(worker, "list_files", directory="node_modules/react")) == [
        "node_modules/react/index.js"
    ]
    assert "node_modules/react/index.js" in _paths(
        _one(worker, "list_files", directory="node_modules", max_depth=3)
    )
    assert _paths(_one(worker, "list_files", directory="src/node_modules")) == [
        "src/node_modules/dep.js"
    ]
    # Globs: excluded unless the pattern spells the excluded part out.
    assert _paths(_one(worker, "glob", patterns=["**/*.js"])) == ["src/app.js"]
    assert _paths(_one(worker, "glob", patterns=["node_modules/**/*.js"])) == [
        "node_modules/react/index.js"
    ]
    assert _paths(_one(worker, "glob", patterns=["**/*.js", "assets/*.{png,PNG}"])) == [
        "assets/IMG.PNG",
        "assets/logo.png",
        "src/app.js",
    ]
    # '*.png' is named, node_modules is not.
    assert _paths(_one(worker, "glob", patterns=["**/*.png"])) == ["assets/logo.png"]
    # Reads are not affected.
    read = _one(worker, "read_file", path="node_modules/react/index.js")
    assert read["result"]["content"] == "alpha react\n"


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_seed001_default_excludes_keep_vendored_trees_and_binaries_out_of_search(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    write_tree(project, VENDORED_TREE)
    user_config(f"[tools.search]\nengine = '{engine}'\n")
    worker = make_worker()

    def found(**args: Any) -> list[str]:
        return sorted({m["path"] for m in _search(worker, query="alpha", **args)["matches"]})

    assert found() == ["assets/icon.svg", "lisp/forj.el", "src/app.js"]
    # include_paths that name an excluded part search it, and only what they name.
    assert found(include_paths=["node_modules/**", "*.js"]) == [
        "node_modules/react/index.js",
        "src/app.js",
    ]
    assert found(include_paths=["**/node_modules/**"]) == [
        "node_modules/react/index.js",
        "src/node_modules/dep.js",
    ]
    assert found(include_paths=["*.png"]) == ["assets/logo.png"]
    assert found(include_paths=["assets/"]) == ["assets/icon.svg"]
    assert found(include_paths=["node_modules/react/**"]) == ["node_modules/react/index.js"]


def test_seed001_default_excludes_are_configurable(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, VENDORED_TREE)
    user_config("[tools.listing]\ndefault_excludes = []\n")
    paths = set(_paths(_one(make_worker(), "list_files", max_depth=10)))
    assert {"node_modules/react/index.js", "assets/IMG.PNG", "lisp/forj.elc"} <= paths
    user_config("[tools.listing]\ndefault_excludes = ['assets/', '*.elc']\n")
    worker = make_worker()
    listed = _one(worker, "list_files", max_depth=10)
    paths = set(_paths(listed))
    assert "node_modules/react/index.js" in paths and "lisp/forj.el" in paths
    assert not {p for p in paths if p.startswith("assets") or p.endswith(".elc")}
    assert listed["result"]["excluded"] == 2


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("['!node_modules/']", "cannot be negated"),
        ("['']", "empty or a comment"),
        ("['a/**/b/**/c/**']", "at most two '**'"),
        ("'node_modules/'", "tools.listing.default_excludes: got 'node_modules/'"),
    ],
)
def test_seed001_default_excludes_bad_values_name_the_key(
    project: Path, value: str, message: str
) -> None:
    from forj_py.config import ConfigError, load

    user_config(f"[tools.listing]\ndefault_excludes = {value}\n")
    with pytest.raises(ConfigError, match="default_excludes") as info:
        load(project)
    assert message in str(info.value)


_NAME_PARTS = st.sampled_from(
    ["a", "B", ".", "png", "PNG", "tar", "gz", "node_modules", "Node_Modules", "x", "-", "~"]
)


@given(
    parts=st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=4), min_size=1, max_size=4),
    is_dir=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_seed001_default_excludes_by_name_agree_with_gitignore_rules(
    parts: list[list[str]], is_dir: bool
) -> None:
    """The name lookups the walk uses decide as the gitignore rules they stand for."""
    from forj_py.config import DEFAULT_EXCLUDES
    from forj_py.system.walk import Excludes, _compile

    rel = "/".join("".join(p) for p in parts)
    patterns = (*DEFAULT_EXCLUDES, "*.tar.gz", "a.b", "x~/")
    reference = _compile(list(patterns), ignore_case=True).verdict(rel, is_dir) is True
    assert Excludes(patterns).matches(rel, is_dir) == reference, rel


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_search_truncated_past_max_results_keeps_the_first_by_path(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    # 900 matching lines: past the first 11 the search only skips (ripgrep's
    # later lines are not decoded, the fallback's later files not read), and
    # what comes back is still the first 10 by path and line, with a note.
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    user_config(f"[tools.search]\nengine = '{engine}'\n")
    names = [f"d{i % 7}/f{i:03}.txt" for i in range(300)]
    tree: dict[str, Any] = {}
    for name in names:
        folder, file = name.split("/")
        tree.setdefault(folder, {})[file] = "hit one\nmiss\nhit two\nhit three\n"
    write_tree(project, tree)
    r = _search(make_worker(), query="hit", max_results=10)
    first = sorted(names)[:4]
    expected = [(p, line) for p in first for line in (1, 3, 4)][:10]
    assert [(m["path"], m["line"]) for m in r["matches"]] == expected
    assert r["truncated"] is True
    assert "more matches than the 10 shown" in r["note"]


@needs_rg
def test_search_orders_directory_by_directory_and_stops_at_the_first_by_path(
    make_worker: MakeWorker, project: Path
) -> None:
    # Names that sort differently as strings ('a-b.txt' < 'a.txt' < 'a/z.txt')
    # and as a tree lists them ('a' first, then 'a b.txt', 'a-b.txt'...): the
    # results follow the tree, which is the order ripgrep is stopped in.
    write_tree(
        project,
        {
            "a": {"z.txt": "hit\nhit\n", "b": {"c.txt": "hit\n"}},
            "a-b.txt": "hit\n",
            "a.txt": "hit\nmiss\nhit\n",
            "a b.txt": "hit\n",
            "a0.txt": "hit\n",
            "A.txt": "hit\n",
        },
    )
    tree_order = [
        ("A.txt", 1),
        ("a/b/c.txt", 1),
        ("a/z.txt", 1),
        ("a/z.txt", 2),
        ("a b.txt", 1),
        ("a-b.txt", 1),
        ("a.txt", 1),
        ("a.txt", 3),
        ("a0.txt", 1),
    ]
    rg, py = _engines(make_worker)
    for worker in (rg, py):
        everything = _search(worker, query="hit", case_sensitive=True, include_paths=["a*", "A*"])
        assert [(m["path"], m["line"]) for m in everything["matches"]] == tree_order
        assert everything["truncated"] is False
        for cut in (1, 3, 4, 8):
            r = _search(
                worker,
                query="hit",
                case_sensitive=True,
                include_paths=["a*", "A*"],
                max_results=cut,
            )
            assert [(m["path"], m["line"]) for m in r["matches"]] == tree_order[:cut], cut
            assert r["truncated"] is True
            assert f"more matches than the {cut} shown" in r["note"]
