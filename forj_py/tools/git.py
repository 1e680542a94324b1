"""The git tools on the project's repository.

git runs in the worker, outside the command sandbox, with the user's own
configuration and credentials and none of the programs the repository's
configuration names (:mod:`forj_py.system.git`).  The repository's hooks
are skipped, and a result says which existing hooks did not run, unless
the user's own file sets ``[tools.git] run_hooks = true``: then they run
inside the command sandbox (:mod:`forj_py.system.hooks`), never outside.

Reading tools (``git_status``, ``git_diff``, ``git_log``) change nothing.
The others are reviewed in the ``ask`` mode; ``git_push`` and ``git_pull``
by default in every mode, and as a forced review with a network warning
first when the remote is not a path on this machine, unless a
``[permissions] network`` rule of the user's own file matches the call.
Guards, so that no call loses work or publishes what the user did not
mean to: a commit needs a clean tree in the committed paths
(``[tools.git] clean_tree_for_commit``) and passes the blocking
``[[validators]]`` first; rebase, merge and pull need no changes to tracked
files; checkout refuses a dirty tree with a recovery step; force push
(``force``, a ``+`` refspec, a deletion) only when the user's own file sets
``allow_force_push``.

Paths are relative to the project root; globs (``src/**``) are git
pathspec globs.  Files the sandbox denies (``.env``) are never staged and
their diffs are left out.  git's own error text comes back in a
``process-error`` with ``details.code = "E_GIT"``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .. import errors
from ..config import Config, ValidatorConfig
from ..output import quoted_block, redact, shown_line
from ..protocol import DenialReason, ErrorKind, ErrorType, RiskLevel
from ..safety.permissions import network_rule_covers
from ..system.git import (
    LOCAL_TRANSPORT_PROGRAMS,
    TRANSPORT_PROGRAMS,
    GitError,
    Repo,
    open_repo,
)
from ..system.hooks import Hooks
from ..system.hooks import prepare as prepare_hooks
from . import _shell
from . import _validators as V
from .registry import Tool, ToolContext

A = TypeVar("A", bound=BaseModel)

_GLOB_CHARS = re.compile(r"[*?\[]")
MAX_CHANGES = 5000


def _ref(value: str | None, what: str = "name") -> str | None:
    """A branch, commit or remote name: never an option, never control characters."""
    if value is None:
        return None
    if not value or value.startswith("-"):
        raise ValueError(f"the {what} {value!r} must not be empty or start with '-'")
    if len(value) > 512 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"the {what} holds control characters or is too long")
    return value


def _paths_list(paths: list[str]) -> list[str]:
    for path in paths:
        if not path or "\0" in path or "\n" in path:
            raise ValueError(f"path {path!r} is empty or holds NUL / newline")
        if path.startswith(":"):
            raise ValueError(
                f"path {path!r}: pathspec magic (':...') is not accepted; give plain paths "
                "or globs relative to the project root"
            )
    return paths


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GitStatusArgs(_Strict):
    porcelain: bool = Field(
        default=True, description="true: the structured result only; false: also git's own text"
    )


class GitDiffArgs(_Strict):
    rev: str | None = Field(
        default=None,
        description="Compare with this commit or range ('HEAD', 'main..HEAD'); default: the "
        "index (unstaged changes)",
    )
    paths: list[str] = Field(
        default_factory=list, max_length=500, description="Paths or globs ('src/**'); default all"
    )
    staged: bool = Field(default=False, description="Show staged changes (git diff --cached)")
    context: int = Field(default=3, ge=0, le=100, description="Lines of context per hunk")

    _r = field_validator("rev")(lambda v: _ref(v, "rev"))
    _p = field_validator("paths")(_paths_list)


class GitLogArgs(_Strict):
    rev: str | None = Field(default=None, description="Start from this commit or range")
    paths: list[str] = Field(default_factory=list, max_length=500, description="Only these paths")
    max_count: int = Field(default=20, ge=1, le=500, description="At most this many commits")

    _r = field_validator("rev")(lambda v: _ref(v, "rev"))
    _p = field_validator("paths")(_paths_list)


class GitAddArgs(_Strict):
    paths: list[str] = Field(
        min_length=1, max_length=500, description="Paths or globs to stage ('src/**', '.')"
    )
    _p = field_validator("paths")(_paths_list)


class GitCommitArgs(_Strict):
    message: str = Field(min_length=1, max_length=100_000, description="The commit message")
    signoff: bool = Field(default=False, description="Add a Signed-off-by trailer")
    allow_empty: bool = Field(default=False, description="Commit even with nothing staged")

    @field_validator("message")
    @classmethod
    def _text(cls, message: str) -> str:
        if "\0" in message or not message.strip():
            raise ValueError("the message is blank or holds a NUL character")
        return message


class GitCheckoutArgs(_Strict):
    target: str = Field(description="The branch (or commit) to switch to")
    create: bool = Field(default=False, description="Create the branch (git checkout -b)")
    track: bool = Field(
        default=True,
        description="When target names only a remote branch, create a local branch tracking it",
    )
    _t = field_validator("target")(lambda v: _ref(v, "target"))


class GitMergeArgs(_Strict):
    branch: str | None = Field(default=None, description="The branch to merge into the current")
    no_ff: bool = Field(default=False, description="Always make a merge commit")
    abort: bool = Field(default=False, description="Abort a merge that stopped on conflicts")
    _b = field_validator("branch")(lambda v: _ref(v, "branch"))

    @model_validator(mode="after")
    def _one(self) -> GitMergeArgs:
        if (self.branch is None) != self.abort:
            raise ValueError("give branch to merge, or abort: true (not both)")
        return self


class GitRebaseArgs(_Strict):
    onto: str | None = Field(default=None, description="Rebase the current branch onto this")
    autosquash: bool = Field(default=False, description="Fold fixup!/squash! commits in")
    action: Literal["start", "continue", "abort"] = Field(
        default="start",
        description="'continue' after resolving conflicts (git_add them first), or 'abort'",
    )
    _o = field_validator("onto")(lambda v: _ref(v, "onto"))

    @model_validator(mode="after")
    def _onto(self) -> GitRebaseArgs:
        if (self.action == "start") != (self.onto is not None):
            raise ValueError("onto is needed to start a rebase, and only then")
        return self


class GitPushArgs(_Strict):
    remote: str = Field(default="origin", description="A remote configured in the repository")
    refspec: str | None = Field(
        default=None, description="What to push ('HEAD:refs/heads/feature'); default: git's"
    )
    force: bool = Field(default=False, description="Force (only if the user's config allows it)")
    set_upstream: bool = Field(default=False, description="Record the remote branch (-u)")
    _r = field_validator("remote")(lambda v: _ref(v, "remote"))

    @field_validator("refspec")
    @classmethod
    def _spec(cls, spec: str | None) -> str | None:
        if spec is not None and (
            not spec or spec.startswith("-") or any(c in spec for c in "\0\n")
        ):
            raise ValueError(f"refspec {spec!r} is empty, an option, or holds NUL / newline")
        return spec

    def forces(self) -> bool:
        """Force pushes and deletions rewrite what the remote has."""
        spec = self.refspec or ""
        return self.force or spec.startswith("+") or spec.startswith(":")


class GitPullArgs(_Strict):
    remote: str = Field(default="origin", description="A remote configured in the repository")
    branch: str | None = Field(default=None, description="The remote branch; default: upstream")
    rebase: bool = Field(default=False, description="Rebase instead of merging")
    _r = field_validator("remote")(lambda v: _ref(v, "remote"))
    _b = field_validator("branch")(lambda v: _ref(v, "branch"))


# --- shared ----------------------------------------------------------------------------


def refusal(what: str, exc: GitError) -> errors.ToolFailure:
    """``E_GIT`` for a git failure; a safety rule's refusal names the rule and what to do."""
    if exc.rule is None:
        return V.git_failure(what, str(exc))
    return errors.process_error(
        f"{what}: {exc}",
        recovery=list(exc.recovery),
        code="E_GIT",
        rule=exc.rule,
        stderr=str(exc),
    )


def repo_of(ctx: ToolContext) -> Repo:
    try:
        return open_repo(ctx.sandbox.project_root, timeout=ctx.config.tools.git.timeout_seconds)
    except GitError as exc:
        raise refusal("git", exc) from None


def _prefix(repo: Repo) -> str:
    rel = os.path.relpath(repo.cwd, repo.toplevel)
    return "" if rel == "." else rel.replace(os.sep, "/") + "/"


def _project_path(repo: Repo, top_rel: str) -> str:
    prefix = _prefix(repo)
    return top_rel[len(prefix) :] if prefix and top_rel.startswith(prefix) else top_rel


def pathspecs(ctx: ToolContext, paths: list[str]) -> list[str]:
    """Pathspecs relative to the project root: globs as globs, names checked by the sandbox."""
    if not paths:
        return ["."]
    specs = []
    for path in paths:
        if os.path.isabs(path) or ".." in path.replace("\\", "/").split("/"):
            raise errors.bad_args(
                f"path {path!r} leaves the project; paths are relative to the project root",
                recovery=["Give paths inside the project, without '..'"],
            )
        if _GLOB_CHARS.search(path):
            specs.append(":(glob)" + path)
        else:
            ctx.sandbox.resolve(path)  # denied names (.env) and links out are refused here
            specs.append(":(literal)" + path)
    return specs


def _denied(ctx: ToolContext, path: str) -> str | None:
    return ctx.sandbox.denied_inside(path)


def _existing_hooks(repo: Repo, ctx: ToolContext, names: tuple[str, ...]) -> tuple[list[str], str]:
    """The operation's hooks the repository has (executable), and its hooks directory."""
    if not names:
        return [], ""
    done = repo.run(["rev-parse", "--git-common-dir"], timeout=ctx.config.tools.git.timeout_seconds)
    if not done.ok:
        return [], ""
    hooks = os.path.realpath(os.path.join(repo.cwd, done.out().strip(), "hooks"))
    return [n for n in names if os.access(os.path.join(hooks, n), os.X_OK)], hooks


def _run_hooked(
    repo: Repo, ctx: ToolContext, names: tuple[str, ...], argv: Callable[[Hooks], list[str]]
) -> tuple[Any, Hooks]:
    """Run git with the hooks ``names`` as the config says (skipped or sandboxed); cancellable.

    The hooks come back too: the result says which ran or were skipped.
    """
    hooks = hooks_for(repo, ctx, names)
    try:
        done = repo.run(
            argv(hooks), timeout=ctx.config.tools.git.timeout_seconds, cancel=ctx.cancel
        )
    finally:
        hooks.close()
    if done.cancelled:
        raise errors.cancelled()
    return done, hooks


def hooks_for(repo: Repo, ctx: ToolContext, names: tuple[str, ...]) -> Hooks:
    """Skipped, or (``[tools.git] run_hooks``) run in the command sandbox; close it after."""
    existing, hooks_dir = _existing_hooks(repo, ctx, names)
    env = _shell.clean_environment(_shell.denylist(ctx)).env
    return prepare_hooks(
        existing,
        enabled=ctx.config.tools.git.run_hooks,
        hooks_dir=hooks_dir,
        toplevel=repo.toplevel,
        jail=ctx.commands,
        env=env,
        writable=ctx.approved_preview is not None or ctx.standing_consent,
    )


def _with_hooks(result: dict[str, Any], hooks: Hooks) -> dict[str, Any]:
    result.update(hooks.describe())
    return result


def tracked_changes(repo: Repo, ctx: ToolContext) -> list[str]:
    """Tracked files (anywhere in the work tree) with staged or unstaged changes."""
    out = V.run_git(
        repo,
        ctx,
        ["status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=all"],
        "git status",
    )
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def policy_failure(message: str, recovery: list[str], **details: Any) -> errors.ToolFailure:
    """A guard refused the call (``E_POLICY``): nothing was changed."""
    return errors.ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.RULE_VIOLATION,
        recovery=recovery,
        code="E_POLICY",
        **details,
    )


def _dirty_guard(repo: Repo, ctx: ToolContext, what: str) -> None:
    dirty = tracked_changes(repo, ctx)
    if dirty:
        shown = ", ".join(dirty[:10]) + (" ..." if len(dirty) > 10 else "")
        raise policy_failure(
            f"{what} needs a clean tree (sec.git.clean_tree), but tracked files have "
            f"uncommitted changes: {shown}; nothing was changed",
            [
                "Commit the changes first (git_add, then git_commit)",
                "Or ask the user to stash or discard them; forj does not throw work away",
            ],
            rule="sec.git.clean_tree",
            files=dirty[:100],
        )


def _conflicts(repo: Repo, ctx: ToolContext) -> list[str]:
    done = repo.run(
        ["diff", "--name-only", "--diff-filter=U", "-z"],
        timeout=ctx.config.tools.git.timeout_seconds,
    )
    return [_project_path(repo, p) for p in done.out().split("\0") if p] if done.ok else []


def _head(repo: Repo, ctx: ToolContext) -> str | None:
    done = repo.run(
        ["rev-parse", "--verify", "--quiet", "HEAD"], timeout=ctx.config.tools.git.timeout_seconds
    )
    return done.out().strip() or None if done.ok else None


def _validators(ctx: ToolContext, rules: frozenset[str]) -> list[ValidatorConfig]:
    return [v for v in ctx.config.validators if v.rule in rules]


def _blocking_failure(what: str, violations: list[V.Violation]) -> errors.ToolFailure:
    blocking = [v for v in violations if v.level == "blocking"]
    first = blocking[0]
    where = f" ({first.file}{':' + str(first.line) if first.line else ''})" if first.file else ""
    return errors.ToolFailure(
        ErrorType.VALIDATION,
        f"{what} refused by {len(blocking)} blocking validator violation"
        f"{'s' if len(blocking) != 1 else ''}: {first.rule}{where}: {first.message}",
        kind=ErrorKind.RULE_VIOLATION,
        recovery=[
            "Fix each violation listed in details.violations, then call again",
            "A rule that is wrong for this project is the user's to change ([[validators]])",
        ],
        code="E_VALIDATION_FAIL",
        violations=[v.json() for v in violations],
    )


def _remote_url(repo: Repo, ctx: ToolContext, remote: str) -> str:
    names = V.run_git(repo, ctx, ["remote"], "git remote").split()
    if remote not in names:
        raise errors.bad_args(
            f"{remote!r} is not a remote of this repository"
            + (f"; its remotes: {', '.join(names)}" if names else "; it has none"),
            recovery=[
                "Use one of the configured remotes; URLs are not accepted (remotes are the "
                "user's to configure)"
            ],
        )
    try:
        repo.network_guard()
    except GitError as exc:
        raise refusal(f"git remote {remote}", exc) from None
    return V.run_git(repo, ctx, ["remote", "get-url", "--", remote], "git remote get-url").strip()


def _push_urls(repo: Repo, ctx: ToolContext, remote: str) -> list[str]:
    """Every URL a push to ``remote`` goes to: its push URLs, after the user's rewrites.

    git pushes to each ``remote.<name>.pushurl`` (else each ``url``), after
    ``pushInsteadOf`` / ``insteadOf`` rewriting; the review must name those,
    not the fetch URL.  (The repository's own rewrites refuse the push.)
    """
    _remote_url(repo, ctx, remote)
    out = V.run_git(
        repo, ctx, ["remote", "get-url", "--push", "--all", "--", remote], "git remote get-url"
    )
    urls = [line.strip() for line in out.splitlines() if line.strip()]
    if not urls:
        raise V.git_failure("git remote get-url", f"the remote {remote!r} has no push URL")
    return urls


def is_local_url(url: str) -> bool:
    """A path or file:// URL: reached without the network."""
    if url.startswith("file://"):
        return True
    if "://" in url:
        return False
    # scp-like host:path has a colon before any slash.
    colon, slash = url.find(":"), url.find("/")
    return colon == -1 or (slash != -1 and slash < colon)


class _GitTool(Tool[A]):
    timeout_kind = "git"
    hooks: ClassVar[tuple[str, ...]] = ()

    def timeout(self, config: Config) -> float:
        return config.tools.git.timeout_seconds


# --- reading ----------------------------------------------------------------------------


class GitStatus(_GitTool[GitStatusArgs]):
    name = "git_status"
    description = (
        "The repository's state: {branch, upstream, ahead, behind, clean, changes: [{path, "
        "status, staged, unstaged}]}. status is git's letter (M modified, A added, D deleted, "
        "R renamed, U conflict, ? untracked); staged / unstaged say where the change is."
    )
    Args = GitStatusArgs

    def summary(self, args: GitStatusArgs) -> str:
        return "git status"

    def execute(self, args: GitStatusArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        out = V.run_git(
            repo,
            ctx,
            [
                "-c",
                "core.quotePath=false",
                "status",
                "--ignore-submodules=all",
                "--porcelain=v2",
                "--branch",
                "-z",
                "--untracked-files=all",
                "--",
                ".",
            ],
            "git status",
        )
        result: dict[str, Any] = {"branch": None, "upstream": None, "ahead": 0, "behind": 0}
        changes: list[dict[str, Any]] = []
        fields = out.split("\0")
        i = 0
        while i < len(fields):
            entry = fields[i]
            i += 1
            if entry.startswith("# branch.head "):
                head = entry[len("# branch.head ") :]
                result["branch"] = None if head == "(detached)" else head
            elif entry.startswith("# branch.oid "):
                oid = entry[len("# branch.oid ") :]
                result["head"] = None if oid == "(initial)" else oid
            elif entry.startswith("# branch.upstream "):
                result["upstream"] = entry[len("# branch.upstream ") :]
            elif entry.startswith("# branch.ab "):
                ahead, behind = entry[len("# branch.ab ") :].split()
                result["ahead"], result["behind"] = int(ahead), -int(behind)
            elif entry[:2] in ("1 ", "2 ", "u "):
                parts = entry.split(" ", {"1": 8, "2": 9, "u": 10}[entry[0]])
                xy, path = parts[1], parts[-1]
                change = _change(xy, _project_path(repo, path), conflict=entry[0] == "u")
                if entry[0] == "2":
                    change["from"] = _project_path(repo, fields[i])
                    i += 1
                changes.append(change)
            elif entry.startswith("? "):
                changes.append(
                    {
                        "path": _project_path(repo, entry[2:]),
                        "status": "?",
                        "staged": False,
                        "unstaged": True,
                    }
                )
        result["clean"] = not changes
        if len(changes) > MAX_CHANGES:
            result["truncated"] = True
            result["total_changes"] = len(changes)
            changes = changes[:MAX_CHANGES]
        result["changes"] = changes
        if not args.porcelain:
            result["text"] = V.run_git(
                repo, ctx, ["status", "--ignore-submodules=all", "--", "."], "git status"
            )
        return result


def _change(xy: str, path: str, conflict: bool) -> dict[str, Any]:
    x, y = xy[0], xy[1]
    status = "U" if conflict else (x if x != "." else y)
    return {
        "path": path,
        "status": status,
        "staged": x != "." and not conflict,
        "unstaged": y != "." or conflict,
    }


class GitDiff(_GitTool[GitDiffArgs]):
    name = "git_diff"
    description = (
        "A unified diff: {patch, files}. Default: unstaged changes; staged: true for what "
        "will be committed; rev for a commit or range. Diffs of files the sandbox denies "
        "(.env, keys) are left out and named in omitted; credentials are redacted."
    )
    Args = GitDiffArgs

    def summary(self, args: GitDiffArgs) -> str:
        what = " --cached" if args.staged else ""
        return (
            f"git diff{what}"
            + (f" {args.rev}" if args.rev else "")
            + (" -- " + " ".join(args.paths) if args.paths else "")
        )

    def paths(self, args: GitDiffArgs) -> list[str]:
        return [p for p in args.paths if not _GLOB_CHARS.search(p)]

    def path_globs(self, args: GitDiffArgs) -> list[str]:
        return [p for p in args.paths if _GLOB_CHARS.search(p)]

    def execute(self, args: GitDiffArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        argv = [
            "-c",
            "core.quotePath=false",
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--ignore-submodules=all",
            # A rename's section names the new path only once: without
            # renames every file has its own section, checked by its name.
            "--no-renames",
            "--no-color",
            "--relative",
            f"-U{args.context}",
            "--src-prefix=a/",
            "--dst-prefix=b/",
        ]
        if args.staged:
            argv.append("--cached")
        if args.rev:
            argv.append(args.rev)
        argv += ["--", *pathspecs(ctx, args.paths)]
        patch = V.run_git(repo, ctx, argv, "git diff")
        kept, omitted = [], []
        for section in _sections(patch):
            names = _section_paths(section)
            denied = [p for p in names if _denied(ctx, p) is not None]
            if denied:
                omitted.extend(denied)
            else:
                kept.append(section)
        result: dict[str, Any] = {"patch": redact("".join(kept)), "files": len(kept)}
        if omitted:
            result["omitted"] = omitted
            result["note"] = "diffs of files the sandbox denies are left out"
        return result


def _sections(patch: str) -> list[str]:
    parts = re.split(r"(?m)^(?=diff --git )", patch)
    return [p for p in parts if p]


def _section_paths(section: str) -> list[str]:
    """Every path a diff section names: both sides, and a rename's two names."""
    names: list[str] = []
    header = re.match(r"diff --git a/(\S+) b/(\S+)", section)
    if header:
        names += [header.group(1), header.group(2)]
    for line in section.split("\n"):
        if line.startswith("@@"):
            break
        if line.startswith(("+++ b/", "--- a/")):
            names.append(V.unquote(line[4:])[2:])
        for prefix in ("rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(prefix):
                names.append(V.unquote(line[len(prefix) :]))
    return list(dict.fromkeys(names))


class GitLog(_GitTool[GitLogArgs]):
    name = "git_log"
    description = (
        "Recent commits, newest first: {commits: [{commit, author, email, date, subject}]}. "
        "rev limits where to start or a range ('main..HEAD'); paths limit to commits touching them."
    )
    Args = GitLogArgs

    def summary(self, args: GitLogArgs) -> str:
        return f"git log -n {args.max_count}" + (f" {args.rev}" if args.rev else "")

    def paths(self, args: GitLogArgs) -> list[str]:
        return [p for p in args.paths if not _GLOB_CHARS.search(p)]

    def path_globs(self, args: GitLogArgs) -> list[str]:
        return [p for p in args.paths if _GLOB_CHARS.search(p)]

    def execute(self, args: GitLogArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        if _head(repo, ctx) is None and args.rev is None:
            return {"commits": [], "note": "the repository has no commits yet"}
        argv = [
            "log",
            "--no-color",
            "--no-show-signature",
            f"-n{args.max_count}",
            "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1e",
        ]
        if args.rev:
            argv.append(args.rev)
        argv += ["--", *pathspecs(ctx, args.paths)]
        out = V.run_git(repo, ctx, argv, "git log")
        commits = []
        for record in out.split("\x1e"):
            fields = record.strip("\n").split("\x1f")
            if len(fields) == 5:
                keys = ("commit", "author", "email", "date", "subject")
                commits.append(dict(zip(keys, fields, strict=True)))
        return {"commits": commits}


# --- changing -------------------------------------------------------------------------


class GitAdd(_GitTool[GitAddArgs]):
    name = "git_add"
    description = (
        "Stage paths or globs for the next commit: {added, paths}. Files the sandbox denies "
        "(.env, keys) are never staged; they are listed in skipped."
    )
    Args = GitAddArgs
    side_effecting = True

    def summary(self, args: GitAddArgs) -> str:
        return "git add " + " ".join(args.paths)

    def paths(self, args: GitAddArgs) -> list[str]:
        return [p for p in args.paths if not _GLOB_CHARS.search(p)]

    def path_globs(self, args: GitAddArgs) -> list[str]:
        return [p for p in args.paths if _GLOB_CHARS.search(p)]

    def execute(self, args: GitAddArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        specs = pathspecs(ctx, args.paths)
        dry = V.run_git(
            repo, ctx, ["-c", "core.quotePath=false", "add", "--dry-run", "--", *specs], "git add"
        )
        would = [_project_path(repo, p) for p in _verbose_paths(dry)]
        skipped = sorted(p for p in would if _denied(ctx, p) is not None)
        if would and len(skipped) == len(would):
            raise errors.bad_args(
                "Every path git_add would stage is a file the sandbox denies "
                f"({', '.join(skipped[:10])}); nothing was staged",
                recovery=["Stage other files; secrets files are the user's to handle"],
            )
        excludes = [":(exclude,literal)" + p for p in skipped]
        out = V.run_git(
            repo,
            ctx,
            ["-c", "core.quotePath=false", "add", "--verbose", "--", *specs, *excludes],
            "git add",
        )
        staged = [_project_path(repo, p) for p in _verbose_paths(out)]
        result: dict[str, Any] = {"added": len(staged), "paths": staged[:1000]}
        if skipped:
            result["skipped"] = skipped
            result["note"] = "files the sandbox denies were not staged"
        return result


def _verbose_paths(out: str) -> list[str]:
    found = []
    for line in out.splitlines():
        m = re.match(r"(?:add|remove) '(.*)'\Z", line)
        if m:
            found.append(m.group(1))
    return found


class GitCommit(_GitTool[GitCommitArgs]):
    name = "git_commit"
    description = (
        "Commit what is staged: {commit, branch, files}. First: no unstaged changes in the "
        "committed paths (clean tree), then the blocking [[validators]] (secrets.scan on the "
        "staged diff by default); a violation refuses the commit and lists every violation "
        "with rule, level, file, line, message. Repository hooks are skipped."
    )
    Args = GitCommitArgs
    side_effecting = True
    hooks = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit")

    def timeout(self, config: Config) -> float:
        t = config.tools.git.timeout_seconds
        if any(v.command is not None for v in config.validators):
            t += config.tools.timeouts.shell_commands_seconds
        return t

    def summary(self, args: GitCommitArgs) -> str:
        return "git commit: " + args.message.split("\n", 1)[0][:120]

    def preview(self, args: GitCommitArgs, ctx: ToolContext) -> str | None:
        repo = repo_of(ctx)
        done = repo.run(
            ["diff", "--cached", "--stat", "--no-color", "--no-ext-diff", "--no-textconv"],
            timeout=ctx.config.tools.git.timeout_seconds,
        )
        rules = [f"{v.rule} ({V.level_of(v)})" for v in _validators(ctx, V.ON_COMMIT)]
        # git drops comment lines and trailing blanks (--cleanup=strip): said, not hidden.
        strip = any(line.startswith("#") for line in args.message.split("\n"))
        about = "git drops its lines that start with #" if strip else ""
        lines = [*quoted_block("message", args.message, about), ""]
        lines += ["staged:", done.out().rstrip() or "  (nothing staged yet)", ""]
        lines.append("checks:  " + (", ".join(rules) or "none configured"))
        return "\n".join(lines) + "\n"

    def execute(self, args: GitCommitArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        staged = [
            p
            for p in V.run_git(
                repo, ctx, ["diff", "--cached", "--name-only", "-z"], "git diff --cached"
            ).split("\0")
            if p
        ]
        if not staged and not args.allow_empty:
            raise V.git_failure("git commit", "nothing to commit: nothing is staged")
        gitcfg = ctx.config.tools.git
        mode = gitcfg.clean_tree_for_commit if gitcfg.require_clean_tree_for_commit else "off"
        if mode != "off":
            done = V.run_git(repo, ctx, ["diff", "--name-only", "-z", "--no-ext-diff"], "git diff")
            unstaged = [p for p in done.split("\0") if p]
            dirty = unstaged if mode == "all" else sorted(set(unstaged) & set(staged))
            if dirty:
                raise policy_failure(
                    "git_commit needs a clean tree (sec.git.clean_tree): "
                    f"{', '.join(dirty[:10])} {'has' if len(dirty) == 1 else 'have'} unstaged "
                    "changes on top of what is staged; nothing was committed",
                    [
                        "Stage the rest with git_add so the commit holds what the files hold",
                        "Or ask the user to set the unstaged part aside",
                    ],
                    rule="sec.git.clean_tree",
                    files=dirty[:100],
                )
        subject = V.Subject(
            repo,
            ctx,
            message=args.message,
            writable=ctx.approved_preview is not None or ctx.standing_consent,
        )
        violations = V.run(_validators(ctx, V.ON_COMMIT), subject)
        if any(v.level == "blocking" for v in violations):
            raise _blocking_failure("git_commit", violations)
        hooks = hooks_for(repo, ctx, self.hooks)
        argv = [*hooks.args, "commit", *hooks.verify(), "--cleanup=strip", "-F", "-"]
        if args.signoff:
            argv.append("--signoff")
        if args.allow_empty:
            argv.append("--allow-empty")
        try:
            V.run_git(repo, ctx, argv, "git commit", stdin=args.message.encode("utf-8"))
        finally:
            hooks.close()
        head = _head(repo, ctx) or ""
        result: dict[str, Any] = {
            "commit": head,
            "short": head[:12],
            "branch": V.current_branch(repo, ctx),
            "files": len(staged),
        }
        if violations:
            result["violations"] = [v.json() for v in violations]
        return _with_hooks(result, hooks)


class GitCheckout(_GitTool[GitCheckoutArgs]):
    name = "git_checkout"
    description = (
        "Switch to a branch or commit, or create a branch (create: true): {checked_out, "
        "branch}. Refused while tracked files have uncommitted changes (commit them first). "
        "A new branch's name is checked by branch.naming.convention when configured."
    )
    Args = GitCheckoutArgs
    side_effecting = True
    hooks = ("post-checkout",)

    def risk(self, args: GitCheckoutArgs) -> RiskLevel:
        return RiskLevel.HIGH  # rewrites the work tree

    def summary(self, args: GitCheckoutArgs) -> str:
        return f"git checkout {'-b ' if args.create else ''}{args.target}"

    def execute(self, args: GitCheckoutArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        dirty = tracked_changes(repo, ctx)
        if dirty:
            raise policy_failure(
                f"git_checkout refused: tracked files have uncommitted changes "
                f"({', '.join(dirty[:10])}{' ...' if len(dirty) > 10 else ''}); switching could "
                "mix them into another branch or lose them; nothing was changed",
                [
                    "Commit the changes first: git_add the files, then git_commit",
                    "Or ask the user to stash or discard them, then check out again",
                ],
                rule="sec.git.clean_tree",
                files=dirty[:100],
            )
        violations: list[V.Violation] = []
        if args.create:
            check = repo.run(
                ["check-ref-format", "--branch", args.target],
                timeout=ctx.config.tools.git.timeout_seconds,
            )
            if not check.ok:
                raise V.git_failure(
                    "git check-ref-format",
                    check.err() or f"{args.target!r} is not a valid branch name",
                )
            subject = V.Subject(repo, ctx, branch=args.target)
            violations = V.run(_validators(ctx, V.ON_CHECKOUT), subject)
            if any(v.level == "blocking" for v in violations):
                raise _blocking_failure("git_checkout", violations)
            argv = ["checkout", "-b", args.target]
        else:
            argv = ["checkout", *([] if args.track else ["--no-guess"]), args.target, "--"]
        hooks = hooks_for(repo, ctx, self.hooks)
        try:
            V.run_git(repo, ctx, [*hooks.args, *argv], "git checkout")
        finally:
            hooks.close()
        result: dict[str, Any] = {
            "checked_out": True,
            "branch": V.current_branch(repo, ctx),
            "head": _head(repo, ctx),
        }
        if violations:
            result["violations"] = [v.json() for v in violations]
        return _with_hooks(result, hooks)


def _stopped(
    repo: Repo, ctx: ToolContext, what: str, stderr: str, key: str, cont: str
) -> dict[str, Any]:
    """A merge or rebase stopped on conflicts: the result lists them and says what next."""
    conflicts = _conflicts(repo, ctx)
    if not conflicts:
        raise V.git_failure(what, stderr)
    return {
        key: False,
        "conflicts": conflicts,
        "note": (
            "Stopped on conflicts. Edit each file to resolve its <<<<<<< ======= >>>>>>> "
            f"blocks, git_add it, then {cont}; or abort to go back"
        ),
    }


class GitMerge(_GitTool[GitMergeArgs]):
    name = "git_merge"
    description = (
        "Merge a branch into the current one: {merged, conflicts[]}. Needs a clean tree. "
        "On conflicts merged is false and conflicts lists the files; resolve, git_add, "
        "git_commit, or call with abort: true."
    )
    Args = GitMergeArgs
    side_effecting = True
    hooks = ("pre-merge-commit", "post-merge")

    def risk(self, args: GitMergeArgs) -> RiskLevel:
        return RiskLevel.HIGH

    def summary(self, args: GitMergeArgs) -> str:
        if args.abort:
            return "git merge --abort"
        return f"git merge {'--no-ff ' if args.no_ff else ''}{args.branch}"

    def execute(self, args: GitMergeArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        if args.abort:
            V.run_git(repo, ctx, ["merge", "--abort"], "git merge --abort")
            return {"aborted": True, "merged": False, "conflicts": []}
        _dirty_guard(repo, ctx, "git_merge")
        argv = ["merge", "--no-edit", "--no-stat", *(["--no-ff"] if args.no_ff else [])]
        done, hooks = _run_hooked(
            repo,
            ctx,
            self.hooks,
            lambda hooks: [*hooks.args, *argv, *hooks.verify(), str(args.branch)],
        )
        if not done.ok:
            return _stopped(
                repo, ctx, "git merge", done.err() or done.out(), "merged", "git_commit"
            )
        result = {"merged": True, "conflicts": [], "head": _head(repo, ctx)}
        return _with_hooks(result, hooks)


class GitRebase(_GitTool[GitRebaseArgs]):
    name = "git_rebase"
    description = (
        "Rebase the current branch onto another: {rebased, conflicts[]}. Needs a clean tree. "
        "On conflicts: resolve, git_add, then action: 'continue'; or action: 'abort'."
    )
    Args = GitRebaseArgs
    side_effecting = True
    hooks = ("pre-rebase", "post-rewrite")

    def risk(self, args: GitRebaseArgs) -> RiskLevel:
        return RiskLevel.HIGH

    def summary(self, args: GitRebaseArgs) -> str:
        if args.action != "start":
            return f"git rebase --{args.action}"
        return f"git rebase {'--autosquash ' if args.autosquash else ''}{args.onto}"

    def execute(self, args: GitRebaseArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        if args.action == "abort":
            V.run_git(repo, ctx, ["rebase", "--abort"], "git rebase --abort")
            return {"aborted": True, "rebased": False, "conflicts": []}
        if args.action == "continue":
            _refuse_pending_commands(repo, ctx)
            argv = ["rebase", "--continue"]
        else:
            _dirty_guard(repo, ctx, "git_rebase")
            # Autosquash needs the interactive machinery in git before 2.44;
            # the sequence editor is ':' (the environment pins it), so nothing waits.
            argv = ["rebase", *(["-i", "--autosquash"] if args.autosquash else []), str(args.onto)]
        done, hooks = _run_hooked(repo, ctx, self.hooks, lambda hooks: [*hooks.args, *argv])
        if not done.ok:
            return _stopped(
                repo,
                ctx,
                "git rebase",
                done.err() or done.out(),
                "rebased",
                "git_rebase with action 'continue'",
            )
        result = {"rebased": True, "conflicts": [], "head": _head(repo, ctx)}
        return _with_hooks(result, hooks)


# A line of a rebase's to-do list that runs a shell command: git reads the
# command name after any blanks, in full or as its one-letter form.
_TODO_EXEC = re.compile(r"^[ \t]*(?:exec|x)(?:[ \t]|$)", re.MULTILINE)


def _refuse_pending_commands(repo: Repo, ctx: ToolContext) -> None:
    """Refuse to continue a rebase whose to-do list runs commands.

    The list lies in the git directory, where the repository (or whoever
    stopped that rebase) wrote it; an ``exec`` line there would run here,
    outside the command sandbox, on a call the user saw only as
    ``git rebase --continue``.
    """
    done = repo.run(
        ["rev-parse", "--git-path", "rebase-merge/git-rebase-todo"],
        timeout=ctx.config.tools.git.timeout_seconds,
    )
    if not done.ok:
        raise V.git_failure("git rev-parse", done.err())
    path = os.path.join(repo.cwd, done.out().strip())
    try:
        with open(path, "rb") as fh:
            todo = fh.read(16 << 20).decode("utf-8", "replace")
    except FileNotFoundError:
        return  # no interactive rebase stopped here: git says what there is
    except OSError as exc:
        raise V.git_failure("git rebase --continue", f"cannot read {path}: {exc}") from None
    commands = [m.group().strip() for m in _TODO_EXEC.finditer(todo)]
    if commands:
        raise policy_failure(
            f"git_rebase refused to continue: the rebase's to-do list ({path}) holds "
            f"{len(commands)} exec line{'s' if len(commands) != 1 else ''}, shell commands that "
            "git would run outside the sandbox; nothing was run and the rebase stays where it is",
            [
                "Call git_rebase with action 'abort' to drop that rebase",
                "Or ask the user to look at the to-do list and continue it themselves",
            ],
            rule="git.rebase_exec",
        )


class _RemoteTool(_GitTool[A]):
    """Push and pull: reviewed by default; a network remote is a forced review.

    ``[permissions] network = ["git_push(origin *)"]`` in the user's own
    file lifts the forced review for the calls it matches (the words are
    the remote, then the refspec or branch, then ``--force`` for a forced
    push); an allow rule or a standing grant may then let them run.
    """

    requires_approval = True
    matches_words = True

    def risk(self, args: A) -> RiskLevel:
        return RiskLevel.HIGH

    def _urls(self, repo: Repo, ctx: ToolContext, remote: str) -> list[str]:
        """Where the call goes: the remote's fetch URL (push overrides this)."""
        return [_remote_url(repo, ctx, remote)]

    def _network_url(self, args: A, ctx: ToolContext) -> str | None:
        """The remote's URLs when reaching any of them takes the network, else None."""
        remote = str(getattr(args, "remote", "origin"))
        try:
            urls = self._urls(repo_of(ctx), ctx, remote)
        except errors.ToolFailure:
            return None  # the call will fail with git's reason; nothing reaches out
        if all(is_local_url(url) for url in urls):
            return None
        return ", ".join(urls)

    def network_access(self, args: A, ctx: ToolContext) -> bool:
        return self._network_url(args, ctx) is not None

    def review_notes(self, args: A, ctx: ToolContext) -> list[str]:
        url = self._network_url(args, ctx)
        if url is None:
            return []
        words = self.rule_words(args) or []
        if network_rule_covers(ctx.config.permissions.network, self.name, words):
            return []
        remote = str(getattr(args, "remote", "origin"))
        return [f"This call reaches the network: {self.name} to {remote} ({redact(url)})."]

    def summary_tags(self, args: A, ctx: ToolContext) -> list[str]:
        return ["network"] if self.network_access(args, ctx) else []


class GitPush(_RemoteTool[GitPushArgs]):
    name = "git_push"
    description = (
        "Push to a configured remote: {pushed, remote}. Always reviewed. Force (force: true, a "
        "'+' refspec, or a ':branch' deletion) only if the user's own config allows it, and "
        "then as --force-with-lease."
    )
    Args = GitPushArgs
    side_effecting = True
    hooks = ("pre-push",)

    def summary(self, args: GitPushArgs) -> str:
        return f"git push {'--force ' if args.forces() else ''}{args.remote} {args.refspec or ''}"

    def rule_words(self, args: GitPushArgs) -> list[str]:
        return [args.remote, args.refspec or "HEAD", *(["--force"] if args.forces() else [])]

    def _urls(self, repo: Repo, ctx: ToolContext, remote: str) -> list[str]:
        return _push_urls(repo, ctx, remote)

    def preview(self, args: GitPushArgs, ctx: ToolContext) -> str | None:
        repo = repo_of(ctx)
        urls = _push_urls(repo, ctx, args.remote)
        local = all(is_local_url(url) for url in urls)
        lines = [f"remote:  {shown_line(args.remote)}"]
        lines += [f"push to: {shown_line(redact(url))}" for url in urls]
        lines += [
            f"refspec: {shown_line(args.refspec or '(git default: the current branch)')}",
            f"force:   {'yes, --force-with-lease' if args.forces() else 'no'}",
            "network: " + ("no (a path on this machine)" if local else "yes"),
        ]
        return "\n".join(lines) + "\n"

    def execute(self, args: GitPushArgs, ctx: ToolContext) -> Any:
        gitcfg = ctx.config.tools.git
        if not gitcfg.allow_push:
            raise errors.denied_by_policy(
                "git_push is turned off ([tools.git] allow_push = false); nothing was pushed",
                DenialReason.NOT_ALLOWLISTED,
                code="E_POLICY",
            )
        if args.forces() and not gitcfg.allow_force_push:
            raise errors.denied_by_policy(
                "A force push (force, a '+' refspec or a deletion) rewrites the remote's "
                "history and needs [tools.git] allow_force_push = true in the user's own "
                "config; nothing was pushed",
                DenialReason.NOT_ALLOWLISTED,
                code="E_POLICY",
                rule="git.force_push",
            )
        repo = repo_of(ctx)
        urls = _push_urls(repo, ctx, args.remote)
        # A path among the push URLs runs its receive-pack here: name the
        # program that skips that repository's hooks (a server would only
        # refuse it, and the push fails rather than running them).
        local = any(is_local_url(url) for url in urls)
        programs = LOCAL_TRANSPORT_PROGRAMS if local else TRANSPORT_PROGRAMS
        # The repository's config must not turn a plain push into a forced or
        # mirror push: no configured push refspecs, no mirror, an explicit ref.
        hooks = hooks_for(repo, ctx, self.hooks)
        argv = [
            *hooks.args,
            "-c",
            "push.default=simple",
            "push",
            programs["push"],
            *hooks.verify(),
        ]
        if args.forces():
            argv.append("--force-with-lease")
        if args.set_upstream:
            argv.append("--set-upstream")
        spec = args.refspec
        if spec and spec.startswith("+"):
            spec = spec[1:]
        argv += [args.remote, spec or "HEAD"]
        try:
            # The remote's name goes whole into its own variable: a name
            # holding '=' would split a -c and leave the mirror setting on.
            mirror = (f"remote.{args.remote}.mirror", "false")
            V.run_git(repo, ctx, argv, "git push", config=[mirror])
        finally:
            hooks.close()
        result = {"pushed": True, "remote": args.remote, "forced": args.forces()}
        return _with_hooks(result, hooks)


class GitPull(_RemoteTool[GitPullArgs]):
    name = "git_pull"
    description = (
        "Fetch and merge (or rebase: true) from a configured remote: {pulled, conflicts[]}. "
        "Always reviewed; needs a clean tree."
    )
    Args = GitPullArgs
    side_effecting = True
    hooks = ("post-merge", "post-rewrite")

    def summary(self, args: GitPullArgs) -> str:
        return f"git pull {'--rebase ' if args.rebase else ''}{args.remote} {args.branch or ''}"

    def rule_words(self, args: GitPullArgs) -> list[str]:
        return [args.remote, *([args.branch] if args.branch else [])]

    def execute(self, args: GitPullArgs, ctx: ToolContext) -> Any:
        repo = repo_of(ctx)
        url = _remote_url(repo, ctx, args.remote)
        _dirty_guard(repo, ctx, "git_pull")
        programs = LOCAL_TRANSPORT_PROGRAMS if is_local_url(url) else TRANSPORT_PROGRAMS
        argv = [
            "pull",
            programs["pull"],
            "--no-edit",
            "--no-stat",
            "--rebase" if args.rebase else "--no-rebase",
            args.remote,
            *([args.branch] if args.branch else []),
        ]
        done, hooks = _run_hooked(repo, ctx, self.hooks, lambda hooks: [*hooks.args, *argv])
        if done.timed_out:
            t = ctx.config.tools.git.timeout_seconds
            raise errors.timed_out("git pull", t, t)
        if not done.ok:
            return _stopped(
                repo,
                ctx,
                "git pull",
                done.err() or done.out(),
                "pulled",
                "git_commit (or git_rebase with action 'continue')",
            )
        result = {"pulled": True, "conflicts": [], "head": _head(repo, ctx)}
        return _with_hooks(result, hooks)


GIT_TOOLS: list[type[Tool[Any]]] = [
    GitStatus,
    GitDiff,
    GitLog,
    GitAdd,
    GitCommit,
    GitCheckout,
    GitMerge,
    GitRebase,
    GitPush,
    GitPull,
]
