"""code.ast.parsed after writes: writing tools refuse source code that parses worse.

Real tree-sitter grammars, real files, through the worker's plan and execute.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MakeWorker, call, user_config, write_tree
from conftest import run_approved as _exec

pytest.importorskip("tree_sitter_python")

RULE = '[[validators]]\nrule = "code.ast.parsed"\n'
GOOD = "def f(x):\n    return x + 1\n"


def test_code_ast_parsed_after_writes_refuses_a_write_that_breaks_the_syntax(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config(RULE)
    write_tree(project, {"pkg": {"mod.py": GOOD}})
    worker = make_worker()
    _exec(worker, call("r", "read_file", path="pkg/mod.py"))
    (broken,) = _exec(
        worker, call("e", "edit", path="pkg/mod.py", old_string="x + 1", new_string="(x + 1")
    )
    assert not broken["ok"]
    error = broken["error"]
    assert error["details"]["rule"] == "code.ast.parsed"
    assert "does not parse as python" in error["message"]
    assert (project / "pkg/mod.py").read_text() == GOOD
    (new,) = _exec(worker, call("w", "write_file", path="pkg/new.js", content="function f( {\n"))
    assert not new["ok"] and "javascript" in new["error"]["message"]
    assert not (project / "pkg/new.js").exists()
    (fine,) = _exec(
        worker, call("e2", "edit", path="pkg/mod.py", old_string="x + 1", new_string="x + 2")
    )
    assert fine["ok"], fine


def test_code_ast_parsed_after_writes_lets_a_broken_file_be_mended_step_by_step(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config(RULE)
    write_tree(project, {"a.py": "def f(:\n    pass\ndef g(:\n    pass\n"})
    worker = make_worker()
    _exec(worker, call("r", "read_file", path="a.py"))
    (half,) = _exec(
        worker, call("e", "edit", path="a.py", old_string="def f(:", new_string="def f():")
    )
    assert half["ok"], half
    assert (project / "a.py").read_text().startswith("def f():")


def test_code_ast_parsed_after_writes_only_when_the_rule_is_configured(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (w,) = _exec(worker, call("w", "write_file", path="b.py", content="def (:\n"))
    assert w["ok"], w
    user_config(RULE.replace('parsed"', 'parsed"\nenforcement = "warning"'))
    (warned,) = _exec(make_worker(), call("w2", "write_file", path="c.py", content="def (:\n"))
    assert warned["ok"], warned


def test_code_ast_parsed_after_writes_checks_every_file_of_a_patch(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config(RULE)
    write_tree(project, {"ok.py": GOOD, "bad.py": GOOD})
    worker = make_worker()
    _exec(worker, call("r1", "read_file", path="ok.py"), call("r2", "read_file", path="bad.py"))
    patch = (
        "*** Begin Patch\n*** Update File: ok.py\n@@\n-    return x + 1\n+    return x + 3\n"
        "*** Update File: bad.py\n@@\n-    return x + 1\n+    return (x + 1\n*** End Patch\n"
    )
    (p,) = _exec(worker, call("p", "apply_patch", patch=patch))
    assert not p["ok"]
    assert "bad.py" in p["error"]["message"]
    assert (project / "ok.py").read_text() == GOOD  # all or nothing
