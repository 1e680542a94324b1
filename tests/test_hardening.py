"""Attacks on the executor that a review found, each kept out for good."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, project_config, run, user_config, write_tree

from forj_py.config import ConfigError, load
from forj_py.errors import ToolFailure
from forj_py.safety.paths import Sandbox
from forj_py.tools.search import find_rg
from forj_py.transport.client import Client, RemoteError, WorkerProcess


def _results(worker: Any, calls: list[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    return run(worker, calls, capacity_bytes=1_000_000, **kw)[1]["results"]


def test_ids_with_control_characters_cannot_share_an_approval(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    calls = [
        call("w1", "write_file", path="a.txt", content="a"),
        call("w1\u0007", "write_file", path="Makefile", content="all:\n\trm -rf /\n"),
        call("w1\u202e", "write_file", path="b.txt", content="b"),
    ]
    plan, _result = run(worker, calls, approved=["w1"])
    assert [i["disposition"] for i in plan["items"]] == ["confirm", "resolved", "resolved"]
    assert "control or invisible" in plan["items"][1]["result"]["error"]["message"]
    assert not (project / "Makefile").exists() and not (project / "b.txt").exists()
    assert (project / "a.txt").exists()


def test_an_id_used_by_a_resolved_call_is_still_taken(make_worker: MakeWorker) -> None:
    worker = make_worker()
    results = _results(
        worker, [call("x", "no_such_tool"), call("x", "read_file", path="README.md")]
    )
    assert results[0]["error"]["details"]["kind"] == "UnknownTool"
    assert results[1]["error"]["details"]["kind"] == "DuplicateToolCallId"


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_narrowed_roots_bind_search_glob_and_list(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    write_tree(project, {"private": {"notes.txt": "password=hunter2\n"}, "src": {"app.py": "pw\n"}})
    user_config(f"[tools.sandbox]\nallowed_roots = ['src']\n[tools.search]\nengine = '{engine}'\n")
    worker = make_worker()
    meta = {"cwd": "src"}
    calls = [
        {"id": "s", "name": "search", "args": {"query": "p"}, "meta": meta},
        {"id": "g", "name": "glob", "args": {"patterns": ["**"]}, "meta": meta},
        {"id": "l", "name": "list_files", "args": {"directory": "."}, "meta": meta},
    ]
    s, g, ls = _results(worker, calls)
    assert {m["path"] for m in s["result"]["matches"]} == {"src/app.py"}
    assert [f["path"] for f in g["result"]["files"]] == ["src", "src/app.py", "src/main.py"]
    assert [f["path"] for f in ls["result"]["files"]] == ["src/app.py", "src/main.py"]


def test_a_nested_root_does_not_move_anchored_denied_patterns(project: Path) -> None:
    write_tree(project, {"private": {"secret.txt": "TOP SECRET"}, "docs": {}})
    (project / "docs" / "alias").symlink_to(project / "private")
    sandbox = Sandbox(project, [".", "private"], ["private/**"])
    for path in ["private/secret.txt", "docs/alias/secret.txt"]:
        with pytest.raises(ToolFailure) as exc:
            sandbox.resolve(path)
        assert exc.value.error.details["pattern"] == "private/**"


@pytest.mark.parametrize(
    "path",
    [".git/hooks/pre-commit", ".git/config", ".forj/config.toml", "sub/.git/x", ".GIT/config"],
)
def test_version_control_and_forj_settings_are_never_written(
    make_worker: MakeWorker, project: Path, path: str
) -> None:
    (project / ".git").mkdir(exist_ok=True)
    worker = make_worker()
    (r,) = _results(worker, [call("w", "write_file", path=path, content="x")], approved=["w"])
    assert r["error"]["details"]["reason"] == "DeniedPatternMatched"
    assert not (project / path).exists()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (r,) = _results(worker, [call("r", "read_file", path=".git/HEAD")])
    assert r["ok"]  # reading is fine


@pytest.mark.parametrize(
    "path", [".ENV", ".Ssh/id_x", "KEY.PEM", "conf/ID_RSA", "Certs/Server.Key"]
)
def test_denied_patterns_ignore_case(project: Path, path: str) -> None:
    with pytest.raises(ToolFailure) as exc:
        Sandbox(project).resolve(path)
    assert exc.value.error.details["reason"] == "DeniedPatternMatched"


def test_pathological_patterns_and_paths_are_refused(project: Path) -> None:
    project_config(project, "[tools.sandbox]\ndenied_patterns = ['**/a/**/a/**/a/**/b']\n")
    with pytest.raises(ConfigError, match="at most two"):
        load(project)
    with pytest.raises(ToolFailure, match="more than 64 components"):
        Sandbox(project).resolve("/".join(["a"] * 100))
    # The worst allowed: two "**" against the deepest allowed path stays fast.
    sandbox = Sandbox(project, denied_patterns=["**/a/**/b"])
    t0 = time.perf_counter()
    for _ in range(20):
        with contextlib.suppress(ToolFailure):
            sandbox.resolve("/".join(["a"] * 63))
    assert time.perf_counter() - t0 < 30  # a hang check with a wide margin, not a benchmark


def test_slow_regex_in_python_search_neither_hangs_nor_freezes_the_worker(project: Path) -> None:
    (project / "evil.txt").write_text("a" * 5000 + "!\n")
    cfg = project.parent / "cfg.toml"
    cfg.write_text("[tools.search]\nengine = 'python'\n")
    with WorkerProcess(project, config=cfg) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        plan = c.call(
            "plan", {"calls": [call("s", "search", query="(a|aa)*(a|aa)*(a|aa)*$", is_regex=True)]}
        )
        fut = c.call_async("execute", {"batch_id": plan["batch_id"]})
        time.sleep(0.2)
        t0 = time.perf_counter()
        # The worker still answers while the regex runs (a freeze would be
        # the search's whole time limit); the margin is a loaded machine's.
        assert c.call("ping", timeout=30) == {}
        assert time.perf_counter() - t0 < 10
        res = json.loads(fut.result(60))
        r = res["results"][0]
        # Cut off by the regex's own limit, or on a loaded machine by the call's.
        assert (
            r["ok"]
            or "regex" in r["error"]["message"].lower()
            or "time limit" in r["error"]["message"]
        )


def test_previews_show_hidden_characters_instead_of_dropping_them(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    content = 'access = "user\u202e \u2066// admin only\u2069"\n\x1b]0;pwned\x07\n'
    plan = worker.plan({"calls": [call("w", "write_file", path="auth.py", content=content)]})
    preview = plan["items"][0]["preview"]
    assert "⟨U+202E⟩" in preview and "⟨U+2066⟩" in preview and "⟨U+001B⟩" in preview
    assert "\u202e" not in preview and "\x1b" not in preview
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["w"]}, lambda e: None)
    assert result["results"][0]["ok"]
    assert (project / "auth.py").read_text() == content  # written exactly as shown


def test_range_read_of_one_enormous_line_is_bounded(make_worker: MakeWorker, project: Path) -> None:
    import resource

    user_config("[tools.read_file]\nmax_scan_bytes = 1048576\n")
    with open(project / "oneline.txt", "wb") as fh:
        for _ in range(200):
            fh.write(b"x" * (1 << 20))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (r,) = _results(
        make_worker(), [call("r", "read_file", path="oneline.txt", start_line=1, end_line=1)]
    )
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert "scan more than" in r["error"]["message"]
    assert grown_mb < 100


def test_a_batch_reply_always_fits_one_frame(project: Path) -> None:
    for i in range(4):
        (project / f"blob{i}.bin").write_bytes(os.urandom(6 << 20))
    cfg = project.parent / "cfg.toml"
    cfg.write_text("[tools.output]\nmax_bytes = 8388608\n")
    with WorkerProcess(project, config=cfg) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        calls = [call(str(i), "read_file", path=f"blob{i}.bin") for i in range(4)]
        plan = c.call("plan", {"calls": calls})
        res = c.call("execute", {"batch_id": plan["batch_id"], "capacity_bytes": 100_000_000})
        assert [r["ok"] for r in res["results"]] == [True] * 4
        assert len(json.dumps(res)) < 8 * 1024 * 1024
        assert all(r["result"]["truncated"] for r in res["results"])


def test_results_respect_small_capacities(make_worker: MakeWorker, project: Path) -> None:
    long_name = "d" * 200 + "/" + "f" * 200 + ".bin"
    write_tree(project, {long_name: os.urandom(20_000)})
    worker = make_worker()
    plan = worker.plan({"calls": [call("b", "read_file", path=long_name)]})
    res = worker.execute({"batch_id": plan["batch_id"], "capacity_bytes": 2048}, lambda e: None)
    text = json.dumps(res["results"][0], ensure_ascii=False, separators=(",", ":"))
    assert len(text.encode()) <= 2048


def test_journal_failure_keeps_the_results(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("r", "read_file", path="README.md")]})
    worker.journal.close()  # every later journal write fails
    res = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert res["results"][0]["ok"] is True
    assert res["warnings"] and "journal could not record" in res["warnings"][0]


def test_project_cannot_shorten_backup_retention(project: Path) -> None:
    project_config(project, "[tools.backups]\nmax_age_days = 0.00001\nmax_total_mb = 0.1\n")
    loaded = load(project)
    assert loaded.config.tools.backups.max_age_days == 14
    assert loaded.config.tools.backups.max_total_mb == 512
    assert len(loaded.warnings) == 2


def test_following_symlinks_does_not_list_denied_directories(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {".ssh": {"config": "Host x", "known_hosts": "h"}})
    (project / "keys").symlink_to(project / ".ssh")
    (r,) = _results(make_worker(), [call("l", "list_files", follow_symlinks=True)])
    assert not any(f["path"].startswith("keys/") for f in r["result"]["files"])


def test_hello_with_an_unencodable_token_is_refused_and_closed(project: Path) -> None:
    with WorkerProcess(project) as proc:
        c = Client(proc.port)
        with pytest.raises(RemoteError) as exc:
            c.call("hello", {"token": "\ud800"})
        assert exc.value.type == "unauthenticated"
        assert c.closed.wait(2)
        c.close()


def test_odd_uids_get_an_error_and_the_connection_lives(project: Path) -> None:
    from forj_py.transport import sexp

    with WorkerProcess(project) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        for raw in [
            b'(call 1e999 ping ("{}"))',
            b'(call @x ping ("{}"))',
            b"(call " + b"9" * 5000 + b' ping ("{}"))',
        ]:
            c.send_raw(b"%06x" % (len(raw) + 1) + raw + b"\n")
        assert c.call("ping") == {}
        assert sexp  # the codec module is what framed these


# --- the second review: the file tools ------------------------------------------


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_search_never_returns_what_read_file_refuses(
    make_worker: MakeWorker, project: Path, engine: str
) -> None:
    if engine == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed")
    write_tree(
        project,
        {
            "server.PEM": "TOKEN=topsecret\n",
            "deploy": {"ID_RSA": "TOKEN=key\n"},
            "creds": {"Prod.Key": "TOKEN=k\n"},
            "src": {"settings.py": "TOKEN=nested\n", "app.py": "TOKEN=fine\n"},
        },
    )
    user_config(
        f"[tools.search]\nengine = '{engine}'\n"
        "[tools.sandbox]\nallowed_roots = ['.', 'src']\ndenied_patterns = ['/settings.py']\n"
    )
    (r,) = _results(make_worker(), [call("s", "search", query="TOKEN")])
    assert {m["path"] for m in r["result"]["matches"]} == {"src/app.py"}


def test_form_feeds_do_not_shift_line_numbers(make_worker: MakeWorker, project: Path) -> None:
    text = ";;; foo.el --- demo\n\x0c\n;;; Code:\n(defun a () 1)\n\u2028tail\n"
    (project / "foo.el").write_text(text)
    worker = make_worker()
    (r,) = _results(worker, [call("r", "read_file", path="foo.el", start_line=4, end_line=4)])
    assert r["result"]["content"] == "(defun a () 1)\n"
    (r,) = _results(
        worker,
        [
            call(
                "e",
                "edit_region",
                path="foo.el",
                start_line=4,
                end_line=4,
                new_content="(defun a () 42)",
                expected="(defun a () 1)\n",
            )
        ],
        approved=["e"],
    )
    assert r["ok"], r
    assert (project / "foo.el").read_text() == text.replace("(defun a () 1)", "(defun a () 42)")


def test_failed_edit_searches_stay_fast(make_worker: MakeWorker, project: Path) -> None:
    (project / "data.csv").write_text("".join(f"row{i},value\n" for i in range(150_000)))
    (project / "code.py").write_text(
        "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(1500))
    )
    worker = make_worker()
    _results(worker, [call("r1", "read_file", path="data.csv", start_line=1, end_line=2)])
    _results(worker, [call("r2", "read_file", path="code.py")])
    needle = "".join(f"def g{i}(y):\n    return y * {i}\n" for i in range(10))
    t0 = time.perf_counter()
    plan = worker.plan(
        {
            "calls": [
                call("e1", "edit", path="data.csv", old_string=",value\n", new_string=";"),
                call("e2", "edit", path="code.py", old_string=needle, new_string="x"),
            ]
        }
    )
    assert time.perf_counter() - t0 < 30  # a hang check with a wide margin, not a benchmark
    e1, e2 = plan["items"]
    assert "occurs 150000 times" in e1["result"]["error"]["message"]
    assert "closest lines" in e2["result"]["error"]["message"]


def test_hard_linked_files_are_not_split(make_worker: MakeWorker, project: Path) -> None:
    (project / "a.txt").write_text("shared\n")
    os.link(project / "a.txt", project / "b.txt")
    worker = make_worker()
    _results(worker, [call("r", "read_file", path="a.txt")])
    (r,) = _results(worker, [call("w", "write_file", path="a.txt", content="x\n")], approved=["w"])
    assert "hard links" in r["error"]["message"]
    assert (project / "b.txt").read_text() == "shared\n"


def test_byte_order_marks_are_kept_and_shown(make_worker: MakeWorker, project: Path) -> None:
    (project / "bom.cs").write_bytes("\ufeffusing System;\nclass A {}\n".encode())
    worker = make_worker()
    _results(worker, [call("r", "read_file", path="bom.cs")])
    plan, result = run(
        worker,
        [
            call(
                "e",
                "edit_region",
                path="bom.cs",
                start_line=1,
                end_line=1,
                new_content="using System.IO;",
                expected="using System;\n",
            )
        ],
        approved=["e"],
    )
    assert result["results"][0]["ok"], result
    assert (project / "bom.cs").read_bytes() == "\ufeffusing System.IO;\nclass A {}\n".encode()
    plan = worker.plan(
        {"calls": [call("w", "write_file", path="z.txt", content="\ufeffx\u200by\n")]}
    )
    assert "⟨U+FEFF⟩x⟨U+200B⟩y" in plan["items"][0]["preview"]


def test_insert_into_an_empty_file_ends_with_a_newline(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "empty.txt").write_text("")
    worker = make_worker()
    _results(worker, [call("r", "read_file", path="empty.txt")])
    (r,) = _results(
        worker,
        [call("e", "edit_region", path="empty.txt", start_line=1, end_line=0, new_content="first")],
        approved=["e"],
    )
    assert r["ok"], r
    assert (project / "empty.txt").read_text() == "first\n"


def test_elisp_check_survives_long_modifier_chains_and_old_breakage(
    make_worker: MakeWorker, project: Path
) -> None:
    from forj_py.tools._elcheck import check

    assert check("?" + "\\C-" * 5000 + "a") is None
    broken = ";; a fixture that is broken on purpose\n(defun f (\n"
    (project / "fixture.el").write_text(broken)
    worker = make_worker()
    _results(worker, [call("r", "read_file", path="fixture.el")])
    (r,) = _results(
        worker,
        [call("e", "edit", path="fixture.el", old_string="on purpose", new_string="deliberately")],
        approved=["e"],
    )
    assert r["ok"], r  # still broken the same way: the edit does not make it worse


def test_glob_pattern_bombs_are_validation_errors(make_worker: MakeWorker) -> None:
    (r,) = _results(make_worker(), [call("g", "glob", patterns=["{a,b}" * 30])])
    assert r["error"]["type"] == "validation-error"


def test_utf16_range_reads_respect_the_scan_limit(make_worker: MakeWorker, project: Path) -> None:
    user_config("[tools.read_file]\nmax_scan_bytes = 100000\n")
    (project / "u16.txt").write_bytes(
        "".join(f"line {i}\n" for i in range(50_000)).encode("utf-16")
    )
    (r,) = _results(make_worker(), [call("r", "read_file", path="u16.txt", start_line=49_990)])
    assert "scan more than" in r["error"]["message"]


def test_search_globs_with_braces_are_refused_the_same_by_both_engines(
    make_worker: MakeWorker,
) -> None:
    (r,) = _results(make_worker(), [call("s", "search", query="x", exclude_paths=["*.{md,py}"])])
    assert "{a,b}" in r["error"]["message"]
