"""The configured defaults are the seeds' (seed 004 section 9, via the design decisions)."""

from __future__ import annotations

from forj_py.config import Config
from forj_py.tools import builtin_tools
from forj_py.tools.proc import DEFAULT_LIMIT, ProcListArgs


def test_seed_004_section_9_defaults() -> None:
    config = Config()
    tools = {tool.name: tool for tool in builtin_tools()}
    # Seed 004: git 30 s, curl 15 s, grep 10 s, 5 MiB capture and HTTP body.
    assert tools["git_status"].timeout(config) == config.tools.git.timeout_seconds == 30
    assert tools["git_push"].timeout(config) == 30
    assert config.tools.curl.timeout_seconds == 15
    assert config.tools.curl.max_bytes == 5 << 20
    assert tools["search"].timeout(config) == config.tools.search.timeout_seconds == 10
    assert config.tools.shell.max_capture_bytes == 5 << 20
    # proc_list: at most 50 rows unless asked.
    assert ProcListArgs().limit == DEFAULT_LIMIT == 50
    # File operations and shell commands keep seed 000's values.
    assert tools["read_file"].timeout(config) == config.tools.timeouts.file_operations_seconds == 30
    assert tools["run_shell"].timeout(config) == config.tools.timeouts.shell_commands_seconds == 300
    assert config.tools.timeouts.default_seconds == 30
    # Safety switches this work added are off until the user's own file turns them on.
    assert config.network.allowed_domains == []
    assert config.tools.git.run_hooks is False
