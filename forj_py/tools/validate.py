"""``validate``: run the rule pack (``[[validators]]``) on request.

The same rules ``git_commit`` runs before committing, so a model can fix
what they would refuse first, over the staged changes, a commit message the model is about to
use, or a branch name: ``{violations: [{rule, level, file, line,
message}], checked, passed}``.  ``passed`` is false when a blocking
violation was found.  The ``*.must.pass`` commands come from the user's
own configuration and run in the command sandbox; unreviewed, the
project is read-only to them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import errors
from ..config import COMMAND_RULES, Config, ValidatorConfig, ValidatorRule
from . import _validators as V
from .git import repo_of
from .registry import Tool, ToolContext

RuleId = ValidatorRule


class ValidateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule_id: RuleId | None = Field(
        default=None, description="Run only this rule; default: every configured rule"
    )
    enforcement: Literal["blocking", "warning", "suggestion"] | None = Field(
        default=None, description="Run only the rules at this level"
    )
    glob: str | None = Field(
        default=None, description="Only files matching this gitignore-style pattern ('src/**')"
    )
    message: str | None = Field(
        default=None, description="A commit message to check (commit.message.conventional)"
    )
    branch: str | None = Field(
        default=None, description="A branch name to check; default: the current branch"
    )

    @field_validator("glob", "message", "branch")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise ValueError("holds a NUL character")
        return value


class Validate(Tool[ValidateArgs]):
    name = "validate"
    description = (
        "Run the project's validators ([[validators]]: secrets.scan, code.todo.blockers, "
        "build/lint/fmt.must.pass, test.required.changed, commit.message.conventional, "
        "branch.naming.convention, sec.git.clean_tree, sec.paths.sandbox) over the staged "
        "changes: {violations: [{rule, level, file, line, message}], checked, passed}. "
        "git_commit runs the same checks and refuses on blocking ones."
    )
    Args = ValidateArgs

    def timeout(self, config: Config) -> float:
        t = config.tools.git.timeout_seconds
        if any(v.command is not None for v in config.validators):
            t += config.tools.timeouts.shell_commands_seconds
        return t

    def summary(self, args: ValidateArgs) -> str:
        return "validate " + (args.rule_id or "every configured rule")

    def _entries(self, args: ValidateArgs, ctx: ToolContext) -> list[ValidatorConfig]:
        entries = list(ctx.config.validators)
        if args.rule_id is not None:
            entries = [v for v in entries if v.rule == args.rule_id]
            if not entries:
                if args.rule_id in COMMAND_RULES:
                    raise errors.bad_args(
                        f"{args.rule_id} is not configured: it runs a command, which only the "
                        "user's own config can give it",
                        recovery=[
                            "Ask the user to add it to their config, e.g. [[validators]] "
                            f'rule = "{args.rule_id}", command = ["make", "check"]'
                        ],
                    )
                entries = [ValidatorConfig(rule=args.rule_id)]
        if args.enforcement is not None:
            entries = [v for v in entries if V.level_of(v) == args.enforcement]
        return entries

    def execute(self, args: ValidateArgs, ctx: ToolContext) -> Any:
        entries = self._entries(args, ctx)
        repo = repo_of(ctx)
        subject = V.Subject(
            repo,
            ctx,
            message=args.message,
            branch=args.branch,
            glob=args.glob,
            writable=ctx.approved_preview is not None or ctx.standing_consent,
        )
        violations = V.run(entries, subject)
        return {
            "violations": [v.json() for v in violations],
            "checked": list(dict.fromkeys(v.rule for v in entries)),
            "passed": not any(v.level == "blocking" for v in violations),
        }
