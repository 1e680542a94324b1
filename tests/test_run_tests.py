"""run_tests: a real pytest and a real batch Emacs over small projects with known counts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config, write_tree

from forj_py.service import Worker
from forj_py.tools.run_tests import junit_cases
from forj_py.transport.client import Client, WorkerProcess

HANG = 120

PYTEST_PROJECT = {
    "tests": {
        "test_math.py": (
            "import pytest\n\n"
            "def test_add():\n    assert 1 + 1 == 2\n\n"
            "def test_sub():\n    assert 3 - 1 == 2\n\n"
            "def test_mul():\n    assert 2 * 2 == 4\n\n"
            "def test_wrong_sum():\n    assert 1 + 1 == 3, 'arithmetic is broken'\n\n"
            "def test_wrong_len():\n    assert len('abc') == 4\n\n"
            "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture exploded')\n\n"
            "def test_uses_broken(broken):\n    pass\n\n"
            "@pytest.mark.skip(reason='not today')\ndef test_skipped():\n    pass\n"
        )
    }
}

ERT_PROJECT = {
    "calc.el": (
        ";;; calc.el --- tiny  -*- lexical-binding: t -*-\n"
        "(defun calc-add (a b) (+ a b))\n(provide 'calc)\n"
    ),
    "test": {
        "calc-test.el": (
            ";;; calc-test.el  -*- lexical-binding: t -*-\n"
            "(require 'ert)\n(require 'calc)\n"
            "(ert-deftest calc-add-small () (should (= (calc-add 1 2) 3)))\n"
            "(ert-deftest calc-add-zero () (should (= (calc-add 0 0) 0)))\n"
            "(ert-deftest calc-add-wrong () (should (= (calc-add 1 1) 3)))\n"
            '(ert-deftest calc-errors () (error "boom in calc"))\n'
            "(ert-deftest calc-skipped () (skip-unless nil))\n"
            "(ert-deftest calc-known-bug () :expected-result :failed (should nil))\n"
        )
    },
}


def run_tests_call(worker: Worker, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("t", "run_tests", **args)]})
    item = plan["items"][0]
    assert item["disposition"] == "confirm" and item["risk"] == "high", item
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": ["t"], "capacity_bytes": 200_000},
        lambda e: None,
    )
    return dict(result["results"][0])


def pytest_cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]


def test_pytest_counts_and_failures_come_from_its_junit_report(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, PYTEST_PROJECT)
    r = run_tests_call(make_worker(), command=pytest_cmd("tests"))
    assert r["ok"], r
    res = r["result"]
    assert (res["total"], res["passed"], res["failed"], res["errors"], res["skipped"]) == (
        7,
        3,
        2,
        1,
        1,
    )
    assert res["runner"] == "pytest"
    report = res["report"]
    assert report.startswith("7 tests: 2 failed, 1 error, 3 passed, 1 skipped (pytest")
    # The failing tests' names and messages come first, then the output's end.
    failed = report.index("FAILED tests.test_math::test_wrong_sum")
    assert "arithmetic is broken" in report[failed:]
    assert "FAILED tests.test_math::test_wrong_len" in report
    assert "ERROR tests.test_math::test_uses_broken" in report
    assert "fixture exploded" in report
    assert report.index("--- output (end) ---") > failed
    assert not list(project.rglob("junit*.xml"))  # the report lives outside the project


def test_pytest_that_crashes_before_reporting_is_a_process_error(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, PYTEST_PROJECT)
    worker = make_worker()
    r = run_tests_call(worker, command=pytest_cmd("--no-such-option"))
    err = r["error"]
    assert err["type"] == "process-error"
    assert "before it reported any results" in err["message"]
    assert err["details"]["exit_code"] == 4
    assert "no-such-option" in err["details"]["output"]
    assert any("pytest" in step for step in err["recovery"])
    # The worker still serves.
    assert run_tests_call(worker, command=pytest_cmd("tests"))["result"]["passed"] == 3


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_ert_runs_in_a_batch_emacs_with_known_counts(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, ERT_PROJECT)
    worker = make_worker()
    plan = worker.plan({"calls": [call("t", "run_tests")]})
    preview = plan["items"][0]["preview"]
    assert "-L test" in preview and "-l test/calc-test.el" in preview
    assert "{forj-ert-driver}" in preview
    r = run_tests_call(worker)
    assert r["ok"], r
    res = r["result"]
    assert (res["total"], res["passed"], res["failed"], res["errors"], res["skipped"]) == (
        6,
        3,  # two plain passes and the expected failure
        1,
        1,
        1,
    )
    assert res["runner"] == "ert"
    report = res["report"]
    assert "FAILED calc-add-wrong" in report
    assert "(calc-add 1 1)" in report
    assert "ERROR calc-errors" in report and "boom in calc" in report


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_ert_selector_picks_tests(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, ERT_PROJECT)
    worker = make_worker()
    res = run_tests_call(worker, selector="calc-add-")["result"]
    assert (res["total"], res["passed"], res["failed"]) == (3, 2, 1)
    res = run_tests_call(worker, selector="(member calc-add-small calc-skipped)")["result"]
    assert (res["total"], res["passed"], res["skipped"]) == (2, 1, 1)
    # No test has the tag: nothing runs, and the report says so instead of failing.
    res = run_tests_call(worker, selector="(and (tag nope) (not :failed))")["result"]
    assert (res["total"], res["passed"], res["failed"], res["errors"]) == (0, 0, 0, 0)
    assert res["report"].startswith("0 tests: none ran (ert")


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_ert_selector_that_runs_code_is_refused(make_worker: MakeWorker, project: Path) -> None:
    """Found in review: (satisfies FN) would run code the review line does not show."""
    write_tree(project, ERT_PROJECT)
    worker = make_worker()
    sneaky = '(satisfies (lambda (_) (with-temp-file "pwned" (insert "x")) t))'
    result = run_tests_call(worker, selector=sneaky)
    assert result["ok"] is False, result
    assert "not made of plain ERT selectors" in json.dumps(result)
    assert not (project / "pwned").exists()


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_ert_test_file_written_earlier_in_the_batch_is_run(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, ERT_PROJECT)
    worker = make_worker()
    new_test = "(require 'ert)\n(ert-deftest calc-new () (should (= 4 (calc-add 2 2))))\n"
    calls = [
        call("w", "write_file", path="test/calc-new-test.el", content=new_test),
        call("t", "run_tests", selector="calc-new"),
    ]
    plan = worker.plan({"calls": calls})
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["w", "t"]}, lambda e: None)
    wrote, ran = result["results"]
    assert wrote["ok"], wrote
    assert (ran["result"]["total"], ran["result"]["passed"]) == (1, 1)


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_ert_file_that_does_not_load_is_a_process_error(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"broken-test.el": "(require 'ert)\n(ert-deftest x () (should t)\n"})
    r = run_tests_call(make_worker())
    err = r["error"]
    assert err["type"] == "process-error"
    assert "before it reported any results" in err["message"]
    # Emacs's own words reach the model: the reader hit the end of the file it loaded.
    output = err["details"]["output"]
    assert "end-of-file" in output and '"-l" "broken-test.el"' in output
    assert any("does not load" in step for step in err["recovery"])


def test_no_ert_test_files_is_a_precise_error(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan = worker.plan({"calls": [call("t", "run_tests")]})
    item = plan["items"][0]
    assert item["disposition"] == "resolved"
    err = item["result"]["error"]
    assert err["type"] == "validation-error"
    assert "No ERT test files" in err["message"]
    assert any("command" in step for step in err["recovery"])


def test_selector_with_command_is_refused(make_worker: MakeWorker) -> None:
    plan = make_worker().plan(
        {"calls": [call("t", "run_tests", selector="x", command=["make", "test"])]}
    )
    assert "selector applies to ERT only" in plan["items"][0]["result"]["error"]["message"]


def test_other_runners_are_read_from_their_summary_lines(make_worker: MakeWorker) -> None:
    worker = make_worker()
    res = run_tests_call(
        worker,
        command=["sh", "-c", "echo 'test result: FAILED. 5 passed; 2 failed; 1 ignored'; exit 101"],
    )["result"]
    assert (res["total"], res["passed"], res["failed"], res["skipped"]) == (8, 5, 2, 1)
    assert res["runner"] == "command" and res["exit_code"] == 101
    err = run_tests_call(worker, command=["sh", "-c", "echo segfault >&2; exit 139"])["error"]
    assert err["type"] == "process-error"
    assert "segfault" in err["details"]["output"]
    ok = run_tests_call(worker, command=["true"])["result"]
    assert ok["total"] == 0 and "counts are unknown" in ok["report"]


def test_junit_reports_with_a_doctype_are_not_read() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><testsuite><testcase name="&b;"/></testsuite>'
    )
    with pytest.raises(ValueError, match="document type"):
        junit_cases(bomb)
    cases = junit_cases(
        b'<testsuites><testsuite><testcase classname="m" name="ok"/>'
        b'<testcase classname="m" name="bad"><failure message="no">trace</failure></testcase>'
        b"</testsuite></testsuites>"
    )
    assert [(c.name, c.status, c.message) for c in cases] == [
        ("m::ok", "passed", ""),
        ("m::bad", "failed", "no\ntrace"),
    ]


# --- the report directory is the command's: planted links and special files ----------------

OUTSIDE_SECRET = "OUTSIDE-SECRET-7f3a"
SECRET_REPORT = (
    '<testsuites><testsuite><testcase classname="leak" name="x">'
    f'<failure message="{OUTSIDE_SECRET}">{OUTSIDE_SECRET}</failure>'
    "</testcase></testsuite></testsuites>\n"
)
# A conftest.py hook that runs after pytest has written its JUnit report
# (pytest_sessionfinish) and puts something else in its place.
PLANTER = (
    "import os\n\n"
    "def pytest_unconfigure(config):\n"
    "    path = config.option.xmlpath\n"
    "    if not path or not os.path.exists(path):\n"
    "        return\n"
    "{keep}"
    "    os.remove(path)\n"
    "    {plant}\n"
)


def run_tests_through_the_worker(project: Path, **args: Any) -> dict[str, Any]:
    """Plan, approve and execute one run_tests call on a real worker process, over EPC."""
    with WorkerProcess(project) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        plan = c.call("plan", {"calls": [call("t", "run_tests", **args)]})
        assert plan["items"][0]["disposition"] == "confirm", plan
        done = c.call("execute", {"batch_id": plan["batch_id"], "approved": ["t"]}, timeout=HANG)
        result = dict(done["results"][0])
        c.call("ping", None)  # the worker still serves
        return result


@pytest.mark.parametrize(
    ("case", "keep", "plant", "said"),
    [
        ("link-to-etc-passwd", "", "os.symlink('/etc/passwd', path)", "symbolic link"),
        ("link-outside-the-project", "", "os.symlink({outside!r}, path)", "symbolic link"),
        ("link-to-a-denied-file", "", "os.symlink({denied!r}, path)", "symbolic link"),
        ("relative-link", "", "os.symlink('../' * 12 + {outside!r}[1:], path)", "symbolic link"),
        ("fifo", "", "os.mkfifo(path)", "a FIFO"),
        ("directory", "", "os.mkdir(path)", "a directory"),
        (
            "hard-link",
            "    os.link(path, path + '.2')\n",
            "os.link(path + '.2', path)",
            "hard links",
        ),
    ],
)
def test_attack_run_tests_never_reads_a_report_the_tests_replaced(
    project: Path, tmp_path: Path, case: str, keep: str, plant: str, said: str
) -> None:
    """The tests replace pytest's JUnit report with a link to a file outside the
    project (or to /etc/passwd, or to the project's denied .env), a FIFO that
    would block the read forever, a directory or a second hard link: nothing
    is read through it, and the call is a process-error naming the report."""
    outside = tmp_path / "outside-report.xml"
    outside.write_text(SECRET_REPORT)
    denied = project / ".env"
    denied.write_text(SECRET_REPORT)
    write_tree(project, PYTEST_PROJECT)
    planted = plant.format(outside=str(outside), denied=str(denied))
    (project / "tests" / "conftest.py").write_text(PLANTER.format(keep=keep, plant=planted))
    r = run_tests_through_the_worker(project, command=pytest_cmd("tests"))
    assert not r["ok"], r
    err = r["error"]
    assert err["type"] == "process-error"
    assert "junit.xml" in err["message"] and said in err["message"], err["message"]
    assert "nothing of it was read" in err["message"]
    assert OUTSIDE_SECRET not in json.dumps(r)
    assert "root:x:0:0" not in json.dumps(r)
    if case.startswith("link") or case == "relative-link":
        assert "/etc/passwd" in err["message"] or str(tmp_path.name) in err["message"]


@pytest.mark.skipif(shutil.which("emacs") is None, reason="needs emacs")
def test_attack_run_tests_never_reads_an_ert_report_the_tests_replaced(
    project: Path, tmp_path: Path
) -> None:
    """An ERT test file swaps forj's JSON report for a link as Emacs exits."""
    outside = tmp_path / "outside-report.json"
    outside.write_text(json.dumps([{"name": OUTSIDE_SECRET, "status": "passed"}]))
    write_tree(project, ERT_PROJECT)
    (project / "test" / "swap-test.el").write_text(
        ";;; swap-test.el  -*- lexical-binding: t -*-\n"
        "(require 'ert)\n"
        "(ert-deftest swap-ok () (should t))\n"
        "(add-hook 'kill-emacs-hook\n"
        '  (lambda () (let ((out (getenv "FORJ_ERT_OUT")))\n'
        "    (delete-file out)\n"
        f"    (make-symbolic-link {json.dumps(str(outside))} out))))\n"
    )
    r = run_tests_through_the_worker(project)
    assert not r["ok"], r
    assert "report.json is a symbolic link" in r["error"]["message"]
    assert OUTSIDE_SECRET not in json.dumps(r)


def test_attack_run_tests_does_not_read_a_report_with_a_doctype(project: Path) -> None:
    """A report with entities (a 'billion laughs' in small) is not read: the
    entity's text never reaches the result."""
    write_tree(project, PYTEST_PROJECT)
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "LAUGH-LAUGH-LAUGH">'
        '<!ENTITY b "&a;&a;&a;&a;">]><testsuite><testcase classname="m" name="&b;">'
        '<failure message="&b;">&b;</failure></testcase></testsuite>'
    )
    (project / "tests" / "conftest.py").write_text(
        PLANTER.format(keep="", plant=f"open(path, 'w').write({bomb!r})")
    )
    r = run_tests_through_the_worker(project, command=pytest_cmd("tests"))
    assert "LAUGH-LAUGH-LAUGH" not in json.dumps(r)


def test_attack_an_unsandboxed_run_that_moves_its_report_directory_is_not_followed(
    project: Path, tmp_path: Path
) -> None:
    """Without the sandbox the tests can even swap the report directory itself for a
    link to a directory holding a forged report: the report is read from the
    directory forj made (held open from before the run), never through the link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "junit.xml").write_text(SECRET_REPORT)
    write_tree(project, PYTEST_PROJECT)
    swap = (
        "d = os.path.dirname(path)\n"
        f"    os.rename(d, d + '-moved'); os.symlink({str(elsewhere)!r}, d)"
    )
    (project / "tests" / "conftest.py").write_text(PLANTER.format(keep="", plant=swap))
    user_config('[tools.shell]\nsandbox = "none"\n')
    r = run_tests_through_the_worker(project, command=pytest_cmd("tests"))
    assert OUTSIDE_SECRET not in json.dumps(r)
    # The report was removed from forj's own directory: no results, said plainly.
    assert r["error"]["type"] == "process-error", r
    assert "before it reported any results" in r["error"]["message"]
    assert (elsewhere / "junit.xml").read_text() == SECRET_REPORT  # nothing removed there
