"""apply_patch, file_patch, fs_move, fs_copy, fs_delete on real files, through the worker."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from conftest import MakeWorker, call, write_tree
from conftest import run_approved as _exec
from test_write_tools import tmpfs

from forj_py.service import Worker

MAIN = "".join(f"line {i}\n" for i in range(1, 101))


def _read(worker: Worker, *paths: str) -> None:
    for r in _exec(worker, *(call(f"r{i}", "read_file", path=p) for i, p in enumerate(paths))):
        assert r["ok"], r


ENVELOPE = """*** Begin Patch
*** Update File: src/main.py
@@ line 9
-line 10
+line ten
*** Update File: README.md
@@
-# demo
+# forj demo
*** Add File: docs/new.md
+hello
+world
*** End Patch
"""


def test_envelope_updates_adds_and_reports_where_hunks_applied(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py", "README.md")
    (r,) = _exec(worker, call("p", "apply_patch", patch=ENVELOPE))
    assert r["ok"], r
    res = r["result"]
    assert res["format"] == "envelope"
    assert (project / "src/main.py").read_text() == MAIN.replace("line 10\n", "line ten\n")
    assert (project / "README.md").read_text() == "# forj demo\n"
    assert (project / "docs/new.md").read_text() == "hello\nworld\n"
    main = next(f for f in res["files"] if f["path"] == "src/main.py")
    assert main["action"] == "updated"
    assert main["hunks"] == [
        {
            "hunk": 1,
            "old_start": 10,
            "old_lines": 1,
            "new_start": 10,
            "new_lines": 1,
            "matched": "exact",
        }
    ]
    assert res["hunks_applied"] == 2
    assert "created: docs/new.md" in res["summary"] and "modified: README.md" in res["summary"]
    assert main["backup_path"] and Path(main["backup_path"]).read_text() == MAIN


def test_unified_diff_with_wrong_line_numbers_and_indentation(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"pkg/mod.py": "def f():\n    a = 1\n    b = 2\n    return a + b\n"})
    worker = make_worker()
    _read(worker, "pkg/mod.py", "src/main.py")
    diff = (
        "diff --git a/pkg/mod.py b/pkg/mod.py\n"
        "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
        "@@ -7,2 +7,2 @@\n"
        " a = 1\n-b = 2\n+b = 3\n"  # indentation lost, numbers wrong
        "--- a/src/main.py\n+++ b/src/main.py\n"
        "@@ -50,2 +50,3 @@\n line 54\n+inserted\n line 55\n"
    )
    (r,) = _exec(worker, call("p", "apply_patch", patch=diff))
    assert r["ok"], r
    assert (
        project / "pkg/mod.py"
    ).read_text() == "def f():\n    a = 1\n    b = 3\n    return a + b\n"
    assert "line 54\ninserted\nline 55\n" in (project / "src/main.py").read_text()
    files = {f["path"]: f for f in r["result"]["files"]}
    (mod_hunk,) = files["pkg/mod.py"]["hunks"]
    assert mod_hunk["matched"] == "indent" and mod_hunk["old_start"] == 2
    (main_hunk,) = files["src/main.py"]["hunks"]
    assert main_hunk["old_start"] == 54 and main_hunk["offset"] == 4
    assert "note: hunk 1 applied at line 2: matched ignoring indentation" in r["result"]["preview"]


def test_t_patch_01_a_failing_hunk_leaves_every_file_untouched(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py", "README.md")
    patch = ENVELOPE.replace("-# demo\n+# forj demo\n", "-# demo page\n+# x\n")
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not r["ok"]
    err = r["error"]
    assert err["details"]["kind"] == "PatchFailed"
    assert "Hunk 1 of README.md" in err["message"] and "Nothing was changed" in err["message"]
    assert err["details"]["closest"]["start_line"] == 1
    assert "# demo" in err["message"]  # the closest lines are quoted
    assert (project / "src/main.py").read_text() == MAIN
    assert (project / "README.md").read_text() == "# demo\n"
    assert not (project / "docs").exists()


@contextlib.contextmanager
def _unwritable(directory: Path, files: dict[str, str]) -> Iterator[None]:
    """``directory``, holding ``files``, refusing every write, root's too.

    A user is stopped by the directory's mode.  Root is not (permissions do
    not stop its writes, and CI runs as root), so there the directory is a
    small file system remounted read-only: the kernel refuses whoever asks.
    """
    directory.mkdir()
    if os.geteuid() != 0:
        write_tree(directory, files)
        directory.chmod(0o500)
        try:
            yield
        finally:
            directory.chmod(0o700)
        return
    with tmpfs(directory):
        write_tree(directory, files)
        subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)
        yield


def test_t_patch_01_a_failing_write_rolls_back_the_files_already_written(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py", "README.md")
    # The patch's last file lands in a directory that cannot be written.
    locked = project / "locked"
    with _unwritable(locked, {"f.txt": "x\n"}):
        _read(worker, "locked/f.txt")
        patch = ENVELOPE.replace(
            "*** End Patch", "*** Update File: locked/f.txt\n@@\n-x\n+y\n*** End Patch"
        )
        (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
        assert (locked / "f.txt").read_text() == "x\n"
    assert not r["ok"]
    assert "put back" in r["error"]["message"]
    assert (project / "src/main.py").read_text() == MAIN
    assert (project / "README.md").read_text() == "# demo\n"
    assert not (project / "docs/new.md").exists()


def test_stale_file_rule_and_el_paren_check(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"lisp/x.el": "(defun x ()\n  1)\n"})
    worker = make_worker()
    patch = "*** Begin Patch\n*** Update File: lisp/x.el\n@@\n-  1)\n+  2)\n*** End Patch\n"
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not r["ok"] and r["error"]["type"] == "stale-file", r
    _read(worker, "lisp/x.el")
    (project / "lisp/x.el").write_text("(defun x ()\n  1)\n;; changed\n")
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not r["ok"] and r["error"]["type"] == "stale-file"
    _read(worker, "lisp/x.el")
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch.replace("+  2)", "+  (2)")))
    assert not r["ok"] and "not readable Emacs Lisp" in r["error"]["message"]
    assert (project / "lisp/x.el").read_text() == "(defun x ()\n  1)\n;; changed\n"


def test_file_patch_with_bare_hunks(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    diff = (
        "@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line two\n"
        "@@ -99,2 +99,2 @@\n line 99\n-line 100\n+line hundred\n"
    )
    (r,) = _exec(worker, call("f", "file_patch", path="src/main.py", unified_diff=diff))
    assert r["ok"], r
    assert r["result"]["patched"] is True and r["result"]["hunks_applied"] == 2
    text = (project / "src/main.py").read_text()
    assert text.startswith("line 1\nline two\n") and text.endswith("line 99\nline hundred\n")


def test_patch_size_limit_from_config(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {".forj/config.toml": "[tools.apply_patch]\nmax_patch_bytes = 1024\n"})
    worker = make_worker()
    _read(worker, "src/main.py")
    big = "@@ -1 +1 @@\n-line 1\n+" + "x" * 2000 + "\n"
    (r,) = _exec(worker, call("f", "file_patch", path="src/main.py", unified_diff=big))
    assert not r["ok"] and "max_patch_bytes" in r["error"]["message"]


def test_envelope_move_and_delete_then_undo_restores(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"old/mod.py": "x = 1\n", "gone.txt": "bye\n"})
    worker = make_worker()
    _read(worker, "old/mod.py")
    patch = (
        "*** Begin Patch\n*** Update File: old/mod.py\n*** Move to: new/mod.py\n"
        "@@\n-x = 1\n+x = 2\n"
        "*** Delete File: gone.txt\n*** End Patch\n"
    )
    plan = worker.plan({"calls": [call("p", "apply_patch", patch=patch)]})
    (item,) = plan["items"]
    assert item["disposition"] == "confirm" and item["risk"] == "high"
    assert "--- a/old/mod.py\n+++ b/new/mod.py\n" in item["preview"]
    assert "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n" in item["preview"]
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["p"]}, lambda e: None)
    assert reply["results"][0]["ok"], reply
    assert (project / "new/mod.py").read_text() == "x = 2\n"
    assert not (project / "old/mod.py").exists() and not (project / "gone.txt").exists()
    done = worker.undo({"batch_id": plan["batch_id"]})
    assert done["applied"] is True
    assert (project / "old/mod.py").read_text() == "x = 1\n"
    assert (project / "gone.txt").read_text() == "bye\n"
    assert not (project / "new/mod.py").exists()


# --- fs tools ---------------------------------------------------------------------------


def test_fs_move_across_directories_carries_the_read(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    (project / "src/main.py").chmod(0o750)
    (r,) = _exec(worker, call("m", "fs_move", src="src/main.py", dst="lib/deep/main.py"))
    assert r["ok"], r
    assert r["result"]["moved"] is True
    assert not (project / "src/main.py").exists()
    assert (project / "lib/deep/main.py").read_text() == MAIN
    assert (project / "lib/deep/main.py").stat().st_mode & 0o777 == 0o750
    # The read moved along: an edit at the new path needs no new read.
    (e,) = _exec(
        worker,
        call("e", "edit", path="lib/deep/main.py", old_string="line 1\n", new_string="first\n"),
    )
    assert e["ok"], e


def test_fs_move_directory_refuses_overwrite_unless_asked(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"a/x.txt": "1\n", "a/sub/y.txt": "2\n", "b.txt": "old\n"})
    worker = make_worker()
    (r,) = _exec(worker, call("m", "fs_move", src="a", dst="c/a2"))
    assert r["ok"], r
    assert (project / "c/a2/sub/y.txt").read_text() == "2\n" and not (project / "a").exists()
    (r,) = _exec(worker, call("m2", "fs_move", src="c/a2/x.txt", dst="b.txt"))
    assert not r["ok"] and "already exists" in r["error"]["message"]
    (r,) = _exec(worker, call("m3", "fs_move", src="c/a2/x.txt", dst="b.txt", overwrite=True))
    assert r["ok"], r
    assert (project / "b.txt").read_text() == "1\n"


def test_fs_copy_file_and_tree(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"t/x.txt": "1\n", "t/s/y.txt": "2\n"})
    worker = make_worker()
    (r,) = _exec(worker, call("c", "fs_copy", src="t", dst="u"))
    assert not r["ok"] and "recursive" in r["error"]["message"]
    (r,) = _exec(worker, call("c2", "fs_copy", src="t", dst="u", recursive=True))
    assert r["ok"], r
    assert (project / "u/s/y.txt").read_text() == "2\n" and (project / "t/s/y.txt").exists()
    assert r["result"]["copied"] is True and r["result"]["files"] == 2


def test_fs_delete_restorable_through_undo(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"d/a.txt": "a\n", "d/b/c.txt": "c\n"})
    worker = make_worker()
    plan = worker.plan({"calls": [call("d", "fs_delete", path="d", recursive=True)]})
    (item,) = plan["items"]
    assert item["disposition"] == "confirm" and item["risk"] == "high"
    assert "fingerprint" in item["preview"]
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["d"]}, lambda e: None)
    (res,) = reply["results"]
    assert res["ok"], res
    assert res["result"]["deleted"] is True and res["result"]["restorable"] is True
    assert not (project / "d").exists()
    assert worker.undo({"batch_id": plan["batch_id"]})["applied"] is True
    assert (project / "d/a.txt").read_text() == "a\n" and (
        project / "d/b/c.txt"
    ).read_text() == "c\n"


def test_fs_delete_checks_the_hash_taken_at_review(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("d", "fs_delete", path="README.md")]})
    (project / "README.md").write_text("# changed after review\n")
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["d"]}, lambda e: None)
    (res,) = reply["results"]
    assert not res["ok"] and res["error"]["type"] == "stale-file"
    assert (project / "README.md").exists()


def test_fs_delete_beyond_backup_limits_is_refused_or_forced_review(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(
        project,
        {
            "big/blob.bin": b"\0" * (2 << 20),
            ".forj/config.toml": "[tools.backups]\nmax_total_mb = 1\n",
        },
    )
    (Path(os.environ["FORJ_CONFIG"])).write_text("[tools.backups]\nmax_total_mb = 1\n")
    worker = make_worker()
    (r,) = _exec(worker, call("d", "fs_delete", path="big", recursive=True))
    assert not r["ok"] and "could not be undone" in r["error"]["message"]
    assert (project / "big/blob.bin").exists()
    plan = worker.plan(
        {
            "calls": [call("d2", "fs_delete", path="big", recursive=True, force=True)],
            "permission_mode": "auto",
        }
    )
    (item,) = plan["items"]
    assert item["disposition"] == "confirm"
    assert any("Not restorable" in w for w in item["warnings"])


def test_fs_tools_stay_in_the_sandbox_and_refuse_links(
    make_worker: MakeWorker, project: Path
) -> None:
    os.symlink(project / "README.md", project / "link.md")
    write_tree(project, {"keys/.env": "SECRET=1\n"})
    worker = make_worker()
    results = _exec(
        worker,
        call("a", "fs_move", src="README.md", dst="../outside.md"),
        call("b", "fs_delete", path="link.md"),
        call("c", "fs_delete", path="keys", recursive=True),
        call("d", "fs_copy", src="README.md", dst=".git/hooks/pre-commit"),
    )
    assert [r["ok"] for r in results] == [False, False, False, False]
    assert "symbolic link" in results[1]["error"]["message"]
    assert (project / "README.md").exists() and (project / "keys/.env").exists()


def test_accept_edits_runs_plain_moves_but_reviews_deletes_and_overwrites(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    plan = worker.plan(
        {
            "calls": [
                call("m", "fs_move", src="README.md", dst="docs/README.md"),
                call("o", "fs_move", src="src/main.py", dst="x.py", overwrite=True),
                call("d", "fs_delete", path="src/main.py"),
            ],
            "permission_mode": "accept-edits",
        }
    )
    assert [i["disposition"] for i in plan["items"]] == ["execute", "confirm", "confirm"]
