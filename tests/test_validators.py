"""The rule pack ([[validators]]): each rule passing and failing, through ``validate`` and
``git_commit``, on real temporary repositories."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, project_config, user_config
from test_git_tools import err, ok, sh_git

from forj_py.config import ConfigError, load

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

AWS = "AKIA" + "ABCDEFGHIJKLMNOP"  # split so this file is no credential itself


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def repo(project: Path) -> Path:
    sh_git(project, "init", "-q", "-b", "main")
    sh_git(project, "add", "-A")
    sh_git(project, "commit", "-qm", "start")
    return project


def stage(root: Path, path: str, text: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    sh_git(root, "add", "-f", path)


def check(make_worker: MakeWorker, **args: Any) -> dict[str, Any]:
    return ok(make_worker(), "validate", **args)


def rules(config: str) -> None:
    user_config(config)


# --- secrets.scan ---------------------------------------------------------------------


def test_secrets_scan_passes_clean_staged_changes(make_worker: MakeWorker, repo: Path) -> None:
    stage(repo, "src/app.py", "import os\nkey = os.environ['API_KEY']\n")
    result = check(make_worker, rule_id="secrets.scan")
    assert result == {"violations": [], "checked": ["secrets.scan"], "passed": True}


def test_secrets_scan_finds_credentials_in_the_staged_diff_without_quoting_them(
    make_worker: MakeWorker, repo: Path
) -> None:
    stage(repo, "src/app.py", f"x = 1\naws = '{AWS}'\npassword = 'hunter2hunter2'\n")
    stage(repo, "deploy/id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    result = check(make_worker)
    assert result["passed"] is False
    found = [(v["rule"], v["level"], v.get("file"), v.get("line")) for v in result["violations"]]
    assert ("secrets.scan", "blocking", "src/app.py", 2) in found
    assert ("secrets.scan", "blocking", "src/app.py", 3) in found
    # A key file is denied by the sandbox's patterns whatever it holds.
    assert any(f == "deploy/id_rsa" for _, _, f, _ in found)
    assert AWS not in str(result) and "hunter2" not in str(result)
    # Only what is staged counts: an unstaged secret is not about to be committed.
    sh_git(repo, "reset", "-q")
    assert check(make_worker)["passed"] is True


def test_git_commit_with_a_secret_in_the_staged_diff_is_refused_with_the_violation(
    make_worker: MakeWorker, repo: Path
) -> None:
    head = sh_git(repo, "rev-parse", "HEAD")
    stage(repo, "config.py", f"AWS_KEY = '{AWS}'\n")
    error = err(make_worker(), "git_commit", message="feat: config")
    assert error["type"] == "validation-error"
    assert error["details"]["code"] == "E_VALIDATION_FAIL"
    (violation,) = error["details"]["violations"]
    assert violation == {
        "rule": "secrets.scan",
        "level": "blocking",
        "file": "config.py",
        "line": 1,
        "message": violation["message"],
    }
    assert "AWS access key" in error["message"] and AWS not in str(error)
    assert sh_git(repo, "rev-parse", "HEAD") == head


# --- code.todo.blockers ----------------------------------------------------------------


def test_code_todo_blockers_on_protected_branches_only(make_worker: MakeWorker, repo: Path) -> None:
    rules('[[validators]]\nrule = "code.todo.blockers"\n')
    stage(repo, "src/a.py", "x = 1  # TODO: later\n")
    result = check(make_worker)
    (violation,) = result["violations"]
    assert (violation["file"], violation["line"], violation["level"]) == ("src/a.py", 1, "blocking")
    assert "protected branch main" in violation["message"]
    assert err(make_worker(), "git_commit", message="feat: a")["details"]["violations"]
    # On a topic branch the same change passes.
    sh_git(repo, "checkout", "-qb", "feat/a")
    assert check(make_worker)["passed"] is True
    assert ok(make_worker(), "git_commit", message="feat: a")["files"] == 1


# --- commands: build / lint / fmt, test.required.changed ---------------------------------


def test_must_pass_rules_run_the_users_commands(make_worker: MakeWorker, repo: Path) -> None:
    rules(
        "[[validators]]\n"
        'rule = "build.must.pass"\ncommand = ["sh", "-c", "test -f build.ok"]\n'
        "[[validators]]\n"
        'rule = "lint.must.pass"\ncommand = ["sh", "-c", "echo lint says no >&2; exit 3"]\n'
        "[[validators]]\n"
        'rule = "fmt.must.pass"\nenforcement = "warning"\ncommand = ["true"]\n'
    )
    stage(repo, "README.md", "# x\n")
    result = check(make_worker)
    by_rule = {v["rule"]: v for v in result["violations"]}
    assert set(by_rule) == {"build.must.pass", "lint.must.pass"}
    assert "exited with code 1" in by_rule["build.must.pass"]["message"]
    assert "exited with code 3" in by_rule["lint.must.pass"]["message"]
    assert "lint says no" in by_rule["lint.must.pass"]["message"]
    # A list in the user's file replaces the default one (secrets.scan only).
    assert result["checked"] == ["build.must.pass", "lint.must.pass", "fmt.must.pass"]
    # Passing commands: no violations.
    rules(
        "[[validators]]\n"
        'rule = "build.must.pass"\ncommand = ["sh", "-c", "test -f README.md"]\n'
        "[[validators]]\n"
        'rule = "lint.must.pass"\ncommand = ["true"]\n'
    )
    assert check(make_worker)["passed"] is True


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_validator_commands_run_in_the_command_sandbox(make_worker: MakeWorker, repo: Path) -> None:
    """Unreviewed, a validator's command sees the project read-only and no network."""
    rules(
        '[[validators]]\nrule = "build.must.pass"\ncommand = ["sh", "-c", "touch made-by-build"]\n'
    )
    result = check(make_worker, rule_id="build.must.pass")
    (violation,) = result["violations"]
    assert "Read-only file system" in violation["message"]
    assert not (repo / "made-by-build").exists()


def test_a_project_cannot_give_a_validator_a_command(make_worker: MakeWorker, repo: Path) -> None:
    project_config(
        repo,
        "[[validators]]\n"
        'rule = "build.must.pass"\ncommand = ["sh", "-c", "touch pwned"]\n'
        "[[validators]]\n"
        'rule = "commit.message.conventional"\n',
    )
    user_config(f'[trust]\nprojects = ["{repo}"]\n')
    loaded = load(repo)
    assert [v.rule for v in loaded.config.validators] == [
        "secrets.scan",
        "commit.message.conventional",
    ]
    assert any("command" in w and "own config" in w for w in loaded.warnings)
    error = err(make_worker(), "validate", rule_id="build.must.pass")
    assert "only the user's own config" in error["message"]


def test_test_required_changed(make_worker: MakeWorker, repo: Path) -> None:
    rules('[[validators]]\nrule = "test.required.changed"\n')
    stage(repo, "src/main.py", "changed = True\n")
    (violation,) = check(make_worker)["violations"]
    assert violation["rule"] == "test.required.changed" and violation["file"] == "src/main.py"
    # The waiver in the commit message, or a test staged with it.
    assert check(make_worker, message="fix: typo [no tests]")["passed"] is True
    stage(repo, "tests/test_main.py", "def test_x():\n    assert True\n")
    assert check(make_worker)["passed"] is True
    # Docs alone need no test.
    sh_git(repo, "reset", "-q")
    stage(repo, "README.md", "# docs\n")
    assert check(make_worker)["passed"] is True
    # With a command: the tests must pass too.
    rules('[[validators]]\nrule = "test.required.changed"\ncommand = ["false"]\n')
    stage(repo, "src/main.py", "changed = 2\n")
    stage(repo, "tests/test_main.py", "def test_y():\n    assert True\n")
    (violation,) = check(make_worker)["violations"]
    assert "false exited with code 1" in violation["message"]


# --- messages and names -----------------------------------------------------------------


def test_commit_message_conventional(make_worker: MakeWorker, repo: Path) -> None:
    rules('[[validators]]\nrule = "commit.message.conventional"\n')
    assert check(make_worker, message="feat(parser): handle empty input")["passed"] is True
    result = check(make_worker, message="fixed some stuff")
    (violation,) = result["violations"]
    assert violation["level"] == "warning" and "Conventional Commit" in violation["message"]
    assert result["passed"] is True  # a warning does not block
    # At commit: the warning comes back with the commit.
    stage(repo, "README.md", "# y\n")
    result = ok(make_worker(), "git_commit", message="fixed some stuff")
    assert result["violations"][0]["rule"] == "commit.message.conventional"
    # Blocking when the user says so.
    rules('[[validators]]\nrule = "commit.message.conventional"\nenforcement = "blocking"\n')
    stage(repo, "README.md", "# z\n")
    assert err(make_worker(), "git_commit", message="oops")["details"]["code"] == (
        "E_VALIDATION_FAIL"
    )


def test_branch_naming_convention(make_worker: MakeWorker, repo: Path) -> None:
    rules('[[validators]]\nrule = "branch.naming.convention"\nenforcement = "blocking"\n')
    assert check(make_worker, branch="feat/login-form")["passed"] is True
    assert check(make_worker)["passed"] is True  # main
    (violation,) = check(make_worker, branch="My Branch")["violations"]
    assert violation["rule"] == "branch.naming.convention"
    error = err(make_worker(), "git_checkout", target="whatever", create=True)
    assert error["details"]["violations"][0]["rule"] == "branch.naming.convention"
    assert "whatever" not in sh_git(repo, "branch")
    ok(make_worker(), "git_checkout", target="fix/crash", create=True)
    rules('[[validators]]\nrule = "branch.naming.convention"\npattern = "wip-[0-9]+"\n')
    assert check(make_worker, branch="wip-12")["passed"] is True
    assert check(make_worker, branch="fix/crash")["violations"][0]["level"] == "warning"


# --- security rules -------------------------------------------------------------------


def test_sec_git_clean_tree(make_worker: MakeWorker, repo: Path) -> None:
    assert check(make_worker, rule_id="sec.git.clean_tree")["passed"] is True
    (repo / "README.md").write_text("# unstaged\n")
    (violation,) = check(make_worker, rule_id="sec.git.clean_tree")["violations"]
    assert (violation["file"], violation["level"]) == ("README.md", "blocking")
    # Configured, it holds at commit time for every tracked file.
    rules('[[validators]]\nrule = "sec.git.clean_tree"\n')
    stage(repo, "src/new.py", "x = 1\n")
    error = err(make_worker(), "git_commit", message="feat: new")
    assert error["details"]["violations"][0]["file"] == "README.md"


def test_sec_paths_sandbox(make_worker: MakeWorker, repo: Path, tmp_path: Path) -> None:
    stage(repo, "docs/inside.txt", "fine\n")
    (repo / "docs" / "link").symlink_to("inside.txt")
    sh_git(repo, "add", "docs/link")
    assert check(make_worker, rule_id="sec.paths.sandbox")["passed"] is True
    (repo / "escape").symlink_to(tmp_path)
    sh_git(repo, "add", "escape")
    (violation,) = check(make_worker, rule_id="sec.paths.sandbox")["violations"]
    assert violation["file"] == "escape" and "outside the project" in violation["message"]


def test_validate_filters_by_level_and_glob(make_worker: MakeWorker, repo: Path) -> None:
    rules(
        '[[validators]]\nrule = "secrets.scan"\n'
        '[[validators]]\nrule = "commit.message.conventional"\n'
    )
    stage(repo, "a/x.py", f"k = '{AWS}'\n")
    stage(repo, "b/y.py", f"k = '{AWS}'\n")
    assert [v["file"] for v in check(make_worker, glob="b/**")["violations"]] == ["b/y.py"]
    only_warnings = check(make_worker, enforcement="warning", message="bad")
    assert [v["rule"] for v in only_warnings["violations"]] == ["commit.message.conventional"]
    plan = make_worker().plan({"calls": [call("v", "validate", rule_id="nope")]})
    assert plan["items"][0]["result"]["error"]["type"] == "validation-error"


# --- code.ast.parsed ------------------------------------------------------------------

STRIPE = "sk_live_" + "51Habc123def456"  # split so this file is no credential itself


def test_code_ast_parsed_reads_no_denied_or_oversized_file_and_quotes_no_source(
    make_worker: MakeWorker, repo: Path
) -> None:
    rules("[tools.ast]\nmax_file_bytes = 1024\n")
    # Denied by the sandbox: named, never read (nor is what it holds repeated).
    stage(repo, "conf/.env.py", f"STRIPE_KEY={STRIPE} def\n")
    # Over max_file_bytes: named with its size, not read.
    stage(repo, "web/big.js", "let x = (;\n" + "// padding\n" * 200)
    # An ordinary file that does not parse: the place and token kind, not the text.
    stage(repo, "src/keys.py", f"x = 1\nSTRIPE_KEY={STRIPE} def\n")
    result = check(make_worker, rule_id="code.ast.parsed")
    assert result["passed"] is False
    by_file = {v["file"]: v for v in result["violations"]}
    assert set(by_file) == {"conf/.env.py", "web/big.js", "src/keys.py"}
    assert by_file["conf/.env.py"]["level"] == "warning"
    assert "denies reading" in by_file["conf/.env.py"]["message"]
    assert by_file["web/big.js"]["level"] == "warning"
    assert "2211 bytes, over [tools.ast] max_file_bytes (1024)" in by_file["web/big.js"]["message"]
    keys = by_file["src/keys.py"]
    assert (keys["level"], keys["line"]) == ("blocking", 2)
    assert "column 1: unexpected identifier" in keys["message"]
    assert "sk_live" not in str(result) and "STRIPE" not in str(result)


def test_code_ast_parsed_in_a_project_below_the_top_of_the_work_tree(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    top = tmp_path / "top"
    (top / "app").mkdir(parents=True)
    sh_git(top, "init", "-q", "-b", "main")
    stage(top, "app/good.py", "def fine():\n    pass\n")
    stage(top, "good.py", "def (:\n")  # outside the project: not its concern
    stage(top, "app/bad.go", "package b\nfunc F( {\n")
    result = ok(make_worker(top / "app"), "validate", rule_id="code.ast.parsed")
    assert [(v["file"], v["line"]) for v in result["violations"]] == [("bad.go", 2)]


def test_ast_catalog_rules_are_not_commit_validators(repo: Path) -> None:
    """code.fn.docs.exported, code.no.unwrap and code.no.panic.in.lib run in
    ``ast_validate`` on request only: a [[validators]] entry naming one is
    refused with the rules it may name, so no one believes git_commit
    checks them."""
    for rule in ("code.fn.docs.exported", "code.no.unwrap", "code.no.panic.in.lib"):
        user_config(f'[[validators]]\nrule = "{rule}"\n')
        with pytest.raises(ConfigError) as refused:
            load(repo)
        assert f"validators.0.rule: got '{rule}'" in str(refused.value)
        assert "'secrets.scan'" in str(refused.value)
