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
