"""The writing tools: write_file, edit_region, multi_edit, edit."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import MakeWorker, call, run, user_config
from conftest import run_approved as _exec

from forj_py.service import Worker


def _read(worker: Worker, path: str) -> None:
    (r,) = _exec(worker, call("r", "read_file", path=path))
    assert r["ok"], r


@contextmanager
def tmpfs(path: Path, *, size: str = "64k", readonly: bool = False) -> Iterator[Path]:
    """A real small file system mounted at ``path`` (root only)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
        if readonly:
            pass
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _remount_ro(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


# --- write_file -------------------------------------------------------------------


def test_write_file_creates_files_and_directories(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    (r,) = _exec(worker, call("w", "write_file", path="new/dir/hello.txt", content="hi\n"))
    assert r["ok"], r
    assert (project / "new/dir/hello.txt").read_text() == "hi\n"
    res = r["result"]
    assert res["created"] is True and res["backup_path"] is None and res["bytes_written"] == 3
    assert res["preview"].startswith("--- /dev/null\n+++ b/new/dir/hello.txt\n")


def test_write_file_existing_requires_a_read_then_backs_up(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (r,) = _exec(worker, call("w", "write_file", path="README.md", content="new\n"))
    assert r["error"]["type"] == "stale-file"
    assert r["error"]["details"]["reason"] == "File was not read before editing"
    assert (project / "README.md").read_text() == "# demo\n"
    _read(worker, "README.md")
    (r,) = _exec(worker, call("w", "write_file", path="README.md", content="new\n"))
    assert r["ok"], r
    assert (project / "README.md").read_text() == "new\n"
    backup = Path(r["result"]["backup_path"])
    assert backup.read_text() == "# demo\n"
    assert project not in backup.parents
    assert (
        r["result"]["preview"] == "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+new\n"
    )


def test_stale_file_after_an_outside_change(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    (project / "README.md").write_text("changed by the user\n")
    (r,) = _exec(worker, call("w", "write_file", path="README.md", content="x\n"))
    assert r["error"]["type"] == "stale-file"
    assert r["error"]["details"]["kind"] == "StaleFile"
    assert "changed since it was last read" in r["error"]["message"]
    assert (project / "README.md").read_text() == "changed by the user\n"


def test_a_write_counts_as_a_read_of_what_was_written(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _exec(worker, call("w", "write_file", path="f.txt", content="a\nb\n"))
    (r,) = _exec(worker, call("e", "edit", path="f.txt", old_string="b", new_string="c"))
    assert r["ok"], r
    assert (project / "f.txt").read_text() == "a\nc\n"


def test_write_file_append_dry_run_and_create_if_missing(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    (r,) = _exec(worker, call("a", "write_file", path="README.md", content="more\n", append=True))
    assert r["ok"] and r["result"]["bytes_written"] == 5
    assert (project / "README.md").read_text() == "# demo\nmore\n"
    (r,) = _exec(worker, call("d", "write_file", path="README.md", content="gone\n", dry_run=True))
    assert r["result"]["dry_run"] is True and "+gone" in r["result"]["preview"]
    assert (project / "README.md").read_text() == "# demo\nmore\n"
    (r,) = _exec(
        worker, call("m", "write_file", path="nope.txt", content="x", create_if_missing=False)
    )
    assert r["error"]["type"] == "file-error" and not (project / "nope.txt").exists()


def test_write_file_keeps_the_original_mode(make_worker: MakeWorker, project: Path) -> None:
    script = project / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o751)
    worker = make_worker()
    _read(worker, "run.sh")
    (r,) = _exec(worker, call("w", "write_file", path="run.sh", content="#!/bin/sh\necho bye\n"))
    assert r["ok"]
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    leftovers = [p for p in project.iterdir() if ".forj-" in p.name]
    assert leftovers == []


def test_forj_test_tools_write_file_validation_fails(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    bad = '(defun broken ()\n  (message "unclosed)\n'
    (r,) = _exec(worker, call("w", "write_file", path="lisp/broken.el", content=bad))
    assert r["error"]["type"] == "validation-error"
    assert "not readable Emacs Lisp" in r["error"]["message"]
    assert r["error"]["details"]["line"] == 2
    assert not (project / "lisp").exists()
    good = '(defun ok () (message "fine ?( \\"") ?\\( [1 2])\n'
    (r,) = _exec(worker, call("w", "write_file", path="lisp/ok.el", content=good))
    assert r["ok"], r


def test_writes_cannot_leave_the_project_or_touch_secrets(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    results = _exec(
        worker,
        call("1", "write_file", path="../escape.txt", content="x"),
        call("2", "write_file", path=".env", content="X=1"),
        call("3", "write_file", path="keys/id_rsa", content="k"),
        call("4", "write_file", path=str(project / "abs.txt"), content="x"),
    )
    assert [r["error"]["details"]["kind"] for r in results] == ["SandboxViolation"] * 4
    assert not (project.parent / "escape.txt").exists()
    assert not (project / ".env").exists()


# --- edit_region ----------------------------------------------------------------------


def test_edit_region_replaces_lines(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="src/main.py",
            start_line=2,
            end_line=3,
            new_content="two\nthree",
            expected="line 2\nline 3\n",
        ),
    )
    assert r["ok"], r
    lines = (project / "src/main.py").read_text().splitlines()
    assert lines[:4] == ["line 1", "two", "three", "line 4"]
    assert r["result"]["changed"] is True and r["result"]["backup_path"]


def test_forj_test_tools_edit_region_bounds(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    before = (project / "src/main.py").read_text()
    for start, end in [(101, 105), (50, 200), (5, 3)]:
        (r,) = _exec(
            worker,
            call(
                "e",
                "edit_region",
                path="src/main.py",
                start_line=start,
                end_line=end,
                new_content="x",
            ),
        )
        assert r["error"]["type"] == "validation-error", (start, end)
        assert "100 line(s)" in r["error"]["message"]
    assert (project / "src/main.py").read_text() == before


def test_edit_region_expected_mismatch_shows_a_diff(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="src/main.py",
            start_line=1,
            end_line=1,
            new_content="x",
            expected="line one\n",
        ),
    )
    msg = r["error"]["message"]
    assert "-line one" in msg and "+line 1" in msg and "nothing was changed" in msg


def test_edit_region_insert_and_crlf(make_worker: MakeWorker, project: Path) -> None:
    (project / "win.txt").write_bytes(b"a\r\nb\r\n")
    worker = make_worker()
    _read(worker, "win.txt")
    (r,) = _exec(
        worker,
        call(
            "i", "edit_region", path="win.txt", start_line=2, end_line=1, new_content="inserted\n"
        ),
    )
    assert r["ok"], r
    assert (project / "win.txt").read_bytes() == b"a\r\ninserted\r\nb\r\n"
    (r,) = _exec(
        worker,
        call("i2", "edit_region", path="win.txt", start_line=4, end_line=3, new_content="end"),
    )
    assert (project / "win.txt").read_bytes() == b"a\r\ninserted\r\nb\r\nend\r\n"


# --- multi_edit -----------------------------------------------------------------------


def test_multi_edit_across_files_with_original_line_numbers(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "b.txt").write_text("1\n2\n3\n4\n")
    worker = make_worker()
    _read(worker, "src/main.py")
    _read(worker, "b.txt")
    edits = [
        {"path": "b.txt", "start_line": 1, "end_line": 1, "new_content": "one\nuno"},
        {"path": "b.txt", "start_line": 3, "end_line": 4, "new_content": "three-four"},
        {"path": "src/main.py", "start_line": 100, "end_line": 100, "new_content": "last"},
    ]
    (r,) = _exec(worker, call("m", "multi_edit", edits=edits))
    assert r["ok"], r
    assert (project / "b.txt").read_text() == "one\nuno\n2\nthree-four\n"
    assert (project / "src/main.py").read_text().endswith("line 99\nlast\n")
    assert r["result"]["applied"] == 3 and r["result"]["skipped"] == 0
    assert [d["path"] for d in r["result"]["details"]] == ["b.txt", "b.txt", "src/main.py"]


def test_multi_edit_dry_run_reports_changed_exactly_when_content_differs(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "b.txt").write_text("1\n2\n3\n")
    worker = make_worker()
    edits = [
        {"path": "b.txt", "start_line": 2, "end_line": 2, "new_content": "two"},
        {"path": "src/main.py", "start_line": 1, "end_line": 1, "new_content": "line 1"},
    ]
    (r,) = _exec(worker, call("m", "multi_edit", edits=edits, dry_run=True))
    assert r["ok"], r
    res = r["result"]
    assert res["dry_run"] is True and res["applied"] == 0
    assert "-2\n+two" in res["preview"] and "main.py" not in res["preview"]
    assert [d["changed"] for d in res["details"]] == [True, False]
    assert all(d["backup_path"] is None for d in res["details"])
    assert (project / "b.txt").read_text() == "1\n2\n3\n"


def test_multi_edit_overlapping_ranges_are_refused(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    edits = [
        {"path": "src/main.py", "start_line": 1, "end_line": 5, "new_content": "a"},
        {"path": "src/main.py", "start_line": 5, "end_line": 6, "new_content": "b"},
    ]
    (r,) = _exec(worker, call("m", "multi_edit", edits=edits))
    assert "overlap" in r["error"]["message"]


def test_multi_edit_stop_on_error_false_applies_what_it_can(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "b.txt").write_text("x\n")
    worker = make_worker()
    _read(worker, "b.txt")  # src/main.py is not read: its edit fails
    edits = [
        {"path": "src/main.py", "start_line": 1, "end_line": 1, "new_content": "a"},
        {"path": "b.txt", "start_line": 1, "end_line": 1, "new_content": "y"},
    ]
    (r,) = _exec(worker, call("m", "multi_edit", edits=edits, stop_on_error=False))
    assert r["ok"], r
    assert r["result"]["applied"] == 1 and r["result"]["skipped"] == 1
    assert "not read" in r["result"]["details"][0]["error"]
    assert (project / "b.txt").read_text() == "y\n"


def test_t_patch_01_failure_on_the_last_file_leaves_every_file_untouched(
    make_worker: MakeWorker, project: Path
) -> None:
    """The last file lives on a tiny file system that is full: its write fails for real."""
    worker = make_worker()
    with tmpfs(project / "full", size="16k"):
        (project / "full" / "z.txt").write_text("small\n")
        filler = project / "full" / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill the file system to the last block
            while True:
                os.write(fd, b"x" * 1024)
        except OSError:
            pass
        finally:
            os.close(fd)
        (project / "a.txt").write_text("a\n")
        for path in ["a.txt", "src/main.py", "full/z.txt"]:
            _read(worker, path)
        before = {p: (project / p).read_bytes() for p in ["a.txt", "src/main.py", "full/z.txt"]}
        edits = [
            {"path": "a.txt", "start_line": 1, "end_line": 1, "new_content": "A"},
            {"path": "src/main.py", "start_line": 1, "end_line": 1, "new_content": "L1"},
            {"path": "full/z.txt", "start_line": 1, "end_line": 1, "new_content": "big " * 5000},
        ]
        (r,) = _exec(worker, call("m", "multi_edit", edits=edits))
        assert r["ok"] is False
        assert "No space left" in r["error"]["message"]
        assert "restored" in r["error"]["message"]
        after = {p: (project / p).read_bytes() for p in before}
        assert after == before
        assert sorted(p.name for p in (project / "full").iterdir()) == ["filler", "z.txt"]


def test_read_only_file_system_is_a_precise_file_error(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    with tmpfs(project / "ro", size="64k"):
        (project / "ro" / "f.txt").write_text("x\n")
        _read(worker, "ro/f.txt")
        _remount_ro(project / "ro")
        (r,) = _exec(worker, call("w", "write_file", path="ro/f.txt", content="y\n"))
        assert r["error"]["type"] == "file-error"
        assert "read-only file system" in r["error"]["message"]
        assert (project / "ro" / "f.txt").read_text() == "x\n"


# --- edit --------------------------------------------------------------------------


def test_edit_unique_match(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (r,) = _exec(
        worker,
        call("e", "edit", path="src/main.py", old_string="line 42\n", new_string="the answer\n"),
    )
    assert r["ok"] and r["result"]["replacements"] == 1
    assert "the answer\n" in (project / "src/main.py").read_text()


def test_edit_several_matches_lists_their_lines(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (r,) = _exec(worker, call("e", "edit", path="src/main.py", old_string="line 1", new_string="x"))
    err = r["error"]
    assert "occurs 12 times" in err["message"]
    assert err["details"]["lines"][:3] == [1, 10, 11]
    (r,) = _exec(
        worker,
        call(
            "e2",
            "edit",
            path="src/main.py",
            old_string="line 9\n",
            new_string="nine\n",
            replace_all=True,
        ),
    )
    assert r["result"]["replacements"] == 1


def test_edit_no_match_quotes_the_closest_lines(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (r,) = _exec(
        worker,
        call("e", "edit", path="src/main.py", old_string="lin 57\nline 58\n", new_string="x"),
    )
    msg = r["error"]["message"]
    assert "was not found" in msg
    assert "57\tline 57" in msg and "58\tline 58" in msg


# --- approval and previews ---------------------------------------------------------------


def test_confirm_carries_the_exact_diff_that_is_applied(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="README.md", old_string="demo", new_string="forj")]}
    )
    item = plan["items"][0]
    assert item["disposition"] == "confirm" and item["risk"] == "medium"
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["e"]}, lambda e: None)
    assert result["results"][0]["result"]["preview"] == item["preview"]


def test_two_edits_of_one_file_in_one_batch_each_apply_their_approved_diff(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    calls = [
        call("1", "edit_region", path="src/main.py", start_line=1, end_line=1, new_content="a\nb"),
        call("2", "edit", path="src/main.py", old_string="line 3\n", new_string="c\n"),
    ]
    plan, result = run(worker, calls, approved=["1", "2"])
    first, second = result["results"]
    assert first["ok"] and second["ok"], result
    assert second["result"]["preview"] == plan["items"][1]["preview"]
    assert (project / "src/main.py").read_text().startswith("a\nb\nline 2\nc\nline 4\n")


def test_a_change_other_than_the_approved_diff_is_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    """The file changes between review and run: the approved diff no longer applies."""
    worker = make_worker()
    _read(worker, "src/main.py")
    plan = worker.plan(
        {"calls": [call("2", "edit", path="src/main.py", old_string="line 3\n", new_string="c\n")]}
    )
    # Someone (the model, in an earlier batch; or the user) changes the file and the
    # worker learns it: the recorded read follows the new content.
    text = (project / "src/main.py").read_text().replace("line 2\n", "two\n")
    (project / "src/main.py").write_text(text)
    _read(worker, "src/main.py")
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["2"]}, lambda e: None)
    err = result["results"][0]["error"]
    assert err["type"] == "stale-file"
    assert "no longer matches the diff the user approved" in err["message"]


def test_dry_runs_do_not_prompt(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan(
        {"calls": [call("d", "write_file", path="x.txt", content="x", dry_run=True)]}
    )
    assert plan["items"][0]["disposition"] == "execute"
    assert plan["items"][0]["risk"] == "low"


def test_edit_of_an_unread_file_is_refused_stale_before_its_review(
    make_worker: MakeWorker,
) -> None:
    """No diff is shown for approval that could never apply: the rule holds at plan time."""
    worker = make_worker()
    plan, result = run(
        worker,
        [call("e", "edit", path="README.md", old_string="demo", new_string="x")],
        approved=["e"],
    )
    assert plan["items"][0]["disposition"] == "resolved"
    assert result["results"][0]["error"]["type"] == "stale-file"


def test_read_then_edit_in_one_batch_works(make_worker: MakeWorker, project: Path) -> None:
    user_config('[tools.approval]\nallowlist = ["edit"]\n')
    worker = make_worker()
    _, result = run(
        worker,
        [
            call("r", "read_file", path="README.md"),
            call("e", "edit", path="README.md", old_string="demo", new_string="x"),
        ],
    )
    assert [r["ok"] for r in result["results"]] == [True, True]
    assert (project / "README.md").read_text() == "# x\n"


def test_backups_are_pruned_by_size(make_worker: MakeWorker, project: Path) -> None:
    user_config("[tools.backups]\nmax_total_mb = 0.001\n")
    worker = make_worker()
    (project / "big.txt").write_text("x" * 800)
    _read(worker, "big.txt")
    for i in range(3):
        _exec(worker, call(str(i), "write_file", path="big.txt", content="y" * (800 + i)))
    batches = list(worker.backups.directory.iterdir())
    assert len(batches) == 3
    worker.backups.prune()
    assert len(list(worker.backups.directory.iterdir())) == 1


def test_symlinked_target_is_replaced_not_followed(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (project / "link.txt").symlink_to(outside)
    worker = make_worker()
    (r,) = _exec(worker, call("w", "write_file", path="link.txt", content="x"))
    assert r["error"]["details"]["reason"] == "PathOutsideSandbox"
    assert outside.read_text() == "outside\n"
    assert os.path.islink(project / "link.txt")


def test_outside_changes_drop_the_recorded_read_at_once(
    make_worker: MakeWorker, project: Path
) -> None:
    import time

    worker = make_worker()
    worker.watcher.start()
    try:
        assert worker.watcher.ready.wait(5)
        _read(worker, "README.md")
        _read(worker, "src/main.py")
        canonical = str((project / "README.md").resolve())
        # Our own write is not an outside change: the file stays known.
        (r,) = _exec(worker, call("w", "write_file", path="src/main.py", content="mine\n"))
        assert r["ok"]
        (project / "README.md").write_text("edited in Emacs\n")
        deadline = time.monotonic() + 5
        while canonical in worker.session.file_reads and time.monotonic() < deadline:
            time.sleep(0.02)
        assert canonical not in worker.session.file_reads
        assert str((project / "src/main.py").resolve()) in worker.session.file_reads
        (r,) = _exec(
            worker, call("e", "edit", path="README.md", old_string="Emacs", new_string="x")
        )
        assert r["error"]["type"] == "stale-file"
    finally:
        worker.watcher.stop()
        worker.watcher.thread.join(5)


def test_write_errors_directory_and_umask(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    (r,) = _exec(worker, call("d", "write_file", path="src", content="x"))
    assert r["error"]["type"] == "file-error" and "is a directory" in r["error"]["message"]
    old = os.umask(0o027)
    try:
        (r,) = _exec(worker, call("n", "write_file", path="fresh.txt", content="x"))
    finally:
        os.umask(old)
    assert r["ok"]
    assert stat.S_IMODE((project / "fresh.txt").stat().st_mode) == 0o640


def test_backups_are_pruned_by_age(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    (r,) = _exec(worker, call("w", "write_file", path="README.md", content="new\n"))
    batch = Path(r["result"]["backup_path"]).parent
    old = batch.stat().st_mtime - 30 * 86400
    os.utime(batch, (old, old))
    worker.backups.prune()
    assert not batch.exists()
