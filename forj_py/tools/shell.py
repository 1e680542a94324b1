"""``run_shell``: run a command in the project.

``cmd`` is an argv array run as it is (no shell), or a string run through
``/bin/sh -c``.  The command runs in its own session and process group,
inside the project (``cwd``), with stdin closed unless ``stdin`` is given,
with the environment cleaned of secrets (``_shell.clean_environment``),
its output streamed to Emacs as it comes, and a time limit that kills the
whole group.  The result is ``{exit_code, stdout, stderr, duration_ms}``;
a non-zero exit is a ``process-error`` whose details carry the same four
fields.

Every call asks for approval (risk high) unless it is a read-only command
(``_readonly``: risk low) and the user's own configuration sets
``[tools.approval] read_only_commands = "auto"``.  The review
shows the exact argv, the working directory and the environment additions.
A call that runs without review is checked again before it starts, with
the sandbox this time: its program must resolve outside the project and
every argument naming an existing file must pass the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from .. import errors
from ..output import block_shape, quoted_block, quoted_lines, shown_line, visible_controls
from ..protocol import DenialReason, RiskLevel
from ..safety.paths import SafePath
from ..safety.permissions import command_matches, parse_rule
from ..system.process import Outcome
from . import _shell
from ._readonly import Verdict, classify_cmd, split_plain_shell
from .registry import Tool, ToolContext

SHELL = "/bin/sh"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Argv = Annotated[list[str], Field(min_length=1, max_length=10_000)]
Script = Annotated[str, Field(min_length=1)]
# One schema with both types rather than anyOf: a validator then says what is
# wrong with the value given ("[] should be non-empty"), not that it is not
# the other type.
CMD_SCHEMA = {
    "type": ["array", "string"],
    "items": {"type": "string"},
    "minItems": 1,
    "maxItems": 10_000,
    "minLength": 1,
}


class RunShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: Annotated[Argv | Script, WithJsonSchema(CMD_SCHEMA)] = Field(
        description="The command: an argv array run as it is (['git', 'status']), or a "
        "string run through /bin/sh -c (for pipes, redirections, globs)"
    )
    cwd: str | None = Field(
        default=None,
        description="Working directory, relative to the project root (or meta.cwd); "
        "must be inside the project. Default: the project root",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="Seconds before the command's process group is killed; at most the "
        "configured shell limit",
    )
    env: dict[str, str] | None = Field(
        default=None, description="Environment variables to add or override"
    )
    stdin: str | None = Field(
        default=None, description="Text written to the command's stdin; stdin is closed if absent"
    )
    allow_network: bool = Field(
        default=False,
        description="Give the command network access (off by default: only loopback). "
        "Always shown to the user for review",
    )

    @field_validator("cmd")
    @classmethod
    def _argv(cls, cmd: list[str] | str) -> list[str] | str:
        parts = [cmd] if isinstance(cmd, str) else cmd
        if isinstance(cmd, list) and not cmd[0]:
            raise ValueError("the program (cmd[0]) is empty")
        if any("\0" in p for p in parts):
            raise ValueError("cmd holds a NUL character, which no command line can carry")
        if isinstance(cmd, str) and not cmd.strip():
            raise ValueError("cmd is blank")
        return cmd

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str] | None) -> dict[str, str] | None:
        for name, value in (env or {}).items():
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"environment variable name {name!r} must be letters, digits and '_', "
                    "not starting with a digit"
                )
            if "\0" in value:
                raise ValueError(f"the value of {name} holds a NUL character")
        return env

    @field_validator("stdin")
    @classmethod
    def _stdin(cls, text: str | None) -> str | None:
        if text is not None and "\0" in text:
            raise ValueError("stdin holds a NUL character; send text")
        return text

    def argv(self) -> list[str]:
        return [SHELL, "-c", self.cmd] if isinstance(self.cmd, str) else list(self.cmd)


class RunShell(Tool[RunShellArgs]):
    name = "run_shell"
    description = (
        "Run a command in the project and return {exit_code, stdout, stderr, duration_ms}. "
        "cmd is an argv array (no shell) or a string run through sh -c. Runs in cwd (inside "
        "the project), stdin closed unless given, secrets removed from the environment, "
        "killed with its whole process group at the timeout. It runs in a sandbox: the "
        "project (read-write), system directories (read-only), an empty HOME and /tmp, "
        "secret files masked, no network unless allow_network is true. A non-zero exit is a "
        "process-error whose details carry the same fields. Long output keeps its head and "
        "tail. Usually needs the user's approval."
    )
    Args = RunShellArgs
    side_effecting = True
    requires_approval = True
    timeout_kind = "shell"
    runs_commands = True

    def command(self, args: RunShellArgs) -> list[str] | str:
        return args.cmd

    def verdict(self, args: RunShellArgs) -> Verdict:
        if args.env:
            return Verdict(False, "it sets environment variables")
        return classify_cmd(args.cmd)

    def read_only_call(self, args: RunShellArgs) -> bool:
        """For the approval policy (``read_only_commands = "auto"``)."""
        return self.verdict(args).read_only

    def mutates(self, args: RunShellArgs) -> bool:
        return not self.read_only_call(args)

    def risk(self, args: RunShellArgs) -> RiskLevel:
        return RiskLevel.LOW if self.read_only_call(args) else RiskLevel.HIGH

    def summary(self, args: RunShellArgs) -> str:
        shown = args.cmd if isinstance(args.cmd, str) else shlex.join(args.cmd)
        text = f"Run {shown}"
        if args.cwd not in (None, "", "."):
            text += f" (in {args.cwd})"
        if args.env:
            text += " with " + " ".join(f"{k}={shlex.quote(v)}" for k, v in args.env.items())
        return text

    def paths(self, args: RunShellArgs) -> list[str]:
        return [args.cwd] if args.cwd else []

    def review_notes(self, args: RunShellArgs, ctx: ToolContext) -> list[str]:
        return command_notes(ctx, args.allow_network, _command_text(args.cmd), bool(args.env))

    def summary_tags(self, args: RunShellArgs, ctx: ToolContext) -> list[str]:
        return command_tags(ctx, args.allow_network)

    def preview(self, args: RunShellArgs, ctx: ToolContext) -> str | None:
        cwd = _shell.resolve_cwd(ctx, args.cwd)
        return self._describe(args, ctx, cwd)

    def _describe(self, args: RunShellArgs, ctx: ToolContext, cwd: SafePath) -> str:
        argv = args.argv()
        env = _shell.clean_environment(_shell.denylist(ctx), extra=args.env)
        if "/" in argv[0]:
            # A path: it may be written by an earlier call of this batch, so
            # the review names it as given rather than what exists now.
            program = f"{argv[0]} (a path, relative to cwd)"
        else:
            program = _shell.which(argv[0], env.env, cwd.canonical) or "(not found on PATH)"
        verdict = self.verdict(args)
        lines = [*show_command(args.cmd), ""]
        lines += [
            "argv:    " + json.dumps(argv, ensure_ascii=False),
            f"program: {shown_line(program)}",
            f"cwd:     {shown_line(cwd.display)}  ({shown_line(cwd.canonical)})",
        ]
        if args.env:
            lines.append(
                "env:     (added to the cleaned environment; no allow rule, grant, network "
                "rule or read-only check covers a call that sets any)"
            )
            lines += [
                "  " + shown_line(f"{name}={json.dumps(value, ensure_ascii=False)}")
                for name, value in args.env.items()
            ]
        else:
            lines.append("env:     no additions")
        if env.removed:
            lines.append("removed: " + " ".join(env.removed))
        if args.stdin is None:
            lines.append("stdin:   closed")
        else:
            # What a program reads on stdin can be what runs (sh, python3 -).
            size = len(args.stdin.encode("utf-8"))
            lines.append(f"stdin:   {size} bytes of text, below")
            lines += quoted_block("stdin", args.stdin)
        lim = _shell.limits(ctx, args.timeout)
        lines.append(f"timeout: {lim.timeout:g} s, then the process group is killed")
        lines.append("sandbox: " + describe_confinement(ctx, args.allow_network))
        # The reason may quote the command: free text like the rest.
        reason = shown_line(verdict.reason)
        lines.append(
            "risk:    low, read-only (" + reason + ")"
            if verdict.read_only
            else "risk:    high (not read-only: " + reason + ")"
        )
        return "\n".join(lines) + "\n"

    def execute(self, args: RunShellArgs, ctx: ToolContext) -> Any:
        cwd = _shell.resolve_cwd(ctx, args.cwd)
        argv = args.argv()
        if ctx.approved_preview is not None:
            if visible_controls(self._describe(args, ctx, cwd)) != ctx.approved_preview:
                raise errors.bad_args(
                    "run_shell: what would run now differs from what was approved (the "
                    "working directory, the program found on PATH or the environment "
                    "changed); nothing was run",
                    recovery=["Make the call again so the user can review it as it is now"],
                )
        elif not ctx.standing_consent:
            argv = self._check_unreviewed(args, ctx, cwd.canonical)
        # A command that runs unasked because it only reads gets the project
        # read-only too; one the user allowed in advance does not.
        writable = (ctx.approved_preview is not None or ctx.standing_consent) and not (
            ctx.read_only_mode
        )
        env = _shell.clean_environment(_shell.denylist(ctx), extra=args.env)
        lim = _shell.limits(ctx, args.timeout)
        stdin = args.stdin.encode("utf-8") if args.stdin is not None else None
        outcome = _shell.run(
            ctx,
            self.name,
            argv,
            cwd.canonical,
            env,
            stdin=stdin,
            lim=lim,
            writable=writable,
            network=args.allow_network,
        )
        status = _shell.exit_status(outcome.returncode)
        result: dict[str, Any] = {
            **status,
            "stdout": "",
            "stderr": "",
            "duration_ms": round(outcome.duration * 1000),
            "sandbox": _shell.confinement(ctx, writable),
            "network": args.allow_network,
        }
        notes = _notes(outcome)
        if notes:
            result["note"] = notes

        def failure(fields: dict[str, Any]) -> errors.ToolFailure | None:
            if outcome.timed_out:
                return errors.command_timed_out(self.name, lim.timeout, **fields)
            if outcome.returncode != 0:
                return errors.process_error(
                    _failure_message(outcome.returncode, status),
                    recovery=_failure_recovery(outcome.returncode, isinstance(args.cmd, str)),
                    **fields,
                )
            return None

        # What the result weighs without the output, the fields a cut adds included.
        reserve = {"truncated": True, "omitted_bytes": {"stdout": 10**12, "stderr": 10**12}}
        reserve.update({"stdout_encoding": "base64", "stderr_encoding": "base64"})
        shape = failure({**result, **reserve})
        skeleton = shape.error.model_dump(mode="json") if shape else {**result, **reserve}
        budget = _shell.budget_for(ctx, self.name, skeleton)
        rendered = _shell.render_streams(
            {"stdout": outcome.stdout, "stderr": outcome.stderr}, env.secrets, budget
        )
        result.update(rendered.fields)
        if rendered.omitted:
            result["truncated"] = True
            result["omitted_bytes"] = rendered.omitted
        fail = failure(result)
        if fail is not None:
            raise fail
        return result

    def _check_unreviewed(self, args: RunShellArgs, ctx: ToolContext, cwd: str) -> list[str]:
        """A call that runs without review must be read-only with the sandbox's word too.

        Returns the argv to run: a plain string command runs as the argv it
        splits into (the same thing, without a shell in between), and ``rg``
        gets the sandbox's denied patterns as exclusions.
        """
        verdict = self.verdict(args)
        if args.allow_network:
            raise errors.denied_by_policy(
                "run_shell ran without review but asks for network", DenialReason.NOT_ALLOWLISTED
            )
        if not verdict.read_only:  # the policy only skips review for read-only calls
            raise errors.denied_by_policy(
                f"run_shell ran without review but is not read-only ({verdict.reason})",
                DenialReason.NOT_ALLOWLISTED,
            )
        argv = split_plain_shell(args.cmd) if isinstance(args.cmd, str) else list(args.cmd)
        assert argv is not None
        env = _shell.clean_environment(_shell.denylist(ctx))
        program = _shell.which(argv[0], env.env, cwd)
        if program is None:
            raise _shell.start_failure(self.name, argv, FileNotFoundError(), env)
        inside = [ctx.sandbox.project_root, *ctx.sandbox.allowed_roots]
        if any(program == r or program.startswith(r.rstrip(os.sep) + os.sep) for r in inside):
            raise _unreviewed_refusal(
                f"{argv[0]} resolves to {program}, inside the project: a program the project "
                "ships is not trusted to only read"
            )
        for token in verdict.paths:
            if os.path.lexists(os.path.join(cwd, token)):
                try:
                    ctx.sandbox.resolve(token, cwd)
                except errors.ToolFailure as failure:
                    raise _unreviewed_refusal(
                        f"argument {token!r}: {failure.error.message}"
                    ) from None
            if argv[0] in ("diff", "cmp") and os.path.isdir(os.path.join(cwd, token)):
                raise _unreviewed_refusal(
                    f"{argv[0]} on the directory {token!r} reads every file in it"
                )
        if argv[0] == "git":
            nested = _nested_repository(cwd, ctx.sandbox.project_root)
            if nested is not None:
                raise _unreviewed_refusal(
                    f"{nested} holds a repository of its own, whose configuration could make "
                    "git run programs (hooks, fsmonitor, filters)"
                )
            # The project's own repository: still take no program from its
            # config, and never a bare repository found by walking up.
            argv = ["git", *SAFE_GIT_CONFIG, *_no_external_programs(argv[1:])]
        if argv[0] == "rg":
            exclusions = [f"--iglob=!{p}" for p in ctx.sandbox.denied_patterns]
            argv = [argv[0], *exclusions, *argv[1:]]
        return argv


# For git commands that run unasked: nothing of the repository's own
# configuration may start a program.
SAFE_GIT_CONFIG = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "core.pager=cat",
    "-c",
    "diff.external=",
    "-c",
    "log.showSignature=false",
    "-c",
    "gpg.program=false",
    "-c",
    "gpg.ssh.program=false",
    "-c",
    "gpg.x509.program=false",
    "--no-pager",
)
# Subcommands that can run an external diff or a textconv filter.
_DIFF_SUBCOMMANDS = frozenset({"diff", "log", "show", "whatchanged", "diff-tree", "diff-index"})


def _no_external_programs(rest: list[str]) -> list[str]:
    if rest and rest[0] in _DIFF_SUBCOMMANDS:
        return [rest[0], "--no-ext-diff", "--no-textconv", *rest[1:]]
    return rest


def _command_text(cmd: list[str] | str) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def show_command(cmd: list[str] | str) -> list[str]:
    """The command as the review shows it: nothing hidden by layout.

    A one-line string command is ``$ command``.  A script (a string with a
    newline) is one quoted block: every line, blank ones included, behind
    the line mark, so no line of it can pass for the review's own text.
    An argv list is shown joined as a shell would read it, except that an
    element holding a newline stands as ``<<argN`` and follows as a block
    of its own: a script passed as ``["sh", "-c", script]`` or
    ``["python3", "-c", code]`` reads like the string form.  Every text goes
    through the review's one set of rules (``output.shown_line``).
    """
    if isinstance(cmd, str):
        if "\n" not in cmd:
            return ["$ " + shown_line(cmd)]
        lines = quoted_lines(cmd)
        return [f"$ sh -c <<script ({block_shape(cmd)})", *lines, "script"]
    words: list[str] = []
    blocks: list[str] = []
    for i, arg in enumerate(cmd):
        if "\n" in arg:
            words.append(f"<<arg{i}")
            blocks += [f"arg{i} ({block_shape(arg)}):", *quoted_lines(arg), f"end of arg{i}"]
        else:
            words.append(shlex.quote(arg))
    return ["$ " + shown_line(" ".join(words)), *blocks]


def describe_confinement(ctx: ToolContext, network: bool) -> str:
    jail = ctx.commands
    if jail is None or not jail.sandboxed:
        reason = jail.availability.reason if jail is not None else "no sandbox in this context"
        return f"none: runs unsandboxed ({reason})"
    net = "network ON" if network else "no network"
    return f"bubblewrap: project read-write, secrets masked, {net}"


def command_notes(ctx: ToolContext, network: bool, text: str, env: bool = False) -> list[str]:
    """Why a command call must be reviewed: it asks for network, or runs unsandboxed.

    ``env``: the call sets environment variables of its own, which no
    network rule covers (they can change what the matched program does).
    """
    notes = []
    if network and (env or not _network_allowed(ctx, text)):
        notes.append("This command asks for network access (allow_network).")
    jail = ctx.commands
    if jail is not None and not jail.sandboxed and not jail.availability.silenced:
        notes.append(f"This command runs unsandboxed: {jail.availability.reason}.")
    return notes


def command_tags(ctx: ToolContext, network: bool) -> list[str]:
    """What a command's summary says first: it gets network, or it runs unsandboxed."""
    tags = ["network"] if network else []
    jail = ctx.commands
    if jail is not None and not jail.sandboxed:
        tags.append("runs unsandboxed")
    return tags


def _network_allowed(ctx: ToolContext, text: str) -> bool:
    """Whether the user's own config lets this command have network without review.

    ``[permissions] network`` rules (``run_shell(npm ci)``) match it like
    allow rules; the older ``[tools.shell] network_commands`` globs match
    its text.
    """
    import fnmatch

    for rule_text in ctx.config.permissions.network:
        try:
            rule = parse_rule(rule_text, "[permissions] network")
            if rule.pattern is None or rule.tool not in ("run_shell", "run_tests"):
                continue
            if command_matches(rule.words(), text, strict=True):
                return True
        except ValueError:
            continue
    return any(
        fnmatch.fnmatchcase(text, pattern) for pattern in ctx.config.tools.shell.network_commands
    ) and _plain_words(text)


_PLAIN = re.compile(r"[^`$<>()&|;\n\\{}*?\[\]!'\"]*")


def _plain_words(text: str) -> bool:
    """No shell syntax that could make a matching command do something else."""
    return _PLAIN.fullmatch(text) is not None


def _nested_repository(cwd: str, root: str) -> str | None:
    """A directory from ``cwd`` up to (not including) ``root`` that has a ``.git``."""
    here = os.path.realpath(cwd)
    root = os.path.realpath(root)
    while here != root and here.startswith(root.rstrip(os.sep) + os.sep):
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        here = os.path.dirname(here)
    return None


def _unreviewed_refusal(reason: str) -> errors.ToolFailure:
    return errors.denied_by_policy(
        f"run_shell would run this read-only command without review, but {reason}; nothing was run",
        DenialReason.DENIED_PATTERN_MATCHED,
    )


def _notes(outcome: Outcome) -> str:
    notes = []
    if outcome.leftovers_stopped:
        notes.append("the command left processes running in its process group; they were stopped")
    if outcome.pipes_abandoned:
        notes.append(
            "a process outside the group kept the output pipes open; the worker stopped "
            "reading them"
        )
    return "; ".join(notes)


def _failure_message(returncode: int, status: dict[str, Any]) -> str:
    if returncode < 0:
        return f"The command was killed by {status.get('signal')}"
    return f"The command exited with code {returncode}"


def _failure_recovery(returncode: int, through_shell: bool) -> list[str]:
    if returncode == 127 and through_shell:
        return [
            "The shell could not find a program (exit 127): check its name and PATH",
            "Read stderr for the name it could not find",
        ]
    if returncode == 126 and through_shell:
        return ["The shell found the program but could not run it (exit 126): is it executable?"]
    return [
        "Read stderr and stdout in the details for the cause",
        "Fix the cause and run the command again; do not repeat it unchanged",
    ]
