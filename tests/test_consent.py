"""One consent stage: modes, permission rules, their order and trust, through the real worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Danger, Note, call, project_config, user_config
from consent_helpers import Workers, error_of, execute, kinds, plan, workers

from forj_py.config import ConfigError

__all__ = ["workers"]


def test_fr_cns_05_no_mode_sent_means_the_configured_default(workers: Workers) -> None:
    worker = workers()
    assert worker.hello_payload({})["permissions"]["mode"] == "ask"
    reply = plan(worker, call("w", "write_file", path="new.txt", content="x\n"))
    assert reply["permission_mode"] == "ask"
    assert kinds(reply) == ["confirm"]
    assert reply["items"][0]["reason"] == "reviewed: the 'ask' mode asks for changes"


def test_fr_cns_05_read_only_mode_offers_and_runs_only_tools_without_side_effects(
    workers: Workers, project: Path
) -> None:
    worker = workers()
    names = {t["name"] for t in worker.tool_definitions({"permission_mode": "read-only"})["tools"]}
    assert {"read_file", "list_files", "search", "run_shell"} <= names
    assert not names & {"write_file", "edit", "multi_edit", "edit_region", "run_tests"}
    everything = {t["name"] for t in worker.tool_definitions({})["tools"]}
    assert {"write_file", "run_tests"} <= everything
    reply = plan(
        worker,
        call("w", "write_file", path="new.txt", content="x\n"),
        call("rm", "run_shell", cmd=["rm", "README.md"]),
        call("ls", "run_shell", cmd=["ls"]),
        call("r", "read_file", path="README.md"),
        permission_mode="read-only",
    )
    assert kinds(reply) == ["resolved", "resolved", "execute", "execute"]
    assert error_of(reply["items"][0])["details"]["reason"] == "NotInMode"
    assert "read-only" in error_of(reply["items"][1])["message"]
    done = execute(worker, reply)
    assert [r["ok"] for r in done["results"]] == [False, False, True, True]
    assert (project / "README.md").exists() and not (project / "new.txt").exists()
    assert done["results"][2]["result"]["sandbox"] == "read-only sandbox"


def test_fr_cns_05_read_only_mode_keeps_the_plan_tools_and_refuses_their_export(
    workers: Workers, project: Path
) -> None:
    worker = workers()
    names = {t["name"] for t in worker.tool_definitions({"permission_mode": "read-only"})["tools"]}
    assert {"todo_write", "task"} <= names
    reply = plan(
        worker,
        call("c", "todo_write", action="create", title="look around"),
        call("l", "task", action="list"),
        call("x", "todo_write", action="export", export_path="TODO.md"),
        permission_mode="read-only",
    )
    assert kinds(reply) == ["execute", "execute", "resolved"]
    assert error_of(reply["items"][2])["details"]["reason"] == "NotInMode"
    done = execute(worker, reply)
    assert [r["ok"] for r in done["results"]] == [True, True, False]
    assert not (project / "TODO.md").exists()


def test_fr_cns_05_accept_edits_applies_edits_inside_the_project_and_still_asks_for_commands(
    workers: Workers, project: Path
) -> None:
    user_config('[permissions]\nmode = "accept-edits"\n')
    worker = workers()
    reply = plan(
        worker,
        call("w", "write_file", path="docs/new.md", content="hello\n"),
        call("t", "run_shell", cmd=["touch", "x"]),
    )
    assert kinds(reply) == ["execute", "confirm"]
    assert "accept-edits" in reply["items"][0]["reason"]
    execute(worker, reply)
    assert (project / "docs" / "new.md").read_text() == "hello\n"
    assert not (project / "x").exists()


def test_fr_cns_05_auto_mode_runs_what_the_rules_allow_and_denies_still_hold(
    workers: Workers, project: Path
) -> None:
    user_config('[permissions]\nmode = "auto"\ndeny = ["run_shell(rm *)"]\n')
    worker = workers()
    reply = plan(
        worker,
        call("t", "run_shell", cmd=["touch", "made.txt"]),
        call("rm", "run_shell", cmd=["rm", "README.md"]),
    )
    assert kinds(reply) == ["execute", "resolved"]
    assert error_of(reply["items"][1])["details"]["reason"] == "DeniedByRule"
    done = execute(worker, reply)
    assert done["results"][0]["ok"], done["results"][0]
    assert done["results"][0]["result"]["sandbox"] == "sandbox"  # writable: the user said so
    assert (project / "made.txt").exists() and (project / "README.md").exists()


def test_fr_cns_05_auto_needs_the_users_own_file(workers: Workers) -> None:
    worker = workers()
    assert worker.hello_payload({})["permissions"]["auto_allowed"] is False
    reply = plan(worker, call("t", "run_shell", cmd=["touch", "x"]), permission_mode="auto")
    assert reply["permission_mode"] == "accept-edits"
    assert "your own config file" in reply["mode_note"]
    assert kinds(reply) == ["confirm"]


def test_fr_cns_05_a_project_may_only_make_the_mode_stricter(
    workers: Workers, project: Path
) -> None:
    user_config('[permissions]\nmode = "accept-edits"\n')
    project_config(project, '[permissions]\nmode = "read-only"\n')
    assert workers().hello_payload({})["permissions"]["mode"] == "read-only"
    project_config(project, '[permissions]\nmode = "auto"\n')
    worker = workers()
    assert worker.hello_payload({})["permissions"]["mode"] == "accept-edits"
    assert any("permissions.mode = 'auto' ignored" in w for w in worker.warnings())


# --- permission rules and their order ---------------------------------------------


def test_fr_cns_06_allow_rules_run_matching_commands_unasked_and_nothing_else(
    workers: Workers, project: Path
) -> None:
    user_config('[permissions]\nallow = ["run_shell(touch *)", "write_file(docs/**)"]\n')
    worker = workers()
    reply = plan(
        worker,
        call("a", "run_shell", cmd="touch a.txt"),
        call("b", "run_shell", cmd="touch b.txt && rm README.md"),
        call("c", "run_shell", cmd="touch $(echo c.txt)"),
        call("d", "write_file", path="docs/d.md", content="d\n"),
        call("e", "write_file", path="e.md", content="e\n"),
    )
    assert kinds(reply) == ["execute", "confirm", "confirm", "execute", "confirm"]
    assert reply["items"][0]["reason"] == "runs: [permissions] allow 'run_shell(touch *)'"
    execute(worker, reply)
    assert (project / "a.txt").exists() and (project / "docs" / "d.md").exists()
    assert (project / "README.md").exists()


def test_fr_cns_06_order_deny_beats_ask_beats_allow(workers: Workers) -> None:
    user_config(
        """
        [permissions]
        allow = ["run_shell(git *)"]
        ask = ["run_shell(git push*)"]
        deny = ["run_shell(git push --force*)"]
        """
    )
    worker = workers()
    reply = plan(
        worker,
        call("s", "run_shell", cmd=["git", "status"]),
        call("p", "run_shell", cmd=["git", "push"]),
        call("f", "run_shell", cmd=["git", "push", "--force"]),
    )
    assert kinds(reply) == ["execute", "confirm", "resolved"]
    assert reply["items"][1]["reason"] == "reviewed: [permissions] ask 'run_shell(git push*)'"
    assert "grant_pattern" not in reply["items"][1]  # no grant can lift an ask rule
    assert error_of(reply["items"][2])["details"]["rule"] == "run_shell(git push --force*)"


def test_fr_cns_06_forced_review_beats_allow_unless_network_is_allowed(workers: Workers) -> None:
    user_config(
        """
        [permissions]
        allow = ["run_shell(curl *)", "run_shell(npm ci)"]
        network = ["run_shell(npm ci)"]
        """
    )
    worker = workers()
    reply = plan(
        worker,
        call("c", "run_shell", cmd=["curl", "https://example.com"], allow_network=True),
        call("n", "run_shell", cmd=["npm", "ci"], allow_network=True),
    )
    assert kinds(reply) == ["confirm", "execute"]
    assert reply["items"][0]["reason"].startswith("always reviewed: This command asks for network")


def test_fr_cns_06_requires_consent_beats_allow(workers: Workers) -> None:
    user_config(
        """
        [permissions]
        allow = ["run_shell"]
        [[rules]]
        type = "requires_consent"
        tool = "run_shell"
        """
    )
    reply = plan(workers(), call("s", "run_shell", cmd=["git", "status"]))
    assert kinds(reply) == ["confirm"]
    assert "requires_consent" in reply["items"][0]["reason"]


def test_fr_cns_06_files_group_and_paths_after_links(workers: Workers, project: Path) -> None:
    (project / "secret").mkdir()
    (project / "src" / "link.txt").symlink_to(project / "secret" / "x.txt")
    user_config('[permissions]\nallow = ["files(src/**)"]\ndeny = ["files(secret/**)"]\n')
    worker = workers()
    reply = plan(
        worker,
        call("ok", "write_file", path="src/new.py", content="x = 1\n"),
        call("link", "write_file", path="src/link.txt", content="gotcha\n"),
    )
    assert kinds(reply) == ["execute", "resolved"]
    assert "files(secret/**)" in error_of(reply["items"][1])["message"]


def test_fr_cns_07_reasons_are_in_the_plan_and_the_journal(workers: Workers) -> None:
    user_config('[permissions]\nallow = ["read_file"]\ndeny = ["run_shell(rm *)"]\n')
    worker = workers()
    reply = plan(
        worker,
        call("r", "read_file", path="README.md"),
        call("rm", "run_shell", cmd=["rm", "x"]),
        call("w", "write_file", path="n.txt", content="n\n"),
    )
    execute(worker, reply, denied={"w": "not now"})
    journaled = worker.journal.consent(reply["batch_id"])
    assert journaled[0]["plan"] == "[ask] runs: [permissions] allow 'read_file'"
    assert journaled[1]["plan"] == "[ask] denied by [permissions] deny 'run_shell(rm *)'"
    assert journaled[2]["plan"] == "[ask] reviewed: the 'ask' mode asks for changes"
    assert journaled[2]["approval"] == "denied by the user: not now"


def test_fr_cns_08_the_review_proposes_the_narrowest_sensible_grant(
    workers: Workers,
) -> None:
    worker = workers()
    reply = plan(
        worker,
        call("a", "run_shell", cmd="pytest -q tests/test_x.py"),
        call("b", "run_shell", cmd=["git", "commit", "-m", "x"]),
        call("c", "run_shell", cmd=["python", "-m", "pytest", "-q"]),
        call("d", "run_shell", cmd="make && make install"),
        call("e", "write_file", path="src/forj/new.py", content="x\n"),
        call("f", "write_file", path="top.txt", content="x\n"),
    )
    proposals = [item.get("grant_pattern") for item in reply["items"]]
    assert proposals == [
        "run_shell(pytest *)",
        "run_shell(git commit *)",
        "run_shell(python -m pytest *)",
        None,  # a compound is approved once
        "write_file(src/forj/**)",
        "write_file(/top.txt)",
    ]


# --- trust ------------------------------------------------------------------------


def test_fr_cns_09_a_project_adds_deny_and_ask_never_allow(workers: Workers, project: Path) -> None:
    user_config('[permissions]\nallow = ["run_shell(make *)"]\n')
    project_config(
        project,
        """
        [permissions]
        allow = ["run_shell(curl *)", "run_shell"]
        ask = ["run_shell(make deploy*)"]
        deny = ["run_shell(make clean*)"]
        network = ["run_shell(curl *)"]
        """,
    )
    worker = workers()
    reply = plan(
        worker,
        call("b", "run_shell", cmd=["make", "build"]),
        call("d", "run_shell", cmd=["make", "deploy"]),
        call("c", "run_shell", cmd=["make", "clean"]),
        call("u", "run_shell", cmd=["curl", "x"]),
    )
    assert kinds(reply) == ["execute", "confirm", "resolved", "confirm"]
    warnings = worker.warnings()
    assert any("permissions.allow 'run_shell(curl *)' ignored" in w for w in warnings)
    assert any("permissions.network 'run_shell(curl *)' ignored" in w for w in warnings)


def test_fr_cns_09_a_trusted_project_may_allow_but_not_network(
    workers: Workers, project: Path
) -> None:
    user_config(f"[trust]\nprojects = [{str(project)!r}]\n")
    project_config(
        project, '[permissions]\nallow = ["run_shell(make *)"]\nnetwork = ["run_shell(make *)"]\n'
    )
    worker = workers()
    assert worker.config.permissions.allow == ["run_shell(make *)"]
    assert worker.config.permissions.network == []
    reply = plan(worker, call("m", "run_shell", cmd=["make", "x"], allow_network=True))
    assert kinds(reply) == ["confirm"]


# --- the old keys -----------------------------------------------------------------


def test_fr_cns_10_old_auto_maps_to_auto_with_commands_still_asked(workers: Workers) -> None:
    user_config('[tools.approval]\nmode = "auto"\n')
    worker = workers(extra_tools=[Note(), Danger()])
    reply = plan(
        worker,
        call("n", "note", text="x"),
        call("s", "run_shell", cmd=["touch", "x"]),
        call("d", "danger", text="x"),
    )
    assert kinds(reply) == ["execute", "confirm", "confirm"]
    assert worker.hello_payload({})["permissions"]["mode"] == "auto"
    assert any('[permissions] mode = "auto"' in w for w in worker.warnings())


def test_fr_cns_10_old_allowlist_of_a_command_tool_maps_to_nothing(workers: Workers) -> None:
    user_config('[tools.approval]\nallowlist = ["run_shell", "note"]\ndenylist = ["boom"]\n')
    worker = workers(extra_tools=[Note()])
    reply = plan(worker, call("s", "run_shell", cmd=["touch", "x"]), call("n", "note", text="x"))
    assert kinds(reply) == ["confirm", "execute"]
    warnings = " ".join(worker.warnings())
    assert 'allow = ["run_shell(PATTERN)"]' in warnings
    assert 'deny = ["boom"]' in warnings


def test_fr_cns_10_bad_patterns_stop_the_worker_with_the_key(workers: Workers) -> None:
    user_config('[permissions]\nallow = ["edit(!src/**)"]\n')
    with pytest.raises(ConfigError, match=r"\[permissions\] allow"):
        workers()
    user_config('[permissions]\nnetwork = ["read_file"]\n')
    with pytest.raises(ConfigError, match="run_shell\\(COMMAND\\)"):
        workers()
