"""``run_tests``: run the project's tests and say what passed.

Two ways to run:

- **ERT** (the default): a separate batch Emacs (``emacs -Q --batch``) loads
  the project's test files (names like ``foo-test.el``, ``foo-tests.el``,
  ``test-foo.el``, ``foo_test.el``, found by the project walk, so ignored
  and denied files are left out), with every directory holding ``.el``
  files on the load path, then a small driver runs the tests ``selector``
  picks (a regexp of test names, or a Lisp selector such as ``(tag fast)``
  or ``:failed``) and writes one JSON record per test to a file outside
  the project.
- **Any runner** (``command``): an argv run as it is.  For pytest
  (``pytest ...``, ``python -m pytest ...``, ``uv run pytest ...``) the
  worker adds ``--junitxml=FILE`` (outside the project) and reads the
  counts and failures from that JUnit XML.  For anything else it reads the
  usual summary lines (``N passed``, ``N failed``, ``N skipped`` /
  ``ignored``, ``N errors``) from the end of the output.

The run itself is ``run_shell``'s: own session and process group, cleaned
environment, stdin closed, output streamed, time limit, whole-group kill.
The result is ``{total, passed, failed, errors, skipped, report}``, with
the failing tests' names and messages first in ``report`` and the end of
the output after them.  A run that ends before reporting anything (a test
file that does not load, a crash, a bad option) is a ``process-error``
with the output's tail and the exit status.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import stat
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .. import errors
from ..output import shown_line, visible_controls
from ..protocol import RiskLevel
from ..safety.paths import SafePath
from ..system.process import Outcome
from ..system.walk import Walker
from . import _shell
from .registry import Tool, ToolContext
from .shell import command_notes, command_tags, describe_confinement, show_command

REPORT = "{forj-report}"  # replaced by a file in a temporary directory outside the project
DRIVER = "{forj-ert-driver}"
MAX_REPORT_FILE = 64 << 20
MAX_MESSAGE_CHARS = 2000
MAX_WALK_ENTRIES = 50_000
MAX_LOAD_PATH = 200
TEST_FILE = re.compile(r"(?:^test-.+|.+[-_]tests?)\.el\Z")
OUTPUT_TAIL = 16 << 10  # bytes of the run's output quoted after the failures

# Runs the tests the selector picks and writes one record per test as JSON.
# Everything it needs arrives in environment variables.  A selector written
# as a Lisp form is read as data and must be made of ERT's plain selectors
# only: (satisfies FN) or byte-code would run code the review does not show.
ERT_DRIVER = r""";;; forj ERT driver  -*- lexical-binding: t -*-
(require 'ert)
(require 'json)
(defun forj-driver--plain-selector-p (selector)
  (cond ((memq selector '(t nil :new :failed :passed :expected :unexpected)) t)
        ((stringp selector) t)
        ((and (consp selector) (eq (car selector) 'tag))
         (and (symbolp (cadr selector)) (null (cddr selector))))
        ((and (consp selector) (eq (car selector) 'member))
         (cl-every (lambda (x) (or (stringp x) (symbolp x))) (cdr selector)))
        ((and (consp selector) (memq (car selector) '(and or not)))
         (cl-every #'forj-driver--plain-selector-p (cdr selector)))))
(let* ((spec (getenv "FORJ_ERT_SELECTOR"))
       (selector (cond ((or (null spec) (string= spec "")) t)
                       ((string-match-p "\\`[(:]" spec)
                        (let ((form (car (read-from-string spec))))
                          (unless (forj-driver--plain-selector-p form)
                            (princ (format "forj: the selector %s is not made of plain ERT %s\n"
                                           spec "selectors (strings, t, :failed, :new, (tag SYM), \
(member NAME...), and/or/not)"))
                            (kill-emacs 3))
                          form))
                       ((member spec '("t" "nil")) (intern spec))
                       (t spec)))
       (stats (ert-run-tests-batch selector))
       (tests (ert--stats-tests stats))
       (results (ert--stats-test-results stats))
       (rows nil))
  (dotimes (i (length tests))
    (let* ((test (aref tests i))
           (result (aref results i))
           (expected (and result (ert-test-result-expected-p test result)))
           (condition (and (ert-test-result-with-condition-p result)
                           (ert-test-result-with-condition-condition result)))
           (status (cond ((null result) "skipped")
                         ((ert-test-skipped-p result) "skipped")
                         (expected "passed")
                         ((ert-test-passed-p result) "failed")
                         ((and (ert-test-failed-p result)
                               (eq (car-safe condition) 'ert-test-failed))
                          "failed")
                         (t "error")))
           (message (cond ((ert-test-skipped-p result)
                           (let ((print-length 10) (print-level 4))
                             (prin1-to-string (cdr condition))))
                          ((equal status "passed") "")
                          ((ert-test-passed-p result) "passed, but was expected to fail")
                          (condition
                           (let ((print-length 20) (print-level 6))
                             (prin1-to-string condition)))
                          (t (format "%S" (type-of result))))))
      (push (list (cons 'name (symbol-name (ert-test-name test)))
                  (cons 'status status)
                  (cons 'message message))
            rows)))
  (let ((coding-system-for-write 'utf-8-unix))
    (with-temp-file (getenv "FORJ_ERT_OUT")
      (insert (json-encode (vconcat (nreverse rows))))))
  (kill-emacs 0))
"""


class RunTestsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    selector: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="ERT only: a regexp of test names, or a Lisp selector such as "
        "(tag fast) or :failed. Default: every test",
    )
    command: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=10_000,
        description="Run another test runner instead of ERT, as an argv array, e.g. "
        "['python', '-m', 'pytest', '-q']; pytest results are read from its JUnit XML",
    )
    allow_network: bool = Field(
        default=False,
        description="Give the tests network access (off by default: only loopback). "
        "Always shown to the user for review",
    )

    @field_validator("command")
    @classmethod
    def _argv(cls, command: list[str] | None) -> list[str] | None:
        if command is not None:
            if not command[0]:
                raise ValueError("the program (command[0]) is empty")
            if any("\0" in part for part in command):
                raise ValueError("command holds a NUL character")
        return command

    @field_validator("selector")
    @classmethod
    def _selector(cls, selector: str | None) -> str | None:
        if selector is not None and "\0" in selector:
            raise ValueError("selector holds a NUL character")
        return selector

    @model_validator(mode="after")
    def _one_way(self) -> RunTestsArgs:
        if self.selector is not None and self.command is not None:
            raise ValueError(
                "selector applies to ERT only; with command, put the selection into the "
                "command itself (e.g. pytest -k NAME)"
            )
        return self


@dataclass(frozen=True)
class Plan:
    runner: str  # "ert" | "pytest" | "command"
    argv: list[str]  # with REPORT / DRIVER placeholders
    cwd: SafePath
    test_files: tuple[str, ...] = ()


@dataclass
class Case:
    name: str
    status: str  # passed | failed | error | skipped
    message: str = ""


class RunTests(Tool[RunTestsArgs]):
    name = "run_tests"
    description = (
        "Run the project's tests; returns {total, passed, failed, errors, skipped, report} "
        "with the failing tests' names and messages first in report. Default: ERT in a "
        "batch Emacs over the project's *-test.el / *-tests.el / test-*.el files (selector: "
        "a regexp of test names or an ERT selector). command runs another runner (argv); "
        "pytest is read from its JUnit XML. Runs in the command sandbox (no network unless "
        "allow_network). Needs the user's approval."
    )
    Args = RunTestsArgs
    side_effecting = True
    requires_approval = True
    timeout_kind = "shell"
    runs_commands = True

    def command(self, args: RunTestsArgs) -> list[str]:
        """The runner's argv; ERT is matched as ``ert`` followed by the selector."""
        if args.command is not None:
            return list(args.command)
        return ["ert", *([args.selector] if args.selector else [])]

    def risk(self, args: RunTestsArgs) -> RiskLevel:
        return RiskLevel.HIGH  # it runs the project's code

    def summary(self, args: RunTestsArgs) -> str:
        if args.command is not None:
            return f"Run tests: {shlex.join(args.command)}"
        return "Run ERT tests" + (f" matching {args.selector}" if args.selector else "")

    def preview(self, args: RunTestsArgs, ctx: ToolContext) -> str | None:
        return self._describe(self._plan(args, ctx), args, ctx)

    def review_notes(self, args: RunTestsArgs, ctx: ToolContext) -> list[str]:
        text = shlex.join(args.command) if args.command else "emacs"
        return command_notes(ctx, args.allow_network, text)

    def summary_tags(self, args: RunTestsArgs, ctx: ToolContext) -> list[str]:
        return command_tags(ctx, args.allow_network)

    def _describe(self, plan: Plan, args: RunTestsArgs, ctx: ToolContext) -> str:
        env = _shell.clean_environment(_shell.denylist(ctx))
        lines = [
            *show_command(plan.argv),
            "",
            "argv:    " + json.dumps(plan.argv, ensure_ascii=False),
            f"runner:  {plan.runner}",
            f"cwd:     {shown_line(plan.cwd.display)}  ({shown_line(plan.cwd.canonical)})",
            "env:     no additions",
        ]
        if env.removed:
            lines.append("removed: " + " ".join(env.removed))
        if plan.runner == "ert":
            lines.append(
                f"tests:   {len(plan.test_files)} files: " + shown_line(" ".join(plan.test_files))
            )
            lines.append(f"select:  {shown_line(args.selector or 't (every test)')}")
            lines.append(f"{DRIVER}: forj's ERT driver, written to a temporary directory")
        if REPORT in " ".join(plan.argv):
            lines.append(f"{REPORT}: a JUnit XML file in a temporary directory")
        lines.append(f"timeout: {_shell.limits(ctx, None).timeout:g} s")
        lines.append("sandbox: " + describe_confinement(ctx, args.allow_network))
        return "\n".join(lines) + "\n"

    def _plan(self, args: RunTestsArgs, ctx: ToolContext) -> Plan:
        if args.command is not None:
            cwd = _shell.resolve_cwd(ctx, ".")
            if _is_pytest(args.command):
                return Plan("pytest", _with_junit(args.command), cwd)
            return Plan("command", list(args.command), cwd)
        cwd = _shell.resolve_cwd(ctx, ".", ctx.sandbox.project_root)
        env = _shell.clean_environment(_shell.denylist(ctx))
        emacs = _find_emacs(env.env)
        files, dirs = _elisp_files(ctx)
        if not files:
            raise errors.bad_args(
                "No ERT test files in the project (names like foo-test.el, foo-tests.el, "
                "test-foo.el); nothing to run",
                recovery=[
                    "Pass command to run another test runner, e.g. ['python', '-m', 'pytest']",
                    "Check that the test files are not ignored (.gitignore) or hidden",
                ],
            )
        argv = [emacs, "-Q", "--batch", "--eval", "(setq load-prefer-newer t)"]
        for d in dirs:
            argv += ["-L", d]
        for f in files:
            argv += ["-l", f]
        argv += ["-l", DRIVER]
        return Plan("ert", argv, cwd, tuple(files))

    def execute(self, args: RunTestsArgs, ctx: ToolContext) -> Any:
        plan = self._plan(args, ctx)
        if ctx.approved_preview is not None and _stable(
            visible_controls(self._describe(plan, args, ctx)), plan.runner
        ) != _stable(ctx.approved_preview, plan.runner):
            raise errors.bad_args(
                "run_tests: what would run now differs from what was approved (the "
                "command, the working directory or the program found changed); nothing was run",
                recovery=["Make the call again so the user can review it as it is now"],
            )
        env = _shell.clean_environment(_shell.denylist(ctx))
        lim = _shell.limits(ctx, None)
        # Cleanup errors ignored: an unsandboxed run could have put anything in
        # place of the directory, and no link is followed to remove it.
        with (
            tempfile.TemporaryDirectory(prefix="forj-tests-", ignore_cleanup_errors=True) as tmp,
            _directory_fd(tmp) as tmp_fd,
        ):
            report_path = os.path.join(tmp, "report.json" if plan.runner == "ert" else "junit.xml")
            driver = os.path.join(tmp, "forj-ert-driver.el")
            if plan.runner == "ert":
                with open(driver, "w", encoding="utf-8") as fh:
                    fh.write(ERT_DRIVER)
                env.env["FORJ_ERT_OUT"] = report_path
                env.env["FORJ_ERT_SELECTOR"] = args.selector or ""
            argv = [a.replace(REPORT, report_path).replace(DRIVER, driver) for a in plan.argv]
            outcome = _shell.run(
                ctx,
                self.name,
                argv,
                plan.cwd.canonical,
                env,
                stdin=None,
                lim=lim,
                network=args.allow_network,
                scratch=(tmp,),
            )
            refused: str | None = None
            try:
                cases = _read_report(plan.runner, tmp_fd, os.path.basename(report_path))
            except ReportRefused as exc:
                cases, refused = None, str(exc)
        if refused is not None:
            self._fail(
                errors.process_error(
                    f"run_tests: {refused}; forj reads a report only as the plain file the "
                    "runner writes in the report directory it made, so nothing of it was read",
                    recovery=[
                        "The tests themselves replaced the report: look for code that writes "
                        "links or special files where the runner writes its report (a conftest.py "
                        "hook, a kill-emacs-hook, an --junitxml of its own)",
                        "Run the command with run_shell to see its output without a report",
                    ],
                    runner=plan.runner,
                    **_shell.exit_status(outcome.returncode),
                    duration_ms=round(outcome.duration * 1000),
                ),
                _output_tail(outcome, env.secrets),
                ctx,
            )
        return self._result(plan, outcome, cases, env, lim, ctx, args.allow_network)

    def _result(
        self,
        plan: Plan,
        outcome: Outcome,
        cases: list[Case] | None,
        env: _shell.CleanEnv,
        lim: _shell.Limits,
        ctx: ToolContext,
        network: bool = False,
    ) -> Any:
        status = _shell.exit_status(outcome.returncode)
        duration_ms = round(outcome.duration * 1000)
        tail = _output_tail(outcome, env.secrets)
        if outcome.timed_out:
            self._fail(
                errors.command_timed_out(self.name, lim.timeout, **status, duration_ms=duration_ms),
                tail,
                ctx,
            )
        counts: dict[str, int] | None = None
        if cases is not None:
            counts = _count(cases)
        elif plan.runner == "command":
            counts = _summary_counts(tail) or None
        if counts is None and not (plan.runner == "command" and outcome.returncode == 0):
            self._fail(
                errors.process_error(
                    f"The test command failed (exit code {outcome.returncode}) and printed "
                    "no summary forj can read"
                    if plan.runner == "command"
                    else f"The test run ended (exit code {outcome.returncode}) before it "
                    "reported any results",
                    recovery=_crash_recovery(plan.runner),
                    runner=plan.runner,
                    **status,
                    duration_ms=duration_ms,
                ),
                tail,
                ctx,
            )
        if counts is None:
            counts = {"total": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
            header = (
                "The command succeeded (exit code 0) but printed no summary forj can read "
                "(N passed / N failed); the counts are unknown."
            )
        else:
            header = (
                f"{_count_line(counts)} ({plan.runner}, exit code {outcome.returncode}, "
                f"{duration_ms / 1000:.1f} s)"
            )
        result: dict[str, Any] = {
            "total": counts["total"],
            "passed": counts["passed"],
            "failed": counts["failed"],
            "errors": counts["errors"],
            "skipped": counts["skipped"],
            "report": "",
            "runner": plan.runner,
            **status,
            "duration_ms": duration_ms,
            "sandbox": _shell.confinement(ctx),
            "network": network,
        }
        report = header + "\n"
        failures = _failures(cases or [])
        if failures:
            report += "\n" + failures
        if tail.strip():
            report += "\n--- output (end) ---\n" + tail
        budget = _shell.budget_for(ctx, self.name, result)
        result["report"], _ = _shell.fit_text(report, "", 0, budget, 0.7)
        return result

    def _fail(self, failure: errors.ToolFailure, tail: str, ctx: ToolContext) -> None:
        """Raise ``failure`` with as much of the output's end as fits."""
        failure.error.details["output"] = ""
        budget = _shell.budget_for(ctx, self.name, failure.error.model_dump(mode="json"))
        failure.error.details["output"], _ = _shell.fit_text(tail, "", 0, budget, 0.2)
        raise failure


def _stable(preview: str, runner: str) -> str:
    """What of a review must not change before the run.

    For ERT, not the list of test files (and so not the argv that loads
    them): an earlier call of the same batch may add one.
    """
    if runner != "ert":
        return preview
    skip = ("$ ", "argv:", "tests:")
    return "\n".join(line for line in preview.splitlines() if not line.startswith(skip))


def _crash_recovery(runner: str) -> list[str]:
    if runner == "ert":
        return [
            "Read the output: a test file that does not load (a syntax error, a missing "
            "require, a void function at load time) stops Emacs before any test runs",
            "Load the file on its own to see the error, e.g. run_shell ['emacs', '-Q', "
            "'--batch', '-l', 'FILE']",
        ]
    if runner == "pytest":
        return [
            "Read the output: a bad option, a broken conftest.py or a missing plugin stops "
            "pytest before it writes its report",
            "Run the command with run_shell to see its full output",
        ]
    return [
        "Read the output for the cause",
        "For structured results, use a runner forj can read (pytest, ERT)",
    ]


# --- runners --------------------------------------------------------------------------------


def _is_pytest(argv: list[str]) -> bool:
    names = [os.path.basename(a) for a in argv]
    if names[0] in ("pytest", "py.test") or names[0].startswith("pytest"):
        return True
    for i, name in enumerate(names[:-1]):
        if name == "-m" and names[i + 1] == "pytest":
            return True
    # Wrappers: uv run pytest, poetry run pytest, pipenv run pytest, hatch run pytest
    return len(names) > 2 and names[1] == "run" and names[2] in ("pytest", "py.test")


def _with_junit(argv: list[str]) -> list[str]:
    flag = f"--junitxml={REPORT}"
    if "--" in argv:
        i = argv.index("--")
        return [*argv[:i], flag, *argv[i:]]
    return [*argv, flag]


def _find_emacs(env: dict[str, str]) -> str:
    explicit = os.environ.get("EMACS", "")
    if os.path.isabs(explicit) and os.access(explicit, os.X_OK) and os.path.isfile(explicit):
        return explicit
    found = shutil.which("emacs", path=env.get("PATH", os.defpath))
    if found is None:
        raise errors.process_error(
            "run_tests: emacs was not found on PATH, so ERT tests cannot run",
            recovery=[
                "Install Emacs, or set EMACS to its path in the worker's environment",
                "Pass command to run another test runner",
            ],
        )
    return found


def _elisp_files(ctx: ToolContext) -> tuple[list[str], list[str]]:
    """The project's ERT test files, and the directories of all its .el files (load path)."""
    tests: list[str] = []
    dirs: dict[str, None] = {}
    walker = Walker(ctx.sandbox)
    for i, entry in enumerate(walker.walk("", files_only=True)):
        if i % 2048 == 0:
            ctx.check_cancelled()
        if i >= MAX_WALK_ENTRIES:
            break
        if entry.kind != "file" or not entry.rel.endswith(".el"):
            continue
        directory = os.path.dirname(entry.rel) or "."
        if len(dirs) < MAX_LOAD_PATH:
            dirs.setdefault(directory, None)
        if TEST_FILE.match(os.path.basename(entry.rel)):
            tests.append(entry.rel)
    return sorted(tests), sorted(dirs)


# --- reading the results ------------------------------------------------------------------


class ReportRefused(Exception):
    """The report is not the plain file a runner writes: the message says what it is."""


@contextlib.contextmanager
def _directory_fd(path: str) -> Iterator[int]:
    """The directory forj made, held open from before the run: whatever the run puts
    at its path later (a link, another directory), the report is read from this one."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_report(runner: str, dir_fd: int, name: str) -> list[Case] | None:
    """The cases the runner reported, or None when it wrote no (usable) report.

    The report directory is the one place outside the project the command
    may write, so what is in it is the command's doing: a symbolic link
    (to ``/etc/passwd``, a file outside the project, a denied file in it),
    a FIFO that would block the read forever, a directory, a hard link to
    a file with other names.  Read only a regular file of one link, opened
    without following any link (``O_NOFOLLOW`` from the directory's own
    descriptor) and without blocking; anything else is refused.
    """
    if runner == "command":
        return None
    data = _read_plain_file(dir_fd, name)
    if data is None or not data or len(data) > MAX_REPORT_FILE:
        return None
    try:
        return _ert_cases(data) if runner == "ert" else junit_cases(data)
    except (ValueError, ET.ParseError):
        return None


def _read_plain_file(dir_fd: int, name: str) -> bytes | None:
    """Up to MAX_REPORT_FILE + 1 bytes of ``name`` in ``dir_fd``; None if it is not there."""
    nofollow = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | nofollow, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        st = _lstat(name, dir_fd)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise ReportRefused(_link_said(name, dir_fd)) from None
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP) and st is not None:
            raise ReportRefused(f"the report {name} is {_kind(st.st_mode)}, not a file") from None
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReportRefused(f"the report {name} is {_kind(st.st_mode)}, not a file")
        if st.st_nlink != 1:
            raise ReportRefused(
                f"the report {name} has {st.st_nlink} hard links; a runner's report has one"
            )
        chunks: list[bytes] = []
        left = MAX_REPORT_FILE + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _link_said(name: str, dir_fd: int) -> str:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        target = "?"
    # The target is the command's text: shown escaped and cut, like its output.
    shown = json.dumps(target[:200], ensure_ascii=False)
    return f"the report {name} is a symbolic link (to {visible_controls(shown)})"


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return kind
    return "something other than a regular file"


def _ert_cases(data: bytes) -> list[Case]:
    rows = json.loads(data.decode("utf-8", "replace"))
    if not isinstance(rows, list):
        raise ValueError("not a list")
    return [
        Case(str(r.get("name", "?")), str(r.get("status", "error")), str(r.get("message", "")))
        for r in rows
        if isinstance(r, dict)
    ]


def junit_cases(data: bytes) -> list[Case]:
    """The test cases of a JUnit XML report (pytest's, or any runner's).

    The file is written by code under test, so it is read defensively: no
    document type declarations (the only way to declare entities, so no
    entity expansion and no external entities), and at most 64 MiB.
    """
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        raise ValueError("a JUnit report with a document type declaration is not read")
    root = ET.fromstring(data)  # noqa: S314 - DTDs refused above; see docs/dependencies.md
    cases = []
    for case in root.iter("testcase"):
        classname = case.get("classname") or ""
        name = case.get("name") or "?"
        full = f"{classname}::{name}" if classname else name
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                text = (child.text or "").strip()
                head = child.get("message") or ""
                message = head + ("\n" + text if text and text != head else "")
                break
        cases.append(Case(full, status, message))
    return cases


def _count(cases: list[Case]) -> dict[str, int]:
    counts = {"total": len(cases), "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    key = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped"}
    for case in cases:
        counts[key.get(case.status, "errors")] += 1
    return counts


_SUMMARY = {
    "passed": re.compile(r"\b(\d+) (?:passed|passing)\b"),
    "failed": re.compile(r"\b(\d+) (?:failed|failing|failures?)\b"),
    "skipped": re.compile(r"\b(\d+) (?:skipped|ignored|pending)\b"),
    "errors": re.compile(r"\b(\d+) errors?\b"),
}


def _summary_counts(text: str) -> dict[str, int]:
    """Counts from a runner's summary lines, read from the end; empty if there are none."""
    counts: dict[str, int] = {}
    for line in reversed(text.splitlines()[-50:]):
        for key, pattern in _SUMMARY.items():
            if key not in counts:
                found = pattern.search(line)
                if found:
                    counts[key] = int(found.group(1))
    if not counts:
        return {}
    for key in _SUMMARY:
        counts.setdefault(key, 0)
    counts["total"] = sum(counts[k] for k in _SUMMARY)
    return counts


def _count_line(counts: dict[str, int]) -> str:
    parts = [
        f"{counts[k]} {label}"
        for k, label in (
            ("failed", "failed"),
            ("errors", "error" if counts.get("errors") == 1 else "errors"),
            ("passed", "passed"),
            ("skipped", "skipped"),
        )
        if counts.get(k)
    ]
    return f"{counts['total']} tests: " + (", ".join(parts) if parts else "none ran")


def _failures(cases: list[Case]) -> str:
    lines = []
    for case in cases:
        if case.status not in ("failed", "error"):
            continue
        label = "FAILED" if case.status == "failed" else "ERROR"
        lines.append(f"{label} {case.name}")
        message = case.message.strip()
        if len(message) > MAX_MESSAGE_CHARS:
            message = (
                message[: MAX_MESSAGE_CHARS // 2] + "\n  ...\n" + message[-MAX_MESSAGE_CHARS // 2 :]
            )
        lines += ["  " + line for line in message.splitlines()]
    return "\n".join(lines) + ("\n" if lines else "")


def _output_tail(outcome: Outcome, secrets: list[str]) -> str:
    """The last part of what the run printed, stderr after stdout."""
    parts = []
    for cap in (outcome.stdout, outcome.stderr):
        data = cap.whole()
        if data is None:
            data = cap.tail
        data = data[-OUTPUT_TAIL:]
        parts.append(_shell.decode_output(data, secrets, skip_partial=True))
    return "\n".join(p.rstrip("\n") for p in parts if p.strip())
