"""Edits are never written wrong: where a text could mean two places, refused.

Through the real worker (plan, approve, execute) on real files.  Each test
names the rule it proves; the property tests over real files
(``test_edit_properties.py``) generate the same shapes at scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import MakeWorker, call
from conftest import run_approved as _exec

from forj_py.service import Worker


def _setup(worker: Worker, project: Path, name: str, text: str) -> None:
    (project / name).write_text(text, encoding="utf-8")
    (r,) = _exec(worker, call("r", "read_file", path=name))
    assert r["ok"], r


def _edit(worker: Worker, path: str, old: str, new: str, **more: Any) -> dict[str, Any]:
    (r,) = _exec(worker, call("e", "edit", path=path, old_string=old, new_string=new, **more))
    return r


TWINS = (
    "def outer():\n"
    "    if ready:\n"
    "        total = count(items)\n"
    "        report(total)\n"
    "\n"
    "total = count(items)\n"
    "report(total)\n"
)


def test_twin_block_found_exactly_and_by_indent_is_refused_naming_both(
    make_worker: MakeWorker, project: Path
) -> None:
    """A copy drifted a level equals the twin exactly: both places named, none written."""
    worker = make_worker()
    _setup(worker, project, "t.py", TWINS)
    r = _edit(worker, "t.py", "total = count(items)\nreport(total)\n", "report(0)\n")
    assert not r["ok"], r
    assert [m["start_line"] for m in r["error"]["details"]["matches"]] == [3, 6]
    assert "lines 6-7 match it exactly" in r["error"]["message"]
    assert (project / "t.py").read_text() == TWINS


def test_twin_block_found_exactly_and_ignoring_trailing_blanks_is_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "a = 1  \nb = 2\nx\na = 1\nb = 2\n"
    _setup(worker, project, "t.py", text)
    r = _edit(worker, "t.py", "a = 1\nb = 2\n", "a = 3\n")
    assert not r["ok"], r
    assert [m["start_line"] for m in r["error"]["details"]["matches"]] == [1, 4]
    assert (project / "t.py").read_text() == text


def test_unique_text_still_applies_at_the_first_pass(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, "t.py", TWINS)
    r = _edit(worker, "t.py", "    if ready:\n", "    if ready and ok:\n")
    assert r["ok"] and r["result"]["matched"] == "exact", r


def test_old_string_starting_with_an_empty_line_matches_at_a_line_start(
    make_worker: MakeWorker, project: Path
) -> None:
    """``\\nfoo`` means an empty line, then foo: not the end of the line before foo."""
    worker = make_worker()
    text = "x = 1\ndef foo():\n    pass\n\n\ndef bar():\n    pass\n"
    _setup(worker, project, "t.py", text)
    r = _edit(worker, "t.py", "\ndef foo():\n", "def foo2():\n")
    assert not r["ok"], r
    assert (project / "t.py").read_text() == text
    r = _edit(worker, "t.py", "\n\ndef bar():\n", "\ndef bar():\n")
    assert r["ok"], r
    assert (project / "t.py").read_text() == "x = 1\ndef foo():\n    pass\n\ndef bar():\n    pass\n"


def test_patch_hunk_without_number_or_unique_anchor_is_refused_when_context_repeats(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "def a():\n    x = 1\n    return x\n\ndef b():\n    x = 1\n    return x\n"
    _setup(worker, project, "p.py", text)
    patch = (
        "*** Begin Patch\n*** Update File: p.py\n@@\n"
        "     x = 1\n-    return x\n+    return 2\n*** End Patch\n"
    )
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not r["ok"], r
    assert [m["start_line"] for m in r["error"]["details"]["matches"]] == [2, 6]
    assert (project / "p.py").read_text() == text
    # A unique anchor settles it.
    anchored = patch.replace("@@\n", "@@ def b():\n")
    (r,) = _exec(worker, call("p", "apply_patch", patch=anchored))
    assert r["ok"], r
    assert (project / "p.py").read_text().endswith("    x = 1\n    return 2\n")


def test_patch_unified_hunk_whose_counts_disagree_is_refused_whole(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "".join(f"line {i}\n" for i in range(1, 30))
    _setup(worker, project, "u.txt", text)
    patch = (
        "--- a/u.txt\n+++ b/u.txt\n"
        "@@ -2,2 +2,2 @@\n line 2\n-line 3\n+line three\n line 4\n-line 5\n+line five\n"
        "@@ -20,3 +20,3 @@\n line 20\n-line 21\n+line twenty-one\n line 22\n"
    )
    (r,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not r["ok"], r
    assert "hunk lines follow it" in r["error"]["message"]
    assert (project / "u.txt").read_text() == text


def test_expected_matching_the_stated_lines_under_either_newline_reading_keeps_the_range(
    make_worker: MakeWorker, project: Path
) -> None:
    """``X\\n\\n`` for the lines X, '', '': the stated range wins, no blank line twice."""
    worker = make_worker()
    text = "a\nX\n\n\nb\nX\n\nc\n"
    _setup(worker, project, "e.txt", text)
    (r,) = _exec(
        worker,
        call(
            "e",
            "edit_region",
            path="e.txt",
            start_line=2,
            end_line=4,
            expected="X\n\n",
            new_content="Y\n\n",
        ),
    )
    assert r["ok"], r
    assert (project / "e.txt").read_text() == "a\nY\n\n\nb\nX\n\nc\n"


# --- whole files and pasted surroundings -----------------------------------------------

FILE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(8))


def test_new_string_holding_the_whole_file_is_refused_with_or_without_expected_or_crlf(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    for name, text in (("w.py", FILE), ("c.py", FILE.replace("\n", "\r\n"))):
        _setup(worker, project, name, text)
        whole = FILE.replace("return x + 3", "return x * 3")
        r = _edit(worker, name, "    return x + 3\n", whole)
        assert not r["ok"] and r["error"]["details"]["problem"] == "whole-file", r
        for expected in (None, "    return x + 3\n"):
            args: dict[str, Any] = {"path": name, "start_line": 11, "end_line": 11}
            args["new_content"] = whole
            if expected is not None:
                args["expected"] = expected
            (r,) = _exec(worker, call("e", "edit_region", **args))
            assert not r["ok"] and r["error"]["details"]["problem"] == "whole-file", r
        assert (project / name).read_bytes() == text.encode()


def test_fenced_marked_or_numbered_new_text_is_refused_with_the_reason(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, "f.py", FILE)
    old = "def f2(x):\n    return x + 2\n"
    cases = {
        "fence": "```python\ndef f2(x):\n    return x * 2\n```\n",
        "diff-markers": " def f2(x):\n-    return x + 2\n+    return x * 2\n",
        "line-numbers": "     7\tdef f2(x):\n     8\t    return x * 2\n",
    }
    for problem, new in cases.items():
        r = _edit(worker, "f.py", old, new)
        assert not r["ok"] and r["error"]["details"]["problem"] == problem, (problem, r)
    arrow = "  7\u2192def f2(x):\n  8\u2192    return x * 2\n"
    r = _edit(worker, "f.py", old, arrow)
    assert not r["ok"] and r["error"]["details"]["problem"] == "line-numbers", r
    (r,) = _exec(worker, call("w", "write_file", path="f.py", content="```\n" + FILE + "```\n"))
    assert not r["ok"] and r["error"]["details"]["problem"] == "fence", r
    assert (project / "f.py").read_text() == FILE
    # Markdown keeps its fences; a YAML list is no diff.
    _setup(worker, project, "d.md", "# t\n\ntext\n")
    r = _edit(worker, "d.md", "text\n", "```python\nx = 1\n```\n")
    assert r["ok"], r
    _setup(worker, project, "l.yml", "items:\n- a\n- b\n")
    r = _edit(worker, "l.yml", "- a\n- b\n", "- a\n- c\n")
    assert r["ok"], r


def test_write_file_with_a_byte_order_mark_on_a_file_that_keeps_one_writes_one(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (project / "b.txt").write_bytes("\ufeffhello\n".encode())
    (r,) = _exec(worker, call("r", "read_file", path="b.txt"))
    (r,) = _exec(worker, call("w", "write_file", path="b.txt", content="\ufeffbye\n"))
    assert r["ok"], r
    assert (project / "b.txt").read_bytes() == "\ufeffbye\n".encode()


# --- double escaping --------------------------------------------------------------------


def test_double_escape_caught_on_one_line_ranges_two_line_texts_and_whole_files(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "def f(x):\n    y = x + 1\n    return y\n"
    # A file that holds a literal \n elsewhere no longer turns the guard off.
    holder = text + 'SEP = "\\n"\nJOIN = x\\ny\n'
    _setup(worker, project, "f.py", holder)
    calls = [
        call("a", "edit_region", path="f.py", start_line=2, end_line=2,
             new_content="    y = x + 1\\n    y = y * 2"),
        call("b", "edit", path="f.py", old_string="    y = x + 1\n",
             new_string="    y = x + 2\\n    y = y * 2\\n    y = y - 1\n"),
        call("c", "write_file", path="f.py", content="def f(x):\\n    return x\\n"),
    ]  # fmt: skip
    for c in calls:
        (r,) = _exec(worker, c)
        assert not r["ok"] and r["error"]["details"]["problem"] == "double-escaped", r
    assert (project / "f.py").read_text() == holder
    # A docstring's closing quote opens no string: two lines joined are still caught.
    lisp = '(defun f ()\n  "Say\nmore."\n  (concat a "\\n" b))\n'
    _setup(worker, project, "d.el", lisp)
    old = 'more."\n  (concat a "\\n" b))\n'
    r = _edit(worker, "d.el", old, 'more. Really."\\n  (concat a "\\n" b))\n')
    assert not r["ok"] and r["error"]["details"]["problem"] == "double-escaped", r
    assert (project / "d.el").read_text() == lisp


def test_real_backslashes_stay_real_regex_comment_c_string_elisp_char_printf(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    files = {
        "r.py": ("    pat = None\n    x = 1\n", '    pat = re.compile(r"\\n\\n+")  # \\n\\n'),
        "j.js": ("  let re = null;\n  x();\n", "  let re = /\\n\\n+/g; // split on \\n\\n"),
        "c.c": ("  int a;\n  a = 0;\n", '  printf("%d\\n\\n", a); puts("\\n");'),
        "e.el": ("  (setq a 1)\n  (setq b 2)\n", "  (insert ?\\n ?\\n) ; two \\n"),
    }
    for name, (old, new) in files.items():
        _setup(worker, project, name, old)
        (r,) = _exec(
            worker, call("e", "edit_region", path=name, start_line=1, end_line=2, new_content=new)
        )
        assert r["ok"], (name, r)
        assert (project / name).read_text() == new + "\n"


# --- lazy placeholders ------------------------------------------------------------------

C_FILE = "int f(int a) {\n  int b = a;\n  b++;\n  b++;\n  return b;\n}\n"


def test_placeholders_in_every_wording_and_comment_style_are_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _setup(worker, project, "f.c", C_FILE)
    for lazy in ("  ...", "  // ... snip ...", "  /* [snip] */", "  [...]", "  // rest unchanged"):
        new = f"int f(int a) {{\n  int b = a * 2;\n{lazy}\n}}\n"
        (r,) = _exec(
            worker, call("e", "edit_region", path="f.c", start_line=1, end_line=6, new_content=new)
        )
        assert not r["ok"] and r["error"]["details"]["problem"] == "placeholder", (lazy, r)
    _setup(worker, project, "p.py", "def f():\n    a = 1\n    b = 2\n    return a\n")
    new = "def f():\n    a = 3\n    ...  # ... (unchanged)\n"
    (r,) = _exec(
        worker, call("e", "edit_region", path="p.py", start_line=1, end_line=4, new_content=new)
    )
    assert not r["ok"] and r["error"]["details"]["problem"] == "placeholder", r


def test_a_dropped_line_counts_even_when_its_text_recurs(
    make_worker: MakeWorker, project: Path
) -> None:
    """``b++;`` twice in the file, once in the new text: one of them is dropped."""
    worker = make_worker()
    _setup(worker, project, "f.c", C_FILE)
    new = "int f(int a) {\n  int b = a;\n  b++;\n  // ... existing code ...\n  return b;\n}\n"
    (r,) = _exec(
        worker, call("e", "edit_region", path="f.c", start_line=1, end_line=6, new_content=new)
    )
    assert not r["ok"] and r["error"]["details"]["problem"] == "placeholder", r
    assert r["error"]["details"]["dropped_lines"] == [4], r


def test_real_code_and_plain_comments_are_not_placeholders(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    cases = {
        "a.py": "class P:\n    def f(self) -> int:\n        ...\n",
        "b.js": "function g(...args) {\n  // Rest of the arguments are passed on\n"
        "  return h(...args);\n}\n",
        "c.go": "func g(xs ...int) int {\n\t// Remaining items are summed below\n"
        "\treturn sum(xs...)\n}\n",
        "d.c": "int g(int n, ...) {\n  /* Other platforms use the default */\n  return n;\n}\n",
        "e.py": "def g():\n    # No change in behaviour for callers\n    return 1\n",
    }
    for name, new in cases.items():
        _setup(worker, project, name, "one\ntwo\nthree\nfour\n")
        (r,) = _exec(
            worker,
            call("e", "edit_region", path=name, start_line=1, end_line=4, new_content=new),
        )
        assert r["ok"], (name, r)
        assert (project / name).read_text() == new


# --- indentation ------------------------------------------------------------------------


def test_new_text_already_at_the_files_depth_is_kept_not_reindented(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = "class A:\n    def f(self):\n        return 1\n"
    _setup(worker, project, "a.py", text)
    # The old text drifted a level deeper; the new one was written at the file's depth.
    r = _edit(
        worker,
        "a.py",
        "        def f(self):\n            return 1\n",
        "    def f(self):\n        return 2\n",
    )
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert (project / "a.py").read_text() == "class A:\n    def f(self):\n        return 2\n"


def test_two_kept_lines_of_the_same_text_map_to_their_own_file_lines(
    make_worker: MakeWorker, project: Path
) -> None:
    """The model's copy lost the file's odd trailing blanks; each kept line keeps its own."""
    worker = make_worker()
    text = "if (a) {\n  x();\n  } \n  y();\n  }\t\n"
    _setup(worker, project, "b.js", text)
    r = _edit(
        worker,
        "b.js",
        "    x();\n    }\n    y();\n    }\n",
        "    x();\n    }\n    z();\n    }\n",
    )
    assert r["ok"], r
    assert (project / "b.js").read_text() == "if (a) {\n  x();\n  } \n  z();\n  }\t\n"


# --- the off-by-lines guard ---------------------------------------------------------------


def test_off_by_lines_guard_needs_evidence_not_a_repeated_edge_line(
    make_worker: MakeWorker, project: Path
) -> None:
    """A commit's new first line may repeat the line above: that alone refuses nothing."""
    worker = make_worker()
    text = "func a() error {\n\treturn nil\n}\n\nfunc b() {\n\tx := 1\n}\n"
    _setup(worker, project, "a.go", text)
    # An insertion a diff slid along repeated lines: it starts as the line above does.
    new = "\treturn nil\n}\n\nfunc c() error {\n"
    (r,) = _exec(
        worker,
        call("i", "edit_region", path="a.go", start_line=3, end_line=2, new_content=new),
    )
    assert r["ok"], r
    after = "func a() error {\n\treturn nil\n\treturn nil\n}\n\nfunc c() error {\n}\n"
    assert (project / "a.go").read_text() == after + "\nfunc b() {\n\tx := 1\n}\n"
    # A replacement starting where its range starts, whose last line repeats the line below.
    _setup(worker, project, "b.go", "func b() int {\n\tx := 1\n\treturn x\n}\n")
    (r,) = _exec(
        worker,
        call("e", "edit_region", path="b.go", start_line=1, end_line=2,
             new_content="func b() int {\n\tx := 2\n\treturn x\n"),
    )  # fmt: skip
    assert r["ok"], r


# --- typographic punctuation ----------------------------------------------------------------


def test_punctuation_pass_keeps_each_places_own_quotes_where_the_file_mixes_them(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    text = 'def f():\n    msg = "Hello"  # says \u201chello\u201d\n    return msg\n'
    _setup(worker, project, "q.py", text)
    r = _edit(
        worker,
        "q.py",
        "    msg = \u201cHello\u201d  # says \u201chello\u201d\n",
        "    msg = \u201cHi there\u201d  # says \u201chello\u201d\n",
    )
    assert r["ok"] and r["result"]["matched"] == "unicode", r
    assert (project / "q.py").read_text() == text.replace('"Hello"', '"Hi there"')


def test_depth_in_columns_tabs_then_alignment_spaces_as_emacs_writes_them(
    make_worker: MakeWorker, project: Path
) -> None:
    """Lisp alignment after tabs (tab width 8): a copy drifted two columns, in spaces."""
    worker = make_worker()
    text = '(defun f ()\n  (let ((x 1)\n\t(y 2))\n    (message "%d"\n\t     x)))\n'
    _setup(worker, project, "f.el", text)
    old = '    (let ((x 1)\n          (y 2))\n      (message "%d"\n               x)))\n'
    new = (
        '    (let ((x 1)\n          (y 2)\n            (z 3))\n      (message "%d"\n'
        "               x)))\n"
    )
    r = _edit(worker, "f.el", old, new)
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert (project / "f.el").read_text() == (
        '(defun f ()\n  (let ((x 1)\n\t(y 2)\n\t  (z 3))\n    (message "%d"\n\t     x)))\n'
    )


def test_tab_width_from_editorconfig_places_alignment_in_a_two_column_file(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (project / ".editorconfig").write_text(
        "root = true\n\n[*.{c,h}]\nindent_style = tab\ntab_width = 2\n"
    )
    text = "int f() {\n\tif (a) {\n\t\tb(1,\n\t\t  2);\n\t}\n}\n"
    _setup(worker, project, "t.c", text)
    old = "  int f() {\n    if (a) {\n      b(1,\n        2);\n"
    new = "  int f() {\n    if (a) {\n      b(1,\n        2);\n      c(3,\n        4);\n"
    r = _edit(worker, "t.c", old, new)
    assert r["ok"] and r["result"]["matched"] == "indent", r
    assert (project / "t.c").read_text() == (
        "int f() {\n\tif (a) {\n\t\tb(1,\n\t\t  2);\n\t\tc(3,\n\t\t  4);\n\t}\n}\n"
    )
    # A depth the copy's pairs cannot tell (they disagree) is refused, not guessed.
    _setup(worker, project, "u.c", "int g() {\n\tx(1,\n\t  2);\n\t\tz();\n}\n")
    old = "    x(1,\n      2);\n        z();\n"
    r = _edit(worker, "u.c", old, old + "          w();\n")
    assert not r["ok"] and r["error"]["details"]["problem"] == "indentation-unclear", r
    assert (project / "u.c").read_text() == "int g() {\n\tx(1,\n\t  2);\n\t\tz();\n}\n"
