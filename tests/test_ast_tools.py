"""The AST tools on real grammars and real files, through the worker (plan, review, run)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config, write_tree

from forj_py.config import load
from forj_py.errors import ToolFailure
from forj_py.service import Worker
from forj_py.tools import _ast_lang
from forj_py.tools.ast import AstGenerate
from forj_py.tools.ast_edit import AstEdit

SOURCES: dict[str, Any] = {
    "py": {
        "auth.py": (
            "def auth_login(user):\n"
            '    """Log in."""\n'
            "    return _check(user)\n"
            "\n"
            "\n"
            "def _check(user):\n"
            "    return user\n"
            "\n"
            "\n"
            "class Session:\n"
            '    """A session."""\n'
            "\n"
            "    def close(self):\n"
            "        def inner():\n"
            "            pass\n"
            "        return inner\n"
        ),
        "use.py": (
            "from auth import auth_login\n"
            "\n"
            "# auth_login is called once\n"
            'NAME = "auth_login"\n'
            "print(auth_login(NAME))\n"
        ),
    },
    "web": {
        "app.js": (
            "/** Start the app. */\n"
            "export function start(port) {\n"
            "  return listen(port);\n"
            "}\n"
            "export const stop = () => start(0);\n"
            "function listen(p) { return p; }\n"
            "class Server {\n"
            "  serve() { return start(1); }\n"
            "}\n"
        ),
        "types.ts": (
            "/** A user. */\n"
            "export interface User { name: string }\n"
            "export type Id = number;\n"
            "export enum Role { Admin }\n"
            "export function greet(u: User): string { return u.name; }\n"
        ),
        "view.tsx": "export function View(): JSX.Element { return <div>hi</div>; }\n",
    },
    "go": {
        "server.go": (
            "package server\n"
            "\n"
            "// Serve starts serving.\n"
            "func Serve() error { return helper() }\n"
            "\n"
            "func helper() error { return nil }\n"
            "\n"
            "type Config struct{ Port int }\n"
            "\n"
            'func (c *Config) Addr() string { return "" }\n'
        ),
    },
    "rs": {
        "lib.rs": (
            "/// Parses the input.\n"
            "pub fn parse(s: &str) -> u32 { s.parse().unwrap() }\n"
            "\n"
            'fn private() { panic!("no"); }\n'
            "\n"
            "pub struct Point { x: i32 }\n"
            "\n"
            "impl Point {\n"
            "    pub fn norm(&self) -> i32 { self.x }\n"
            "}\n"
            "\n"
            "#[cfg(test)]\n"
            "mod tests {\n"
            "    #[test]\n"
            '    fn t() { super::parse("1"); Some(1).unwrap(); }\n'
            "}\n"
        ),
    },
    "c": {
        "util.c": (
            "/* Adds two numbers. */\n"
            "int add(int a, int b) { return a + b; }\n"
            "\n"
            "static int twice(int a) { return add(a, a); }\n"
            "\n"
            "struct pair { int a; int b; };\n"
        ),
        "util.h": "int add(int a, int b);\n",
    },
}


@pytest.fixture
def code(project: Path) -> Path:
    (project / "src/main.py").unlink()  # the shared fixture's text, not Python
    write_tree(project, SOURCES)
    return project


def run1(worker: Worker, name: str, approve: bool = True, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("c", name, **args)]})
    reply = worker.execute(
        {"batch_id": plan["batch_id"], **({"approved": ["c"]} if approve else {})},
        lambda event: None,
    )
    return dict(reply["results"][0])


def ok(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    entry = run1(worker, name, **args)
    assert entry["ok"], entry
    return dict(entry["result"])


def err(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    entry = run1(worker, name, **args)
    assert not entry["ok"], entry
    return dict(entry["error"])


def defs(worker: Worker, **where: Any) -> dict[tuple[str, str], dict[str, Any]]:
    nodes = ok(worker, "ast_query", where=where, limit=5000)["nodes"]
    return {(n["file"], n["qualname"]): n for n in nodes}


# --- ast_generate ---------------------------------------------------------------------


def test_ast_generate_indexes_each_language(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    result = ok(worker, "ast_generate", paths=["**"])
    assert result["errors"] == []
    assert result["languages"] == {
        "c": 2,
        "go": 1,
        "javascript": 1,
        "python": 2,
        "rust": 1,
        "tsx": 1,
        "typescript": 1,
    }
    assert result["parsed_files"] == 9
    found = defs(worker)
    want = {
        # (file, qualname): (type, exported, documented)
        ("py/auth.py", "auth_login"): ("fn", True, True),
        ("py/auth.py", "_check"): ("fn", False, False),
        ("py/auth.py", "Session"): ("class", True, True),
        ("py/auth.py", "Session.close"): ("method", True, False),
        ("py/auth.py", "Session.close.inner"): ("fn", False, False),
        ("web/app.js", "start"): ("fn", True, True),
        ("web/app.js", "stop"): ("fn", True, False),
        ("web/app.js", "listen"): ("fn", False, False),
        ("web/app.js", "Server"): ("class", False, False),
        ("web/app.js", "Server.serve"): ("method", False, False),
        ("web/types.ts", "User"): ("interface", True, True),
        ("web/types.ts", "Id"): ("type", True, False),
        ("web/types.ts", "Role"): ("enum", True, False),
        ("web/types.ts", "greet"): ("fn", True, False),
        ("web/view.tsx", "View"): ("fn", True, False),
        ("go/server.go", "Serve"): ("fn", True, True),
        ("go/server.go", "helper"): ("fn", False, False),
        ("go/server.go", "Config"): ("struct", True, False),
        ("go/server.go", "Addr"): ("method", True, False),
        ("rs/lib.rs", "parse"): ("fn", True, True),
        ("rs/lib.rs", "private"): ("fn", False, False),
        ("rs/lib.rs", "Point"): ("struct", True, False),
        ("rs/lib.rs", "norm"): ("method", True, False),
        ("c/util.c", "add"): ("fn", True, True),
        ("c/util.c", "twice"): ("fn", False, False),
        ("c/util.c", "pair"): ("struct", True, False),
    }
    for key, (kind, exported, documented) in want.items():
        node = found[key]
        assert (node["type"], node["exported"], node["documented"]) == (
            kind,
            exported,
            documented,
        ), key
    # Spans point at the definition itself.
    start = found[("py/auth.py", "auth_login")]
    text = (code / "py/auth.py").read_bytes()
    assert text[start["span"]["start"] : start["span"]["end"]].startswith(b"def auth_login")
    assert start["lines"] == {"start": 1, "end": 3}


def test_ast_generate_is_incremental_by_mtime_and_hash(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    assert ok(worker, "ast_generate", paths=["py/**"])["parsed_files"] == 2
    again = ok(worker, "ast_generate", paths=["py/**"])
    assert (again["parsed_files"], again["unchanged_files"]) == (0, 2)
    # Touched, same content: read and hashed, not parsed.
    os.utime(code / "py/use.py", ns=(1, 1))
    touched = ok(worker, "ast_generate", paths=["py/**"])
    assert (touched["parsed_files"], touched["unchanged_files"]) == (0, 2)
    # Changed: parsed again, and only it.
    (code / "py/auth.py").write_text("def renamed():\n    pass\n")
    changed = ok(worker, "ast_generate", paths=["py/**"])
    assert (changed["parsed_files"], changed["unchanged_files"]) == (1, 1)
    names = {n for _, n in defs(worker)}
    assert "renamed" in names and "auth_login" not in names
    # Not incremental: everything again.
    assert ok(worker, "ast_generate", paths=["py/**"], incremental=False)["parsed_files"] == 2


def test_ast_generate_reports_parse_errors_per_file_and_goes_on(
    make_worker: MakeWorker, code: Path
) -> None:
    write_tree(
        code,
        {
            "broken": {
                "a.py": "def ok():\n    pass\n\ndef bad(:\n    pass\n",
                "b.go": "package b\nfunc F( {\n",
                "c.rs": "pub fn fine() {}\n",
            }
        },
    )
    worker = make_worker()
    result = ok(worker, "ast_generate", paths=["broken/*"])
    assert result["parsed_files"] == 3
    by_file = {e["file"]: e for e in result["errors"]}
    assert set(by_file) == {"broken/a.py", "broken/b.go"}
    assert by_file["broken/a.py"]["problems"][0]["line"] == 4
    assert by_file["broken/b.go"]["problems"][0]["line"] == 2
    assert "do not parse" in result["note"]
    # The good file and what precedes the error are indexed.
    names = {n for _, n in defs(worker)}
    assert {"ok", "fine"} <= names


STRIPE = "sk_live_" + "51Habc123def456"  # split so this file is no credential itself


def test_ast_generate_deep_nesting_is_a_per_file_error_within_the_time_limit(
    make_worker: MakeWorker, code: Path
) -> None:
    """Error recovery's nesting once cost the tree search the square of its depth, all
    the while holding the interpreter: 100,000 open parentheses kept the worker busy
    well past this call's time limit, and the file after it was never looked at."""
    user_config("[tools.ast]\ngenerate_timeout_seconds = 5\n")
    write_tree(
        code,
        {"deep": {"a.py": "(" * 100_000, "b.py": "def after():\n    pass\n"}},
    )
    worker = make_worker()
    result = ok(worker, "ast_generate", paths=["deep/*"])
    assert "stopped" not in result, result
    assert result["parsed_files"] == 2
    by_file = {e["file"]: e for e in result["errors"]}
    assert set(by_file) == {"deep/a.py"}
    assert by_file["deep/a.py"]["problems"][0] == {
        "line": 1,
        "column": 1,
        "message": "unexpected '('",
    }
    assert ("deep/b.py", "after") in defs(worker)


def test_ast_tree_search_honours_cancel_and_the_deadline_inside_one_file() -> None:
    """The searches of one file's tree look at the call's cancel and deadline
    themselves: nothing has to wait for them to return."""
    data = b"def f():\n    pass\n" + b"(" * 100_000
    parsed = _ast_lang.parse("d.py", "python", data)
    assert [d.name for d in parsed.definitions] == ["f"]
    assert parsed.error_count == 1
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ToolFailure) as cancelled:
        _ast_lang.parse("d.py", "python", data, _ast_lang.Watch(cancel=cancel))
    assert cancelled.value.error.type.value == "cancelled"
    past = _ast_lang.Watch(deadline=time.monotonic() - 1)
    with pytest.raises(_ast_lang.OutOfTime):
        _ast_lang.parse("d.py", "python", data, past)
    root = _ast_lang.tree_of("python", data).root_node
    assert _ast_lang.identifier_sites("python", "fn", root, "f") == [(4, 5)]
    with pytest.raises(ToolFailure):
        _ast_lang.identifier_sites("python", "fn", root, "f", _ast_lang.Watch(cancel=cancel))


def test_ast_syntax_errors_name_the_token_kind_never_the_text(
    make_worker: MakeWorker, code: Path
) -> None:
    write_tree(code, {"conf": {"keys.py": f"x = 1\nSTRIPE_KEY={STRIPE} def\n"}})
    result = ok(make_worker(), "ast_generate", paths=["conf/*"])
    [error] = result["errors"]
    assert error["problems"][0] == {"line": 2, "column": 1, "message": "unexpected identifier"}
    assert "sk_live" not in str(result) and "STRIPE" not in str(result)


def test_ast_generate_language_filter_and_max_files(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    only_go = ok(worker, "ast_generate", paths=["**"], language="go")
    assert only_go["languages"] == {"go": 1}
    capped = ok(worker, "ast_generate", paths=["**"], max_files=2)
    assert capped["matched_files"] == 2 and "only the first 2" in capped["note"]


def test_ast_tools_stay_inside_the_sandbox(
    make_worker: MakeWorker, code: Path, tmp_path: Path
) -> None:
    user_config('[tools.sandbox]\ndenied_patterns = ["secret/**"]\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("def leaked():\n    pass\n")
    write_tree(code, {"secret": {"keys.py": "def hidden_key():\n    pass\n"}})
    (code / "py" / "link.py").symlink_to(outside / "leak.py")
    os.symlink(outside, code / "out")
    worker = make_worker()
    for pattern in ["../outside/*.py", "/etc/*.py", "py/../../outside/*"]:
        error = err(worker, "ast_generate", paths=[pattern])
        assert "relative to the project root" in error["message"]
    ok(worker, "ast_generate", paths=["**"])
    ok(worker, "ast_generate", paths=["secret/*.py", "out/*.py", "py/link.py"])
    names = {n for _, n in defs(worker)}
    assert "hidden_key" not in names and "leaked" not in names
    assert "auth_login" in names


def test_ast_tools_not_installed_say_how_to_install(
    make_worker: MakeWorker, code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grammar module is absent, as on a worker installed without the extra.
    monkeypatch.setitem(sys.modules, "tree_sitter_go", None)
    monkeypatch.setattr(_ast_lang, "_loaded", {})
    error = err(make_worker(), "ast_generate", paths=["go/*.go"])
    assert "pip install 'forj[ast]'" in error["message"]
    assert error["details"]["code"] == "E_AST_PARSE"


def test_ast_timeouts_follow_seed_004(code: Path) -> None:
    config = load(code).config
    assert AstGenerate().timeout(config) == 300
    assert AstEdit().timeout(config) == 30


# --- ast_query ------------------------------------------------------------------------


def test_ast_query_filters(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    ok(worker, "ast_generate", paths=["**"])
    assert set(defs(worker, type="fn", name_like="auth*")) == {("py/auth.py", "auth_login")}
    assert set(defs(worker, type="method", exported=True)) == {
        ("py/auth.py", "Session.close"),
        ("go/server.go", "Addr"),
        ("rs/lib.rs", "norm"),
    }
    assert set(defs(worker, file_glob="c/**", exported=False)) == {("c/util.c", "twice")}
    assert {q for _, q in defs(worker, language="typescript", documented=False)} == {
        "Id",
        "Role",
        "greet",
    }
    assert defs(worker, name_like="nothing*") == {}
    few = ok(worker, "ast_query", limit=3)
    assert len(few["nodes"]) == 3 and few["total"] > 3 and "showing 3 of" in few["note"]


def test_ast_query_ids_are_stable_and_answers_follow_the_files(
    make_worker: MakeWorker, code: Path
) -> None:
    worker = make_worker()
    ok(worker, "ast_generate", paths=["py/**"])
    before = defs(worker)[("py/auth.py", "_check")]
    # Lines above it added: same id, new span; a query re-parses on its own.
    path = code / "py/auth.py"
    path.write_text("import os\n\n\n" + path.read_text() + "\ndef added():\n    pass\n")
    after = defs(worker)
    moved = after[("py/auth.py", "_check")]
    assert moved["id"] == before["id"] and moved["lines"]["start"] == before["lines"]["start"] + 3
    assert ("py/auth.py", "added") in after
    (code / "py/use.py").unlink()
    result = ok(worker, "ast_query")
    assert result["removed"] == ["py/use.py"]


def test_ast_query_without_an_index_says_to_generate(make_worker: MakeWorker, code: Path) -> None:
    error = err(make_worker(), "ast_query", where={"type": "fn"})
    assert "ast_generate" in error["recovery"][0]
    assert error["details"]["code"] == "E_AST_PARSE"


def test_ast_query_outline_is_compact_and_says_when_cut(
    make_worker: MakeWorker, code: Path
) -> None:
    worker = make_worker()
    ok(worker, "ast_generate", paths=["**"])
    whole = ok(worker, "ast_query", mode="outline")
    assert "note" not in whole
    assert "py/auth.py\n  fn auth_login L1-3\n  fn _check L6-7 (private)\n" in whole["outline"]
    assert "    method close L13-16\n" in whole["outline"]
    cut = ok(worker, "ast_query", mode="outline", max_chars=200)
    assert len(cut["outline"]) <= 200 + 40
    shown = sum(1 for line in cut["outline"].splitlines() if line.startswith(" ") and " L" in line)
    assert f"{shown} of {whole['definitions']} definitions" in cut["note"]
    assert "narrow where.file_glob" in cut["note"]


# --- ast_edit -------------------------------------------------------------------------


def _target(worker: Worker, file: str, qualname: str) -> str:
    ok(worker, "ast_generate", paths=["**"])
    return str(defs(worker)[(file, qualname)]["id"])


def test_ast_edit_renames_across_files_through_review(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    plan = worker.plan(
        {"calls": [call("r", "ast_edit", target_node_id=node, new_name="auth_signin")]}
    )
    (item,) = plan["items"]
    assert item["disposition"] == "confirm"
    # One diff per file, each with its count of sites.
    assert "--- a/py/auth.py\n+++ b/py/auth.py\n" in item["preview"]
    assert "--- a/py/use.py\n+++ b/py/use.py\n" in item["preview"]
    assert "note: 2 identifier(s) auth_login -> auth_signin" in item["preview"]
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["r"]}, lambda e: None)
    result = reply["results"][0]["result"]
    assert result["edited"] is True
    assert result["sites"] == {"py/auth.py": 1, "py/use.py": 2}
    use = (code / "py/use.py").read_text()
    # Identifiers only: the comment and the string keep the old name.
    assert use == (
        "from auth import auth_signin\n"
        "\n"
        "# auth_login is called once\n"
        'NAME = "auth_login"\n'
        "print(auth_signin(NAME))\n"
    )
    assert (code / "py/auth.py").read_text().startswith("def auth_signin(user):\n")
    # Parsed again after: the index knows the new name under the same file.
    assert ("py/auth.py", "auth_signin") in defs(worker)
    # And it is one change for undo.
    assert worker.undo({"batch_id": plan["batch_id"]})["applied"] is True
    assert "auth_login(NAME)" in (code / "py/use.py").read_text()


def test_ast_edit_denied_changes_nothing(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    before = {p: (code / p).read_text() for p in ("py/auth.py", "py/use.py")}
    entry = run1(worker, "ast_edit", approve=False, target_node_id=node, new_name="x")
    assert not entry["ok"] and entry["error"]["details"]["kind"] == "UserDenied"
    assert {p: (code / p).read_text() for p in before} == before


@pytest.mark.parametrize(
    ("file", "qualname", "new_name", "changed"),
    [
        ("web/app.js", "start", "launch", {"web/app.js": 3}),
        ("web/types.ts", "User", "Person", {"web/types.ts": 2}),
        ("go/server.go", "helper", "assist", {"go/server.go": 2}),
        ("rs/lib.rs", "parse", "parse_all", {"rs/lib.rs": 2}),
        ("c/util.c", "add", "sum", {"c/util.c": 2, "c/util.h": 1}),
    ],
)
def test_ast_edit_renames_in_each_language(
    make_worker: MakeWorker,
    code: Path,
    file: str,
    qualname: str,
    new_name: str,
    changed: dict[str, int],
) -> None:
    worker = make_worker()
    node = _target(worker, file, qualname)
    result = ok(worker, "ast_edit", target_node_id=node, new_name=new_name)
    assert result["sites"] == changed
    for path in changed:
        assert new_name in (code / path).read_text()
    # Every changed file still parses.
    assert ok(worker, "ast_generate", paths=["**"])["errors"] == []


def test_ast_edit_refused_when_the_result_would_not_parse(
    make_worker: MakeWorker, code: Path
) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    before = (code / "py/use.py").read_text()
    error = err(worker, "ast_edit", target_node_id=node, new_name="class")
    assert error["details"]["code"] == "E_AST_EDIT"
    assert "unparseable" in error["message"] and "nothing was changed" in error["message"]
    assert (code / "py/use.py").read_text() == before
    bad = err(worker, "ast_edit", target_node_id=node, new_name="not a name")
    assert "not an identifier" in bad["message"]
    unknown = err(worker, "ast_edit", target_node_id="nffffffffffff", new_name="x")
    assert unknown["details"]["code"] == "E_AST_EDIT"


def test_ast_edit_refused_when_a_file_changes_after_review(
    make_worker: MakeWorker, code: Path
) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    plan = worker.plan({"calls": [call("r", "ast_edit", target_node_id=node, new_name="go")]})
    with (code / "py/use.py").open("a") as fh:
        fh.write("auth_login(2)\n")
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["r"]}, lambda e: None)
    entry = reply["results"][0]
    assert not entry["ok"] and entry["error"]["type"] == "stale-file"
    assert "def auth_login" in (code / "py/auth.py").read_text()


def test_ast_edit_paths_limit_the_rename(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    result = ok(worker, "ast_edit", target_node_id=node, new_name="login", paths=["py/auth.py"])
    assert result["files_touched"] == ["py/auth.py"]
    assert "auth_login" in (code / "py/use.py").read_text()


# --- ast_validate, ast_external, code.ast.parsed --------------------------------------


def test_ast_validate_catalog_and_own_rules(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    ok(worker, "ast_generate", paths=["**"])
    result = ok(worker, "ast_validate")
    assert result["passed"] is False
    found = {(v["rule"], v["file"], v["line"]) for v in result["violations"]}
    assert ("code.fn.docs.exported", "py/auth.py", 13) in found  # Session.close
    assert ("code.fn.docs.exported", "go/server.go", 8) in found  # Config
    assert ("code.fn.docs.exported", "py/auth.py", 1) not in found  # documented
    assert ("code.fn.docs.exported", "py/auth.py", 6) not in found  # private
    # Rust: unwrap and panic! outside tests only (the test module is skipped).
    assert ("code.no.unwrap", "rs/lib.rs", 2) in found
    assert ("code.no.panic.in.lib", "rs/lib.rs", 4) in found
    assert not any(r == "code.no.unwrap" and line > 10 for r, _, line in found)
    own = ok(
        worker,
        "ast_validate",
        rules=[
            {
                "id": "private_fn_docs",
                "enforcement": "warning",
                "where": {"type": "fn", "exported": False, "file_glob": "go/**"},
                "must_have": ["docstring"],
            }
        ],
    )
    assert own["passed"] is True
    assert [(v["rule"], v["level"], v["file"], v["line"]) for v in own["violations"]] == [
        ("private_fn_docs", "warning", "go/server.go", 6)
    ]
    assert "catalog" in err(worker, "ast_validate", rules=[{"id": "mine"}])["message"]


def test_ast_external_is_not_available(make_worker: MakeWorker, code: Path) -> None:
    error = err(
        make_worker(),
        "ast_external",
        provider="rust-analyzer",
        request={"method": "textDocument/documentSymbol"},
    )
    assert error["details"]["code"] == "E_AST_PARSE"
    assert "no language-server bridge" in error["message"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_code_ast_parsed_validator_checks_the_staged_files(
    make_worker: MakeWorker, code: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_git_tools import sh_git

    (tmp_path / "gitconfig").write_text("[user]\n\tname = T\n\temail = t@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    sh_git(code, "init", "-q", "-b", "main")
    sh_git(code, "add", "-A")
    worker = make_worker()
    clean = ok(worker, "validate", rule_id="code.ast.parsed")
    assert clean["passed"] is True and clean["violations"] == []
    (code / "go/server.go").write_text("package server\nfunc Broken( {\n")
    (code / "notes.txt").write_text("not code (\n")
    sh_git(code, "add", "go/server.go", "notes.txt")
    bad = ok(worker, "validate", rule_id="code.ast.parsed")
    assert bad["passed"] is False
    assert [(v["rule"], v["level"], v["file"], v["line"]) for v in bad["violations"]] == [
        ("code.ast.parsed", "blocking", "go/server.go", 2)
    ]


def test_ast_edit_from_a_subdirectory_cwd(make_worker: MakeWorker, code: Path) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    rename = {
        "id": "r",
        "name": "ast_edit",
        "args": {"target_node_id": node, "new_name": "sign_in"},
        "meta": {"cwd": "web"},
    }
    plan = worker.plan({"calls": [rename]})
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["r"]}, lambda e: None)
    assert reply["results"][0]["ok"], reply
    assert reply["results"][0]["result"]["files_touched"] == ["py/auth.py", "py/use.py"]
    assert "sign_in(NAME)" in (code / "py/use.py").read_text()


def test_ast_edit_says_when_the_new_name_is_already_there(
    make_worker: MakeWorker, code: Path
) -> None:
    worker = make_worker()
    node = _target(worker, "py/auth.py", "auth_login")
    plan = worker.plan({"calls": [call("r", "ast_edit", target_node_id=node, new_name="_check")]})
    preview = plan["items"][0]["preview"]
    assert "note: _check already appears 2 time(s) in this file" in preview
    result = ok(worker, "ast_edit", target_node_id=node, new_name="_check", dry_run=True)
    assert result["clashes"] == {"py/auth.py": 2}
    assert "def auth_login" in (code / "py/auth.py").read_text()


SHORTHAND = {
    "auth.js": (
        "function authCheck(user) { return !!user; }\n"
        "const table = { authCheck, other: 1 };\n"
        "module.exports = { authCheck };\n"
    ),
    "use.js": (
        "const { authCheck } = require('./auth');\n"
        "function run({ authCheck: check }, { authCheck }) { return check && authCheck; }\n"
        "authCheck(1);\n"
    ),
    "api.ts": (
        "export function loadUser(id: number): number { return id; }\n"
        "export const api = { loadUser };\n"
        "const { loadUser: load } = api;\n"
    ),
}


@pytest.mark.parametrize(
    ("file", "qualname", "new_name", "changed"),
    [
        ("auth.js", "authCheck", "checkAuth", {"auth.js": 3, "use.js": 4}),
        ("api.ts", "loadUser", "fetchUser", {"api.ts": 2}),
    ],
)
def test_ast_edit_rename_reaches_shorthand_properties_and_patterns(
    make_worker: MakeWorker,
    project: Path,
    file: str,
    qualname: str,
    new_name: str,
    changed: dict[str, int],
) -> None:
    """``{ authCheck }`` in an object or a pattern names the function: renamed with it."""
    (project / "src/main.py").unlink()
    write_tree(project, SHORTHAND)
    worker = make_worker()
    node = _target(worker, file, qualname)
    result = ok(worker, "ast_edit", target_node_id=node, new_name=new_name)
    assert result["sites"] == changed
    for path in changed:
        assert qualname not in (project / path).read_text().replace(f"{qualname}: ", "")
    assert ok(worker, "ast_generate", paths=["**"])["errors"] == []


# Each grammar's shapes of a reference to a function, before and after renaming
# auth_check to verify.  Names that are not references stay: a keyword
# argument's name, a struct field (Go's keyed literal, C's designator, Rust's
# field access), a Python string.  Rust's shorthand initializer keeps its field
# name.  Texts the grammar does not parse as code (a C macro body) stay too.
REFERENCE_SHAPES = {
    "python": (
        "auth.py",
        "def auth_check(user):\n    return user\n",
        "from auth import auth_check\n"
        '__all__ = ["auth_check"]\n'
        "@auth_check\n"
        "def g(): pass\n"
        "f(x=auth_check)\n"
        "f(auth_check=1)\n"
        "handler = lambda: auth_check\n",
        "from auth import verify\n"
        '__all__ = ["auth_check"]\n'
        "@verify\n"
        "def g(): pass\n"
        "f(x=verify)\n"
        "f(auth_check=1)\n"
        "handler = lambda: verify\n",
    ),
    "go": (
        "auth.go",
        "package auth\n\nfunc auth_check(u int) bool { return u > 0 }\n",
        "package auth\n\n"
        "var h = auth_check\n"
        "var c = T{auth_check: auth_check}\n"
        "func f() { go auth_check(1); defer auth_check(2); run(auth_check) }\n",
        "package auth\n\n"
        "var h = verify\n"
        "var c = T{auth_check: verify}\n"
        "func f() { go verify(1); defer verify(2); run(verify) }\n",
    ),
    "rust": (
        "auth.rs",
        "pub fn auth_check(u: u32) -> bool { u > 0 }\n",
        "use crate::auth::auth_check;\n"
        "use auth::{auth_check, other};\n"
        "use auth::auth_check as ac;\n"
        "fn f() {\n"
        "    let s = Foo { auth_check };\n"
        "    let t = Foo { auth_check: auth_check };\n"
        "    v.map(auth_check);\n"
        "    auth::auth_check(1);\n"
        "    s.auth_check;\n"
        '    println!("{}", auth_check(1));\n'
        "}\n",
        "use crate::auth::verify;\n"
        "use auth::{verify, other};\n"
        "use auth::verify as ac;\n"
        "fn f() {\n"
        "    let s = Foo { auth_check: verify };\n"
        "    let t = Foo { auth_check: verify };\n"
        "    v.map(verify);\n"
        "    auth::verify(1);\n"
        "    s.auth_check;\n"
        '    println!("{}", verify(1));\n'
        "}\n",
    ),
    "c": (
        "auth.c",
        "int auth_check(int u) { return u > 0; }\n",
        "#define CALL auth_check(1)\n"
        "int (*p)(int) = &auth_check;\n"
        "int (*q)(int) = auth_check;\n"
        "struct S s = { .auth_check = auth_check };\n"
        "void f(void) { s.auth_check = auth_check; }\n",
        "#define CALL auth_check(1)\n"
        "int (*p)(int) = &verify;\n"
        "int (*q)(int) = verify;\n"
        "struct S s = { .auth_check = verify };\n"
        "void f(void) { s.auth_check = verify; }\n",
    ),
}


@pytest.mark.parametrize("language", sorted(REFERENCE_SHAPES))
def test_ast_edit_rename_reaches_each_grammars_reference_shapes(
    make_worker: MakeWorker, project: Path, language: str
) -> None:
    """Every reference shape the grammar parses is renamed, and nothing else is."""
    file, definition, uses, renamed = REFERENCE_SHAPES[language]
    (project / "src/main.py").unlink()
    # The uses follow the definition in the same file: one file, whatever the
    # language's notion of modules.
    write_tree(project, {file: definition + uses})
    worker = make_worker()
    node = _target(worker, file, "auth_check")
    ok(worker, "ast_edit", target_node_id=node, new_name="verify")
    assert (project / file).read_text() == definition.replace("auth_check", "verify") + renamed
