"""The built-in tools, one module per tool (or per family of tools)."""

from __future__ import annotations

from typing import Any

from .ast import AST_TOOLS
from .ast_edit import AstEdit
from .curl import Curl
from .edit import Edit
from .edit_region import EditRegion
from .fs import FsCopy, FsDelete, FsMove
from .git import GIT_TOOLS
from .listing import Glob, ListFiles
from .multi_edit import MultiEdit
from .patch import ApplyPatch, FilePatch
from .proc import ProcList
from .read_file import ReadFile
from .registry import Tool
from .run_tests import RunTests
from .search import Search
from .seed004 import SEED004_TOOLS
from .shell import RunShell
from .task import Task
from .todo_write import TodoWrite
from .validate import Validate
from .write_file import WriteFile


def builtin_tools() -> list[Tool[Any]]:
    """Every tool the worker offers, in no particular order (the registry sorts)."""
    return [
        ReadFile(),
        ListFiles(),
        Glob(),
        Search(),
        WriteFile(),
        EditRegion(),
        MultiEdit(),
        Edit(),
        RunShell(),
        RunTests(),
        TodoWrite(),
        Task(),
        ApplyPatch(),
        FilePatch(),
        FsMove(),
        FsCopy(),
        FsDelete(),
        *(tool() for tool in GIT_TOOLS),
        Validate(),
        *(tool() for tool in SEED004_TOOLS),
        *(tool() for tool in AST_TOOLS),
        AstEdit(),
        Curl(),
        ProcList(),
    ]
