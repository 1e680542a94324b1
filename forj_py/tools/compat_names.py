"""The Tool Runtime SDK's names for tools forj already has.

Clients written against that SDK (and models trained on it) call
``file_read``, ``file_write``, ``fs_list``, ``grep`` and ``shell_exec``
with its argument shapes and expect its result shapes. Each name here is
a thin adapter over forj's own tool: the arguments are translated, the
call is planned, reviewed and executed by the real tool (same sandbox,
stale-file rule, backups, journal), and only the result is reshaped.

The adapters are accepted under their names but not advertised: a model
told about both ``read_file`` and ``file_read`` would have two tools for
one job.
"""

from __future__ import annotations

import os
import stat
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import errors
from ..config import Config
from ..protocol import RiskLevel
from .listing import Glob
from .read_file import ReadFile
from .registry import Tool, ToolContext
from .search import Search
from .shell import RunShell
from .write_file import WriteFile

A = TypeVar("A", bound=BaseModel)


class _Adapter(Tool[A], Generic[A]):
    """Plans and runs a call as ``target`` would, with translated arguments."""

    target: ClassVar[Tool[Any]]

    def translate(self, args: A) -> dict[str, Any]:
        raise NotImplementedError

    def reshape(self, result: Any, args: A, ctx: ToolContext) -> Any:
        return result

    def inner(self, args: A) -> Any:
        # Parsed by the target's own model, so its validators (NUL bytes,
        # line ranges, env names) judge the translated call too.
        try:
            return self.target.parse(self.translate(args))
        except errors.ToolFailure:
            raise
        except ValueError as exc:
            raise errors.bad_args(
                f"{self.name}: {exc}",
                recovery=[f"Check the arguments against {self.name}'s schema"],
            ) from exc

    def as_rules_see_it(
        self, args: A, raw: dict[str, Any]
    ) -> tuple[Tool[Any], Any, dict[str, Any]]:
        return self.target, self.inner(args), self.translate(args)

    def mutates(self, args: A) -> bool:
        return self.target.mutates(self.inner(args))

    def risk(self, args: A) -> RiskLevel:
        return self.target.risk(self.inner(args))

    def summary(self, args: A) -> str:
        return self.target.summary(self.inner(args))

    def paths(self, args: A) -> list[str]:
        return self.target.paths(self.inner(args))

    def path_globs(self, args: A) -> list[str]:
        return self.target.path_globs(self.inner(args))

    def command(self, args: A) -> list[str] | str | None:
        return self.target.command(self.inner(args))

    def preview(self, args: A, ctx: ToolContext) -> str | None:
        return self.target.preview(self.inner(args), ctx)

    def review_notes(self, args: A, ctx: ToolContext) -> list[str]:
        return self.target.review_notes(self.inner(args), ctx)

    def summary_tags(self, args: A, ctx: ToolContext) -> list[str]:
        return self.target.summary_tags(self.inner(args), ctx)

    def timeout(self, config: Config) -> float:
        return self.target.timeout(config)

    def execute(self, args: A, ctx: ToolContext) -> Any:
        return self.reshape(self.target.execute(self.inner(args), ctx), args, ctx)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- file_read


class FileReadArgs(_Strict):
    path: str = Field(min_length=1, description="File path relative to the project root")
    max_bytes: int = Field(
        default=1_048_576,
        ge=1,
        le=100_000_000,
        description="At most this many bytes of content come back",
    )


class FileRead(_Adapter[FileReadArgs]):
    name = "file_read"
    description = "Read a file: {content, sha256}. The SDK name for read_file."
    Args = FileReadArgs
    target = ReadFile()
    alias_of = ReadFile.name
    timeout_kind = "file"

    def translate(self, args: FileReadArgs) -> dict[str, Any]:
        return {"path": args.path, "max_bytes": args.max_bytes}

    def reshape(self, result: Any, args: FileReadArgs, ctx: ToolContext) -> Any:
        out = dict(result)
        if result.get("redacted_credentials"):
            # The hash of bytes the model saw all but the secret of would let
            # it test guesses of the secret offline.
            out["sha256"] = None
            out["sha256_note"] = "not given: the content shown has credentials redacted"
        elif result.get("binary"):
            out["sha256"] = None
            out["sha256_note"] = "not given for binary files"
        else:
            sp = ctx.sandbox.resolve(args.path, ctx.working_dir)
            # The hash read_file recorded for the stale-file rule, during this
            # very read: the file's own bytes, whatever the content's cut.
            out["sha256"] = ctx.session.file_reads.get(sp.canonical)
        return out


# --------------------------------------------------------------- file_write


class FileWriteArgs(_Strict):
    path: str = Field(min_length=1, description="File path relative to the project root")
    content: str = Field(description="The full new content")
    attribution: dict[str, Any] | None = Field(
        default=None, description="Who asked for the write (kept in the journal with the call)"
    )
    create_dirs: bool = Field(default=True, description="Create missing parent directories")
    mode_octal: str | None = Field(
        default=None,
        pattern=r"^0?[0-7]{3}$",
        description="Permission bits for the file, e.g. '0644' (no setuid, setgid or sticky, "
        "not writable by others)",
    )

    @field_validator("mode_octal")
    @classmethod
    def _not_world_writable(cls, mode: str | None) -> str | None:
        if mode is not None and int(mode, 8) & 0o002:
            raise ValueError(f"mode {mode} lets every user write the file; drop the last 2")
        return mode


class FileWrite(_Adapter[FileWriteArgs]):
    name = "file_write"
    description = "Write a whole file: {written, bytes}. The SDK name for write_file."
    Args = FileWriteArgs
    target = WriteFile()
    alias_of = WriteFile.name
    side_effecting = True
    timeout_kind = "file"

    def translate(self, args: FileWriteArgs) -> dict[str, Any]:
        return {"path": args.path, "content": args.content}

    def summary(self, args: FileWriteArgs) -> str:
        mode = f" [mode {args.mode_octal}]" if args.mode_octal else ""
        return super().summary(args) + mode

    def preview(self, args: FileWriteArgs, ctx: ToolContext) -> str | None:
        self._check_parent(args, ctx)
        return super().preview(args, ctx)

    def review_notes(self, args: FileWriteArgs, ctx: ToolContext) -> list[str]:
        notes = super().review_notes(args, ctx)
        if args.mode_octal is not None:
            # A mode is not part of the diff; the user sees it here, always.
            notes.append(
                f"Sets the file's mode to {args.mode_octal} after writing it (undo restores "
                "the content, not the mode)"
            )
        return notes

    def execute(self, args: FileWriteArgs, ctx: ToolContext) -> Any:
        self._check_parent(args, ctx)
        result = self.target.execute(self.inner(args), ctx)
        if args.mode_octal is not None:
            self._set_mode(args, ctx, int(args.mode_octal, 8))
        return {
            "written": True,
            "bytes": result.get("bytes_written", len(args.content.encode("utf-8"))),
            "path": result.get("path", args.path),
            "created": result.get("created", False),
            "backup_path": result.get("backup_path"),
        }

    def _set_mode(self, args: FileWriteArgs, ctx: ToolContext, mode: int) -> None:
        sp = ctx.sandbox.resolve(args.path, ctx.working_dir, for_write=True)
        # Opened without following a link and changed through the descriptor:
        # a link swapped in after the write cannot aim the chmod elsewhere.
        try:
            fd = os.open(sp.canonical, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise errors.file_error(
                f"{sp.display} was written but its mode was not set: {exc.strerror}",
                sp.display,
                recovery=["Read the path to see what is there now"],
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise errors.file_error(
                    f"{sp.display} is no longer a regular file; its mode was not set",
                    sp.display,
                    recovery=["Read the path to see what is there now"],
                )
            os.fchmod(fd, mode & 0o777)
        finally:
            os.close(fd)

    def _check_parent(self, args: FileWriteArgs, ctx: ToolContext) -> None:
        if args.create_dirs:
            return
        sp = ctx.sandbox.resolve(args.path, ctx.working_dir)
        parent = os.path.dirname(sp.canonical)
        if not os.path.isdir(parent):
            raise errors.file_error(
                f"The directory of {sp.display} does not exist (create_dirs is false)",
                sp.display,
                recovery=["Set create_dirs to true, or write to an existing directory"],
            )


# ------------------------------------------------------------------ fs_list


class FsListArgs(_Strict):
    glob: str = Field(min_length=1, description="Glob relative to the project root ('src/**')")
    max_results: int = Field(default=5000, ge=1, le=100_000)
    include_hidden: bool = Field(default=False, description="Include names starting with '.'")


class FsList(_Adapter[FsListArgs]):
    name = "fs_list"
    description = "List files matching a glob: {files: [path]}. The SDK name for glob."
    Args = FsListArgs
    target = Glob()
    alias_of = Glob.name
    timeout_kind = "file"

    def translate(self, args: FsListArgs) -> dict[str, Any]:
        return {
            "patterns": [args.glob],
            "max_results": args.max_results,
            "include_hidden": args.include_hidden,
        }

    def reshape(self, result: Any, args: FsListArgs, ctx: ToolContext) -> Any:
        files = [e["path"] for e in result.get("files", []) if e.get("type") != "dir"]
        out: dict[str, Any] = {"files": files, "truncated": bool(result.get("truncated"))}
        if result.get("note"):
            out["note"] = result["note"]
        return out


# --------------------------------------------------------------------- grep


class GrepArgs(_Strict):
    pattern: str = Field(min_length=1, max_length=10_000, description="A regular expression")
    glob: str | None = Field(default=None, description="Only files matching this glob")
    case_sensitive: bool = Field(default=False)
    max_results: int = Field(default=1000, ge=1, le=10_000)


class Grep(_Adapter[GrepArgs]):
    name = "grep"
    description = (
        "Search file contents with a regex: {matches: [{file, line, col, snippet}]}. "
        "The SDK name for search."
    )
    Args = GrepArgs
    target = Search()
    alias_of = Search.name
    timeout_kind = "file"

    def translate(self, args: GrepArgs) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": args.pattern,
            "is_regex": True,
            "case_sensitive": args.case_sensitive,
            "max_results": args.max_results,
        }
        if args.glob:
            out["include_paths"] = [args.glob]
        return out

    def reshape(self, result: Any, args: GrepArgs, ctx: ToolContext) -> Any:
        matches = [
            {
                "file": m["path"],
                "line": m["line"],
                "col": m["column"],
                "snippet": m.get("before", "") + m.get("match_text", "") + m.get("after", ""),
            }
            for m in result.get("matches", [])
        ]
        out: dict[str, Any] = {"matches": matches, "truncated": bool(result.get("truncated"))}
        for key in ("note", "redacted_credentials"):
            if result.get(key):
                out[key] = result[key]
        return out


# --------------------------------------------------------------- shell_exec


class ShellExecArgs(_Strict):
    cmd: list[str] | str = Field(description="argv array, or a string run through /bin/sh -c")
    cwd: str | None = Field(default=None, description="Relative to the project root")
    timeout_ms: int | None = Field(default=None, ge=1, le=86_400_000)
    env: dict[str, str] | None = Field(default=None)
    stdin: str | None = Field(default=None)
    allow_network: bool = Field(default=False)


class ShellExec(_Adapter[ShellExecArgs]):
    name = "shell_exec"
    description = "Run a command: {code, stdout, stderr}. The SDK name for run_shell."
    Args = ShellExecArgs
    target = RunShell()
    alias_of = RunShell.name
    side_effecting = True
    requires_approval = RunShell.requires_approval
    timeout_kind = "shell"
    runs_commands = True

    def translate(self, args: ShellExecArgs) -> dict[str, Any]:
        out: dict[str, Any] = {"cmd": args.cmd, "allow_network": args.allow_network}
        if args.cwd is not None:
            out["cwd"] = args.cwd
        if args.timeout_ms is not None:
            out["timeout"] = args.timeout_ms / 1000
        if args.env is not None:
            out["env"] = args.env
        if args.stdin is not None:
            out["stdin"] = args.stdin
        return out

    def reshape(self, result: Any, args: ShellExecArgs, ctx: ToolContext) -> Any:
        return {"code": result.get("exit_code"), **result}


COMPAT_TOOLS: tuple[type[Tool[Any]], ...] = (FileRead, FileWrite, FsList, Grep, ShellExec)
