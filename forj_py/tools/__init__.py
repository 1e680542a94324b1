"""The built-in tools, one module per tool (or per family of tools).

:data:`BUILTIN` names each tool and where its class lives.  The worker
does not import these modules when it starts: it reads every tool's name,
flags and schema from ``catalog.json`` and imports a tool's module on the
first call to it.  Adding a tool is one line here, then
``python -m forj_py.tools.catalog`` to write its entry into the catalog
(``tests/test_tool_catalog.py`` fails until the catalog matches the code).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .registry import Registry, Tool, ToolInfo

# Tool name -> "module:Class", the module relative to this package.
BUILTIN: dict[str, str] = {
    "read_file": "read_file:ReadFile",
    "list_files": "listing:ListFiles",
    "glob": "listing:Glob",
    "search": "search:Search",
    "write_file": "write_file:WriteFile",
    "edit_region": "edit_region:EditRegion",
    "multi_edit": "multi_edit:MultiEdit",
    "edit": "edit:Edit",
    "run_shell": "shell:RunShell",
    "run_tests": "run_tests:RunTests",
    "todo_write": "todo_write:TodoWrite",
    "load_tools": "load_tools:LoadTools",
    "task": "task:Task",
    "apply_patch": "patch:ApplyPatch",
    "file_patch": "patch:FilePatch",
    "fs_move": "fs:FsMove",
    "fs_copy": "fs:FsCopy",
    "fs_delete": "fs:FsDelete",
    "git_status": "git:GitStatus",
    "git_diff": "git:GitDiff",
    "git_log": "git:GitLog",
    "git_add": "git:GitAdd",
    "git_commit": "git:GitCommit",
    "git_checkout": "git:GitCheckout",
    "git_merge": "git:GitMerge",
    "git_rebase": "git:GitRebase",
    "git_push": "git:GitPush",
    "git_pull": "git:GitPull",
    "validate": "validate:Validate",
    "curl": "curl:Curl",
    "proc_list": "proc:ProcList",
    "diagnostics": "diagnostics:Diagnostics",
    "ast_generate": "ast:AstGenerate",
    "ast_query": "ast:AstQuery",
    "ast_validate": "ast:AstValidate",
    "ast_external": "ast:AstExternal",
    "ast_edit": "ast_edit:AstEdit",
    # The other names forj accepts for tools above, as the Tool Runtime SDK
    # calls them: accepted, not offered (compat_names.py).
    "file_read": "compat_names:FileRead",
    "file_write": "compat_names:FileWrite",
    "fs_list": "compat_names:FsList",
    "grep": "compat_names:Grep",
    "shell_exec": "compat_names:ShellExec",
}


# The families a chat may offer the model one at a time.  The core set is
# what most coding work needs (read, list, search, edit, run, plan); every
# other tool belongs to one family, offered when the model loads it with
# ``load_tools`` (or calls one of its tools).  A tool not named here
# (the other names of compat_names.py, a tool registered by a test) is core: never hidden.
CORE = "core"
FAMILIES: dict[str, tuple[str, ...]] = {
    "git": (
        "git_status",
        "git_diff",
        "git_log",
        "git_add",
        "git_commit",
        "git_checkout",
        "git_merge",
        "git_rebase",
        "git_push",
        "git_pull",
    ),
    "files": ("apply_patch", "file_patch", "fs_move", "fs_copy", "fs_delete"),
    "ast": ("ast_generate", "ast_query", "ast_validate", "ast_external", "ast_edit"),
    "tasks": ("task",),
    "web": ("curl",),
    "checks": ("validate", "proc_list", "diagnostics"),
}
# One line per family, for the model: what loading it gives.
FAMILY_PURPOSE: dict[str, str] = {
    "git": "status, diff, log, add, commit, checkout, merge, rebase, push, pull",
    "files": "unified-diff patches; move, copy, delete files",
    "ast": "syntax-tree queries, validation and symbol renames",
    "tasks": "a persistent task list with dependencies",
    "web": "one HTTP request to an allowed domain",
    "checks": "the project's validators; the processes forj started; the editor's diagnostics",
}
_FAMILY_OF = {tool: family for family, tools in FAMILIES.items() for tool in tools}


def family_of(name: str) -> str:
    """The family tool ``name`` belongs to; :data:`CORE` for any tool of no family."""
    return _FAMILY_OF.get(name, CORE)


def tool_class(name: str) -> type[Tool[Any]]:
    """The class of built-in tool ``name``, its module imported now."""
    module, _, attr = BUILTIN[name].partition(":")
    cls: type[Tool[Any]] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    return cls


def builtin_tools() -> list[Tool[Any]]:
    """Every built-in tool, each module imported now (the registry sorts them)."""
    return [tool_class(name)() for name in BUILTIN]


def builtin_registry(catalog: dict[str, dict[str, Any]] | None = None) -> Registry:
    """The built-in tools as the worker serves them: each imported on its first call.

    ``catalog`` defaults to ``catalog.json``.  A tool missing from it (added
    without regenerating the catalog) is imported and its schema generated
    now: slower, never wrong.
    """
    if catalog is None:
        from .catalog import load_catalog

        catalog = load_catalog()
    registry = Registry()
    for name in BUILTIN:
        known = catalog.get(name)
        if known is None:
            registry.register(tool_class(name)())
            continue
        registry.register_lazy(
            ToolInfo(
                name,
                known["description"],
                known["side_effecting"],
                known["requires_approval"],
                known["runs_commands"],
                known["matches_words"],
                known["alias_of"],
            ),
            known["parameters"],
            _loader(name),
        )
    return registry


def _loader(name: str) -> Callable[[], Tool[Any]]:
    return lambda: tool_class(name)()
