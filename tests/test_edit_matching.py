"""Edits land where the model meant them, or are refused with the fix.

Through the real worker (plan, approve, execute) on real files: the
matching passes of ``edit`` and of ``expected``, line numbers within a
batch, stale numbers relocated or caught, double escaping, lazy
placeholders, and redacted credentials put back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import MakeWorker, call, run
from conftest import run_approved as _exec

from forj_py.service import Worker

PY = '''class Greeter:
    def greet(self, name):
        """Say hello."""
        message = "Hello, " + name  # greet -- politely
        return message

    def part(self, name):
        return "Bye, " + name
'''

TABS = '(defun f ()\n\t(let ((x 1))\n\t\t(message "x is %d" x)))\n'


def _setup(worker: Worker, project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")
    for name in files:
        (r,) = _exec(worker, call("r", "read_file", path=name))
        assert r["ok"], r


def _edit(worker: Worker, path: str, old: str, new: str, **more: Any) -> dict[str, Any]:
    (r,) = _exec(worker, call("e", "edit", path=path, old_string=old, new_string=new, **more))
    return r


# --- edit: the matching passes -------------------------------------------------------


def test_edit_match_01_exact_then_trailing_then_indent_then_punctuation(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY, "t.el": TABS})
    r = _edit(worker, "g.py", "message\n", "message.strip()\n")
    assert r["ok"] and r["result"]["matched"] == "exact", r
    assert "note:" not in r["result"]["preview"]

    # Trailing blanks added by the model: found, and the kept line stays as the file had it.
    r = _edit(
        worker,
        "g.py",
        '        """Say hello."""   \n        message = "Hello, " + name  # greet -- politely  \n',
        '        """Say hello."""   \n        message = "Hi, " + name  # greet -- politely\n',
    )
    assert r["ok"] and r["result"]["matched"] == "trailing", r
    assert "ignoring trailing whitespace" in r["result"]["preview"]
    assert (
        '        """Say hello."""\n        message = "Hi, " + name  # greet -- politely\n'
        in (project / "g.py").read_text()
    )

    # A level too deep, with a new line: re-indented to the file's depth.
    r = _edit(
        worker,
        "g.py",
        '            def part(self, name):\n                return "Bye, " + name\n',
        "            def part(self, name):\n                name = name.title()\n"
        '                return "Bye, " + name\n',
    )
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert (
        (project / "g.py")
        .read_text()
        .endswith(
            "    def part(self, name):\n"
            "        name = name.title()\n"
            '        return "Bye, " + name\n'
        )
    )
    assert "re-indented" in r["result"]["preview"]

    # Tabs typed as spaces: the new line gets the file's tabs.
    r = _edit(
        worker,
        "t.el",
        '    (let ((x 1))\n        (message "x is %d" x)))\n',
        '    (let ((x 1))\n        (setq x 2)\n        (message "x is %d" x)))\n',
    )
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert (project / "t.el").read_text() == (
        '(defun f ()\n\t(let ((x 1))\n\t\t(setq x 2)\n\t\t(message "x is %d" x)))\n'
    )

    # Curly quotes and an en dash where the file has ASCII: the new text follows the file.
    r = _edit(
        worker,
        "g.py",
        "message = \u201cHi, \u201d + name  # greet \u2013 politely",
        "message = \u201cHey, \u201d + name  # greet \u2013 warmly \u2014 \u2018really\u2019",
    )
    assert r["ok"] and r["result"]["matched"] == "unicode", r
    # The dash the model learnt from the file's "--" becomes "--"; others become ASCII.
    assert (
        "        message = \"Hey, \" + name  # greet -- warmly - 'really'\n"
        in (project / "g.py").read_text()
    )


def test_edit_match_02_several_matches_list_every_place(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "".join(f"def f{i}():\n    return None\n\n" for i in range(3))
    _setup(worker, project, {"m.py": text})
    r = _edit(worker, "m.py", "        return None\n", "        return 0\n")
    assert not r["ok"]
    err = r["error"]
    assert err["type"] == "validation-error"
    assert [m["start_line"] for m in err["details"]["matches"]] == [2, 5, 8]
    assert "occurs 3 times" in err["message"] and "return None" in err["message"]
    assert (project / "m.py").read_text() == text
    # replace_all takes every one of them, at the pass that found them.
    r = _edit(worker, "m.py", "        return None\n", "        return 0\n", replace_all=True)
    assert r["ok"] and r["result"]["replacements"] == 3, r
    assert (project / "m.py").read_text() == text.replace("return None", "return 0")


def test_edit_match_03_a_changed_line_is_refused_pointing_at_the_closest_lines(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY})
    r = _edit(
        worker,
        "g.py",
        "    def greet(self, name):\n"
        '        """Say goodbye."""\n'
        '        message = "Hello, " + name',
        "    pass",
    )
    assert not r["ok"]
    err = r["error"]
    assert err["details"]["closest"]["start_line"] == 2
    assert err["details"]["closest"]["end_line"] >= 4
    assert '-        """Say goodbye."""' in err["message"]
    assert '+        """Say hello."""' in err["message"]
    assert any("start_line=2" in step for step in err["recovery"])
    assert (project / "g.py").read_text() == PY


def test_edit_match_04_indentation_inside_the_files_own_is_not_an_exact_match(
    make_worker: MakeWorker, project: Path
) -> None:
    """A block sent a level too shallow is a substring of the deeper lines: still re-indented."""
    worker = make_worker()
    _setup(worker, project, {"g.py": PY})
    r = _edit(worker, "g.py", "    return message\n", "    return message\n    # done\n")
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert "        return message\n        # done\n" in (project / "g.py").read_text()
    # Beside an occurrence elsewhere (here inside a line), the place is ambiguous.
    _setup(worker, project, {"h.py": "x = foo()\nif x:\n    foo()\n"})
    r = _edit(worker, "h.py", "foo()\n", "bar()\n")
    assert not r["ok"]
    assert [m["start_line"] for m in r["error"]["details"]["matches"]] == [1, 3]


# --- line numbers: batches, relocation, the echo guard -----------------------------------


def _numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def test_edit_lines_01_numbers_in_a_batch_refer_to_the_file_as_read(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"n.txt": _numbered(20)})
    results = _exec(
        worker,
        call("a", "edit_region", path="n.txt", start_line=2, end_line=3, new_content="A\nB\nC\nD"),
        call("b", "edit", path="n.txt", old_string="line 5\n", new_string=""),
        call("c", "edit_region", path="n.txt", start_line=10, end_line=10, new_content="TEN"),
        call(
            "d",
            "multi_edit",
            edits=[
                {"path": "n.txt", "start_line": 12, "end_line": 12, "new_content": "TWELVE"},
                {"path": "n.txt", "start_line": 15, "end_line": 14, "new_content": "before 15"},
            ],
        ),
    )
    assert all(r["ok"] for r in results), results
    text = (project / "n.txt").read_text()
    assert text.splitlines() == [
        "line 1", "A", "B", "C", "D", "line 4", "line 6", "line 7", "line 8", "line 9",
        "TEN", "line 11", "TWELVE", "line 13", "line 14", "before 15", "line 15",
        "line 16", "line 17", "line 18", "line 19", "line 20",
    ]  # fmt: skip
    assert results[2]["result"]["applied_at"] == [11, 11]
    assert "after the earlier changes of this batch" in results[2]["result"]["preview"]


def test_edit_lines_02_lines_an_earlier_call_rewrote_need_expected(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"n.txt": _numbered(10)})
    first, second = _exec(
        worker,
        call("a", "edit_region", path="n.txt", start_line=3, end_line=5, new_content="X"),
        call("b", "edit_region", path="n.txt", start_line=4, end_line=4, new_content="Y"),
    )
    assert first["ok"], first
    assert not second["ok"]
    assert "changed by an earlier call of this batch" in second["error"]["message"]
    first, second = _exec(
        worker,
        call("a", "edit_region", path="n.txt", start_line=1, end_line=1, new_content="ONE\none"),
        call(
            "b",
            "edit_region",
            path="n.txt",
            start_line=3,
            end_line=3,
            new_content="Z",
            expected="X",
        ),
    )
    assert first["ok"] and second["ok"], second
    assert (project / "n.txt").read_text().splitlines()[:4] == ["ONE", "one", "line 2", "Z"]


def test_edit_lines_03_stale_numbers_with_expected_are_relocated(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY})
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="g.py",
            start_line=5,
            end_line=5,
            expected="    def part(self, name):\n",
            new_content="    def part(self, name, polite=False):\n",
        ),
    )
    assert r["ok"], r
    assert r["result"]["relocated_from"] == [5, 5]
    assert r["result"]["applied_at"] == [7, 7]
    assert "it was found at lines 7-7" in r["result"]["preview"]
    assert "    def part(self, name, polite=False):\n" in (project / "g.py").read_text()
    # The review said so before anything ran.
    plan = worker.plan(
        {
            "calls": [
                call(
                    "p",
                    "edit_region",
                    path="g.py",
                    start_line=1,
                    end_line=1,
                    expected="        return message",
                    new_content="        return message  # relocated",
                )
            ]
        }
    )
    assert "did not hold 'expected'; it was found at lines 5-5" in plan["items"][0]["preview"]


def test_edit_lines_04_expected_that_occurs_twice_or_nowhere_is_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "a\nsame\nb\nsame\nc\n"
    _setup(worker, project, {"s.txt": text})
    (r,) = _exec(
        worker,
        call("e", "edit_region", path="s.txt", start_line=1, end_line=1, new_content="x",
             expected="same"),
    )  # fmt: skip
    assert not r["ok"]
    assert [m["start_line"] for m in r["error"]["details"]["matches"]] == [2, 4]
    (r,) = _exec(
        worker,
        call("e", "edit_region", path="s.txt", start_line=1, end_line=2, new_content="x",
             expected="a\nsome\n"),
    )  # fmt: skip
    assert not r["ok"]
    assert r["error"]["details"]["closest"]["start_line"] == 1
    assert (project / "s.txt").read_text() == text


def test_edit_lines_05_off_by_n_without_expected_is_caught_by_its_echo(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY})
    # Meant for lines 3-4 (the docstring and the message), sent one line low.
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="g.py",
            start_line=4,
            end_line=5,
            new_content='        """Say hello."""\n        message = "Hi, " + name\n',
        ),
    )
    assert not r["ok"]
    err = r["error"]
    assert err["details"]["problem"] == "off-by-lines"
    assert err["details"]["suggested"] == {"start_line": 3, "end_line": 4}
    assert "expected" in err["recovery"][0]
    assert (project / "g.py").read_text() == PY
    # The same content at the right lines is fine.
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="g.py",
            start_line=3,
            end_line=4,
            new_content='        """Say hello."""\n        message = "Hi, " + name\n',
        ),
    )
    assert r["ok"], r


# --- double escaping ---------------------------------------------------------------------


def test_edit_esc_01_content_escaped_twice_is_refused_with_the_fix(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY, "c.c": "int main() {\n  return 0;\n}\n"})
    escaped = 'def greet(self, name):\\n    return "Hi"\\n'
    results = _exec(
        worker,
        call("w", "write_file", path="g.py", content=escaped),
        call("r", "edit_region", path="g.py", start_line=2, end_line=5, new_content=escaped),
        call(
            "m",
            "multi_edit",
            edits=[{"path": "g.py", "start_line": 7, "end_line": 8, "new_content": escaped}],
        ),
        call("e", "edit", path="g.py", old_string='        """Say hello."""\n        message',
             new_string='        """Say hi."""\\n        message'),
    )  # fmt: skip
    # One literal sequence for two lines is caught too: the piece after it is the
    # replaced text's own second line, at its own indentation.
    for r in results:
        assert not r["ok"], r
        assert r["error"]["details"]["problem"] == "double-escaped"
        assert "escaped twice" in r["error"]["message"]
        assert '"\\n" (one backslash)' in r["error"]["recovery"][0]
    # printf("done\n") is normal code, even replacing several lines.
    (r,) = _exec(
        worker,
        call("c", "edit_region", path="c.c", start_line=1, end_line=2,
             new_content='int main() { printf("done\\n"); printf("\\n"); return 0;'),
    )  # fmt: skip
    assert r["ok"], r


def test_edit_esc_02_replaced_text_with_the_same_sequences_is_not_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "s = 'a\\nb\\nc'\nt = 1\n"
    _setup(worker, project, {"s.py": text})
    (r,) = _exec(
        worker,
        call("e", "edit_region", path="s.py", start_line=1, end_line=2,
             new_content="s = 'a\\nb\\nc\\nd' if x else y\\nz"),
    )  # fmt: skip
    assert r["ok"], r


# --- lazy placeholders -------------------------------------------------------------------


def test_edit_lazy_01_a_placeholder_that_would_drop_code_is_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"g.py": PY})
    lazy = PY.split("    def part")[0] + "    # ... existing code ...\n"
    results = _exec(
        worker,
        call("w", "write_file", path="g.py", content=lazy),
        call("r", "edit_region", path="g.py", start_line=2, end_line=5,
             new_content="    def greet(self, name):\n        // rest of the method unchanged\n"),
        call("e", "edit", path="g.py", old_string=PY[PY.index("    def greet"):],
             new_string="    def greet(self, name):\n        (unchanged)\n"),
    )  # fmt: skip
    for r in results:
        assert not r["ok"], r
        assert r["error"]["details"]["problem"] == "placeholder"
        assert "full text" in r["error"]["recovery"][0]
    assert results[0]["error"]["details"]["placeholder"] == "# ... existing code ..."
    assert results[0]["error"]["details"]["dropped_lines"] == [7, 8]
    assert 'return "Bye, " + name' in results[0]["error"]["message"]
    assert (project / "g.py").read_text() == PY


def test_edit_lazy_02_placeholders_already_there_or_beside_all_lines_are_fine(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "def f():\n    # ... existing code ...\n    return 1\n"
    _setup(worker, project, {"f.py": text})
    r = _edit(
        worker, "f.py", "    # ... existing code ...\n    return 1\n",
        "    # ... existing code ...\n    return 2\n",
    )  # fmt: skip
    assert r["ok"], r
    # Added beside every original line: nothing is dropped.
    r = _edit(worker, "f.py", "    return 2\n", "    return 2\n    # rest of the file unchanged\n")
    assert r["ok"], r


# --- redacted credentials ------------------------------------------------------------------

CONFIG = (
    "[remote]\n"
    "url = https://deploy:s3cr3t-PASS@git.example.com/repo.git\n"
    "mirror = https://ghp_abcdefghijklmnopqrstuvwxyz0123@mirror.example.com/r.git\n"
    "name = old\n"
)


def test_edit_cred_01_redacted_credentials_are_put_back_and_stay_hidden(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"deploy.cfg": CONFIG})
    # old_string as the model read it (secret redacted), matched against the real file.
    plan, result = run(
        worker,
        [
            call(
                "e",
                "edit",
                path="deploy.cfg",
                old_string="url = https://deploy:***@git.example.com/repo.git\n",
                new_string="url = https://deploy:***@git.example.com/repo2.git\n",
            )
        ],
        approved=["e"],
    )
    preview = plan["items"][0]["preview"]
    assert "s3cr3t" not in preview and "deploy:***@git.example.com/repo2.git" in preview
    assert "keeps 1 redacted credential(s)" in preview
    (r,) = result["results"]
    assert r["ok"], r
    assert r["result"]["credentials_kept"] == 1
    assert "s3cr3t" not in str(r)
    assert (
        "url = https://deploy:s3cr3t-PASS@git.example.com/repo2.git\n"
        in (project / "deploy.cfg").read_text()
    )

    # write_file and edit_region put them back as well.
    whole = (project / "deploy.cfg").read_text()
    model_view = whole.replace("s3cr3t-PASS", "***").replace(
        "ghp_abcdefghijklmnopqrstuvwxyz0123", "***"
    )
    (w,) = _exec(worker, call("w", "write_file", path="deploy.cfg",
                              content=model_view.replace("old", "new")))  # fmt: skip
    assert w["ok"], w
    assert w["result"]["credentials_kept"] == 2
    assert "keeps 2 redacted credential(s)" in w["result"]["preview"]
    assert (project / "deploy.cfg").read_text() == whole.replace("old", "new")
    (g,) = _exec(
        worker,
        call("g", "edit_region", path="deploy.cfg", start_line=3, end_line=3,
             expected="mirror = https://***@mirror.example.com/r.git",
             new_content="mirror = https://***@mirror.example.com/r.git  # kept"),
    )  # fmt: skip
    assert g["ok"], g
    assert (
        "ghp_abcdefghijklmnopqrstuvwxyz0123@mirror.example.com/r.git  # kept"
        in (project / "deploy.cfg").read_text()
    )
    assert "ghp_" not in g["result"]["preview"]


def test_edit_cred_02_a_marker_that_fits_no_credential_is_refused_naming_the_line(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, {"deploy.cfg": CONFIG})
    before = (project / "deploy.cfg").read_text()
    r = _edit(
        worker,
        "deploy.cfg",
        "name = old\n",
        "name = old\nbackup = https://deploy:***@other.example.com/r.git\n",
    )
    assert not r["ok"]
    assert r["error"]["details"]["problem"] == "redacted-credential"
    assert r["error"]["details"]["line"] == 2
    assert "other.example.com" in r["error"]["message"]
    assert (project / "deploy.cfg").read_text() == before


# --- diff-like lines apply exactly as approved --------------------------------------------

DIFF_LIKE = ["--", "---", "+++", "@@ -1,2 +1,2 @@", "-- x", "--- a/x", "+++ b/x", "@@"]


def _approved(worker: Worker, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plan, check every call is reviewed with a diff, approve all, execute."""
    plan = worker.plan({"calls": calls})
    for item in plan["items"]:
        assert item["disposition"] == "confirm" and item["preview"], item
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": [c["id"] for c in calls]}, lambda e: None
    )
    return list(result["results"])


def test_edit_diff_01_lines_that_look_like_diff_syntax_apply_as_approved(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    for n, shape in enumerate(DIFF_LIKE):
        with_line = f"a\nb\n{shape}\nc\n"
        without = "a\nb\nc\n"
        files = {f"r{n}.txt": with_line, f"s{n}.txt": with_line, f"i{n}.txt": without,
                 f"j{n}.txt": without, f"w{n}.txt": with_line, f"e{n}.txt": with_line,
                 f"f{n}.txt": without}  # fmt: skip
        _setup(worker, project, files)
        results = _approved(
            worker,
            [
                # multi_edit over two files: one removes the line, the other adds it.
                call("m", "multi_edit", edits=[
                    {"path": f"r{n}.txt", "start_line": 3, "end_line": 3, "new_content": ""},
                    {"path": f"i{n}.txt", "start_line": 3, "end_line": 2,
                     "new_content": shape + "\n"},
                ]),
                call("m2", "multi_edit", edits=[
                    {"path": f"j{n}.txt", "start_line": 3, "end_line": 2,
                     "new_content": shape + "\n"},
                    {"path": f"s{n}.txt", "start_line": 3, "end_line": 3, "new_content": ""},
                ]),
                call("r", "edit_region", path=f"w{n}.txt", start_line=3, end_line=3,
                     new_content=""),
                call("e", "edit", path=f"e{n}.txt", old_string=f"b\n{shape}\n",
                     new_string="b\n"),
                call("e2", "edit", path=f"f{n}.txt", old_string="b\n",
                     new_string=f"b\n{shape}\n"),
                call("w", "write_file", path=f"w{n}.txt", content=f"{shape}\n{shape}\nz\n"),
            ],
        )  # fmt: skip
        assert all(r["ok"] for r in results), (shape, results)
        for name in (f"r{n}.txt", f"s{n}.txt", f"e{n}.txt"):
            assert (project / name).read_text() == without, (shape, name)
        for name in (f"i{n}.txt", f"j{n}.txt", f"f{n}.txt"):
            assert (project / name).read_text() == with_line, (shape, name)
        assert (project / f"w{n}.txt").read_text() == f"{shape}\n{shape}\nz\n"


def test_edit_match_05_an_empty_new_string_deletes_the_lines_found(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "a = 1\n        \n\tb = 2 \n\nc = 3\n"
    _setup(worker, project, {"d.py": text})
    r = _edit(worker, "d.py", "\n\tb = 2\n\n", "")
    assert r["ok"] and r["result"]["matched"] == "trailing", r
    assert (project / "d.py").read_text() == "a = 1\nc = 3\n"


def test_edit_diff_02_a_preview_of_many_files_splits_back_into_each_files_diff() -> None:
    """Whatever the lines say, the hunk counts decide where a file's diff ends."""
    import random

    from forj_py.tools._edit import review, split_file_diffs

    rng = random.Random(7)
    shapes = [
        "x",
        "--",
        "-- ",
        "-- x",
        "---",
        "--- a/f",
        "+++ b/f",
        "@@ -1 +1 @@",
        "-",
        "+",
        " ",
        "",
    ]
    for _ in range(300):
        diffs = []
        for n in range(rng.randint(1, 4)):
            old = [rng.choice(shapes) for _ in range(rng.randint(0, 12))]
            new = list(old)
            for _ in range(rng.randint(1, 3)):
                at = rng.randint(0, len(new))
                if new and at < len(new) and rng.random() < 0.5:
                    del new[at]
                else:
                    new.insert(at, rng.choice(shapes))
            end_old = "\n" if rng.random() < 0.8 else ""
            end_new = "\n" if rng.random() < 0.8 else ""
            notes = ["a note"] if rng.random() < 0.3 else []
            diff = review(f"f{n}", "\n".join(old) + end_old, "\n".join(new) + end_new, True, notes)
            if diff:
                diffs.append(diff)
        assert split_file_diffs("".join(diffs)) == diffs
