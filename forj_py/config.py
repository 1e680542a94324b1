"""Configuration: the user's file and the project's file, validated into one model.

Two TOML files feed the worker:

- the user's file (``$FORJ_CONFIG``, else ``$XDG_CONFIG_HOME/forj/config.toml``,
  else ``~/.config/forj/config.toml``), which is the user's own word;
- the project's ``.forj/config.toml``, which arrives with whatever repository
  the user cloned and so is not trusted to loosen anything.

A project file may *tighten* every safety setting but loosen none of them
unless the user lists that project under ``[trust] projects``.  A loosening
is dropped and reported as a warning (``hello`` carries it to Emacs), so a
cloned repository cannot switch off the user's safety.  Settings that are
not about safety (timeouts, size limits) the project may set freely.

The editor's options that mirror TOML keys (Emacs's ``defcustom``s, sent
with ``--settings``) count as the user's file and take precedence over
its keys; for the tools mode the stricter of the two wins.

Bad keys and values are errors that name the file, the key and what is
allowed; the worker refuses to start on them rather than guess.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .patterns import PatternTooComplex, gitignore_regexes
from .protocol import PermissionMode, ToolsMode

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

PROJECT_CONFIG = Path(".forj") / "config.toml"
MAX_CONFIG_BYTES = 1 << 20


class ConfigError(Exception):
    """A configuration file that cannot be used; the message says why and where."""


class _Section(BaseModel):
    # strict: TOML already has real booleans and numbers; "yes" is not true.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


class SandboxConfig(_Section):
    allowed_roots: list[str] = Field(default_factory=lambda: ["."], min_length=1)
    denied_patterns: list[str] = Field(default_factory=list)
    allow_absolute: bool = False
    include_default_denies: bool = True

    @field_validator("denied_patterns")
    @classmethod
    def _no_negation(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if pattern.lstrip().startswith("!"):
                raise ValueError(
                    f"{pattern!r}: a pattern cannot be negated with '!' (lists are merged "
                    "across files and may only add denials); to allow a file the defaults "
                    "deny, set include_default_denies = false and list the patterns you want"
                )
            _check_pattern(pattern)
        return patterns


def _check_pattern(pattern: str) -> None:
    if pattern.count("**") > 2:
        # Each "**" multiplies matching work; a repository's config must
        # not be able to make every path check crawl.
        raise ValueError(f"{pattern!r}: at most two '**' per pattern")
    try:
        gitignore_regexes(pattern)
    except PatternTooComplex as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:
        raise ValueError(f"{pattern!r} is not a valid gitignore-style pattern: {exc}") from None


class TimeoutsConfig(_Section):
    default_seconds: float = Field(default=30, gt=0, le=86_400)
    file_operations_seconds: float = Field(default=30, gt=0, le=86_400)
    shell_commands_seconds: float = Field(default=300, gt=0, le=86_400)


class OutputConfig(_Section):
    # EPC frames hold at most 16 MiB, and JSON inside a Lisp string can double.
    max_bytes: int = Field(default=102_400, ge=1024, le=8 << 20)


class EnvironmentConfig(_Section):
    # Additive to the built-in denylist: no configuration can let a secret
    # through to a command, it can only name more of them.
    denylist: list[str] = Field(default_factory=list)


class ApprovalConfig(_Section):
    enabled: bool = True
    mode: Literal["auto", "prompt", "deny"] = "prompt"
    allowlist: list[str] = Field(default_factory=list)
    denylist: list[str] = Field(default_factory=list)
    prompt_side_effects: bool = True
    # "auto": run_shell calls the classifier finds read-only run without a
    # prompt.  "prompt" by default; only the user's own file can set "auto".
    read_only_commands: Literal["prompt", "auto"] = "prompt"


class ShellConfig(_Section):
    # Bytes of each stream (stdout, stderr) kept for the result: the first
    # and the last half; everything is still streamed to Emacs.
    # 5 MiB: a build's or a test run's whole log fits, a runaway loop's does not.
    max_capture_bytes: int = Field(default=5 << 20, ge=64 << 10, le=256 << 20)
    # SIGTERM to the process group, then SIGKILL after this long.
    kill_grace_seconds: float = Field(default=2.0, gt=0, le=60)
    # After the command exits, how long its pipes are still read when
    # something it left behind holds them open.
    drain_seconds: float = Field(default=1.0, gt=0, le=60)
    # The OS sandbox commands run in: "auto" uses bubblewrap where it works
    # and otherwise sends every command to review; "bwrap" refuses to run
    # commands without it; "none" (the user's own file only) runs them
    # unconfined and silences the warning.
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    # Extra host paths visible inside the sandbox (the user's own file only).
    sandbox_read_paths: list[str] = Field(default_factory=list)
    sandbox_write_paths: list[str] = Field(default_factory=list)
    # Processes one command may have at once (a fork bomb's ceiling).
    max_processes: int = Field(default=512, ge=16, le=1_000_000)
    # The sandbox's writable tmpfs mounts (/tmp, /var/tmp, /dev/shm, $HOME)
    # live in memory: each holds at most tmpfs_size_mib, and all of them at
    # most tmpfs_total_mib together (an equal share each when the sizes
    # would add up to more).  Past that a write fails with ENOSPC.
    tmpfs_size_mib: int = Field(default=512, ge=1, le=1 << 20)
    tmpfs_total_mib: int = Field(default=2048, ge=4, le=1 << 22)
    # Commands that may have network without a forced review, as globs over
    # the command text ("npm install *"); the user's own file only.
    network_commands: list[str] = Field(default_factory=list)


class BackupsConfig(_Section):
    max_age_days: float = Field(default=14, gt=0, le=3650)
    max_total_mb: float = Field(default=512, gt=0, le=1 << 20)


# What list_files, glob and search skip unless a request names it: vendored
# dependencies and files that are binary by their extension.  (.git is
# skipped by the walk itself.)
DEFAULT_EXCLUDES = (
    "node_modules/",
    # images
    *("*.png", "*.jpg", "*.jpeg", "*.gif", "*.bmp", "*.ico", "*.webp", "*.tif", "*.tiff"),
    *("*.psd", "*.xcf", "*.heic"),
    # audio and video
    *("*.mp3", "*.wav", "*.ogg", "*.flac", "*.m4a", "*.mp4", "*.m4v", "*.mov", "*.avi"),
    *("*.mkv", "*.webm"),
    # archives and disk images
    *("*.zip", "*.tar", "*.gz", "*.tgz", "*.bz2", "*.xz", "*.zst", "*.7z", "*.rar"),
    *("*.jar", "*.war", "*.whl", "*.iso", "*.dmg"),
    # compiled code and libraries
    *("*.o", "*.a", "*.so", "*.dylib", "*.dll", "*.exe", "*.class", "*.pyc", "*.pyo"),
    *("*.pyd", "*.elc", "*.eln", "*.wasm"),
    # fonts, documents, databases
    *("*.ttf", "*.otf", "*.woff", "*.woff2", "*.eot", "*.pdf", "*.sqlite", "*.sqlite3"),
)


class ListingConfig(_Section):
    # list_files, glob and search stop after this many entries and say so.
    max_entries: int = Field(default=5000, ge=10, le=1_000_000)
    # Gitignore-style patterns skipped unless named; [] lists everything.
    default_excludes: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EXCLUDES), max_length=1000
    )

    @field_validator("default_excludes")
    @classmethod
    def _plain_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if pattern.lstrip().startswith("!"):
                raise ValueError(
                    f"{pattern!r}: a pattern cannot be negated with '!'; to see what a "
                    "pattern skips, leave it out of the list"
                )
            if not pattern.strip() or pattern.lstrip().startswith("#"):
                raise ValueError(f"{pattern!r}: empty or a comment, not a pattern")
            _check_pattern(pattern)
        return patterns


class SearchConfig(_Section):
    # auto: ripgrep when it can be found, else pure Python (same results).
    engine: Literal["auto", "ripgrep", "python"] = "auto"
    # 10 s: a search that takes longer is too broad to help the model; it
    # should narrow the path or the pattern instead.
    timeout_seconds: float = Field(default=10, gt=0, le=3600)


class ReadFileConfig(_Section):
    max_file_read_bytes: int = Field(default=204_800, ge=1024, le=1 << 30)
    max_scan_bytes: int = Field(default=2_097_152, ge=1024, le=1 << 34)


class ApplyPatchConfig(_Section):
    # Bytes of one patch (apply_patch and file_patch): bounds what one call
    # holds in memory and asks the user to review.
    max_patch_bytes: int = Field(default=524_288, ge=1024, le=64 << 20)
    # How many files one apply_patch may touch, and how many hunks in all.
    max_files: int = Field(default=100, ge=1, le=10_000)
    max_hunks: int = Field(default=1000, ge=1, le=100_000)


class DedupeConfig(_Section):
    # An identical call (name and sorted arguments) of a listed tool inside
    # the window is answered with a Deduplicated error instead of running.
    # Nothing is listed by default, so re-reading after an edit always works.
    window_seconds: float = Field(default=300, gt=0, le=86_400)
    tools: list[str] = Field(default_factory=list)


class GitConfig(_Section):
    """``[tools.git]``: the git tools' time limit, guards and hooks."""

    timeout_seconds: float = Field(default=30, gt=0, le=3600)
    allow_push: bool = True
    # Rewriting a remote's history: only the user's own file can allow it.
    allow_force_push: bool = False
    # What "clean tree" means before a commit: no unstaged changes in the
    # paths being committed, in any tracked file, or not checked.
    clean_tree_for_commit: Literal["committed-paths", "all", "off"] = "committed-paths"
    # The seed's spelling; false is clean_tree_for_commit = "off".
    require_clean_tree_for_commit: bool = True
    # The repository's hooks are skipped unless this is true (the user's own
    # file only); they then run inside the command sandbox, never outside.
    run_hooks: bool = False


class CurlConfig(_Section):
    """``[tools.curl]``: the HTTP client's time and size limits."""

    # The default and the ceiling of a call's timeout_ms.
    timeout_seconds: float = Field(default=15, gt=0, le=600)
    # The default and the ceiling of a call's max_bytes (the response body).
    max_bytes: int = Field(default=5 << 20, ge=1024, le=64 << 20)


def _domain_entries(entries: list[str]) -> list[str]:
    """``host``, ``*.host``, ``host:port`` or ``host:*``; an IP literal for itself."""
    shape = re.compile(
        r"(\*\.)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
        r"(:(\*|[0-9]{1,5}))?\Z"
    )
    for entry in entries:
        if not shape.match(entry) or ".." in entry:
            raise ValueError(
                f"{entry!r} is not a domain entry; write a host name ('docs.python.org'), "
                "its subdomains ('*.python.org'), a port ('localhost:8000', 'example.com:*') "
                "or an IP address ('127.0.0.1:8000')"
            )
    return entries


class NetworkConfig(_Section):
    """``[network]``: where curl may go (your own file only)."""

    # Empty: curl is off.  Scheme default ports only unless an entry names one.
    allowed_domains: list[str] = Field(default_factory=list, max_length=1000)

    _shape = field_validator("allowed_domains")(_domain_entries)


class AstConfig(_Section):
    """``[tools.ast]``: the AST tools (ast_generate, ast_query, ast_edit, ast_validate)."""

    # Building the index of a large tree may take minutes; an edit must not,
    # since the user waits on its review.
    generate_timeout_seconds: float = Field(default=300, gt=0, le=86_400)
    edit_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    # One call parses at most this many files; larger files are skipped, said so.
    max_files: int = Field(default=5000, ge=1, le=1_000_000)
    max_file_bytes: int = Field(default=2 << 20, ge=1024, le=64 << 20)


# The rules of the validator catalog: the config's and the validate tool's one list.
ValidatorRule = Literal[
    "secrets.scan",
    "code.todo.blockers",
    "build.must.pass",
    "lint.must.pass",
    "fmt.must.pass",
    "test.required.changed",
    "commit.message.conventional",
    "branch.naming.convention",
    "sec.git.clean_tree",
    "sec.paths.sandbox",
    "code.ast.parsed",
]
COMMAND_RULES = frozenset({"build.must.pass", "lint.must.pass", "fmt.must.pass"})


class ValidatorConfig(_Section):
    """One ``[[validators]]`` entry: a rule of the catalog and how much it matters."""

    rule: ValidatorRule
    # Absent: the rule's level in the catalog.
    enforcement: Literal["blocking", "warning", "suggestion"] | None = None
    # The argv a *.must.pass rule runs (and test.required.changed, if given),
    # in the command sandbox.  Only the user's own file may set one.
    command: list[str] | None = Field(default=None, min_length=1, max_length=1000)
    # code.todo.blockers: the branches it guards (globs); the words it refuses.
    branches: list[str] | None = None
    words: list[str] | None = None
    # branch.naming.convention: the names allowed (a regular expression).
    pattern: str | None = Field(default=None, max_length=1000)
    # commit.message.conventional: the allowed types.
    types: list[str] | None = None
    # test.required.changed: which changed paths are tests (gitignore-style),
    # and the phrase in a commit message that waives the rule.
    tests: list[str] | None = None
    override: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("command")
    @classmethod
    def _argv(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and (not command[0] or any("\0" in a for a in command)):
            raise ValueError("command is an argv: a non-empty program, no NUL characters")
        return command

    @field_validator("pattern")
    @classmethod
    def _regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return pattern

    @field_validator("tests")
    @classmethod
    def _globs(cls, patterns: list[str] | None) -> list[str] | None:
        for pattern in patterns or []:
            _check_pattern(pattern)
        return patterns


def _default_validators() -> list[ValidatorConfig]:
    # A commit that carries a credential is refused unless the user says otherwise.
    return [ValidatorConfig(rule="secrets.scan", enforcement="blocking")]


class ToolDefinition(_Section):
    """One ``[[tools.definitions]]`` entry: a tool as the model is told about it."""

    # What every provider's function-calling dialect accepts as a name.
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(min_length=1, max_length=8192)
    parameters: dict[str, Any]

    @field_validator("parameters")
    @classmethod
    def _a_schema_of_an_object(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise ValueError(
                'must be a JSON Schema with type = "object" (a call\'s args are an object), '
                'e.g. { "type"="object", "properties"={ "path"={ "type"="string" } } }'
            )
        # Imported here: only a config with tool definitions needs jsonschema
        # while the worker starts.
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(top level)"
            raise ValueError(
                f"not a valid JSON Schema (Draft 2020-12) at {where}: {exc.message}"
            ) from None
        outside = _refs_outside(schema)
        if outside is not None:
            # A schema that points elsewhere would have the worker fetch a URL
            # or read a file each time a call is checked.
            raise ValueError(
                f"$ref {outside!r} points outside this schema; only refs starting with '#' work"
            )
        return schema


def _refs_outside(node: Any) -> str | None:
    if isinstance(node, dict):
        for key, value in node.items():
            outward = isinstance(value, str) and not value.startswith("#")
            if key in ("$ref", "$dynamicRef") and outward:
                return str(value)
            found = _refs_outside(value)
            if found is not None:
                return found
    elif isinstance(node, list):
        for item in node:
            found = _refs_outside(item)
            if found is not None:
                return found
    return None


class ToolsConfig(_Section):
    mode: ToolsMode = Field(default=ToolsMode.ENABLED, strict=False)
    allow_parallel: bool = Field(
        default=False,
        description="Accepted for compatibility; calls always run one at a time.",
    )
    max_tool_calls_per_batch: int = Field(default=8, ge=1, le=1000)
    max_tool_iterations_per_user_turn: int = Field(default=4, ge=1, le=1000)
    max_tool_args_bytes: int = Field(default=262_144, ge=1024, le=64 << 20)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    read_file: ReadFileConfig = Field(default_factory=ReadFileConfig)
    backups: BackupsConfig = Field(default_factory=BackupsConfig)
    listing: ListingConfig = Field(default_factory=ListingConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    shell: ShellConfig = Field(default_factory=ShellConfig)
    dedupe: DedupeConfig = Field(default_factory=DedupeConfig)
    apply_patch: ApplyPatchConfig = Field(default_factory=ApplyPatchConfig)
    git: GitConfig = Field(default_factory=GitConfig)
    ast: AstConfig = Field(default_factory=AstConfig)
    curl: CurlConfig = Field(default_factory=CurlConfig)
    # Tools the model is told about in parse_only mode, where the user runs
    # them by hand; in enabled mode only with advertise_definitions = "config".
    definitions: list[ToolDefinition] = Field(default_factory=list, max_length=256)
    advertise_definitions: Literal["registry", "config"] = "registry"

    @field_validator("definitions")
    @classmethod
    def _names_once(cls, definitions: list[ToolDefinition]) -> list[ToolDefinition]:
        seen: set[str] = set()
        for definition in definitions:
            if definition.name in seen:
                raise ValueError(f"tool {definition.name!r} is defined twice; keep one")
            seen.add(definition.name)
        return definitions


# --- consent: [permissions] and [[rules]] -------------------------------------

# Strictest first: a project file may only move a mode towards the front.
PERMISSION_MODES: list[str] = ["read-only", "ask", "accept-edits", "auto"]

_RULE_SHAPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}(\((?s:.+)\))?\Z")


def _rule_texts(rules: list[str]) -> list[str]:
    """The shape of ``TOOL`` / ``TOOL(PATTERN)``; the pattern is checked with the tools."""
    for text in rules:
        if not _RULE_SHAPE.match(text):
            raise ValueError(
                f"{text!r} is not a permission rule; write TOOL or TOOL(PATTERN), e.g. "
                "'read_file', 'run_shell(git status*)', 'edit(src/**)', 'files(docs/**)'"
            )
        if "\0" in text or len(text) > 2000:
            raise ValueError(f"{text[:60]!r}: a rule holds no NUL and at most 2000 characters")
    return rules


class PermissionsConfig(_Section):
    mode: PermissionMode = "ask"
    allow: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    # Commands that may have network without a forced review (your own file only).
    network: list[str] = Field(default_factory=list)
    # "auto": run_shell calls the read-only classifier accepts run unasked.
    read_only_commands: Literal["prompt", "auto"] = "prompt"
    # A review left unanswered this long is a denial; 0 waits for ever.
    permission_timeout_seconds: float = Field(default=0, ge=0, le=86_400)

    _shapes = field_validator("allow", "ask", "deny", "network")(_rule_texts)


class _Rule(_Section):
    pass


class MaxCallsRule(_Rule):
    type: Literal["max_calls"]
    tool: str
    max: int = Field(ge=1, le=100_000)


class CooldownRule(_Rule):
    type: Literal["cooldown"]
    tool: str
    seconds: float = Field(gt=0, le=86_400)


class ExclusiveGroupRule(_Rule):
    type: Literal["exclusive_group"]
    tools: list[str] = Field(min_length=2)


class RequiresPrecedingRule(_Rule):
    type: Literal["requires_preceding"]
    tool: str
    after: list[str] = Field(min_length=1)


class RequiresFollowingRule(_Rule):
    type: Literal["requires_following"]
    tool: str
    before: list[str] = Field(min_length=1)


class RequiredBeforeExitRule(_Rule):
    type: Literal["required_before_exit"]
    tools: list[str] = Field(min_length=1)


class StartConstraintRule(_Rule):
    type: Literal["start_constraint"]
    tools: list[str] = Field(min_length=1)


class RequiresConsentRule(_Rule):
    type: Literal["requires_consent"]
    tool: str


class ExitLoopRule(_Rule):
    type: Literal["exit_loop"]
    tool: str


class ContinueLoopRule(_Rule):
    type: Literal["continue_loop"]
    tool: str


RuleConfig = Annotated[
    MaxCallsRule
    | CooldownRule
    | ExclusiveGroupRule
    | RequiresPrecedingRule
    | RequiresFollowingRule
    | RequiredBeforeExitRule
    | StartConstraintRule
    | RequiresConsentRule
    | ExitLoopRule
    | ContinueLoopRule,
    Field(discriminator="type"),
]
# What a project file may add without trust: rules that only ever refuse or
# ask more.  The others make the chat ask the model for calls, or let the
# loop go on.
RESTRICTIVE_RULES = frozenset(
    {
        "max_calls",
        "cooldown",
        "exclusive_group",
        "requires_preceding",
        "requires_consent",
        "exit_loop",
    }
)


class TrustConfig(_Section):
    # Project roots whose .forj/config.toml may loosen settings.  Only read
    # from the user's file: a project cannot vouch for itself.
    projects: list[str] = Field(default_factory=list)


# A server's name becomes part of its tools' names (mcp__NAME__tool): the
# characters every provider accepts in a tool name, no double underscore.
MCP_SERVER_NAME = r"^[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$"
MAX_MCP_SERVER_NAME = 24


class McpServerConfig(_Section):
    """One ``[mcp.servers.NAME]`` entry: an outside MCP server whose tools the chat may use.

    Exactly one of ``command`` (a program speaking MCP on its stdin and
    stdout) and ``url`` (a streamable HTTP endpoint).
    """

    command: list[str] | None = Field(default=None, min_length=1, max_length=256)
    # Only these variables reach the program, with the few harmless ones
    # every program needs (PATH, HOME, LANG...): never the editor's secrets.
    env: dict[str, str] = Field(default_factory=dict, max_length=64)
    # The program's working directory; the project root when not given.
    cwd: str | None = None
    url: str | None = Field(default=None, max_length=2048)
    # Sent with every request to ``url`` (an Authorization header, say).
    headers: dict[str, str] = Field(default_factory=dict, max_length=64)
    enabled: bool = True
    # How long the server may take to start and list its tools.
    startup_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # How long one call may take.
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)

    @field_validator("command")
    @classmethod
    def _a_program(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and (not command[0] or any("\0" in w for w in command)):
            raise ValueError('must name a program first, e.g. ["uvx", "mcp-server-time"]')
        return command

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"https?://[^\s/]+", url):
            raise ValueError('must be an http:// or https:// URL, e.g. "http://127.0.0.1:8000/mcp"')
        return url

    @field_validator("env", "headers")
    @classmethod
    def _names(cls, table: dict[str, str]) -> dict[str, str]:
        for name, value in table.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) or "\0" in value:
                raise ValueError(f"{name!r}: a name of letters, digits and _ with a text value")
        return table

    def model_post_init(self, context: Any, /) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                'give either command (a program, e.g. ["uvx", "mcp-server-time"]) '
                'or url (e.g. "http://127.0.0.1:8000/mcp"), not both'
            )
        if self.url is not None and (self.env or self.cwd is not None):
            raise ValueError("env and cwd are for a command; an HTTP server takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a url; a command takes env")


class McpConfig(_Section):
    # Outside MCP servers whose tools the chat may use, by name.  The user's
    # own file only: a cloned repository must not start programs or add tools.
    servers: dict[str, McpServerConfig] = Field(default_factory=dict, max_length=32)

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if len(name) > MAX_MCP_SERVER_NAME or not re.match(MCP_SERVER_NAME, name):
                raise ValueError(
                    f"server name {name!r}: up to {MAX_MCP_SERVER_NAME} letters and digits, "
                    "words joined by single - or _ (it becomes part of each tool's name)"
                )
        return servers

    # Calls of an MCP client (forj_py mcp) that need review are shown in the
    # Emacs connected to the project's worker.  The user's own file only:
    # it decides whose eyes a review goes before.
    review_in_emacs: bool = False
    # How long a review in Emacs may stay unanswered before the call falls
    # back to the client's own way of asking (or is refused).
    review_timeout_seconds: float = Field(default=600.0, gt=0, le=86400)


class Config(_Section):
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    trust: TrustConfig = Field(default_factory=TrustConfig)
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    rules: list[RuleConfig] = Field(default_factory=list, max_length=1000)
    validators: list[ValidatorConfig] = Field(default_factory=_default_validators, max_length=200)

    @field_validator("validators")
    @classmethod
    def _commands_where_needed(cls, validators: list[ValidatorConfig]) -> list[ValidatorConfig]:
        for entry in validators:
            if entry.rule in COMMAND_RULES and entry.command is None:
                raise ValueError(
                    f"{entry.rule} runs a command: give it one, e.g. "
                    f'{{ rule = "{entry.rule}", command = ["make", "check"] }}'
                )
        return validators


@dataclass
class LoadedConfig:
    config: Config
    user_file: Path | None
    project_file: Path | None
    trusted: bool
    warnings: list[str] = field(default_factory=list)
    # The editor's options that were set, as sent: they count as the user's file.
    settings: list[Setting] = field(default_factory=list)


# --- settings from the editor ----------------------------------------------------


class Setting(BaseModel):
    """One editor option that mirrors a TOML key (``--settings``).

    Emacs sends the global value of each forj option that is not nil; the
    option's name is there so an error can name what the user set.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(pattern=r"^[a-z_]+(\.[a-z_]+)+$", max_length=200)
    value: Any
    option: str | None = Field(default=None, max_length=200)

    @property
    def label(self) -> str:
        return f"{self.option} ({self.key})" if self.option else self.key


SETTINGS_SOURCE = "settings from the editor (--settings)"


def parse_settings(text: str) -> list[Setting]:
    """The ``--settings`` JSON: ``[{"key": "tools.timeouts.default_seconds", "value": 60,
    "option": "forj-worker-default-timeout"}, ...]``, each checked against :class:`Config`."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{SETTINGS_SOURCE}: not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ConfigError(f"{SETTINGS_SOURCE}: must be a JSON array of {{key, value, option}}")
    settings: list[Setting] = []
    problems: list[str] = []
    for n, item in enumerate(raw):
        try:
            settings.append(Setting.model_validate(item))
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'item'}: {e['msg']}" for e in exc.errors()
            )
            problems.append(f"  item {n}: {detail}")
    if not problems:
        problems = _check_settings(settings)
    if problems:
        raise ConfigError("\n".join([f"{SETTINGS_SOURCE}: invalid:", *problems]))
    return settings


def _nest(settings: list[Setting]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for setting in settings:
        *parents, leaf = setting.key.split(".")
        target = nested
        for part in parents:
            child = target.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{SETTINGS_SOURCE}: {setting.label}: {part} is not a table")
            target = child
        target[leaf] = setting.value
    return nested


def _check_settings(settings: list[Setting]) -> list[str]:
    """Validate the settings as a configuration; each problem names the editor's option."""
    try:
        Config.model_validate(_nest(settings))
    except ValidationError as exc:
        by_key = {s.key: s.label for s in settings}
        problems = []
        for err in exc.errors():
            key = ".".join(str(part) for part in err["loc"])
            label = by_key.get(key, key)
            if err["type"] == "extra_forbidden":
                problems.append(f"  {label}: not a configuration key forj knows")
            else:
                problems.append(f"  {label}: got {err.get('input')!r}; {err['msg']}")
        return problems
    return []


def _apply_settings(user: Config, settings: list[Setting]) -> Config:
    """``user`` with the editor's options over it; for the tools mode the stricter wins."""
    if not settings:
        return user
    given = Config.model_validate(_nest(settings))
    merged = user.model_copy(deep=True)
    for path, value in _set_leaves(given):
        if path == ("tools", "mode"):
            value, _ = _stricter_of(_TOOLS_MODE_ORDER)(_get(user, path), value)
        _set(merged, path, value)
    return merged


# --- locating and reading files ---------------------------------------------


def user_config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("FORJ_CONFIG")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "forj" / "config.toml"


def _read_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _format_validation(path: Path, exc: ValidationError, model: type[BaseModel]) -> str:
    lines = [f"{path}: invalid configuration:"]
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        key = ".".join(loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            lines.append(f"  {key}: unknown key; allowed here: {', '.join(allowed)}")
            continue
        if err["type"] == "missing":
            lines.append(f"  {key}: missing; this key is required")
            continue
        got = err.get("input")
        detail = err["msg"]
        if err["type"] == "enum":
            detail = "allowed values: " + ", ".join(m.value for m in ToolsMode)
        lines.append(f"  {key}: got {got!r}; {detail}")
    return "\n".join(lines)


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    current: Any = model
    for part in loc:
        if part.isdigit():
            continue  # an entry of an array of tables: its keys are the item's
        info = current.model_fields.get(part)
        annotation = info.annotation if info is not None else None
        if getattr(annotation, "__origin__", None) is list:
            annotation = annotation.__args__[0]  # type: ignore[union-attr]
        if not isinstance(annotation, type):
            return []
        current = annotation
    return sorted(current.model_fields)


def _parse(path: Path, text: str) -> Config:
    raw = _read_toml(path, text)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation(path, exc, Config)) from None


def read_project_config_text(root: Path) -> str | None:
    """Read ``.forj/config.toml`` without following symlinks out of the root.

    The file comes with the repository; a symlink planted there must not make
    the worker read (and echo in error messages) a file from elsewhere.
    """
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    directory = getattr(os, "O_DIRECTORY", 0)
    try:
        root_fd = os.open(root, os.O_RDONLY | directory)
    except OSError as exc:
        raise ConfigError(f"{root}: cannot open the project root: {exc.strerror}") from None
    try:
        try:
            dir_fd = os.open(".forj", os.O_RDONLY | directory | nofollow, dir_fd=root_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"{root / '.forj'}: cannot open: {exc.strerror}") from None
        try:
            fd = os.open(
                "config.toml", os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"{root / PROJECT_CONFIG}: cannot open ({exc.strerror}); "
                "it must be a regular file inside the project"
            ) from None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(root_fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{root / PROJECT_CONFIG}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{root / PROJECT_CONFIG}: not UTF-8 text") from None


def load(
    root: Path, user_file: str | None = None, settings: list[Setting] | None = None
) -> LoadedConfig:
    """Read, validate and merge the user's and the project's configuration.

    ``settings`` (the editor's options) count as part of the user's file
    and take precedence over its keys.
    """
    root = root.resolve()
    upath = user_config_path(user_file)
    user = Config()
    used_user: Path | None = None
    if upath.is_file():
        try:
            text = upath.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{upath}: cannot read: {exc}") from None
        user = _parse(upath, text)
        used_user = upath
    elif user_file is not None:
        raise ConfigError(f"{upath}: no such configuration file")
    settings = settings or []
    user = _apply_settings(user, settings)

    trusted = any(_same_dir(root, Path(p).expanduser()) for p in user.trust.projects)
    ptext = read_project_config_text(root)
    if ptext is None:
        return LoadedConfig(user, used_user, None, trusted, settings=settings)
    ppath = root / PROJECT_CONFIG
    project = _parse(ppath, ptext)
    warnings: list[str] = []
    if "trust" in project.model_fields_set:
        warnings.append(
            f"{ppath}: [trust] is ignored here; only your own config file can trust a project"
        )
    merged = merge(user, project, root=root, trusted=trusted, source=str(ppath), warnings=warnings)
    return LoadedConfig(merged, used_user, ppath, trusted, warnings, settings)


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# --- merging: a project may tighten, never loosen ------------------------------

_TOOLS_MODE_ORDER = [ToolsMode.DISABLED, ToolsMode.PARSE_ONLY, ToolsMode.ENABLED]
_APPROVAL_ORDER = ["deny", "prompt", "auto"]  # strictest first


def _stricter_of(order: list[Any]) -> Callable[[Any, Any], tuple[Any, bool]]:
    def rule(user: Any, project: Any) -> tuple[Any, bool]:
        if order.index(project) <= order.index(user):
            return project, True
        return user, False

    return rule


def _bool_only_to(safe: bool) -> Callable[[Any, Any], tuple[Any, bool]]:
    def rule(user: Any, project: Any) -> tuple[Any, bool]:
        if project in (user, safe):
            return project, True
        return user, False

    return rule


def _larger_only(user: Any, project: Any) -> tuple[Any, bool]:
    if project >= user:
        return project, True
    return user, False


def _union(user: Any, project: Any) -> tuple[Any, bool]:
    return list(dict.fromkeys([*user, *project])), True


def _subset(user: Any, project: Any) -> tuple[Any, bool]:
    kept = [item for item in project if item in user]
    return kept, len(kept) == len(project)


# (section path, key) -> rule(user_value, project_value) -> (value, fully_accepted)
_SAFETY_RULES: dict[tuple[str, ...], Callable[[Any, Any], tuple[Any, bool]]] = {
    ("tools", "mode"): _stricter_of(_TOOLS_MODE_ORDER),
    ("tools", "approval", "enabled"): _bool_only_to(False),
    ("tools", "approval", "mode"): _stricter_of(_APPROVAL_ORDER),
    ("tools", "approval", "allowlist"): _subset,
    ("tools", "approval", "denylist"): _union,
    ("tools", "approval", "prompt_side_effects"): _bool_only_to(True),
    ("tools", "approval", "read_only_commands"): _stricter_of(["prompt", "auto"]),
    ("tools", "sandbox", "allow_absolute"): _bool_only_to(False),
    ("tools", "sandbox", "denied_patterns"): _union,
    ("tools", "sandbox", "include_default_denies"): _bool_only_to(True),
    ("tools", "environment", "denylist"): _union,
    # Backups are the user's undo: a project may keep more of them, not fewer.
    ("tools", "backups", "max_age_days"): _larger_only,
    ("tools", "backups", "max_total_mb"): _larger_only,
    ("tools", "git", "allow_push"): _bool_only_to(False),
    ("tools", "git", "clean_tree_for_commit"): _stricter_of(["all", "committed-paths", "off"]),
    ("tools", "git", "require_clean_tree_for_commit"): _bool_only_to(True),
}
_ROOTS_KEY = ("tools", "sandbox", "allowed_roots")
# Keys only the user's own file may loosen, even for a trusted project:
# each would switch a protection off or widen what commands reach.
_USER_ONLY: dict[tuple[str, ...], Callable[[Any, Any], tuple[Any, bool]]] = {
    ("tools", "shell", "sandbox"): _stricter_of(["bwrap", "auto", "none"]),
    ("tools", "shell", "sandbox_read_paths"): _subset,
    ("tools", "shell", "sandbox_write_paths"): _subset,
    ("tools", "shell", "network_commands"): _subset,
    ("tools", "shell", "max_processes"): lambda user, project: (
        (project, True) if project <= user else (user, False)
    ),
    # Memory a command may fill through its tmpfs mounts: a project may
    # lower the caps, never raise them.
    ("tools", "shell", "tmpfs_size_mib"): lambda user, project: (
        (project, True) if project <= user else (user, False)
    ),
    ("tools", "shell", "tmpfs_total_mib"): lambda user, project: (
        (project, True) if project <= user else (user, False)
    ),
    ("tools", "approval", "read_only_commands"): _stricter_of(["prompt", "auto"]),
    # What the model is told a tool does: a cloned repository must not
    # write the descriptions the model acts on.
    ("tools", "definitions"): lambda user, project: (user, project == user),
    ("tools", "advertise_definitions"): lambda user, project: (user, project == user),
    # Force push rewrites a shared history.
    ("tools", "git", "allow_force_push"): _bool_only_to(False),
    # Who reviews an MCP client's calls.
    ("mcp", "review_in_emacs"): lambda user, project: (user, project == user),
    ("mcp", "review_timeout_seconds"): lambda user, project: (user, project == user),
    # Outside MCP servers: programs forj starts and tools the model is given.
    ("mcp", "servers"): lambda user, project: (user, project == user),
    # A hook is a program the repository's author wrote.
    ("tools", "git", "run_hooks"): _bool_only_to(False),
    # Where curl may send what it is given.
    ("network", "allowed_domains"): _subset,
    # How long a request may hold the worker and how much it may bring in.
    ("tools", "curl", "timeout_seconds"): lambda user, project: (
        (project, True) if project <= user else (user, False)
    ),
    ("tools", "curl", "max_bytes"): lambda user, project: (
        (project, True) if project <= user else (user, False)
    ),
}


_TRUST_HINT = "Add this project to [trust] projects in your own config file to allow it."


def merge(
    user: Config,
    project: Config,
    *,
    root: Path,
    trusted: bool,
    source: str,
    warnings: list[str],
) -> Config:
    """The effective configuration: ``user`` overlaid with what ``project`` may set."""
    merged = user.model_copy(deep=True)
    for path, value in _set_leaves(project):
        if path[0] == "trust":
            continue
        user_value = _get(user, path)
        if path in _CONSENT_RULES:
            new, problems = _CONSENT_RULES[path](user_value, value, trusted)
            _set(merged, path, new)
            warnings.extend(f"{source}: {problem}" for problem in problems)
            continue
        if path in _USER_ONLY:
            new, accepted = _USER_ONLY[path](user_value, value)
            hint = "Only your own config file can set this, even for a trusted project."
        elif trusted or (path not in _SAFETY_RULES and path != _ROOTS_KEY):
            _set(merged, path, value)
            continue
        elif path == _ROOTS_KEY:
            new, accepted = _narrow_roots(user_value, value, root)
            hint = _TRUST_HINT
        else:
            new, accepted = _SAFETY_RULES[path](user_value, value)
            hint = _TRUST_HINT
        _set(merged, path, new)
        if not accepted:
            warnings.append(
                f"{source}: {'.'.join(path)} = {_show(value)} would loosen your setting "
                f"{_show(user_value)}; ignored. {hint}"
            )
    return merged


# --- merging the consent keys: each rule knows whether the project is trusted

_ConsentRule = Callable[[Any, Any, bool], tuple[Any, list[str]]]
_USER_ONLY_HINT = "Only your own config file can set this, even for a trusted project."


def _permission_mode(user: str, project: str, trusted: bool) -> tuple[Any, list[str]]:
    order = PERMISSION_MODES
    if project == "auto" and user != "auto":
        return user, [f"permissions.mode = 'auto' ignored. {_USER_ONLY_HINT}"]
    if trusted or order.index(project) <= order.index(user):
        return project, []
    return user, [
        f"permissions.mode = {project!r} would loosen your mode {user!r}; ignored. {_TRUST_HINT}"
    ]


def _legacy_approval_mode(user: str, project: str, trusted: bool) -> tuple[Any, list[str]]:
    # The old key's "auto" now means the auto permission mode: your own file only.
    order = ["deny", "prompt", "auto"]
    if project == "auto" and user != "auto" and trusted:
        return user, [f"tools.approval.mode = 'auto' ignored. {_USER_ONLY_HINT}"]
    if trusted or order.index(project) <= order.index(user):
        return project, []
    return user, [
        f"tools.approval.mode = {project!r} would loosen your setting {user!r}; ignored. "
        + _TRUST_HINT
    ]


def _allow_rules(user: list[str], project: list[str], trusted: bool) -> tuple[Any, list[str]]:
    if trusted:
        return list(dict.fromkeys([*user, *project])), []
    extra = [rule for rule in project if rule not in user]
    problems = [f"permissions.allow {rule!r} ignored. {_TRUST_HINT}" for rule in extra]
    return list(user), problems


def _added_rules(user: list[str], project: list[str], trusted: bool) -> tuple[Any, list[str]]:
    return list(dict.fromkeys([*user, *project])), []


def _network_rules(user: list[str], project: list[str], trusted: bool) -> tuple[Any, list[str]]:
    kept = [rule for rule in project if rule in user]
    problems = [
        f"permissions.network {rule!r} ignored. {_USER_ONLY_HINT}"
        for rule in project
        if rule not in user
    ]
    return kept, problems


def _read_only_commands(user: str, project: str, trusted: bool) -> tuple[Any, list[str]]:
    if project == "auto" and user != "auto":
        return user, [f"permissions.read_only_commands = 'auto' ignored. {_USER_ONLY_HINT}"]
    return project, []


def _rule_list(user: list[Any], project: list[Any], trusted: bool) -> tuple[Any, list[str]]:
    """The project's rules are added to yours; without trust, only restrictive ones."""
    kept = [rule for rule in project if trusted or rule.type in RESTRICTIVE_RULES]
    problems = [
        f"[[rules]] type = {rule.type!r} ignored: without trust a project may add only "
        f"{', '.join(sorted(RESTRICTIVE_RULES))} rules. {_TRUST_HINT}"
        for rule in project
        if rule not in kept
    ]
    return [*user, *kept], problems


def _validator_list(user: list[Any], project: list[Any], trusted: bool) -> tuple[Any, list[str]]:
    """A project adds checks; a check that runs a command comes only from your own file."""
    kept = [v for v in project if v.command is None or v in user]
    problems = [
        f"[[validators]] rule = {v.rule!r} with command {v.command!r} ignored. " + _USER_ONLY_HINT
        for v in project
        if v not in kept
    ]
    return [*user, *[v for v in kept if v not in user]], problems


_CONSENT_RULES: dict[tuple[str, ...], _ConsentRule] = {
    ("permissions", "mode"): _permission_mode,
    ("permissions", "allow"): _allow_rules,
    ("permissions", "ask"): _added_rules,
    ("permissions", "deny"): _added_rules,
    ("permissions", "network"): _network_rules,
    ("permissions", "read_only_commands"): _read_only_commands,
    ("tools", "approval", "mode"): _legacy_approval_mode,
    ("rules",): _rule_list,
    ("validators",): _validator_list,
}


def _narrow_roots(user_roots: list[str], project_roots: list[str], root: Path) -> tuple[Any, bool]:
    """Keep only the project's roots that lie inside one of the user's roots."""
    bounds = [_resolve_root(root, r) for r in user_roots]
    kept = [
        r for r in project_roots if any(_inside(_resolve_root(root, r), bound) for bound in bounds)
    ]
    if not kept:
        return user_roots, False
    return kept, len(kept) == len(project_roots)


def _resolve_root(root: Path, value: str) -> Path:
    return (root / Path(value).expanduser()).resolve()


def _inside(path: Path, bound: Path) -> bool:
    return path == bound or bound in path.parents


def _show(value: Any) -> str:
    if isinstance(value, list) and value and isinstance(value[0], ToolDefinition):
        value = [definition.name for definition in value]
    if isinstance(value, ToolsMode):
        value = value.value
    if isinstance(value, str):
        return repr(value)
    return str(value).replace("True", "true").replace("False", "false")


def _set_leaves(
    model: BaseModel, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf the file actually set (defaults are not 'set')."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for name in model.model_fields_set:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.extend(_set_leaves(value, (*prefix, name)))
        else:
            out.append(((*prefix, name), value))
    return sorted(out, key=lambda item: item[0])


def _get(model: BaseModel, path: tuple[str, ...]) -> Any:
    value: Any = model
    for part in path:
        value = getattr(value, part)
    return value


def _set(model: BaseModel, path: tuple[str, ...], value: Any) -> None:
    target: Any = model
    for part in path[:-1]:
        target = getattr(target, part)
    setattr(target, path[-1], value)


def describe(loaded: LoadedConfig) -> dict[str, Any]:
    """The effective configuration as JSON, for ``hello``."""
    effective = loaded.config.model_dump(mode="json")
    # The values of a server's env and headers are often keys: the names are enough.
    for server in effective["mcp"]["servers"].values():
        for table in ("env", "headers"):
            server[table] = {name: "[REDACTED]" for name in server[table]}
    return {
        "effective": effective,
        "user_file": str(loaded.user_file) if loaded.user_file else None,
        "project_file": str(loaded.project_file) if loaded.project_file else None,
        "trusted": loaded.trusted,
        "settings": [s.model_dump(mode="json") for s in loaded.settings],
    }
