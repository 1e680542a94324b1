"""Approving part of a reviewed change, hunk by hunk (``execute``'s ``hunks``).

The user approves some hunks of a call's diff and drops the others; the
worker writes only the approved ones, through edit-before-approve's write
(stale check, backups, journal for undo), and tells the model what was
applied, what was dropped and why, and what the file holds there now.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, run, write_tree
from test_ast_tools import SOURCES, defs, ok

from forj_py.errors import ProtocolError
from forj_py.service import Worker
from forj_py.tools import _edit, _hunks

MAIN = "".join(f"line {i}\n" for i in range(1, 101))


def _read(worker: Worker, *paths: str) -> None:
    _, result = run(worker, [call(f"r{i}", "read_file", path=p) for i, p in enumerate(paths)])
    assert all(r["ok"] for r in result["results"]), result


def _three_hunks_and_readme(worker: Worker) -> str:
    """Plan a multi_edit with three hunks in src/main.py and one in README.md."""
    _read(worker, "src/main.py", "README.md")
    edits = [
        {"path": "src/main.py", "start_line": n, "end_line": n, "new_content": f"LINE {n}\n"}
        for n in (10, 50, 90)
    ] + [{"path": "README.md", "start_line": 1, "end_line": 1, "new_content": "# forj\n"}]
    plan = worker.plan({"calls": [call("m", "multi_edit", edits=edits)]})
    (item,) = plan["items"]
    assert item["disposition"] == "confirm"
    assert item["preview"].count("\n@@ ") == 4
    # The plan says which files the review may decide hunk by hunk.
    assert item["hunk_files"] == [
        {"path": "src/main.py", "hunks": 3},
        {"path": "README.md", "hunks": 1},
    ]
    return str(plan["batch_id"])


def _execute(worker: Worker, batch: str, **body: Any) -> dict[str, Any]:
    return worker.execute({"batch_id": batch, **body}, lambda e: None)


def test_hunks_drop_one_of_three_writes_the_rest_and_tells_the_model(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    batch = _three_hunks_and_readme(worker)
    done = _execute(
        worker,
        batch,
        approved=["m"],
        hunks={
            "m": {
                "src/main.py": {
                    "approved": [0, 2],
                    "dropped": [{"index": 1, "reason": "line 50 stays as it is"}],
                }
            }
        },
    )
    (r,) = done["results"]
    assert r["ok"], r
    expected = MAIN.replace("line 10\n", "LINE 10\n").replace("line 90\n", "LINE 90\n")
    assert (project / "src/main.py").read_text() == expected
    # A file left out of 'hunks' is written as proposed.
    assert (project / "README.md").read_text() == "# forj\n"
    body = r["result"]
    assert body["partly_applied"] is True
    assert (body["hunks_applied"], body["hunks_dropped"]) == (3, 1)
    assert "approved only part of your change" in body["note"]
    main, readme = body["files"]
    assert main["path"] == "src/main.py" and main["user_modified"] is False
    assert Path(main["backup_path"]).read_text() == MAIN
    assert [(h["index"], h["state"], h.get("reason")) for h in main["hunks"]] == [
        (0, "applied", None),
        (1, "dropped", "line 50 stays as it is"),
        (2, "applied", None),
    ]
    # Each hunk's place as the file holds it now, context included.
    assert main["hunks"][1]["lines"] == "47-53"
    assert main["hunks"][1]["now"] == "".join(f"line {i}\n" for i in range(47, 54))
    assert main["hunks"][0]["now"].splitlines()[3] == "LINE 10"
    assert [h["state"] for h in readme["hunks"]] == ["applied"]
    # The preview is the change actually written: no hunk at line 50.
    assert "+LINE 10" in body["preview"] and "+LINE 50" not in body["preview"]
    # The write counts as a read: the model can edit on from what is there.
    _, again = run(
        worker,
        [call("e2", "edit", path="src/main.py", old_string="line 50\n", new_string="L50\n")],
        approved=["e2"],
    )
    assert again["results"][0]["ok"], again
    # Undo puts back the file as it was before the partial write.
    checkpoints = worker.checkpoints({})["checkpoints"]
    worker.undo({"batch_id": checkpoints[0]["batch_id"]})
    worker.undo({"batch_id": batch})
    assert (project / "src/main.py").read_text() == MAIN
    assert (project / "README.md").read_text() == "# demo\n"


def test_hunks_every_hunk_dropped_is_a_denial_with_the_reasons(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "src/main.py")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="src/main.py", old_string="line 7\n", new_string="7\n")]}
    )
    done = _execute(
        worker,
        plan["batch_id"],
        approved=["e"],
        hunks={"e": {"src/main.py": {"dropped": [{"index": 0, "reason": "not this one"}]}}},
    )
    (r,) = done["results"]
    assert not r["ok"]
    assert r["error"]["details"]["kind"] == "UserDenied"
    assert "not this one" in r["error"]["message"]
    assert (project / "src/main.py").read_text() == MAIN


def test_hunks_of_a_new_file_all_dropped_do_not_create_it(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    patch = (
        "*** Begin Patch\n*** Update File: README.md\n@@\n-# demo\n+x\n"
        "*** Add File: new.txt\n+n\n*** End Patch\n"
    )
    plan = worker.plan({"calls": [call("m", "apply_patch", patch=patch)]})
    assert plan["items"][0]["disposition"] == "confirm", plan
    done = _execute(
        worker,
        plan["batch_id"],
        approved=["m"],
        hunks={"m": {"new.txt": {"dropped": [{"index": 0}]}}},
    )
    (r,) = done["results"]
    assert r["ok"], r
    assert (project / "README.md").read_text() == "x\n"
    assert not (project / "new.txt").exists()
    dropped = next(f for f in r["result"]["files"] if f["path"] == "new.txt")
    assert dropped["hunks"][0]["state"] == "dropped"


@pytest.mark.parametrize(
    ("hunks", "words"),
    [
        ({"src/main.py": {"approved": [0, 1], "dropped": [{"index": 3}]}}, "there is no hunk 3"),
        ({"src/main.py": {"approved": [0, 1, 7]}}, "numbered 0 to 2"),
        ({"src/main.py": {"approved": [0, 1]}}, "hunk 2 of src/main.py"),
        ({"src/main.py": {"approved": [0, 1, 2], "dropped": [{"index": 1}]}}, "named twice"),
        ({"docs/other.md": {"approved": [0]}}, "does not write docs/other.md"),
    ],
)
def test_hunks_bad_decisions_are_refused_and_nothing_runs(
    make_worker: MakeWorker, project: Path, hunks: dict[str, Any], words: str
) -> None:
    worker = make_worker()
    batch = _three_hunks_and_readme(worker)
    with pytest.raises(ProtocolError) as info:
        _execute(worker, batch, approved=["m"], hunks={"m": hunks})
    assert info.value.type == "bad-request"
    assert words in str(info.value)
    assert (project / "src/main.py").read_text() == MAIN
    # Nothing ran: the batch can still be executed.
    done = _execute(worker, batch, approved=["m"])
    assert done["results"][0]["ok"]


def test_hunks_need_an_approved_reviewed_call_and_no_hand_edit_of_the_same_file(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    batch = _three_hunks_and_readme(worker)
    decided = {"m": {"README.md": {"approved": [0]}}}
    for body, words in [
        ({"approved": [], "hunks": decided}, "not approved"),
        ({"approved": ["m"], "hunks": {"r9": {"README.md": {"approved": [0]}}}}, "awaiting review"),
        (
            {"approved": ["m"], "hunks": decided, "modified": {"m": {"README.md": "mine\n"}}},
            "both edited by hand",
        ),
        ({"approved": ["m"], "hunks": {"m": {"README.md": {"approved": [-1]}}}}, "approved"),
    ]:
        with pytest.raises(ProtocolError) as info:
            _execute(worker, batch, **body)
        assert words in str(info.value), (words, str(info.value))
    assert (project / "README.md").read_text() == "# demo\n"


def test_hunks_a_patch_that_moves_a_file_is_approved_whole(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    patch = (
        "*** Begin Patch\n*** Update File: README.md\n*** Move to: READ.md\n"
        "@@\n-# demo\n+# forj\n*** End Patch\n"
    )
    plan = worker.plan({"calls": [call("p", "apply_patch", patch=patch)]})
    assert "hunk_files" not in plan["items"][0]
    with pytest.raises(ProtocolError, match="cannot be approved in part"):
        _execute(
            worker, plan["batch_id"], approved=["p"], hunks={"p": {"READ.md": {"approved": [0]}}}
        )
    assert (project / "README.md").exists()


def test_hunks_are_the_hunks_the_review_diff_shows() -> None:
    """Hunk i is the i-th '@@' of the previewed diff, whatever the texts (large
    files whose common start and end are trimmed before diffing, files
    without a final newline, hunks close enough to merge)."""
    rng = random.Random(30)
    for _ in range(300):
        old_lines = [
            f"{rng.choice('abcde')}{rng.randrange(5)}\n" for _ in range(rng.randrange(0, 60))
        ]
        new_lines = list(old_lines)
        for _ in range(rng.randrange(0, 6)):
            at = rng.randrange(0, len(new_lines) + 1)
            what = rng.choice(("insert", "delete", "change"))
            if what == "insert" or not new_lines or at == len(new_lines):
                new_lines.insert(at, f"new {rng.randrange(100)}\n")
            elif what == "delete":
                del new_lines[at]
            else:
                new_lines[at] = f"changed {rng.randrange(100)}\n"
        old, new = "".join(old_lines), "".join(new_lines)
        if rng.random() < 0.2:
            new = new.rstrip("\n")
        diff = _edit.unified_diff("f", old, new)
        total = _hunks.count(old, new)
        assert diff.count("\n@@ ") == total, (old, new, diff)
        # All approved is the proposal; none approved is the file as it was.
        assert _hunks.partial(old, new, frozenset(range(total)))[0] == new
        assert _hunks.partial(old, new, frozenset())[0] == old
        # Each hunk alone changes exactly what its diff shows.
        for i in range(total):
            only = _hunks.partial(old, new, frozenset({i}))[0]
            assert _edit.unified_diff("f", old, only).count("\n@@ ") == 1


def test_hunks_a_rename_across_files_is_decided_file_by_file(
    make_worker: MakeWorker, project: Path
) -> None:
    """ast_edit's rename_symbol is one call over several files: each file's
    hunks are decided on their own."""
    (project / "src/main.py").unlink()
    write_tree(project, SOURCES)
    worker = make_worker()
    ok(worker, "ast_generate", paths=["**"])
    node = str(defs(worker)[("py/auth.py", "auth_login")]["id"])
    plan = worker.plan(
        {"calls": [call("r", "ast_edit", target_node_id=node, new_name="auth_signin")]}
    )
    (item,) = plan["items"]
    assert {f["path"] for f in item["hunk_files"]} == {"py/auth.py", "py/use.py"}
    use_before = (project / "py/use.py").read_text()
    done = _execute(
        worker,
        plan["batch_id"],
        approved=["r"],
        hunks={"r": {"py/use.py": {"dropped": [{"index": 0, "reason": "use.py later"}]}}},
    )
    assert done["results"][0]["ok"], done["results"][0]
    assert (project / "py/auth.py").read_text().startswith("def auth_signin(user):\n")
    assert (project / "py/use.py").read_text() == use_before


def test_attack_hunks_a_call_approved_in_part_gives_no_grant(
    make_worker: MakeWorker, project: Path
) -> None:
    """A standing grant lets later calls like this one run unreviewed and whole:
    given with an approval in part, it would turn 'only these hunks' into
    'all of it, from now on'.  The pair is refused and nothing runs."""
    worker = make_worker()
    batch = _three_hunks_and_readme(worker)
    with pytest.raises(ProtocolError, match="approved in part") as info:
        _execute(
            worker,
            batch,
            approved=["m"],
            hunks={"m": {"src/main.py": {"approved": [0, 2], "dropped": [{"index": 1}]}}},
            grants={"m": {"scope": "session", "pattern": "multi_edit"}},
        )
    assert info.value.type == "bad-request"
    assert worker.grants({})["grants"] == []
    assert (project / "src/main.py").read_text() == MAIN
    # The same decision without the grant runs, and the journal says it was in part.
    done = _execute(
        worker,
        batch,
        approved=["m"],
        hunks={"m": {"src/main.py": {"approved": [0, 2], "dropped": [{"index": 1}]}}},
    )
    assert done["results"][0]["ok"]
    assert worker.grants({})["grants"] == []
    (row,) = [r for r in worker.audit({})["rows"] if r["call_id"] == "m"]
    assert row["decision"] == "approved in part by the user (once): src/main.py: hunks [0, 2] of 3"


def test_attack_hunks_a_file_swapped_for_a_link_after_review_is_not_written(
    make_worker: MakeWorker, project: Path
) -> None:
    """The review showed a change to a.txt; if a.txt becomes a link to b.txt
    (same text) before the call runs, the approved hunks must not land in
    b.txt, a file the user saw no change for."""
    text = "".join(f"row {i}\n" for i in range(1, 31))
    (project / "a.txt").write_text(text)
    (project / "b.txt").write_text(text)
    worker = make_worker()
    _read(worker, "a.txt", "b.txt")
    edits = [
        {"path": "a.txt", "start_line": n, "end_line": n, "new_content": f"ROW {n}\n"}
        for n in (3, 27)
    ]
    plan = worker.plan({"calls": [call("m", "multi_edit", edits=edits)]})
    (project / "a.txt").unlink()
    (project / "a.txt").symlink_to("b.txt")
    done = _execute(
        worker,
        plan["batch_id"],
        approved=["m"],
        hunks={"m": {"a.txt": {"approved": [0], "dropped": [{"index": 1}]}}},
    )
    (r,) = done["results"]
    assert not r["ok"]
    assert r["error"]["details"]["kind"] == "StaleFile", r
    assert (project / "b.txt").read_text() == text


def test_hunks_keep_crlf_line_ends_the_byte_order_mark_and_a_missing_final_newline(
    make_worker: MakeWorker, project: Path
) -> None:
    """A file with CRLF line ends, a UTF-8 byte-order mark and no final newline,
    approved in part: the dropped hunk's lines are byte for byte as before,
    the approved one is as proposed, and the mark and the ends are kept."""
    rows = [f"row {i}" for i in range(1, 31)]
    before = "\ufeff" + "\r\n".join(rows)
    (project / "c.txt").write_bytes(before.encode("utf-8"))
    worker = make_worker()
    _read(worker, "c.txt")
    edits = [
        {"path": "c.txt", "start_line": n, "end_line": n, "new_content": f"ROW {n}\n"}
        for n in (3, 30)
    ]
    plan = worker.plan({"calls": [call("m", "multi_edit", edits=edits)]})
    assert plan["items"][0]["hunk_files"] == [{"path": "c.txt", "hunks": 2}]
    done = _execute(
        worker,
        plan["batch_id"],
        approved=["m"],
        hunks={"m": {"c.txt": {"approved": [0], "dropped": [{"index": 1}]}}},
    )
    assert done["results"][0]["ok"], done
    after = (project / "c.txt").read_bytes().decode("utf-8")
    assert after == before.replace("row 3\r\n", "ROW 3\r\n")


def test_hunks_every_writing_tool_offers_them(make_worker: MakeWorker, project: Path) -> None:
    """Each writing tool's preview is the diff its hunks are counted on, so the
    review offers hunk keys for it (the worker checks this for every call)."""
    worker = make_worker()
    _read(worker, "src/main.py")
    calls = [
        call("e", "edit", path="src/main.py", old_string="line 7\n", new_string="7\n"),
        call("w", "write_file", path="new.txt", content="n\n"),
        call("g", "edit_region", path="src/main.py", start_line=40, end_line=40, new_content="x\n"),
        call(
            "p",
            "apply_patch",
            patch="*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch\n",
        ),
    ]
    for c in calls:
        plan = worker.plan({"calls": [c]})
        (item,) = plan["items"]
        assert item["disposition"] == "confirm", item
        assert item.get("hunk_files"), (c["name"], item)


def test_attack_hunks_refused_when_the_preview_is_not_the_counted_diff(
    make_worker: MakeWorker, project: Path
) -> None:
    """Should a call's preview ever differ from the diff the worker counts hunks
    on (a tool that draws its own), an index would name lines the user did
    not see: such a call offers no hunk keys and its hunk decisions are refused."""
    worker = make_worker()
    batch = _three_hunks_and_readme(worker)
    planned = worker._batch(batch).calls[0]
    # The first hunk's header as a different tool might draw it.
    planned.preview = (planned.preview or "").replace("@@ -7,7 +7,7 @@", "@@ -7,7 +7,8 @@", 1)
    assert planned.item().hunk_files is None
    with pytest.raises(ProtocolError, match="cannot be approved in part"):
        _execute(
            worker,
            batch,
            approved=["m"],
            hunks={"m": {"src/main.py": {"approved": [0, 2], "dropped": [{"index": 1}]}}},
        )
    assert (project / "src/main.py").read_text() == MAIN
