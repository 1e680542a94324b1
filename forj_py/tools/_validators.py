"""The rule pack (``[[validators]]``): checks run before a commit and on request.

Each rule looks at what is about to be committed (the staged diff, read
from git with the safe runner of :mod:`forj_py.system.git`), at the commit
message, or at a branch name, and reports violations ``{rule, level, file,
line, message}``.  The ``*.must.pass`` rules run the command the user's
own configuration gives them, in the command sandbox, with the project
writable only when the call running them was reviewed or allowed in
advance (as ``run_shell``).

Messages never quote a secret they found: they name its kind and where it
is.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex

from .. import errors
from ..config import ValidatorConfig
from ..patterns import gitignore_regexes
from ..system.git import Repo
from . import _ast_lang, _shell
from .registry import ToolContext

# The level of each rule when an entry gives no enforcement: blocking where
# committing anyway would do harm (a leaked secret, a broken build), a
# warning for the naming conventions.
CATALOG_LEVEL = {
    "secrets.scan": "blocking",
    "code.todo.blockers": "blocking",
    "build.must.pass": "blocking",
    "lint.must.pass": "blocking",
    "fmt.must.pass": "blocking",
    "test.required.changed": "blocking",
    "commit.message.conventional": "warning",
    "branch.naming.convention": "warning",
    "sec.git.clean_tree": "blocking",
    "sec.paths.sandbox": "blocking",
    "code.ast.parsed": "blocking",
}
LEVELS = ("blocking", "warning", "suggestion")

DEFAULT_PROTECTED = ["main", "master"]
DEFAULT_TODO_WORDS = ["TODO", "FIXME"]
DEFAULT_BRANCH_PATTERN = (
    r"(main|master|develop|trunk|"
    r"(feat|feature|fix|bugfix|hotfix|release|chore|docs|refactor|test|perf|ci|build)"
    r"/[a-z0-9][a-z0-9._/-]*)"
)
DEFAULT_TYPES = [
    "feat",
    "fix",
    "docs",
    "style",
    "refactor",
    "perf",
    "test",
    "build",
    "ci",
    "chore",
    "revert",
]
DEFAULT_TESTS = [
    "test/",
    "tests/",
    "test-*/",
    "spec/",
    "test_*",
    "*_test.*",
    "*-test.*",
    "*-tests.*",
    "*.test.*",
    "*_spec.*",
]
DEFAULT_OVERRIDE = "[no tests]"
# Files that count as code for test.required.changed (by extension).
CODE_EXTENSIONS = frozenset(
    {
        ".py",
        ".el",
        ".js",
        ".jsx",
        ".ts",
        ".tsx",
        ".go",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".java",
        ".kt",
        ".rb",
        ".php",
        ".cs",
        ".swift",
        ".scala",
        ".clj",
        ".ex",
        ".exs",
        ".hs",
        ".ml",
        ".lua",
        ".sh",
    }
)

# Shapes of credentials: (what it is, pattern).  The same well-known shapes
# the environment scrubbing knows, plus key = "value" assignments.
SECRET_SHAPES: list[tuple[str, re.Pattern[str]]] = [
    ("a URL with a password", re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")),
    ("an API key (sk-...)", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}")),
    ("an AWS access key id", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    (
        "a password or secret assigned in the code",
        re.compile(
            r"(?i)\b[\w.-]*(password|passwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token)"
            r"[\w.-]*\s*[:=]\s*['\"][^'\"\s$%{}<>]{8,}['\"]"
        ),
    ),
]


@dataclass
class Violation:
    rule: str
    level: str
    message: str
    file: str | None = None
    line: int | None = None

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "level": self.level}
        if self.file is not None:
            out["file"] = self.file
        if self.line is not None:
            out["line"] = self.line
        out["message"] = self.message
        return out


@dataclass
class Change:
    """One staged file: its path (relative to the project root) and added lines."""

    path: str
    status: str  # A, M, D, T (type change)
    added: list[tuple[int, str]] = field(default_factory=list)
    symlink_target: str | None = None


def git_failure(what: str, stderr: str, **details: Any) -> errors.ToolFailure:
    """git's own words, as a ``process-error`` with ``details.code = "E_GIT"``."""
    text = stderr.strip() or "(git printed nothing)"
    return errors.process_error(
        f"{what}: {text}",
        recovery=_recovery_for(text),
        code="E_GIT",
        stderr=text,
        **details,
    )


def _recovery_for(stderr: str) -> list[str]:
    low = stderr.lower()
    if "not a git repository" in low:
        return ["The project is not a git repository; ask the user whether to create one"]
    if "pathspec" in low and "did not match" in low:
        return ["Check the names with git_status or list_files, then call again"]
    if "unknown revision" in low or "bad revision" in low or "invalid reference" in low:
        return ["Check the branch or commit name with git_log or git_status, then call again"]
    if "would be overwritten" in low:
        return ["Commit your changes (git_add, git_commit) first, or ask the user to stash them"]
    if "rejected" in low or "non-fast-forward" in low or "fetch first" in low:
        return ["Pull first (git_pull), resolve what it brings, then push again"]
    if "nothing to commit" in low:
        return ["Stage changes with git_add first, or pass allow_empty if an empty commit is meant"]
    return [
        "Read git's message above for the cause",
        "Check the state with git_status, then call again with that in mind",
    ]


def run_git(repo: Repo, ctx: ToolContext, args: list[str], what: str, **kw: Any) -> str:
    """Run git, raising its own error text as an ``E_GIT`` failure."""
    done = repo.run(args, timeout=ctx.config.tools.git.timeout_seconds, cancel=ctx.cancel, **kw)
    if done.cancelled:
        raise errors.cancelled()
    if done.timed_out:
        raise errors.timed_out(
            what, ctx.config.tools.git.timeout_seconds, ctx.config.tools.git.timeout_seconds
        )
    if done.returncode != 0:
        raise git_failure(what, done.err())
    return done.out()


# --- reading the staged diff ---------------------------------------------------------


_HUNK = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def unquote(path: str) -> str:
    """A path as git prints it: C-quoted when it holds unusual characters."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    body = path[1:-1]
    out = bytearray()
    i = 0
    simple = {
        "n": b"\n",
        "t": b"\t",
        '"': b'"',
        "\\": b"\\",
        "a": b"\a",
        "b": b"\b",
        "f": b"\f",
        "r": b"\r",
        "v": b"\v",
    }
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out += simple[nxt]
                i += 2
                continue
            if nxt.isdigit() and i + 3 < len(body) + 1:
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out += c.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def staged_changes(repo: Repo, ctx: ToolContext) -> list[Change]:
    """Every staged file under the project root, with its added lines."""
    text = run_git(
        repo,
        ctx,
        [
            "-c",
            "core.quotePath=false",
            "diff",
            "--cached",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--no-renames",
            "--relative",
            "-U0",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "--",
            ".",
        ],
        "git diff --cached",
    )
    changes: list[Change] = []
    current: Change | None = None
    new_line = 0
    link = False
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            current = Change(path="", status="M")
            changes.append(current)
            link = False
            continue
        if current is None:
            continue
        if line.startswith("new file mode"):
            current.status = "A"
            link = line.endswith("120000")
        elif line.startswith("deleted file mode"):
            current.status = "D"
        elif line.startswith("new mode"):
            current.status = "T"
            link = line.endswith("120000")
        elif line.startswith("--- ") and not current.path:
            old = unquote(line[4:])
            current.path = old[2:] if old.startswith("a/") else ""
        elif line.startswith("+++ "):
            new = unquote(line[4:])
            if new.startswith("b/"):
                current.path = new[2:]
        elif line.startswith("@@"):
            m = _HUNK.match(line)
            new_line = int(m.group(1)) if m else 0
        elif line.startswith("+"):
            current.added.append((new_line, line[1:]))
            if link:
                current.symlink_target = line[1:]
            new_line += 1
        elif line.startswith("Binary files") and not current.path:
            m = re.match(r"Binary files (?:a/(.*)|/dev/null) and (?:b/(.*)|/dev/null) differ", line)
            if m:
                current.path = unquote(m.group(2) or m.group(1) or "")
    return [c for c in changes if c.path]


def current_branch(repo: Repo, ctx: ToolContext) -> str | None:
    done = repo.run(
        ["symbolic-ref", "--quiet", "--short", "HEAD"], timeout=ctx.config.tools.git.timeout_seconds
    )
    return done.out().strip() or None if done.ok else None


def unstaged_paths(repo: Repo, ctx: ToolContext) -> list[str]:
    """Tracked files under the project root whose work tree differs from the index."""
    text = run_git(
        repo,
        ctx,
        ["diff", "--name-only", "--relative", "-z", "--no-ext-diff", "--", "."],
        "git diff",
    )
    return [p for p in text.split("\0") if p]


# --- the rules --------------------------------------------------------------------


@dataclass
class Subject:
    """What the rules look at; the staged diff is read once, when a rule first needs it."""

    repo: Repo
    ctx: ToolContext
    message: str | None = None  # the commit message, if a commit is being checked
    branch: str | None = None  # a branch about to be created, else the current one
    glob: str | None = None
    # Commit-time commands get the project writable when the commit was reviewed.
    writable: bool = False
    _changes: list[Change] | None = None

    def changes(self) -> list[Change]:
        if self._changes is None:
            found = staged_changes(self.repo, self.ctx)
            if self.glob:
                found = [c for c in found if _glob_match(self.glob, c.path)]
            self._changes = found
        return self._changes

    def branch_name(self) -> str | None:
        return self.branch or current_branch(self.repo, self.ctx)


def _glob_match(pattern: str, path: str) -> bool:
    return any(regex.match(source, path) for source, _ in gitignore_regexes(pattern))


Rule = Callable[[ValidatorConfig, str, Subject], list[Violation]]


def _secrets(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    out = []
    for change in s.changes():
        if change.status != "D":
            pattern = s.ctx.sandbox.denied_inside(change.path, False)
            if pattern is not None:
                out.append(
                    Violation(
                        entry.rule,
                        level,
                        f"{change.path} is staged, and the pattern {pattern!r} marks it as a "
                        "file of secrets; unstage it (ask the user) rather than commit it",
                        change.path,
                    )
                )
                continue
        for number, text in change.added:
            for kind, shape in SECRET_SHAPES:
                if shape.search(text):
                    out.append(
                        Violation(
                            entry.rule,
                            level,
                            f"the staged line holds {kind}; take it out of the file (read it "
                            "from the environment or a file the repository ignores) and stage "
                            "the file again",
                            change.path,
                            number,
                        )
                    )
                    break
    return out


def _todo(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    branch = s.branch_name()
    protected = entry.branches or DEFAULT_PROTECTED
    if branch is None or not any(fnmatch.fnmatchcase(branch, g) for g in protected):
        return []
    words = entry.words or DEFAULT_TODO_WORDS
    found = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b")
    out = []
    for change in s.changes():
        for number, text in change.added:
            m = found.search(text)
            if m:
                out.append(
                    Violation(
                        entry.rule,
                        level,
                        f"{m.group(1)} added on the protected branch {branch}; finish the work "
                        "or move it to a task before committing here",
                        change.path,
                        number,
                    )
                )
    return out


def _command(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    assert entry.command is not None
    ctx = s.ctx
    env = _shell.clean_environment(_shell.denylist(ctx))
    shell = ctx.config.tools.shell
    lim = _shell.Limits(
        ctx.config.tools.timeouts.shell_commands_seconds,
        shell.kill_grace_seconds,
        shell.drain_seconds,
    )
    try:
        outcome = _shell.run(
            ctx,
            "validate",
            list(entry.command),
            ctx.sandbox.project_root,
            env,
            stdin=None,
            lim=lim,
            writable=s.writable,
        )
    except errors.ToolFailure as failure:
        if failure.error.type.value == "cancelled":
            raise
        return [
            Violation(
                entry.rule, level, f"{_shown(entry.command)} could not run: {failure.error.message}"
            )
        ]
    if outcome.returncode == 0 and not outcome.timed_out:
        return []
    how = (
        f"did not finish within {lim.timeout:g} s"
        if outcome.timed_out
        else f"exited with code {outcome.returncode}"
    )
    tail = _tail(outcome, env.secrets)
    return [
        Violation(
            entry.rule,
            level,
            f"{_shown(entry.command)} {how}"
            + (f"; the end of its output:\n{tail}" if tail else ""),
        )
    ]


def _shown(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)


def _tail(outcome: Any, secrets: list[str], limit: int = 4000) -> str:
    parts = []
    for cap in (outcome.stdout, outcome.stderr):
        data = cap.whole()
        if data is None:
            data = cap.tail
        parts.append(_shell.decode_output(data[-limit:], secrets, skip_partial=True))
    text = "\n".join(p.rstrip("\n") for p in parts if p.strip())
    return text[-limit:]


def _tests_changed(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    patterns = entry.tests or DEFAULT_TESTS
    sources = [src for p in patterns for src, _ in gitignore_regexes(p)]

    def is_test(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) + "/" for i in range(1, len(parts))]
        return any(regex.match(src, form) for src in sources for form in [path, *prefixes])

    changes = s.changes()
    code = [
        c.path
        for c in changes
        if os.path.splitext(c.path)[1] in CODE_EXTENSIONS and not is_test(c.path)
    ]
    tests = [c.path for c in changes if is_test(c.path)]
    override = entry.override or DEFAULT_OVERRIDE
    out: list[Violation] = []
    if code and not tests and not (s.message and override in s.message):
        out.append(
            Violation(
                entry.rule,
                level,
                f"code changed ({', '.join(code[:5])}{' ...' if len(code) > 5 else ''}) but no "
                f"test did; stage a test that covers the change, or put {override!r} in the "
                "commit message to say none is needed",
                code[0],
            )
        )
    if code and entry.command is not None and not out:
        out += _command(entry, level, s)
    return out


def _conventional(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    if s.message is None:
        return []
    types = entry.types or DEFAULT_TYPES
    shape = re.compile(
        r"(" + "|".join(re.escape(t) for t in types) + r")(\([A-Za-z0-9_./-]+\))?!?: \S"
    )
    first = s.message.split("\n", 1)[0]
    if shape.match(first):
        return []
    return [
        Violation(
            entry.rule,
            level,
            f"the subject {first[:80]!r} is not a Conventional Commit; write TYPE(SCOPE): "
            f"summary, TYPE one of {', '.join(types)} (e.g. 'fix(parser): handle empty input')",
        )
    ]


def _branch_naming(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    name = s.branch_name()
    if name is None:
        return []
    pattern = entry.pattern or DEFAULT_BRANCH_PATTERN
    try:
        ok = regex.fullmatch(pattern, name, timeout=1.0) is not None
    except TimeoutError:
        ok = False
    if ok:
        return []
    return [
        Violation(
            entry.rule,
            level,
            f"the branch name {name!r} does not match the naming convention {pattern!r}; "
            "pick a name like 'feat/short-topic' or 'fix/issue-summary'",
        )
    ]


def _clean_tree(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    return [
        Violation(
            entry.rule,
            level,
            f"{path} has unstaged changes; stage them (git_add) or ask the user to "
            "set them aside, so what is checked is what is committed",
            path,
        )
        for path in unstaged_paths(s.repo, s.ctx)
        if not s.glob or _glob_match(s.glob, path)
    ]


def _paths_sandbox(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    out = []
    sandbox = s.ctx.sandbox
    for change in s.changes():
        if change.status == "D":
            continue
        try:
            sandbox.resolve(change.path)
        except errors.ToolFailure as failure:
            out.append(Violation(entry.rule, level, failure.error.message, change.path))
            continue
        target = change.symlink_target
        if target is not None:
            where = os.path.normpath(
                os.path.join(
                    os.path.dirname(os.path.join(sandbox.project_root, change.path)), target
                )
            )
            if os.path.isabs(target) or not (
                where == sandbox.project_root
                or where.startswith(sandbox.project_root.rstrip(os.sep) + os.sep)
            ):
                out.append(
                    Violation(
                        entry.rule,
                        level,
                        f"the staged symbolic link points outside the project ({target!r}); "
                        "unstage it or point it at a file inside the project",
                        change.path,
                    )
                )
    return out


def _ast_parsed(entry: ValidatorConfig, level: str, s: Subject) -> list[Violation]:
    """Every staged file in a language the AST tools read parses (as staged).

    A file the sandbox denies is not read (secrets.scan is the rule for
    those), nor one over ``[tools.ast] max_file_bytes``: each is named, as
    a warning, so the skip is never silent.  Messages give the place and
    kind of a syntax error, never the text there.
    """
    out = []
    limit = s.ctx.config.tools.ast.max_file_bytes
    watch = _ast_lang.Watch(s.ctx.cancel)
    for change in s.changes():
        language = _ast_lang.language_of(change.path)
        if change.status == "D" or change.symlink_target is not None or language is None:
            continue
        s.ctx.check_cancelled()
        if s.ctx.sandbox.denied_inside(change.path, False) is not None:
            out.append(
                Violation(
                    entry.rule,
                    "warning",
                    "not checked: the sandbox denies reading this file, so its staged "
                    "contents were not read",
                    change.path,
                )
            )
            continue
        try:
            _ast_lang.grammar(language)
        except errors.ToolFailure as failure:
            # A blocking rule that cannot check must not pass in silence.
            return [Violation(entry.rule, level, failure.error.message, change.path)]
        # The staged blob; './' because the diff's paths are relative to the
        # project root, which may be below the top of the work tree.
        blob = f":./{change.path}"
        # Its size first: a blob is read whole, so a large one is not read at all.
        size = run_git(s.repo, s.ctx, ["cat-file", "-s", blob], "git cat-file").strip()
        if not size.isdigit():
            raise git_failure("git cat-file", f"no size for the staged {change.path}")
        if int(size) > limit:
            out.append(
                Violation(
                    entry.rule,
                    "warning",
                    f"not checked: the staged file has {size} bytes, over "
                    f"[tools.ast] max_file_bytes ({limit})",
                    change.path,
                )
            )
            continue
        staged = run_git(s.repo, s.ctx, ["show", "--no-textconv", blob], "git show").encode(
            "utf-8", "surrogateescape"
        )
        problems, count = _ast_lang.problems_of(
            _ast_lang.tree_of(language, staged).root_node, watch
        )
        if count:
            first = problems[0]
            out.append(
                Violation(
                    entry.rule,
                    level,
                    f"does not parse as {language} ({count} syntax error(s); column "
                    f"{first.column}: {first.message}); fix it and stage it again",
                    change.path,
                    first.line,
                )
            )
    return out


RULES: dict[str, Rule] = {
    "secrets.scan": _secrets,
    "code.todo.blockers": _todo,
    "build.must.pass": _command,
    "lint.must.pass": _command,
    "fmt.must.pass": _command,
    "test.required.changed": _tests_changed,
    "commit.message.conventional": _conventional,
    "branch.naming.convention": _branch_naming,
    "sec.git.clean_tree": _clean_tree,
    "sec.paths.sandbox": _paths_sandbox,
    "code.ast.parsed": _ast_parsed,
}
# Which rules each trigger runs: a branch name is judged at checkout, where
# it is chosen; everything else at commit, where the changes are.
ON_COMMIT = frozenset(RULES) - {"branch.naming.convention"}
ON_CHECKOUT = frozenset({"branch.naming.convention"})


def level_of(entry: ValidatorConfig) -> str:
    return entry.enforcement or CATALOG_LEVEL[entry.rule]


def run(entries: list[ValidatorConfig], subject: Subject) -> list[Violation]:
    """Every violation of ``entries`` (each distinct entry once), blocking first."""
    out: list[Violation] = []
    seen: list[ValidatorConfig] = []
    for entry in entries:
        if entry in seen:
            continue
        seen.append(entry)
        subject.ctx.check_cancelled()
        out += RULES[entry.rule](entry, level_of(entry), subject)
    return sorted(out, key=lambda v: LEVELS.index(v.level))
