"""The sandbox (seed 000 FR-VAL-04..06): validation, denied patterns, symlink safety."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from conftest import MakeWorker, call, run, user_config, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forj_py.errors import ToolFailure
from forj_py.safety.paths import Sandbox


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A project with symlinks pointing in and out, and a secret outside it."""
    outside = tmp_path / "outside"
    root = tmp_path / "root"
    write_tree(outside, {"secret.txt": "top secret\n", "dir": {"f.txt": "outside\n"}})
    write_tree(
        root,
        {
            "a.txt": "a\n",
            "sub": {"b.txt": "b\n", "deep": {"c.txt": "c\n"}},
            ".ssh": {"id": "key\n"},
            "cert.pem": "pem\n",
            ".env": "SECRET=1\n",
            "config": {"settings.ini": "x=1\n"},
        },
    )
    (root / "in_link").symlink_to(root / "sub")
    (root / "out_link").symlink_to(outside)
    (root / "out_file").symlink_to(outside / "secret.txt")
    (root / "dangling_out").symlink_to(outside / "not-yet")
    (root / "innocent.txt").symlink_to(root / ".ssh" / "id")
    (root / "loop").symlink_to(root / "loop")
    return root, outside


def _reason(exc: pytest.ExceptionInfo[ToolFailure]) -> str:
    return str(exc.value.error.details.get("reason"))


def test_t_sbx_01_rejects_dotdot(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root)
    for path in ["../outside/secret.txt", "sub/../../outside", "sub/..", "..", "a/../a.txt"]:
        with pytest.raises(ToolFailure) as exc:
            sb.resolve(path)
        assert _reason(exc) == "PathOutsideSandbox", path
        assert exc.value.error.type.value == "validation-error"


def test_t_sbx_02_rejects_absolute_paths_when_disallowed(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    sb = Sandbox(root)
    for path in [str(root / "a.txt"), "/etc/passwd", str(outside / "secret.txt")]:
        with pytest.raises(ToolFailure) as exc:
            sb.resolve(path)
        assert _reason(exc) == "PathOutsideSandbox"
    allowed = Sandbox(root, allow_absolute=True)
    assert allowed.resolve(str(root / "a.txt")).display == "a.txt"
    with pytest.raises(ToolFailure):
        allowed.resolve(str(outside / "secret.txt"))


def test_t_sbx_03_denied_patterns_match_on_canonical_path(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root, denied_patterns=["config/**"])
    cases = {
        ".ssh/id": "**/.ssh/**",
        ".ssh": "**/.ssh/**",
        "cert.pem": "**/*.pem",
        ".env": "**/.env",
        # the link's own name is harmless; where it leads is not
        "innocent.txt": "**/.ssh/**",
        "config/settings.ini": "config/**",
        "sub/x.key": "**/*.key",
    }
    for path, pattern in cases.items():
        with pytest.raises(ToolFailure) as exc:
            sb.resolve(path)
        assert _reason(exc) == "DeniedPatternMatched", path
        assert exc.value.error.details["pattern"] == pattern, path
    assert sb.resolve("a.txt").rel == "a.txt"


def test_include_default_denies_false_drops_only_the_defaults(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root, denied_patterns=["*.pem"], include_default_denies=False)
    assert sb.resolve(".env").rel == ".env"
    with pytest.raises(ToolFailure):
        sb.resolve("cert.pem")


def test_negated_denied_patterns_are_refused(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with pytest.raises(ValueError, match="cannot be negated"):
        Sandbox(root, denied_patterns=["!cert.pem"])


def test_symlinks_out_of_the_root_are_rejected(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root)
    for path in ["out_link/secret.txt", "out_file", "out_link", "dangling_out"]:
        with pytest.raises(ToolFailure) as exc:
            sb.resolve(path)
        assert _reason(exc) == "PathOutsideSandbox", path


def test_symlinks_inside_the_root_resolve_to_their_target(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sp = Sandbox(root).resolve("in_link/b.txt")
    assert sp.canonical == str(root / "sub" / "b.txt")
    assert sp.display == "sub/b.txt"
    assert sp.exists


def test_fr_val_04a_resolution_is_canonical_and_absolute(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root)
    sp = sb.resolve("./sub//deep/./c.txt")
    assert sp.canonical == str(root / "sub" / "deep" / "c.txt")
    new = sb.resolve("sub/new/file.txt")
    assert not new.exists
    assert new.canonical == str(root / "sub" / "new" / "file.txt")
    assert sb.resolve("c.txt", base=str(root / "sub" / "deep")).rel == "sub/deep/c.txt"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "Path is empty"),
        ("a\x00b", "NUL byte"),
        ("bad\udc80name", "not valid Unicode"),
        ("x" * 5000, "longer than"),
    ],
)
def test_bad_path_text_is_a_validation_error(
    tree: tuple[Path, Path], path: str, message: str
) -> None:
    root, _ = tree
    with pytest.raises(ToolFailure) as exc:
        Sandbox(root).resolve(path)
    assert message in exc.value.error.message
    assert exc.value.error.recovery


def test_symlink_loop_is_rejected_or_fails_safely(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root)
    try:
        sp = sb.resolve("loop")
    except ToolFailure:
        return
    with pytest.raises(ToolFailure):
        os.close(sb.open_regular(sp))


# --- property: nothing generated ever lands outside the root --------------------

_segments = st.sampled_from(
    [
        "a.txt",
        "sub",
        "deep",
        "c.txt",
        "..",
        ".",
        "",
        "in_link",
        "out_link",
        "out_file",
        "dangling_out",
        "loop",
        "new",
        "secret.txt",
        "/",
        "~",
        "...",
        "sub\\..\\..",
    ]
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(_segments, min_size=1, max_size=6), absolute=st.booleans())
def test_property_no_generated_path_resolves_outside_the_root(
    tree: tuple[Path, Path], parts: list[str], absolute: bool
) -> None:
    root, _ = tree
    sb = Sandbox(root, allow_absolute=absolute)
    path = "/".join(parts)
    if absolute:
        path = str(root) + "/" + path
    try:
        sp = sb.resolve(path)
    except ToolFailure as failure:
        assert failure.error.recovery
        return
    real_root = os.path.realpath(root)
    assert sp.canonical == real_root or sp.canonical.startswith(real_root + os.sep)
    assert os.path.realpath(sp.canonical) == sp.canonical or not os.path.lexists(sp.canonical)
    if sp.exists and os.path.isfile(sp.canonical):
        os.close(sb.open_regular(sp))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=st.text(max_size=60))
def test_property_arbitrary_text_never_escapes_or_crashes(
    tree: tuple[Path, Path], path: str
) -> None:
    root, _ = tree
    try:
        sp = Sandbox(root).resolve(path)
    except ToolFailure:
        return
    assert sp.canonical.startswith(os.path.realpath(root))


# --- symlink swap after validation (FR-VAL-06) ---------------------------------------


def test_fr_val_06_directory_swapped_for_symlink_after_validation(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    sb = Sandbox(root)
    (root / "work").mkdir()
    (root / "work" / "secret.txt").write_text("inside\n")
    sp = sb.resolve("work/secret.txt")
    # After validation, swap the directory for a link to the outside.
    (root / "work" / "secret.txt").unlink()
    (root / "work").rmdir()
    (root / "work").symlink_to(outside)
    with pytest.raises(ToolFailure) as exc:
        sb.open_regular(sp)
    assert "changed while it was being opened" in exc.value.error.message


def test_fr_val_06_file_swapped_for_symlink_after_validation(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    sb = Sandbox(root)
    sp = sb.resolve("a.txt")
    (root / "a.txt").unlink()
    (root / "a.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolFailure):
        sb.open_regular(sp)


def test_fr_val_06_file_replaced_after_validation_is_detected(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sb = Sandbox(root)
    sp = sb.resolve("a.txt")
    (root / "a.txt").rename(root / "old.txt")
    (root / "a.txt").write_text("another file\n")
    with pytest.raises(ToolFailure) as exc:
        sb.open_regular(sp)
    assert "changed" in exc.value.error.message


def test_fr_val_06_race_swapping_symlinks_never_reads_outside(
    tree: tuple[Path, Path], make_worker: MakeWorker
) -> None:
    """A thread flips a directory between real and a link out while reads run."""
    root, outside = tree
    (outside / "dir" / "f.txt").write_text("OUTSIDE\n")
    real = root / "flip_real"
    real.mkdir()
    (real / "f.txt").write_text("inside\n")
    flip = root / "flip"
    flip.symlink_to(real)  # a symlink inside the root: allowed
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            tmp = root / "flip.tmp"
            tmp.symlink_to(outside / "dir")
            os.replace(tmp, flip)
            tmp.symlink_to(real)
            os.replace(tmp, flip)

    worker = make_worker(root)
    thread = threading.Thread(target=flipper)
    thread.start()
    try:
        seen = set()
        for _ in range(300):
            _, result = run(worker, [call("1", "read_file", path="flip/f.txt")])
            r = result["results"][0]
            if r["ok"]:
                seen.add(r["result"]["content"])
            else:
                assert r["error"]["details"]["reason"] == "PathOutsideSandbox", r
    finally:
        stop.set()
        thread.join()
    assert "OUTSIDE\n" not in seen


def test_denied_and_outside_paths_through_the_worker_touch_nothing(
    tree: tuple[Path, Path], make_worker: MakeWorker
) -> None:
    root, _ = tree
    user_config("")
    worker = make_worker(root)
    paths = [
        "../outside/secret.txt",
        "/etc/passwd",
        "out_link/secret.txt",
        ".env",
        "a\x00b",
        "innocent.txt",
    ]
    _, result = run(worker, [call(str(i), "read_file", path=p) for i, p in enumerate(paths)])
    assert all(not r["ok"] for r in result["results"])
    assert all(r["error"]["recovery"] for r in result["results"])
    assert worker.session.file_reads == {}


@pytest.mark.parametrize(
    ("pattern", "denied", "allowed"),
    [
        ("*/", ["a/b.txt"], ["top.txt"]),
        ("secrets/", ["secrets/x", "a/secrets/y"], ["secretsx/z"]),
        ("/private", ["private/x"], ["a/private/x"]),
        ("*.bak", ["x.bak", "d/y.BAK"], ["x.bakery"]),
    ],
)
def test_denied_patterns_have_gitignore_semantics(
    project: Path, pattern: str, denied: list[str], allowed: list[str]
) -> None:
    for path in allowed:
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text("x")
    sandbox = Sandbox(project, denied_patterns=[pattern], include_default_denies=False)
    for path in denied:
        with pytest.raises(ToolFailure):
            sandbox.resolve(path)
    for path in allowed:
        sandbox.resolve(path)
