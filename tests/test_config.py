"""Configuration: validation, and a project that cannot loosen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import MakeWorker, project_config, user_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forj_py.config import Config, ConfigError, load


def test_defaults_without_any_file(project: Path) -> None:
    loaded = load(project)
    assert loaded.config == Config()
    assert loaded.config.tools.approval.mode == "prompt"
    assert loaded.config.tools.max_tool_calls_per_batch == 8
    assert loaded.warnings == []


def test_every_section_of_seed_000_is_accepted(project: Path) -> None:
    user_config(
        """
        [tools]
        mode = "enabled"
        allow_parallel = false
        max_tool_calls_per_batch = 8
        max_tool_iterations_per_user_turn = 4
        max_tool_args_bytes = 262144
        [tools.sandbox]
        allowed_roots = ["."]
        denied_patterns = ["**/.ssh/**", "**/*.pem"]
        allow_absolute = false
        include_default_denies = true
        [tools.timeouts]
        default_seconds = 30
        file_operations_seconds = 30
        shell_commands_seconds = 300
        [tools.output]
        max_bytes = 102400
        [tools.environment]
        denylist = ["*_KEY"]
        [tools.approval]
        enabled = true
        mode = "prompt"
        allowlist = ["read_file"]
        denylist = ["run_command"]
        prompt_side_effects = true
        [tools.read_file]
        max_file_read_bytes = 204800
        max_scan_bytes = 2097152
        """
    )
    cfg = load(project).config
    assert cfg.tools.approval.allowlist == ["read_file"]
    assert cfg.tools.sandbox.denied_patterns == ["**/.ssh/**", "**/*.pem"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[tools.approval]\nmode = 'yolo'\n",
            "tools.approval.mode: got 'yolo'; Input should be 'auto', 'prompt' or 'deny'",
        ),
        (
            "[tools]\nmode = 'on'\n",
            "tools.mode: got 'on'; allowed values: disabled, parse_only, enabled",
        ),
        (
            "[tools.approval]\nmod = 'auto'\n",
            "tools.approval.mod: unknown key; allowed here: "
            "allowlist, denylist, enabled, mode, prompt_side_effects",
        ),
        (
            "[tool]\nmode = 'x'\n",
            "tool: unknown key; allowed here: mcp, network, permissions, rules, tools, trust",
        ),
        (
            "[tools]\nmax_tool_calls_per_batch = 0\n",
            "tools.max_tool_calls_per_batch: got 0; Input should be greater than or equal to 1",
        ),
        ("[tools.sandbox]\nallow_absolute = 'yes'\n", "tools.sandbox.allow_absolute: got 'yes'"),
        ("[tools\n", "not valid TOML"),
        (
            "[tools.sandbox]\ndenied_patterns = ['!keep.pem']\n",
            "'!keep.pem': a pattern cannot be negated",
        ),
        (
            '[tools.sandbox]\ndenied_patterns = ["\\\\"]\n',
            "is not a valid gitignore-style pattern",
        ),
    ],
)
def test_bad_key_or_value_names_file_key_and_allowed_values(
    project: Path, text: str, expected: str
) -> None:
    user_config(text)
    with pytest.raises(ConfigError) as exc:
        load(project)
    assert os.environ["FORJ_CONFIG"] in str(exc.value)
    assert expected in str(exc.value)


def test_bad_project_file_is_an_error_naming_the_project_file(project: Path) -> None:
    project_config(project, "[tools.approval]\nmode = 3\n")
    with pytest.raises(ConfigError) as exc:
        load(project)
    assert str(project / ".forj" / "config.toml") in str(exc.value)


def test_explicit_missing_config_file_is_an_error(project: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load(project, str(project / "missing.toml"))


def test_project_may_tighten_every_safety_setting(project: Path) -> None:
    user_config(
        """
        [tools.approval]
        mode = "auto"
        allowlist = ["read_file", "note"]
        """
    )
    project_config(
        project,
        """
        [tools]
        mode = "parse_only"
        [tools.approval]
        mode = "deny"
        allowlist = ["read_file"]
        denylist = ["note"]
        enabled = false
        [tools.sandbox]
        allowed_roots = ["src"]
        denied_patterns = ["secret/**"]
        [tools.environment]
        denylist = ["MY_*"]
        """,
    )
    loaded = load(project)
    t = loaded.config.tools
    assert loaded.warnings == []
    assert t.mode.value == "parse_only"
    assert t.approval.mode == "deny"
    assert t.approval.allowlist == ["read_file"]
    assert t.approval.denylist == ["note"]
    assert t.approval.enabled is False
    assert t.sandbox.allowed_roots == ["src"]
    assert t.sandbox.denied_patterns == ["secret/**"]
    assert t.environment.denylist == ["MY_*"]


LOOSENINGS = {
    "approval mode": ("[tools.approval]\nmode = 'auto'\n", ("approval", "mode"), "prompt"),
    "allowlist": ("[tools.approval]\nallowlist = ['run_shell']\n", ("approval", "allowlist"), []),
    "prompt_side_effects": (
        "[tools.approval]\nprompt_side_effects = false\n",
        ("approval", "prompt_side_effects"),
        True,
    ),
    "roots": (
        "[tools.sandbox]\nallowed_roots = ['..', '/']\n",
        ("sandbox", "allowed_roots"),
        ["."],
    ),
    "allow_absolute": (
        "[tools.sandbox]\nallow_absolute = true\n",
        ("sandbox", "allow_absolute"),
        False,
    ),
    "default denies": (
        "[tools.sandbox]\ninclude_default_denies = false\n",
        ("sandbox", "include_default_denies"),
        True,
    ),
    "tools mode": ("[tools]\nmode = 'enabled'\n", ("mode",), "parse_only"),
}


@pytest.mark.parametrize("name", sorted(LOOSENINGS))
def test_untrusted_project_cannot_loosen(project: Path, name: str) -> None:
    user_config(
        """
        [tools]
        mode = "parse_only"
        [tools.approval]
        denylist = ["run_shell"]
        [tools.sandbox]
        denied_patterns = ["*.secret"]
        [tools.environment]
        denylist = ["MINE_*"]
        """
    )
    text, path, user_value = LOOSENINGS[name]
    project_config(project, text)
    loaded = load(project)
    value: object = loaded.config.tools
    for part in path:
        value = getattr(value, part)
    if hasattr(value, "value"):
        value = value.value  # type: ignore[union-attr]
    assert value == user_value
    assert len(loaded.warnings) == 1
    assert "would loosen your setting" in loaded.warnings[0]
    assert "[trust] projects" in loaded.warnings[0]


def test_project_lists_add_to_denylists_and_never_remove(project: Path) -> None:
    user_config(
        """
        [tools.approval]
        denylist = ["run_shell"]
        [tools.sandbox]
        denied_patterns = ["*.secret"]
        [tools.environment]
        denylist = ["MINE_*"]
        """
    )
    project_config(
        project,
        """
        [tools.approval]
        denylist = []
        [tools.sandbox]
        denied_patterns = ["more/**"]
        [tools.environment]
        denylist = []
        """,
    )
    t = load(project).config.tools
    assert t.approval.denylist == ["run_shell"]
    assert t.sandbox.denied_patterns == ["*.secret", "more/**"]
    assert t.environment.denylist == ["MINE_*"]


def test_trusted_project_may_loosen(project: Path) -> None:
    user_config(f"[trust]\nprojects = [{str(project)!r}]\n")
    project_config(
        project,
        "[tools.approval]\nmode = 'prompt'\nprompt_side_effects = false\n"
        "[tools.sandbox]\ninclude_default_denies = false\n",
    )
    loaded = load(project)
    assert loaded.trusted
    assert loaded.config.tools.approval.prompt_side_effects is False
    assert loaded.config.tools.sandbox.include_default_denies is False
    assert loaded.warnings == []


def test_trusted_project_cannot_turn_on_auto(project: Path) -> None:
    """The auto mode, under either spelling, is the user's own file's alone."""
    user_config(f"[trust]\nprojects = [{str(project)!r}]\n")
    project_config(project, "[tools.approval]\nmode = 'auto'\n[permissions]\nmode = 'auto'\n")
    loaded = load(project)
    assert loaded.config.tools.approval.mode == "prompt"
    assert loaded.config.permissions.mode == "ask"
    assert len(loaded.warnings) == 2
    assert all("Only your own config file" in w for w in loaded.warnings)


@pytest.mark.parametrize("trusted", [False, True])
def test_sandbox_keys_are_the_users_own_even_for_a_trusted_project(
    project: Path, trusted: bool
) -> None:
    """sandbox = "none", extra mounts, network patterns, a higher process cap and
    read-only auto-approval: only the user's own file may set them."""
    user_config(f"[trust]\nprojects = [{str(project)!r}]\n" if trusted else "")
    project_config(
        project,
        """
        [tools.shell]
        sandbox = "none"
        sandbox_read_paths = ["~/.ssh"]
        sandbox_write_paths = ["/"]
        network_commands = ["*"]
        max_processes = 100000
        [tools.approval]
        read_only_commands = "auto"
        """,
    )
    loaded = load(project)
    shell = loaded.config.tools.shell
    assert shell.sandbox == "auto"
    assert shell.sandbox_read_paths == [] and shell.sandbox_write_paths == []
    assert shell.network_commands == [] and shell.max_processes == 512
    assert loaded.config.tools.approval.read_only_commands == "prompt"
    assert sum("Only your own config file" in w for w in loaded.warnings) == 6


def test_a_project_may_tighten_the_sandbox(project: Path) -> None:
    project_config(project, "[tools.shell]\nsandbox = 'bwrap'\nmax_processes = 64\n")
    shell = load(project).config.tools.shell
    assert shell.sandbox == "bwrap" and shell.max_processes == 64


def test_project_cannot_trust_itself(project: Path) -> None:
    project_config(
        project, f"[trust]\nprojects = [{str(project)!r}]\n[tools.approval]\nmode = 'auto'\n"
    )
    loaded = load(project)
    assert not loaded.trusted
    assert loaded.config.tools.approval.mode == "prompt"
    assert any("[trust] is ignored" in w for w in loaded.warnings)


def test_non_safety_settings_are_free_for_the_project(project: Path) -> None:
    project_config(
        project,
        "[tools.timeouts]\ndefault_seconds = 120\n[tools.read_file]\nmax_file_read_bytes = 4096\n",
    )
    cfg = load(project).config
    assert cfg.tools.timeouts.default_seconds == 120
    assert cfg.tools.read_file.max_file_read_bytes == 4096


def test_project_config_symlink_out_of_the_root_is_refused(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("[tools.approval]\nmode = 'deny'\n")
    (project / ".forj").mkdir()
    (project / ".forj" / "config.toml").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="must be a regular file inside the project"):
        load(project)


def test_loosening_is_reported_in_hello(make_worker: MakeWorker, project: Path) -> None:
    project_config(project, "[tools.approval]\nmode = 'auto'\n")
    hello = make_worker().hello_payload({})
    assert hello["config"]["effective"]["tools"]["approval"]["mode"] == "prompt"
    assert len(hello["warnings"]) == 1 and "approval.mode" in hello["warnings"][0]


# --- fuzz: any TOML document is either a valid config or a clear error ----------

_scalar = st.one_of(
    st.booleans(), st.integers(-5, 10**9), st.text(max_size=12), st.floats(allow_nan=False)
)
_keys = st.sampled_from(
    [
        "mode",
        "allowlist",
        "denylist",
        "enabled",
        "max_bytes",
        "allowed_roots",
        "allow_absolute",
        "x",
        "default_seconds",
    ]
)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return (
            '"'
            + value.replace("\\", "\\\\")
            .replace('"', '\\"')
            .encode("unicode_escape")
            .decode()
            .replace("\\\\", "\\")
            + '"'
        )
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    section=st.sampled_from(
        [
            "tools",
            "tools.approval",
            "tools.sandbox",
            "tools.output",
            "tools.timeouts",
            "trust",
            "nope",
        ]
    ),
    entries=st.dictionaries(_keys, st.one_of(_scalar, st.lists(_scalar, max_size=3)), max_size=4),
)
def test_fuzz_config_files_validate_or_fail_clearly(
    project: Path, section: str, entries: dict
) -> None:
    body = "\n".join(f"{k} = {_toml(v)}" for k, v in entries.items())
    project_config(project, f"[{section}]\n{body}\n")
    try:
        loaded = load(project)
    except ConfigError as exc:
        assert str(project / ".forj" / "config.toml") in str(exc)
        return
    # Whatever the project said, the user's defaults were never loosened.
    t = loaded.config.tools
    assert t.approval.mode in ("prompt", "deny")
    assert t.sandbox.allow_absolute is False
    assert t.sandbox.include_default_denies is True
    assert t.approval.allowlist == []


# --- the editor's options (--settings): they count as the user's file -----------------


def _settings(*items: tuple[str, object, str]) -> str:
    import json

    return json.dumps([{"key": k, "value": v, "option": o} for k, v, o in items])


def test_settings_override_the_users_file_and_show_in_hello(
    project: Path, make_worker: MakeWorker
) -> None:
    from forj_py.config import describe, parse_settings

    user_config(
        "[tools.timeouts]\nshell_commands_seconds = 100\n[tools.output]\nmax_bytes = 50000\n"
    )
    settings = parse_settings(
        _settings(
            ("tools.timeouts.shell_commands_seconds", 45, "forj-worker-shell-timeout"),
            ("tools.read_file.max_file_read_bytes", 4096, "forj-worker-max-file-read-bytes"),
            ("tools.timeouts.default_seconds", 2.5, "forj-worker-default-timeout"),
        )
    )
    loaded = load(project, settings=settings)
    tools = loaded.config.tools
    assert tools.timeouts.shell_commands_seconds == 45
    assert tools.read_file.max_file_read_bytes == 4096
    assert tools.timeouts.default_seconds == 2.5
    assert tools.output.max_bytes == 50000  # the file's own keys stay
    shown = describe(loaded)
    assert shown["effective"]["tools"]["read_file"]["max_file_read_bytes"] == 4096
    assert shown["settings"][0] == {
        "key": "tools.timeouts.shell_commands_seconds",
        "value": 45,
        "option": "forj-worker-shell-timeout",
    }


@pytest.mark.parametrize(
    ("file_mode", "option_mode", "effective"),
    [
        ("parse_only", "enabled", "parse_only"),
        ("enabled", "disabled", "disabled"),
        ("enabled", "parse_only", "parse_only"),
    ],
)
def test_settings_tools_mode_the_stricter_wins(
    project: Path, file_mode: str, option_mode: str, effective: str
) -> None:
    from forj_py.config import parse_settings

    user_config(f"[tools]\nmode = {file_mode!r}\n")
    settings = parse_settings(_settings(("tools.mode", option_mode, "forj-tools-mode")))
    assert load(project, settings=settings).config.tools.mode.value == effective


def test_settings_count_as_the_users_file_for_a_project(project: Path) -> None:
    """A project may tighten what an option set, and loosen none of it."""
    from forj_py.config import parse_settings

    project_config(project, "[tools.approval]\nmode = 'auto'\n")
    settings = parse_settings(_settings(("tools.approval.mode", "deny", "forj-approval")))
    loaded = load(project, settings=settings)
    assert loaded.config.tools.approval.mode == "deny"
    assert "would loosen your setting 'deny'" in loaded.warnings[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _settings(("tools.timeouts.shell_commands_seconds", 0, "forj-worker-shell-timeout")),
            "forj-worker-shell-timeout (tools.timeouts.shell_commands_seconds): got 0; "
            "Input should be greater than 0",
        ),
        (
            _settings(("tools.output.max_bytes", "lots", "forj-worker-max-output-bytes")),
            "forj-worker-max-output-bytes (tools.output.max_bytes): got 'lots'; "
            "Input should be a valid integer",
        ),
        (
            _settings(("tools.timeouts.shel_seconds", 3, "forj-worker-typo")),
            "forj-worker-typo (tools.timeouts.shel_seconds): not a configuration key forj knows",
        ),
        ('[{"key": "Tools", "value": 1}]', "item 0: key: String should match pattern"),
        ('{"tools": {}}', "must be a JSON array"),
        ("[", "not valid JSON"),
    ],
)
def test_bad_settings_are_errors_naming_the_option(text: str, message: str) -> None:
    from forj_py.config import parse_settings

    with pytest.raises(ConfigError) as info:
        parse_settings(text)
    assert "settings from the editor (--settings)" in str(info.value)
    assert message in str(info.value)


def test_a_real_worker_takes_settings_and_refuses_bad_ones(project: Path) -> None:
    from forj_py.transport.client import Client, WorkerProcess

    good = _settings(
        ("tools.read_file.max_file_read_bytes", 2048, "forj-worker-max-file-read-bytes")
    )
    (project / "big.txt").write_text("x" * 3000)
    with WorkerProcess(project, settings=good) as proc, Client(proc.port) as client:
        hello = client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
        assert hello["config"]["effective"]["tools"]["read_file"]["max_file_read_bytes"] == 2048
        plan = client.call(
            "plan", {"calls": [{"id": "r", "name": "read_file", "args": {"path": "big.txt"}}]}
        )
        done = client.call("execute", {"batch_id": plan["batch_id"]})
        assert "over the 2048-byte limit" in done["results"][0]["error"]["message"]
    bad = _settings(("tools.read_file.max_file_read_bytes", 1, "forj-worker-max-file-read-bytes"))
    with pytest.raises(RuntimeError) as info:
        WorkerProcess(project, settings=bad)
    assert "forj-worker-max-file-read-bytes (tools.read_file.max_file_read_bytes): got 1" in str(
        info.value
    )
