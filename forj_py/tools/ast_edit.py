"""``ast_edit``: a structural edit, ``rename_symbol``, as one reviewed multi-file change.

The target is a definition from ``ast_query`` (its id).  Every file of the
same language family that the index knows (or those the ``paths`` globs
name) is parsed, and each identifier token spelled like the old name is
given the new one: strings and comments are never touched, because they
are not identifiers.  The rename goes by spelling, not by type: an
unrelated identifier of the same name in those files is renamed too, and
the result says how many sites per file so the review can judge.

Every changed file is parsed again before anything is proposed: a rename
that leaves a file with more syntax errors than it had (a keyword as the
new name) is refused.  The change is then the writing tools' own: one
diff per file in the review, the approved diffs checked again before
writing, backups, an all-or-nothing write (:func:`_edit.commit_all`), the
journal for undo; the index is brought up to date after.

The stale-file rule of the writing tools does not apply: the new text is
computed from each file as it is at planning and again at execution, never
from what the model remembers; a file that changes in between no longer
matches its approved diff, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..config import Config
from ..output import visible_controls
from ..protocol import ErrorCode
from . import _ast_lang as L
from . import _ast_sync as S
from . import _edit
from .registry import Tool, ToolContext

# Identifiers of every language read: letters, digits, "_" (and "$" in JS).
_NAME = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
MAX_FILES = 500


class AstEditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation: Literal["rename_symbol"] = "rename_symbol"
    target_node_id: str = Field(
        min_length=2, max_length=64, description="A definition's id from ast_query"
    )
    new_name: str = Field(min_length=1, max_length=200)
    paths: list[str] | None = Field(
        default=None,
        max_length=100,
        description="Only rename in files matching these globs; default: every indexed file "
        "of the definition's language family",
    )
    dry_run: bool = Field(default=False, description="Only show the diffs; change nothing")


@dataclass
class _File:
    loaded: _edit.Loaded
    new_text: str
    sites: int
    # Identifiers already spelled like the new name: the rename may merge
    # two things into one, which parsing cannot see.
    clashes: int = 0


class AstEdit(Tool[AstEditArgs]):
    name = "ast_edit"
    description = (
        "Rename a symbol across files (operation 'rename_symbol'): the definition given by "
        "target_node_id (from ast_query) and every identifier spelled the same in files of its "
        "language, never strings or comments. Reviewed as one diff per file; refused if a file "
        "would no longer parse. The rename is by name, not by type: check the sites per file."
    )
    Args = AstEditArgs
    side_effecting = True

    def timeout(self, config: Config) -> float:
        return config.tools.ast.edit_timeout_seconds

    def mutates(self, args: AstEditArgs) -> bool:
        return not args.dry_run

    def summary(self, args: AstEditArgs) -> str:
        dry = " [dry run]" if args.dry_run else ""
        return f"Rename symbol {args.target_node_id} to {args.new_name}{dry}"

    def path_globs(self, args: AstEditArgs) -> list[str]:
        # The files are known only when the rename is computed: without
        # paths it may reach any file, so a deny or ask rule on files holds.
        return list(args.paths or ["**"])

    def _stage(self, args: AstEditArgs, ctx: ToolContext) -> tuple[str, list[_File]]:
        if not _NAME.match(args.new_name):
            raise errors.bad_args(
                f"{args.new_name!r} is not an identifier (letters, digits and '_', not "
                "starting with a digit)",
                recovery=["Give new_name as a bare identifier"],
            )
        index = S.open_index(ctx)
        S.refresh_known(ctx, index)
        root = ctx.sandbox.project_root
        target = index.node(root, args.target_node_id)
        if target is None:
            raise L.ast_failure(
                ErrorCode.AST_EDIT,
                f"No definition has the id {args.target_node_id!r} (its file changed or is "
                "not indexed)",
                recovery=["Call ast_query again and use an id from its answer"],
                reason="unknown node",
            )
        files = index.files(root)
        language = files[target.path].language
        if "$" in args.new_name and L.FAMILY[language] != "js":
            raise errors.bad_args(f"{args.new_name!r} is not an identifier in {language}")
        if target.name == args.new_name:
            raise errors.bad_args(f"{target.name} already has that name")
        family = L.FAMILY[language]
        scope = S.matcher(args.paths) if args.paths else None
        candidates = sorted(
            p
            for p, row in files.items()
            if L.FAMILY[row.language] == family and (scope is None or scope.match(p))
        )
        if target.path not in candidates:
            candidates.insert(0, target.path)
        staged: list[_File] = []
        # Index paths are relative to the project root, whatever the call's cwd.
        at_root = dataclasses.replace(ctx, working_dir=root)
        watch = L.Watch(ctx.cancel, S.deadline_of(ctx))
        try:
            for path in candidates:
                ctx.check_cancelled()
                loaded = _edit.load(at_root, path, must_exist=True, enforce_read=False)
                if target.name not in loaded.text:
                    continue
                lang = files[path].language
                data = loaded.text.encode("utf-8")
                tree = L.tree_of(lang, data)
                sites = L.rename_sites(
                    lang, target.kind, tree.root_node, target.name, args.new_name, watch
                )
                if not sites:
                    continue
                new = bytearray(data)
                for start, end, replacement in reversed(sites):
                    new[start:end] = replacement
                after = L.tree_of(lang, bytes(new))
                _, before = L.problems_of(tree.root_node, watch)
                problems, count = L.problems_of(after.root_node, watch)
                if count > before:
                    where = problems[0] if problems else None
                    raise L.ast_failure(
                        ErrorCode.AST_EDIT,
                        f"Renaming {target.name} to {args.new_name} would leave {path} unparseable"
                        + (f" (line {where.line}: {where.message})" if where else "")
                        + "; nothing was changed",
                        recovery=[
                            f"Choose another name: {args.new_name!r} may be a keyword or clash "
                            "with the syntax",
                        ],
                        reason="result does not parse",
                        path=path,
                        problems=[p.json() for p in problems[:5]],
                    )
                clashes = len(
                    L.identifier_sites(lang, target.kind, tree.root_node, args.new_name, watch)
                )
                staged.append(_File(loaded, bytes(new).decode("utf-8"), len(sites), clashes))
                if len(staged) > MAX_FILES:
                    raise L.ast_failure(
                        ErrorCode.AST_EDIT,
                        f"The rename touches more than {MAX_FILES} files; forj proposes smaller "
                        "changes",
                        recovery=["Limit it with paths (globs), one part of the project at a time"],
                        reason="too many files",
                    )
        except L.OutOfTime:
            raise L.ast_failure(
                ErrorCode.AST_EDIT,
                "The time limit came while the files were searched for "
                f"{target.name}; nothing was changed",
                recovery=[
                    "Limit the rename with paths (globs), one part of the project at a time",
                    "Or ask the user to raise [tools.ast] edit_timeout_seconds",
                ],
                reason="time limit",
            ) from None
        if not staged:
            raise L.ast_failure(
                ErrorCode.AST_EDIT,
                f"No identifier {target.name} found to rename",
                recovery=["Call ast_query again: the definition may have changed"],
                reason="nothing to rename",
            )
        return target.name, staged

    def preview(self, args: AstEditArgs, ctx: ToolContext) -> str | None:
        old_name, staged = self._stage(args, ctx)
        if not args.dry_run:
            for f in staged:
                _edit.stage_preview(ctx, f.loaded, f.new_text, read_first=False)
        return _diffs(staged, old_name, args.new_name)

    def execute(self, args: AstEditArgs, ctx: ToolContext) -> Any:
        old_name, staged = self._stage(args, ctx)
        preview = _diffs(staged, old_name, args.new_name)
        if ctx.approved_preview is not None:
            approved = set(_edit.split_file_diffs(ctx.approved_preview))
            for f in staged:
                diff = _review(f, old_name, args.new_name)
                if visible_controls(diff) not in approved:
                    _edit.check_approved(ctx, diff, f.loaded.sp.display)  # raises
            if len(staged) != len(approved):
                raise _edit.stale(
                    "The rename no longer touches the files the user approved; nothing was written",
                    staged[0].loaded.sp,
                    "Files changed between approval and execution",
                )
        backups: list[str | None] = [None] * len(staged)
        if not args.dry_run:
            backups = _edit.commit_all(ctx, [(f.loaded, f.new_text) for f in staged])
            index = S.open_index(ctx)
            S.sync(ctx, index, [f.loaded.sp.display for f in staged])
        return {
            "edited": not args.dry_run,
            "dry_run": args.dry_run,
            "old_name": old_name,
            "new_name": args.new_name,
            "files_touched": [f.loaded.sp.display for f in staged],
            "sites": {f.loaded.sp.display: f.sites for f in staged},
            "total_sites": sum(f.sites for f in staged),
            **(
                {"clashes": {f.loaded.sp.display: f.clashes for f in staged if f.clashes}}
                if any(f.clashes for f in staged)
                else {}
            ),
            "backups": {f.loaded.sp.display: b for f, b in zip(staged, backups, strict=True) if b},
            "note": (
                "identifiers only (strings and comments untouched), by name: every identifier "
                f"spelled {old_name} in these files was renamed; the files were parsed again"
            ),
            "preview": preview,
        }


def _review(f: _File, old_name: str, new_name: str) -> str:
    notes = [f"{f.sites} identifier(s) {old_name} -> {new_name}"]
    if f.clashes:
        notes.append(
            f"{new_name} already appears {f.clashes} time(s) in this file: check the rename "
            "does not merge two names into one"
        )
    return _edit.review(f.loaded.sp.display, f.loaded.text, f.new_text, True, notes)


def _diffs(staged: list[_File], old_name: str, new_name: str) -> str:
    return "".join(_review(f, old_name, new_name) for f in staged)
