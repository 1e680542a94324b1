"""The read-only AST tools: ``ast_generate``, ``ast_query``, ``ast_validate``, ``ast_external``.

``ast_generate`` parses the files its globs name (inside the sandbox, as
``glob`` walks) into the AST index; a file that does not parse is
reported with where, and the batch goes on.  ``ast_query`` answers from
the index after re-checking the files it knows (so it never answers from
a file as it was): definitions with stable ids and spans, or an outline
of the repository, bounded by the output limit and saying what it left
out.  ``ast_validate`` checks definitions against rules (documentation of
exported functions; Rust's ``unwrap``/``panic!``).  ``ast_external`` has
no bridge to a language server and says so.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..config import Config
from ..output import dumps
from ..protocol import ErrorCode
from ..safety.files import read_bytes
from ..store.ast_index import NodeRow
from . import _ast_lang as L
from . import _ast_sync as S
from .registry import Tool, ToolContext

Kind = Literal["fn", "method", "class", "struct", "enum", "interface", "trait", "type", "module"]
Language = Literal["python", "javascript", "typescript", "tsx", "go", "rust", "c"]
assert set(Kind.__args__) == set(L.KINDS)  # type: ignore[attr-defined]
assert set(Language.__args__) == set(L.LANGUAGES)  # type: ignore[attr-defined]


class AstTool:
    """What every AST tool shares: its time limit (building the index may take 5 min)."""

    def timeout(self, config: Config) -> float:
        return config.tools.ast.generate_timeout_seconds


# --- ast_generate ----------------------------------------------------------------------


class GenerateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(
        min_length=1,
        max_length=100,
        description="Glob patterns relative to the project root ('src/**/*.rs', '**/*.py')",
    )
    language: Language | None = Field(
        default=None, description="Only files of this language; default: by extension"
    )
    incremental: bool = Field(
        default=True, description="Skip files unchanged since their last parse (default)"
    )
    max_files: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Parse at most this many files"
    )


class AstGenerate(AstTool, Tool[GenerateArgs]):
    name = "ast_generate"
    description = (
        "Parse source files (Python, JavaScript, TypeScript/TSX, Go, Rust, C) matching the "
        "globs into the AST index that ast_query, ast_edit and ast_validate use. Incremental: "
        "unchanged files are not parsed again. Files that do not parse are listed in errors "
        "with line and column; the others are indexed anyway."
    )
    Args = GenerateArgs

    def summary(self, args: GenerateArgs) -> str:
        lang = f" [{args.language}]" if args.language else ""
        return "AST index " + " ".join(args.paths) + lang

    def path_globs(self, args: GenerateArgs) -> list[str]:
        return list(args.paths)

    def execute(self, args: GenerateArgs, ctx: ToolContext) -> Any:
        files, walker = S.find_files(ctx, args.paths, args.language)
        cap = min(args.max_files or ctx.config.tools.ast.max_files, ctx.config.tools.ast.max_files)
        notes = []
        if len(files) > cap:
            notes.append(
                f"{len(files)} files match; only the first {cap} (by path) were looked at: "
                "narrow the globs, or raise max_files / [tools.ast] max_files"
            )
            files = files[:cap]
        for language in sorted({L.language_of(f) or "" for f in files} - {""}):
            L.grammar(language)  # not installed: say so before anything is parsed
        index = S.open_index(ctx)
        report = S.sync(
            ctx, index, files, incremental=args.incremental, deadline=S.deadline_of(ctx)
        )
        result: dict[str, Any] = {
            "parsed_files": len(report.parsed),
            "unchanged_files": report.unchanged,
            "matched_files": len(files),
            "languages": dict(sorted(report.languages.items())),
            "errors": report.errors,
        }
        notes += S.wire_report(report, result)
        if not files:
            notes.append(
                "no file matched in a language the AST tools read ("
                + ", ".join(sorted(set(L.EXTENSIONS)))
                + "); check the globs with the glob tool"
            )
        if walker.excluded:
            notes.append(
                f"{walker.excluded} entries skipped by default (vendored directories, binary "
                "files); a glob that spells one out reaches it"
            )
        if report.errors:
            notes.append(
                f"{len(report.errors)} file(s) do not parse; their definitions before the "
                "error are indexed, read the lines named to fix them"
            )
        if notes:
            result["note"] = ". ".join(notes)
        return result


# --- where, shared by ast_query and ast_validate -----------------------------------------


class Where(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Kind | None = Field(default=None, description="Kind of definition")
    name_like: str | None = Field(
        default=None,
        max_length=200,
        description="Name pattern: '*' any run, '?' one character ('auth*'); case-sensitive",
    )
    file_glob: str | None = Field(
        default=None, max_length=500, description="Only files matching this glob ('src/**')"
    )
    exported: bool | None = Field(
        default=None, description="Public to other modules, by the language's own rule"
    )
    documented: bool | None = Field(default=None, description="Has a docstring/doc comment")
    language: Language | None = None


def select(nodes: list[NodeRow], where: Where, languages: dict[str, str]) -> list[NodeRow]:
    name_re = re.compile(fnmatch.translate(where.name_like)) if where.name_like else None
    file_match = S.matcher([where.file_glob]) if where.file_glob else None
    out = []
    for n in nodes:
        if where.type is not None and n.kind != where.type:
            continue
        if where.exported is not None and n.exported != where.exported:
            continue
        if where.documented is not None and n.documented != where.documented:
            continue
        if where.language is not None and languages.get(n.path) != where.language:
            continue
        if name_re is not None and not name_re.match(n.name):
            continue
        if file_match is not None and not file_match.match(n.path):
            continue
        out.append(n)
    return out


def wire_node(n: NodeRow) -> dict[str, Any]:
    return {
        "id": n.id,
        "type": n.kind,
        "name": n.name,
        "qualname": n.qualname,
        "file": n.path,
        "span": {"start": n.start_byte, "end": n.end_byte},
        "lines": {"start": n.start_line, "end": n.end_line},
        "exported": n.exported,
        "documented": n.documented,
    }


# --- ast_query -------------------------------------------------------------------------


class QueryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    where: Where = Field(default_factory=Where)
    limit: int = Field(default=200, ge=1, le=5000)
    mode: Literal["nodes", "outline"] = Field(
        default="nodes",
        description="'nodes': matching definitions with ids and spans; 'outline': a compact "
        "map of the definitions file by file (for context), bounded by max_chars",
    )
    max_chars: int = Field(default=12_000, ge=200, le=1_000_000, description="Outline size cap")


class AstQuery(AstTool, Tool[QueryArgs]):
    name = "ast_query"
    description = (
        "Find definitions in the AST index (build it with ast_generate): where {type: fn|method|"
        "class|struct|enum|interface|trait|type|module, name_like, file_glob, exported, "
        "documented, language}. Nodes carry stable ids (for ast_edit), byte spans and lines. "
        "mode 'outline' gives a compact repository map of definitions instead."
    )
    Args = QueryArgs

    def summary(self, args: QueryArgs) -> str:
        shown = {k: v for k, v in args.where.model_dump().items() if v is not None}
        return f"AST {args.mode} " + (", ".join(f"{k}={v}" for k, v in shown.items()) or "all")

    def execute(self, args: QueryArgs, ctx: ToolContext) -> Any:
        index = S.open_index(ctx)
        report = S.refresh_known(ctx, index)
        root = ctx.sandbox.project_root
        languages = {p: r.language for p, r in index.files(root).items()}
        found = select(index.nodes(root), args.where, languages)
        result: dict[str, Any] = {}
        notes = S.wire_report(report, result)
        if report.parsed:
            notes.append(f"{len(report.parsed)} changed file(s) were parsed again first")
        if args.mode == "outline":
            result["outline"], note = outline(found, min(args.max_chars, ctx.output_limit // 2))
            result["definitions"] = len(found)
            if note:
                notes.append(note)
        else:
            nodes = []
            budget = ctx.output_limit // 2
            used = 0
            for n in found[: args.limit]:
                wired = wire_node(n)
                used += len(dumps(wired)) + 1
                if used > budget:
                    break
                nodes.append(wired)
            result["nodes"] = nodes
            result["total"] = len(found)
            if len(nodes) < len(found):
                notes.append(
                    f"showing {len(nodes)} of {len(found)} matches ("
                    + ("limit" if len(nodes) == args.limit else "output limit")
                    + "); narrow where (file_glob, name_like, type) to see the rest"
                )
        if notes:
            result["note"] = ". ".join(notes)
        return result


def outline(nodes: list[NodeRow], max_chars: int) -> tuple[str, str | None]:
    """Definitions file by file, members indented: ``fn name L10-24``, cut at ``max_chars``."""
    by_file: dict[str, list[NodeRow]] = {}
    for n in nodes:
        by_file.setdefault(n.path, []).append(n)
    parts: list[str] = []
    used = files_shown = defs_shown = 0
    for path, defs in by_file.items():
        lines = [path]
        for d in defs:
            depth = d.qualname.count(".")
            mark = "" if d.exported else " (private)"
            lines.append(
                f"{'  ' * (depth + 1)}{d.kind} {d.name} L{d.start_line}-{d.end_line}{mark}"
            )
        block = "\n".join(lines) + "\n"
        if used + len(block) > max_chars:
            # Part of the file, if its first lines fit: a file shown is never
            # presented as whole when it is not.
            room = max_chars - used
            kept = []
            size = 0
            for line in lines:
                if size + len(line) + 1 > room:
                    break
                kept.append(line)
                size += len(line) + 1
            if len(kept) > 1:
                parts.append("\n".join(kept) + f"\n  ... {len(lines) - len(kept)} more here\n")
                files_shown += 1
                defs_shown += len(kept) - 1
            break
        parts.append(block)
        used += len(block)
        files_shown += 1
        defs_shown += len(defs)
    text = "".join(parts)
    if defs_shown < len(nodes):
        return text, (
            f"outline cut at {max_chars} characters: {defs_shown} of {len(nodes)} definitions "
            f"in {files_shown} of {len(by_file)} files shown; narrow where.file_glob or "
            "where.type, or raise max_chars"
        )
    return text, None


# --- ast_validate ----------------------------------------------------------------------

CatalogRule = Literal["code.fn.docs.exported", "code.no.unwrap", "code.no.panic.in.lib"]
CATALOG: dict[str, str] = {
    "code.fn.docs.exported": "blocking",
    "code.no.unwrap": "warning",
    "code.no.panic.in.lib": "warning",
}
# Where a test lives (code.no.unwrap), and what is not library code (panic!).
_TEST_PATH = re.compile(r"(^|/)(tests?|benches|examples)/|(^|/)[^/]*_test\.rs$")
_BIN_PATH = re.compile(r"(^|/)(main\.rs|bin/[^/]+\.rs|build\.rs)$")


class AstRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="A catalog rule (code.fn.docs.exported, code.no.unwrap, "
        "code.no.panic.in.lib) or a name of your own with where and must_have",
    )
    enforcement: Literal["blocking", "warning", "suggestion"] | None = None
    where: Where | None = None
    must_have: list[Literal["docstring"]] | None = None


class ValidateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[AstRule] = Field(
        default_factory=list, max_length=50, description="Default: the three catalog rules"
    )
    file_glob: str | None = Field(default=None, max_length=500, description="Only these files")


class AstValidate(AstTool, Tool[ValidateArgs]):
    name = "ast_validate"
    description = (
        "Check the indexed code against rules: code.fn.docs.exported (exported functions, "
        "methods and types need a docstring/doc comment), code.no.unwrap and "
        "code.no.panic.in.lib (Rust), or your own {id, where, must_have: ['docstring']}. "
        "Returns {violations: [{rule, level, file, line, message, node_id}], passed}."
    )
    Args = ValidateArgs

    def summary(self, args: ValidateArgs) -> str:
        return "AST validate " + (", ".join(r.id for r in args.rules) or "catalog rules")

    def execute(self, args: ValidateArgs, ctx: ToolContext) -> Any:
        rules = args.rules or [AstRule(id=r) for r in CATALOG]
        for rule in rules:
            custom = rule.id not in CATALOG
            if custom and (rule.where is None or not rule.must_have):
                raise errors.bad_args(
                    f"Rule {rule.id!r} is not in the catalog ({', '.join(CATALOG)}); give it "
                    "where and must_have: ['docstring']",
                    recovery=["Name a catalog rule, or describe your own with where/must_have"],
                )
        index = S.open_index(ctx)
        report = S.refresh_known(ctx, index)
        root = ctx.sandbox.project_root
        files = index.files(root)
        languages = {p: r.language for p, r in files.items()}
        scope = S.matcher([args.file_glob]) if args.file_glob else None
        nodes = [n for n in index.nodes(root) if scope is None or scope.match(n.path)]
        violations: list[dict[str, Any]] = []
        for rule in rules:
            ctx.check_cancelled()
            level = rule.enforcement or CATALOG.get(rule.id, "blocking")
            if rule.id in ("code.no.unwrap", "code.no.panic.in.lib"):
                rust = [p for p, lang in languages.items() if lang == "rust"]
                rust = [p for p in rust if scope is None or scope.match(p)]
                violations += _rust_calls(ctx, rule.id, level, rust)
                continue
            where = rule.where
            if where is None:  # code.fn.docs.exported
                where = Where(exported=True)
            picked = select(nodes, where, languages)
            if rule.id == "code.fn.docs.exported" and rule.where is None:
                picked = [n for n in picked if n.kind != "module"]
            for n in picked:
                if not n.documented:
                    violations.append(
                        {
                            "rule": rule.id,
                            "level": level,
                            "file": n.path,
                            "line": n.start_line,
                            "message": f"{n.kind} {n.qualname} has no "
                            + _doc_word(languages[n.path]),
                            "node_id": n.id,
                        }
                    )
        order = ("blocking", "warning", "suggestion")
        violations.sort(key=lambda v: (order.index(v["level"]), v["file"], v["line"]))
        result: dict[str, Any] = {
            "violations": violations,
            "checked": [r.id for r in rules],
            "passed": not any(v["level"] == "blocking" for v in violations),
        }
        notes = S.wire_report(report, result)
        if notes:
            result["note"] = ". ".join(notes)
        return result


def _doc_word(language: str) -> str:
    return {
        "python": "docstring",
        "rust": "doc comment (///)",
        "go": "doc comment",
        "c": "comment before it",
    }.get(language, "JSDoc comment (/** */)")


def _rust_calls(ctx: ToolContext, rule: str, level: str, paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        if _TEST_PATH.search(path) or (rule == "code.no.panic.in.lib" and _BIN_PATH.search(path)):
            continue
        sp = ctx.sandbox.resolve(path)
        data = read_bytes(ctx.sandbox, sp, ctx.config.tools.ast.max_file_bytes)
        tree = L.tree_of("rust", data)
        for seen, node in enumerate(L._walk(tree.root_node, lambda n: not _is_test_item(n))):
            if seen % L.CHECK_EVERY == L.CHECK_EVERY - 1:
                ctx.check_cancelled()
            line = node.start_point[0] + 1
            if rule == "code.no.unwrap" and node.type == "call_expression":
                fn = node.child_by_field_name("function")
                field = fn.child_by_field_name("field") if fn is not None else None
                if (
                    fn is not None
                    and fn.type == "field_expression"
                    and field is not None
                    and (field.text == b"unwrap")
                ):
                    out.append(
                        {
                            "rule": rule,
                            "level": level,
                            "file": path,
                            "line": line,
                            "message": ".unwrap() outside tests: handle the error or use "
                            "expect() with a reason",
                        }
                    )
            elif rule == "code.no.panic.in.lib" and node.type == "macro_invocation":
                macro = node.child_by_field_name("macro")
                if macro is not None and macro.text == b"panic":
                    out.append(
                        {
                            "rule": rule,
                            "level": level,
                            "file": path,
                            "line": line,
                            "message": "panic! in library code: return an error instead",
                        }
                    )
    return out


def _is_test_item(node: Any) -> bool:
    """A ``#[cfg(test)]`` module or a ``#[test]`` function: not looked into."""
    if node.type not in ("mod_item", "function_item"):
        return False
    prev = node.prev_sibling
    while prev is not None and prev.type in ("attribute_item", "line_comment"):
        text = (prev.text or b"").replace(b" ", b"")
        if text in (b"#[cfg(test)]", b"#[test]"):
            return True
        prev = prev.prev_sibling
    return False


# --- ast_external ----------------------------------------------------------------------


class ExternalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1, max_length=100, description="e.g. 'rust-analyzer'")
    request: dict[str, Any] = Field(description="The request, e.g. an LSP method and params")


class AstExternal(AstTool, Tool[ExternalArgs]):
    name = "ast_external"
    description = (
        "Ask an external analyzer (a language server) for what tree-sitter cannot tell "
        "(types, references). No bridge is configured in this forj: the call says so; use "
        "ast_query and search instead."
    )
    Args = ExternalArgs

    def summary(self, args: ExternalArgs) -> str:
        method = args.request.get("method")
        return f"External AST {args.provider}" + (f" {method}" if isinstance(method, str) else "")

    def execute(self, args: ExternalArgs, ctx: ToolContext) -> Any:
        raise L.ast_failure(
            ErrorCode.AST_PARSE,
            f"No external analyzer is available: forj has no language-server bridge, so "
            f"{args.provider!r} cannot be asked",
            recovery=[
                "Use ast_query for definitions and search for references instead",
                "Do not retry: this forj cannot start language servers",
            ],
            reason="not available",
            provider=args.provider,
        )


AST_TOOLS: list[type[Tool[Any]]] = [AstGenerate, AstQuery, AstValidate, AstExternal]
