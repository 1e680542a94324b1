"""The command sandbox's index of denied files, on its own (no bubblewrap needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forj_py.safety import commands
from forj_py.safety.commands import MaskIndex
from forj_py.safety.paths import Sandbox


def _index(root: Path) -> MaskIndex:
    index = MaskIndex(Sandbox(root))
    index.start()
    assert index.wait(10)
    return index


def test_the_entry_budget_bounds_each_walk_not_the_whole_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long session walks many new directories; each walk has the budget
    # to itself, so the hundredth new directory is indexed like the first.
    monkeypatch.setattr(commands, "MAX_INDEXED_ENTRIES", 40)
    root = tmp_path / "p"
    root.mkdir()
    for n in range(20):
        (root / f"f{n}.txt").write_text("x\n")
    index = _index(root)
    for round_ in range(10):
        new = root / f"new{round_}"
        new.mkdir()
        for n in range(15):
            (new / f"f{n}.txt").write_text("x\n")
        (new / ".env").write_text("TOKEN=x\n")
        index.changed(str(new))
        assert f"new{round_}/.env" in index.current().files


def test_names_that_are_not_utf8_are_judged_and_cost_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "deploy").mkdir(parents=True)
    (root / ".env").write_text("TOKEN=x\n")
    (root / "deploy" / "server.pem").write_text("key\n")
    raw = os.fsencode(root)
    for name in (b"caf\xe9.txt", b"caf\xe9.pem"):
        with open(os.path.join(raw, name), "w") as fh:
            fh.write("x\n")
    masks = _index(root).current()
    assert {".env", "deploy/server.pem", os.fsdecode(b"caf\xe9.pem")} <= set(masks.files)
    assert os.fsdecode(b"caf\xe9.txt") not in masks.files


def test_read_only_trees_are_searched_for_secrets_too(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / ".git").mkdir(parents=True)
    (root / "vendor" / "lib" / ".git").mkdir(parents=True)
    (root / "vendor" / "lib" / ".git" / "id_ed25519").write_text("key\n")
    (root / "vendor" / "lib" / ".git" / "HEAD").write_text("ref\n")
    index = _index(root)
    masks = index.current()
    assert {".git", "vendor/lib/.git"} <= set(masks.readonly)
    assert "vendor/lib/.git/id_ed25519" in masks.files
    # One that arrives later, under a read-only tree, is heard of too.
    (root / ".git" / "deploy.pem").write_text("key\n")
    index.changed(str(root / ".git" / "deploy.pem"))
    assert ".git/deploy.pem" in index.current().files


def _deep_chain(root: Path, levels: int, name: str = "x" * 200) -> int:
    """``levels`` nested directories of ``name`` under ``root``; the deepest's descriptor."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def test_directories_too_deep_to_index_are_masked_whole(tmp_path: Path) -> None:
    # Past PATH_MAX neither the walk nor a mount can name a secret, while a
    # command can still walk there one step at a time: the deepest directory
    # that can be named is masked whole.
    root = tmp_path / "p"
    root.mkdir()
    (root / "shallow").mkdir()
    (root / "shallow" / "notes.txt").write_text("x\n")
    fd = _deep_chain(root, 25)
    secret = os.open(".env", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(secret, b"TOKEN=x\n")
    os.close(secret)
    os.close(fd)
    index = _index(root)
    masks = index.current()
    assert len(masks.dirs) == 1
    (deep,) = masks.dirs
    assert deep.startswith("x" * 200 + "/")
    assert len(os.fsencode(root)) + 1 + len(deep) + 255 >= 4096
    assert "shallow" not in masks.dirs and not masks.files
    # One made while the worker runs is masked whole when the watcher tells.
    fd = _deep_chain(root / "shallow", 25, "y" * 200)
    os.close(fd)
    for depth in range(1, 26):
        index.changed(str(root / "shallow" / "/".join(["y" * 200] * depth)))
        if len(index.current().dirs) > 1:
            break
    assert any(d.startswith("shallow/" + "y" * 200) for d in index.current().dirs)
