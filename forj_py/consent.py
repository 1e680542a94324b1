"""Consent: the one place that decides whether a valid call runs, is reviewed or is refused.

The planner has checked the call (schema, limits, sandbox); what is left is
the user's word, in this order, first match wins:

 0. the permission mode does not offer the tool (``read-only``)   → refused
 1. a ``deny`` rule (or the old ``[tools.approval]`` denylist / deny mode) → refused
 2. a ``[[rules]]`` rule is violated, or the call is a duplicate   → error result
 3. forced review: the sandbox is missing, or the call asks for
    network that ``[permissions] network`` does not cover          → reviewed
 4. an ``ask`` rule, or a ``requires_consent`` rule                → reviewed
 5. a standing grant covers the call                               → runs
 6. an ``allow`` rule covers the call                              → runs
 7. the mode's default                                             → runs / reviewed

Every decision carries the sentence that explains it: the plan item shows
it, the journal keeps it.  The old ``[tools.approval]`` keys are read here
too, as aliases of the new ones (see :func:`build_policy`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .config import Config, ConfigError
from .errors import ToolFailure
from .protocol import DenialReason, ErrorKind, ErrorType
from .rules import Probe, RulesEngine
from .safety.paths import Sandbox
from .safety.permissions import FILES_GROUP, PermissionRule, Subject, parse_rule, split_command
from .store.grants import Grant, GrantStore
from .tools.registry import Registry, Tool, ToolInfo

# Tools offered in read-only mode although they can change things: run_shell
# runs there only for commands the read-only classifier accepts, in the
# read-only sandbox; the plan tools keep the model's own list (no project
# file changes) and only their export, which writes a file, is refused.
READ_ONLY_EXTRAS = frozenset({"run_shell", "todo_write", "task"})
# Programs whose first argument is a subcommand worth keeping in a proposed grant.
_SUBCOMMANDS = frozenset(
    {
        "git",
        "npm",
        "npx",
        "yarn",
        "pnpm",
        "cargo",
        "go",
        "make",
        "docker",
        "podman",
        "kubectl",
        "pip",
        "pip3",
        "uv",
        "poetry",
        "bundle",
        "rake",
        "mix",
        "dotnet",
        "gradle",
        "mvn",
        "nix",
        "brew",
        "apt",
        "systemctl",
        "cmake",
        "ninja",
        "tox",
        "nox",
        "hatch",
    }
)
_GLOB = set("*?[]\\")


@dataclass
class Policy:
    """The effective consent settings, with the old keys folded in."""

    mode: str
    allow: list[PermissionRule]
    ask: list[PermissionRule]
    deny: list[PermissionRule]
    read_only_commands: bool
    prompt_side_effects: bool
    # The old deny mode: every tool not in the old allowlist is refused.
    legacy_deny_all: bool
    legacy_allowlist: frozenset[str]
    auto_allowed: bool
    timeout: float
    warnings: list[str] = field(default_factory=list)


def build_policy(config: Config, registry: Registry) -> Policy:
    """``[permissions]`` plus the old ``[tools.approval]`` keys, checked against the tools.

    The old keys map as follows (each with a warning naming the new
    spelling): ``mode = "auto"`` → mode ``auto`` with an implicit
    ``ask = ["run_shell", "run_tests"]`` (commands never start running
    unasked because of an upgrade); ``mode = "deny"`` → mode ``read-only``,
    and tools outside the allowlist refused; ``allowlist`` → ``allow``
    rules, except for command tools (nothing: it never let commands run
    unasked); ``denylist`` → ``deny`` rules; ``prompt_side_effects =
    false`` → mode ``accept-edits``; ``read_only_commands`` → the same key
    under ``[permissions]``.
    """
    perms = config.permissions
    old = config.tools.approval
    warnings: list[str] = []
    allow = [parse_rule(t, "[permissions] allow") for t in perms.allow]
    ask = [parse_rule(t, "[permissions] ask") for t in perms.ask]
    deny = [parse_rule(t, "[permissions] deny") for t in perms.deny]
    mode = perms.mode
    if old.mode == "auto":
        warnings.append(
            "[tools.approval] mode = 'auto' is read as [permissions] mode = \"auto\" with "
            'ask = ["run_shell", "run_tests"]; write the new keys instead'
        )
        if mode == "ask":
            mode = "auto"
        source = "[tools.approval] mode = 'auto'"
        # Every tool that asked in every mode before (run_shell, run_tests) still asks.
        ask += [
            parse_rule(n, source)
            for n in registry.names()
            if _info_of(registry, n).requires_approval
        ]
    elif old.mode == "deny":
        warnings.append(
            "[tools.approval] mode = 'deny' is read as [permissions] mode = \"read-only\" "
            "with every tool outside the allowlist denied; write the new keys instead"
        )
        mode = "read-only"
    if not old.prompt_side_effects and mode == "ask":
        warnings.append(
            "[tools.approval] prompt_side_effects = false is read as [permissions] mode = "
            '"accept-edits"; write that instead'
        )
        mode = "accept-edits"
    for name in old.allowlist:
        entry = registry.get(name)
        if entry is not None and entry.info.runs_commands:
            warnings.append(
                f"[tools.approval] allowlist entry {name!r} maps to nothing: it never let "
                f'commands run unasked. Write [permissions] allow = ["{name}(PATTERN)"] for '
                "the commands you mean"
            )
        else:
            allow.append(parse_rule(name, "[tools.approval] allowlist"))
            if old.mode != "deny":
                warnings.append(
                    f"[tools.approval] allowlist entry {name!r} is read as [permissions] "
                    f'allow = ["{name}"]; write that instead'
                )
    for name in old.denylist:
        deny.append(parse_rule(name, "[tools.approval] denylist"))
        warnings.append(
            f"[tools.approval] denylist entry {name!r} is read as [permissions] deny = "
            f'["{name}"]; write that instead'
        )
    if old.read_only_commands == "auto":
        warnings.append(
            "[tools.approval] read_only_commands is read as [permissions] "
            "read_only_commands; write that instead"
        )
    if config.tools.shell.network_commands:
        warnings.append(
            "[tools.shell] network_commands still works; the new spelling is [permissions] "
            'network = ["run_shell(COMMAND)"]'
        )
    allow, ask, deny = (_as_forj_tools(rules, registry, warnings) for rules in (allow, ask, deny))
    for rule in [*allow, *ask, *deny]:
        _check_rule(rule, registry, warnings)
    for text in perms.network:
        rule = parse_rule(text, "[permissions] network")
        entry = registry.get(rule.tool)
        reaches = entry is not None and entry.info.matches_words
        if not ((rule.tool in ("run_shell", "run_tests") and rule.pattern is not None) or reaches):
            raise ConfigError(
                f"[permissions] network {text!r}: write run_shell(COMMAND) or "
                "run_tests(COMMAND) with a command pattern, git_push(REMOTE REFSPEC), "
                "git_pull(REMOTE BRANCH) or curl(HOST METHOD), e.g. 'git_push(origin *)', "
                "'curl(docs.python.org GET)'"
            )
        _check_rule(rule, registry, warnings)
    return Policy(
        mode=mode,
        allow=allow,
        ask=ask,
        deny=deny,
        read_only_commands="auto" in (perms.read_only_commands, old.read_only_commands),
        prompt_side_effects=old.prompt_side_effects,
        legacy_deny_all=old.mode == "deny",
        legacy_allowlist=frozenset(old.allowlist),
        # The project cannot set auto; a stricter project mode keeps it off too.
        auto_allowed=mode == "auto",
        timeout=perms.permission_timeout_seconds,
        warnings=warnings,
    )


def _info_of(registry: Registry, name: str) -> ToolInfo:
    entry = registry.get(name)
    assert entry is not None
    return entry.info


def _as_forj_tools(
    rules: list[PermissionRule], registry: Registry, warnings: list[str]
) -> list[PermissionRule]:
    """Rules naming another name of a tool (``file_read``) rewritten to its forj tool.

    Calls by those names are judged as their forj tools, so a rule left
    under the other name would match nothing, silently.
    """
    out = []
    for rule in rules:
        entry = registry.get(rule.tool)
        alias_of = entry.info.alias_of if entry is not None else None
        if alias_of is None:
            out.append(rule)
            continue
        text = alias_of + rule.text[len(rule.tool) :]
        warnings.append(
            f"{rule.source} {rule.text!r}: {rule.tool} is the Tool Runtime SDK's name for "
            f"{alias_of}; "
            f"read as {text!r} (its arguments are {alias_of}'s); write that instead"
        )
        out.append(parse_rule(text, rule.source))
    return out


def _check_rule(rule: PermissionRule, registry: Registry, warnings: list[str]) -> None:
    entry = registry.get(rule.tool)
    if entry is None and rule.tool != FILES_GROUP:
        warnings.append(
            f"{rule.source} {rule.text!r} names no tool of this worker; it matches nothing"
        )
    try:
        rule.check(entry is not None and (entry.info.runs_commands or entry.info.matches_words))
    except ValueError as exc:
        raise ConfigError(f"{rule.source}: {exc}") from None


def available(tool: ToolInfo, mode: str) -> bool:
    """Whether the mode offers the tool to the model at all."""
    return mode != "read-only" or not tool.side_effecting or tool.name in READ_ONLY_EXTRAS


def subject_of(
    tool: Tool[Any],
    args: Any,
    sandbox: Sandbox,
    working_dir: str,
    network: bool | None = None,
) -> Subject:
    """What permission rules see of a call: its command, its words, or its paths (links resolved).

    ``network`` is the tool's own answer (:meth:`Tool.network_access`);
    without it, the call's ``allow_network`` argument.
    """
    root = sandbox.project_root
    resolved: list[str] = []
    given: list[str] = []
    command = tool.command(args) if tool.runs_commands else None
    words = tool.rule_words(args) if tool.matches_words else None
    if words is not None:
        return Subject(
            tool=tool.name,
            words=tuple(words),
            network=bool(getattr(args, "allow_network", False)) if network is None else network,
        )
    if command is None:
        for path in tool.paths(args):
            sp = sandbox.resolve(path, working_dir, for_write=tool.mutates(args))
            resolved.append(_relative(sp.canonical, root))
            given.append(_relative(os.path.normpath(os.path.join(working_dir, path)), root))
    env = getattr(args, "env", None) if command is not None else None
    return Subject(
        tool=tool.name,
        # An outside MCP server's tool (mcp__SERVER__TOOL) does what its server
        # does, not a file edit forj can see: the "files" rules never cover it.
        changes_files=tool.side_effecting
        and not tool.runs_commands
        and not tool.name.startswith("mcp__"),
        command=command,
        env=tuple(sorted(env)) if isinstance(env, dict) else (),
        paths=tuple(resolved),
        given_paths=tuple(given),
        network=bool(getattr(args, "allow_network", False)) if network is None else network,
        globs=command is None and bool(tool.path_globs(args)),
    )


def _relative(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)
    return "." if rel == os.curdir else rel.replace(os.sep, "/")


@dataclass
class Facts:
    """One valid call, as the consent stage needs it."""

    call_id: str
    tool: Tool[Any]
    args: Any
    raw_args: dict[str, Any]
    subject: Subject
    mode: str
    notes: list[str]
    session: str
    probe: Probe | None
    # The connection the call came over: its session and timed grants only.
    owner: str = ""


@dataclass
class Decision:
    outcome: str  # execute | confirm | refuse
    reason: str
    step: (
        str  # mode | deny | rule | forced-review | ask | requires-consent | grant | allow | default
    )
    failure: ToolFailure | None = None
    grant: Grant | None = None
    # Runs without review on the user's word given in advance (not because it only reads).
    standing: bool = False


class Consent:
    def __init__(
        self,
        policy: Policy,
        engine: RulesEngine,
        grants: GrantStore,
        registry: Registry,
        clock: Callable[[], float],
    ) -> None:
        self.policy = policy
        self.engine = engine
        self.grants = grants
        self.registry = registry
        self.clock = clock

    # --- modes --------------------------------------------------------------------

    def mode_for(self, requested: str | None) -> tuple[str, str | None]:
        """The mode a request runs in, and a note when the request was not honoured."""
        if requested is None:
            return self.policy.mode, None
        if requested == "auto" and not self.policy.auto_allowed:
            fallback = "accept-edits"
            return fallback, (
                f'The auto mode needs [permissions] mode = "auto" in your own config file; '
                f"using {fallback!r}"
            )
        return requested, None

    def available_names(self, mode: str) -> set[str]:
        return {n for n in self.registry.names() if available(self._info(n), mode)}

    def definitions(self, mode: str) -> list[dict[str, Any]]:
        return [d for d in self.registry.definitions() if available(self._info(d["name"]), mode)]

    def _info(self, name: str) -> ToolInfo:
        return _info_of(self.registry, name)

    # --- the decision -------------------------------------------------------------

    def decide(self, f: Facts) -> Decision:
        p = self.policy
        tool, subject = f.tool, f.subject
        # The old deny mode first: its refusal keeps its own reason.
        if p.legacy_deny_all and tool.name not in p.legacy_allowlist:
            return _refuse(
                "deny",
                "[tools.approval] mode = 'deny' and the tool is not in the allowlist",
                errors.denied_by_policy(
                    f"Approval mode is 'deny' and {tool.name!r} is not in the allowlist",
                    DenialReason.NOT_ALLOWLISTED,
                    tool=tool.name,
                ),
            )
        # 0. the mode
        if not available(ToolInfo.of(tool), f.mode):
            return _refuse(
                "mode",
                f"{tool.name} is not available in read-only mode",
                _not_in_mode(tool.name),
            )
        if f.mode == "read-only" and tool.side_effecting and not _read_only_call(tool, f.args):
            return _refuse(
                "mode",
                f"read-only mode runs only read-only {tool.name} calls",
                errors.denied_by_policy(
                    f"The chat is in read-only mode and this {tool.name} call is not read-only "
                    f"({_why_not_read_only(tool, f.args)}); nothing was run",
                    DenialReason.NOT_IN_MODE,
                    tool=tool.name,
                ),
            )
        # 1. deny
        for rule in p.deny:
            if rule.matches(subject, strict=False):
                return _refuse(
                    "deny",
                    f"denied by {rule.source} {rule.text!r}",
                    errors.denied_by_policy(
                        f"The user's configuration denies this call ({rule.source} {rule.text!r})",
                        DenialReason.DENIED_BY_RULE,
                        tool=tool.name,
                        rule=rule.text,
                    ),
                )
        # 2. the user's [[rules]] and deduplication
        if f.probe is not None:
            failure = self.engine.check_planned(f.probe, tool.name, f.raw_args, f.call_id)
            if failure is not None:
                return _refuse("rule", "refused by a rule: " + failure.error.message, failure)
        # 3. forced review
        if f.notes:
            return Decision("confirm", "always reviewed: " + f.notes[0], "forced-review")
        # 4. ask, requires_consent
        for rule in p.ask:
            if rule.matches(subject, strict=False):
                return Decision("confirm", f"reviewed: {rule.source} {rule.text!r}", "ask")
        if self.engine.requires_consent(tool.name) is not None:
            return Decision(
                "confirm", f"reviewed: a requires_consent rule for {tool.name}", "requires-consent"
            )
        # 5. standing grants
        grant = self.grants.find(subject, f.owner, f.session)
        if grant is not None:
            return Decision(
                "execute",
                f"runs: standing grant {grant.id} {grant.rule!r} ({_scope(grant)})",
                "grant",
                grant=grant,
                standing=True,
            )
        # 6. allow
        for rule in p.allow:
            if rule.matches(subject, strict=True):
                return Decision(
                    "execute", f"runs: {rule.source} {rule.text!r}", "allow", standing=True
                )
        # 7. the mode's default
        return self._default(f)

    def _default(self, f: Facts) -> Decision:
        tool, mode = f.tool, f.mode
        if mode == "auto":
            return Decision("execute", "runs: the auto mode", "default", standing=True)
        if tool.requires_approval:
            if self.policy.read_only_commands and _read_only_call(tool, f.args):
                return Decision(
                    "execute",
                    f'runs: a read-only {tool.name} call (read_only_commands = "auto")',
                    "default",
                )
            if mode == "read-only":
                return Decision("execute", f"runs: a read-only {tool.name} call", "default")
            return Decision("confirm", f"reviewed: {tool.name} always asks in {mode!r}", "default")
        if not tool.mutates(f.args):
            return Decision("execute", "runs: the call changes nothing", "default")
        if _removes_files(tool, f.args):
            return Decision(
                "confirm",
                f"reviewed: {tool.name} deletes or replaces files, which {mode!r} always asks for",
                "default",
            )
        if mode == "accept-edits" and f.subject.changes_files and _inside(f.subject):
            return Decision(
                "execute", "runs: the accept-edits mode (an edit inside the project)", "default"
            )
        if not self.policy.prompt_side_effects:
            return Decision("execute", "runs: prompt_side_effects = false", "default")
        return Decision("confirm", f"reviewed: the {mode!r} mode asks for changes", "default")

    # --- grants -------------------------------------------------------------------

    def propose(self, subject: Subject) -> str | None:
        """The narrowest sensible rule a grant for this call could use, or None."""
        text = _proposal(subject)
        if text is None:
            return None
        try:
            if not parse_rule(text, "proposal").matches(subject, strict=True):
                return None
        except ValueError:
            return None
        return text


def _proposal(subject: Subject) -> str | None:
    if subject.words is not None:
        # The first word (a remote, a host) and anything after it.
        first = subject.words[0] if subject.words else ""
        if not first or any(c in _GLOB for c in first):
            return None
        return f"{subject.tool}({shlex.quote(first)} *)"
    if subject.command is not None:
        command = subject.command
        if isinstance(command, str):
            parts = split_command(command)
            if parts is None or len(parts) != 1:
                return None  # shell syntax or a compound: approve it once
            words = parts[0]
        else:
            words = command
        if not words or any(c in _GLOB for c in words[0]):
            return None
        keep = [words[0]]
        program = os.path.basename(words[0])
        if len(words) > 2 and program.startswith("python") and words[1] == "-m":
            keep += words[1:3]
        elif len(words) > 1 and program in _SUBCOMMANDS and not words[1].startswith("-"):
            keep.append(words[1])
        if any(c in _GLOB for w in keep for c in w):
            return None
        return f"{subject.tool}({' '.join(shlex.quote(w) for w in keep)} *)"
    if not subject.paths:
        return subject.tool
    if any(c in _GLOB for p in subject.paths for c in p) or any(
        p.startswith("..") for p in subject.paths
    ):
        return None
    dirs = {os.path.dirname(p) for p in subject.paths}
    common = os.path.commonpath(sorted(dirs)) if all(dirs) else ""
    if common:
        return f"{subject.tool}({common}/**)"
    if len(subject.paths) == 1:
        return f"{subject.tool}(/{subject.paths[0]})"
    return None


def _refuse(step: str, reason: str, failure: ToolFailure) -> Decision:
    return Decision("refuse", reason, step, failure=failure)


def _not_in_mode(name: str) -> ToolFailure:
    return ToolFailure(
        ErrorType.PERMISSION,
        f"{name} is not available in read-only mode; nothing was run",
        kind=ErrorKind.SANDBOX_VIOLATION,
        reason=DenialReason.NOT_IN_MODE.value,
        tool=name,
        recovery=[
            "Use the tools you were given: this chat only reads",
            "Describe the change you would make, or ask the user to switch the mode",
        ],
    )


def _read_only_call(tool: Tool[Any], args: Any) -> bool:
    check = getattr(tool, "read_only_call", None)
    if callable(check):
        return bool(check(args))
    # A tool without a classifier: read-only exactly when the call changes nothing.
    return not tool.mutates(args)


def _removes_files(tool: Tool[Any], args: Any) -> bool:
    """Deletes and overwriting moves: outside what accept-edits (and a quiet default) covers."""
    check = getattr(tool, "removes_files", None)
    return bool(check(args)) if callable(check) else False


def _why_not_read_only(tool: Tool[Any], args: Any) -> str:
    verdict = getattr(tool, "verdict", None)
    if callable(verdict):
        return str(verdict(args).reason)
    return "it changes things"


def _inside(subject: Subject) -> bool:
    return bool(subject.paths) and not any(
        p == ".." or p.startswith("../") or os.path.isabs(p) for p in subject.paths
    )


def _scope(grant: Grant) -> str:
    if grant.scope == "minutes" and grant.expires_at is not None:
        return "until a set time"
    return {"session": "this chat", "project": "this project"}.get(grant.scope, grant.scope)
