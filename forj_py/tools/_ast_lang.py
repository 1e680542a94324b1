"""The languages the AST tools read, and what a definition is in each.

Grammars are the prebuilt tree-sitter wheels, one per language, imported
when a file of that language is first parsed (the ``ast`` extra).  For
each language this module knows which syntax nodes are definitions, what
kind each is (``fn``, ``method``, ``class``...), where its name is, whether
it is exported (public to other modules by that language's own rule) and
whether it carries documentation; and which node types are identifiers,
the only tokens a rename touches (never strings or comments).

:func:`parse` turns bytes into a :class:`Parsed`: the syntax errors (line
and column of each) and the definitions, with ids stable across re-parses
(a hash of file, kind, qualified name and ordinal, not of position).
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..errors import ToolFailure
from ..protocol import ErrorCode, ErrorKind, ErrorType

# The kinds a definition can be: the vocabulary of ``where.type``.
KINDS = ("fn", "method", "class", "struct", "enum", "interface", "trait", "type", "module")

# Extension -> language.  No Emacs Lisp: no grammar for it ships as a wheel
# (the ``.el`` reader check of the writing tools covers those files).
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
}
LANGUAGES = ("python", "javascript", "typescript", "tsx", "go", "rust", "c")
# Languages whose files refer to each other's names: a rename crosses them.
FAMILY = {
    "python": "python",
    "javascript": "js",
    "typescript": "js",
    "tsx": "js",
    "go": "go",
    "rust": "rust",
    "c": "c",
}
# (module, function returning the grammar)
_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
}
INSTALL_HINT = "pip install 'forj[ast]'"
MAX_ERRORS_PER_FILE = 20
# The walks of a tree look at the call's cancel and deadline every this many nodes.
CHECK_EVERY = 2048


def ast_failure(
    code: ErrorCode, message: str, *, recovery: list[str], **details: Any
) -> ToolFailure:
    """A failure of the AST tools, carrying its seed code (E_AST_PARSE, E_AST_EDIT)."""
    return ToolFailure(
        ErrorType.VALIDATION,
        message,
        kind=ErrorKind.EXECUTION_FAILED,
        recovery=recovery,
        code=code.value,
        **details,
    )


def language_of(path: str) -> str | None:
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower()) if dot > path.rfind("/") else None


_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def grammar(language: str) -> Any:
    """The tree-sitter ``Language`` of ``language``; a clear error when not installed."""
    with _lock:
        found = _loaded.get(language)
        if found is not None:
            return found
        module_name, attr = _GRAMMARS[language]
        try:
            import tree_sitter

            module = importlib.import_module(module_name)
            found = tree_sitter.Language(getattr(module, attr)())
        except ImportError as exc:
            raise ast_failure(
                ErrorCode.AST_PARSE,
                f"The AST tools are not installed (missing {exc.name or module_name}): "
                f"{INSTALL_HINT}",
                recovery=[
                    f"Ask the user to run {INSTALL_HINT} in forj's Python environment "
                    "(make install does it), then restart the worker",
                    "Meanwhile, use search and read_file to find definitions",
                ],
                reason="not installed",
            ) from None
        _loaded[language] = found
        return found


def available() -> str | None:
    """None when every grammar loads; else why not (the install hint)."""
    try:
        for language in LANGUAGES:
            grammar(language)
    except ToolFailure as failure:
        return failure.error.message
    return None


class OutOfTime(Exception):
    """The call's time limit came while a file's syntax tree was being searched."""


@dataclass(frozen=True)
class Watch:
    """What ends a search of a syntax tree early: the call's cancel, its deadline.

    Searching a tree holds the interpreter for as long as it runs, so the
    searches themselves look at these, and nothing waits on them to return.
    """

    cancel: threading.Event | None = None
    deadline: float | None = None  # time.monotonic()

    def due(self) -> bool:
        return (self.cancel is not None and self.cancel.is_set()) or (
            self.deadline is not None and time.monotonic() > self.deadline
        )

    def check(self) -> None:
        """Raise the cancel (a tool failure) or :class:`OutOfTime` when either came."""
        if self.cancel is not None and self.cancel.is_set():
            raise errors.cancelled()
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime()


NO_WATCH = Watch()


def tree_of(language: str, data: bytes) -> Any:
    import tree_sitter

    return tree_sitter.Parser(grammar(language)).parse(data)


# --- what the parse yields ---------------------------------------------------------


@dataclass(frozen=True)
class SyntaxProblem:
    line: int  # 1-based
    column: int  # 1-based, in bytes
    message: str

    def json(self) -> dict[str, Any]:
        return {"line": self.line, "column": self.column, "message": self.message}


@dataclass
class Definition:
    id: str
    kind: str
    name: str
    qualname: str
    start_byte: int
    end_byte: int
    start_line: int  # 1-based
    end_line: int
    exported: bool
    documented: bool


@dataclass
class Parsed:
    language: str
    problems: list[SyntaxProblem] = field(default_factory=list)
    error_count: int = 0
    definitions: list[Definition] = field(default_factory=list)


def problems_of(root: Any, watch: Watch = NO_WATCH) -> tuple[list[SyntaxProblem], int]:
    """Where the parse failed: every ERROR and MISSING node (the first few described).

    A problem names its place and the kind of token found there, never the
    text: the file may hold a secret, and the message goes to the model.
    """
    found: list[SyntaxProblem] = []
    count = 0
    if not root.has_error:
        return found, 0
    for seen, node in enumerate(_walk(root, lambda n: n.has_error)):
        if seen % CHECK_EVERY == CHECK_EVERY - 1:
            watch.check()
        if node.is_missing or node.type == "ERROR":
            count += 1
            if len(found) < MAX_ERRORS_PER_FILE:
                row, col = node.start_point
                message = f"missing {node.type!r}" if node.is_missing else _unexpected(node)
                found.append(SyntaxProblem(row + 1, col + 1, message))
    return found, count


def _unexpected(error: Any) -> str:
    """What an ERROR node starts with, as the grammar names it (``unexpected '('``,
    ``unexpected identifier``): a node kind, never source text."""
    first = error.children[0] if error.child_count else None
    if first is None or first.type == "ERROR":
        return "syntax error"
    return f"unexpected {first.type}" if first.is_named else f"unexpected {first.type!r}"


def _walk(node: Any, descend: Callable[[Any], bool] = lambda n: True) -> Iterator[Any]:
    """Every node under ``node`` in document order (iterative: deep trees are fine)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if descend(current):
            stack.extend(reversed(current.children))


def parse(path: str, language: str, data: bytes, watch: Watch = NO_WATCH) -> Parsed:
    """The syntax errors and definitions of ``data``; raises the cancel or
    :class:`OutOfTime` when ``watch`` says so, however the tree is shaped."""
    tree = tree_of(language, data)
    parsed = Parsed(language)
    parsed.problems, parsed.error_count = problems_of(tree.root_node, watch)
    parsed.definitions = _definitions(path, language, tree.root_node, watch)
    return parsed


def node_id(path: str, kind: str, qualname: str, ordinal: int) -> str:
    digest = hashlib.sha256(f"{path}\0{kind}\0{qualname}\0{ordinal}".encode()).hexdigest()
    return "n" + digest[:12]


# --- definitions, per language -----------------------------------------------------


@dataclass(frozen=True)
class Found:
    kind: str
    name: str
    exported: bool
    documented: bool


def _text(node: Any) -> str:
    return (node.text or b"").decode("utf-8", "replace") if node is not None else ""


def _field_name(node: Any) -> str:
    return _text(node.child_by_field_name("name"))


def _comment_before(node: Any, doc_prefixes: tuple[str, ...]) -> bool:
    """A comment ends on the line just before ``node`` (and starts with a doc prefix)."""
    prev = node.prev_sibling
    while prev is not None and prev.type in ("attribute_item", "decorator"):
        prev = prev.prev_sibling
    if prev is None or "comment" not in prev.type:
        return False
    if prev.end_point[0] < node.start_point[0] - 1:
        return False
    return _text(prev).lstrip().startswith(doc_prefixes)


def _python(node: Any, parents: list[Found]) -> Found | None:
    if node.type not in ("function_definition", "class_definition"):
        return None
    name = _field_name(node)
    in_class = bool(parents) and parents[-1].kind == "class"
    kind = "class" if node.type == "class_definition" else ("method" if in_class else "fn")
    body = node.child_by_field_name("body")
    first = body.named_children[0] if body is not None and body.named_children else None
    documented = (
        first is not None
        and first.type == "expression_statement"
        and bool(first.named_children)
        and first.named_children[0].type == "string"
    )
    public = not name.startswith("_") or (name.startswith("__") and name.endswith("__"))
    nested_in_fn = any(p.kind in ("fn", "method") for p in parents)
    exported = public and not nested_in_fn and all(p.exported for p in parents)
    return Found(kind, name, exported, documented)


def _js(node: Any, parents: list[Found]) -> Found | None:
    kinds = {
        "function_declaration": "fn",
        "generator_function_declaration": "fn",
        "class_declaration": "class",
        "abstract_class_declaration": "class",
        "method_definition": "method",
        "interface_declaration": "interface",
        "type_alias_declaration": "type",
        "enum_declaration": "enum",
    }
    kind = kinds.get(node.type)
    anchor = node
    if kind is None and node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None or value.type not in ("arrow_function", "function_expression", "function"):
            return None
        if parents and parents[-1].kind != "module":
            return None
        kind = "fn"
        anchor = node.parent  # the lexical_declaration carries the comment and the export
    if kind is None:
        return None
    name = _field_name(node)
    if not name:
        return None
    exported = (
        anchor is not None
        and anchor.parent is not None
        and (anchor.parent.type == "export_statement")
    )
    if kind == "method":
        exported = bool(parents) and parents[-1].exported and not name.startswith("#")
    target = anchor.parent if exported and kind != "method" else anchor
    documented = target is not None and _comment_before(target, ("/**",))
    return Found(kind, name, exported, documented)


def _go(node: Any, parents: list[Found]) -> Found | None:
    if node.type in ("function_declaration", "method_declaration"):
        name = _field_name(node)
        kind = "method" if node.type == "method_declaration" else "fn"
        anchor = node
    elif node.type == "type_spec":
        name = _field_name(node)
        body = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            body.type if body is not None else "", "type"
        )
        anchor = node.parent if node.parent is not None else node
    else:
        return None
    exported = name[:1].isupper()
    documented = _comment_before(anchor, ("//", "/*"))
    return Found(kind, name, exported, documented)


def _rust(node: Any, parents: list[Found]) -> Found | None:
    kinds = {
        "function_item": "fn",
        "struct_item": "struct",
        "enum_item": "enum",
        "trait_item": "trait",
        "type_item": "type",
        "mod_item": "module",
        "union_item": "struct",
    }
    kind = kinds.get(node.type)
    if kind is None:
        return None
    name = _field_name(node)
    if kind == "fn" and node.parent is not None and node.parent.type == "declaration_list":
        owner = node.parent.parent
        if owner is not None and owner.type in ("impl_item", "trait_item"):
            kind = "method"
    exported = any(c.type == "visibility_modifier" for c in node.children)
    owner = node.parent.parent if node.parent is not None else None
    if kind == "method" and owner is not None and owner.type == "trait_item":
        exported = bool(parents) and parents[-1].exported
    documented = _comment_before(node, ("///", "/**", "//!")) or any(
        c.type == "attribute_item" and _text(c).replace(" ", "").startswith("#[doc")
        for c in _siblings_before(node)
    )
    return Found(kind, name, exported, documented)


def _siblings_before(node: Any) -> Iterator[Any]:
    prev = node.prev_sibling
    while prev is not None and prev.type in ("attribute_item", "line_comment", "block_comment"):
        yield prev
        prev = prev.prev_sibling


def _c(node: Any, parents: list[Found]) -> Found | None:
    if node.type == "function_definition":
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is None:
            return None
        name_node = declarator.child_by_field_name("declarator")
        if name_node is None or name_node.type != "identifier":
            return None
        static = any(
            c.type == "storage_class_specifier" and _text(c) == "static" for c in node.children
        )
        documented = _comment_before(node, ("/*", "//"))
        return Found("fn", _text(name_node), not static, documented)
    if node.type in ("struct_specifier", "enum_specifier", "union_specifier"):
        if node.child_by_field_name("body") is None or not _field_name(node):
            return None  # a use of the type, not its definition
        kind = "enum" if node.type == "enum_specifier" else "struct"
        anchor = (
            node.parent
            if node.parent is not None
            and node.parent.type
            in (
                "declaration",
                "type_definition",
            )
            else node
        )
        return Found(kind, _field_name(node), True, _comment_before(anchor, ("/*", "//")))
    return None


_FINDERS: dict[str, Callable[[Any, list[Found]], Found | None]] = {
    "python": _python,
    "javascript": _js,
    "typescript": _js,
    "tsx": _js,
    "go": _go,
    "rust": _rust,
    "c": _c,
}

# Identifier tokens a rename may change, by what is renamed.  Member names
# (obj.name) are property/field identifiers: only a method's rename touches
# them, so renaming a function `parse` leaves `s.parse()` alone.  Type names
# are type identifiers where the grammar says so.  Go's exported functions
# are reached as pkg.Name, a field identifier too.
_PLAIN = frozenset({"identifier"})
_MEMBERS = {
    "javascript": frozenset(
        {"property_identifier", "shorthand_property_identifier", "private_property_identifier"}
    ),
    "go": frozenset({"field_identifier"}),
    "rust": frozenset({"field_identifier"}),
    "c": frozenset({"field_identifier"}),
    "python": frozenset(),
}
_MEMBERS["typescript"] = _MEMBERS["tsx"] = _MEMBERS["javascript"]
_TYPE_KINDS = frozenset({"class", "struct", "enum", "interface", "trait", "type"})


# Shorthand forms that are references to a name in scope as well as keys:
# ``{ authCheck }`` in an object and ``const { authCheck } = ...`` in a pattern
# name the variable; left behind, a renamed export breaks at run time.
_SHORTHAND = {
    "javascript": frozenset(
        {"shorthand_property_identifier", "shorthand_property_identifier_pattern"}
    ),
}
_SHORTHAND["typescript"] = _SHORTHAND["tsx"] = _SHORTHAND["javascript"]


def identifier_types(language: str, kind: str) -> frozenset[str]:
    """The node types a rename of a ``kind`` definition changes in ``language``."""
    wanted = set(_PLAIN) | _SHORTHAND.get(language, frozenset())
    if kind == "method" or (language == "go" and kind == "fn"):
        wanted |= _MEMBERS[language]
    if kind in _TYPE_KINDS:
        wanted.add("type_identifier")
    return frozenset(wanted)


# The node types each finder looks at: tree-sitter finds them (a query runs
# in C), the finder judges each; walking every node in Python would cost
# several times the parse itself.
_DEFINITION_TYPES = {
    "python": ("function_definition", "class_definition"),
    "javascript": (
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "abstract_class_declaration",
        "method_definition",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "variable_declarator",
    ),
    "go": ("function_declaration", "method_declaration", "type_spec"),
    "rust": (
        "function_item",
        "struct_item",
        "enum_item",
        "trait_item",
        "type_item",
        "mod_item",
        "union_item",
    ),
    "c": ("function_definition", "struct_specifier", "enum_specifier", "union_specifier"),
}
_DEFINITION_TYPES["typescript"] = _DEFINITION_TYPES["tsx"] = _DEFINITION_TYPES["javascript"]
_queries: dict[tuple[str, frozenset[str]], Any] = {}


def _nodes_of_types(
    language: str, root: Any, types: Iterable[str], watch: Watch = NO_WATCH
) -> list[Any]:
    """Every node of ``types`` (those the grammar has) under ``root``, in document order.

    Where the tree has syntax errors, the query would be searching error
    recovery's nesting, which costs it the square of the nesting (a file of
    100,000 open parentheses takes it many seconds, 2 MB of them hours, all
    the while holding the interpreter).  So the nodes on the way to an error
    are walked here, each looked at once, and the query searches only the
    subtrees free of errors, where it is linear; the walk looks at ``watch``.
    """
    import tree_sitter

    lang = grammar(language)
    wanted = frozenset(t for t in types if lang.id_for_node_kind(t, True))
    if not wanted:
        return []
    key = (language, wanted)
    with _lock:
        query = _queries.get(key)
        if query is None:
            source = " ".join(f"({t}) @n" for t in sorted(wanted))
            query = _queries[key] = tree_sitter.Query(lang, source)

    def search(node: Any) -> list[Any]:
        # No progress_callback: in the tree-sitter this was written against it
        # crashes the process on ordinary files.  A search of an error-free
        # subtree is linear in its size, so the checks between searches suffice.
        found: list[Any] = tree_sitter.QueryCursor(query).captures(node).get("n", [])
        return found

    if not root.has_error:
        found = search(root)
    else:
        found = []
        for seen, node in enumerate(_walk(root, lambda n: n.has_error)):
            if seen % CHECK_EVERY == CHECK_EVERY - 1:
                watch.check()
            if node.has_error or node.child_count == 0:
                if node.type in wanted:
                    found.append(node)
            else:
                found += search(node)
        watch.check()
    return sorted(found, key=lambda n: (n.start_byte, -n.end_byte))


def _definitions(path: str, language: str, root: Any, watch: Watch = NO_WATCH) -> list[Definition]:
    finder = _FINDERS[language]
    out: list[Definition] = []
    seen: dict[tuple[str, str], int] = {}
    # The definitions enclosing the current node: (its end, what it is).
    stack: list[tuple[int, Found]] = []
    for node in _nodes_of_types(language, root, _DEFINITION_TYPES[language], watch):
        while stack and stack[-1][0] <= node.start_byte:
            stack.pop()
        parents = [found for _, found in stack]
        found = finder(node, parents)
        if found is None or not found.name:
            continue
        qual = ".".join([*(p.name for p in parents), found.name])
        ordinal = seen.get((found.kind, qual), 0)
        seen[(found.kind, qual)] = ordinal + 1
        out.append(
            Definition(
                node_id(path, found.kind, qual, ordinal),
                found.kind,
                found.name,
                qual,
                node.start_byte,
                node.end_byte,
                node.start_point[0] + 1,
                node.end_point[0] + 1,
                found.exported,
                found.documented,
            )
        )
        stack.append((node.end_byte, found))
    return out


# Tokens of an identifier type that are not references, each as its way up
# the tree: (parent type, the field the token or the step below fills).  A
# Python keyword argument's name (``f(auth_check=1)``) names the callee's
# parameter; a Go composite literal's key (``T{auth_check: 1}``) names a
# struct field, since a function or a type cannot be a map key.
_NOT_REFERENCES: dict[str, tuple[tuple[tuple[str, str | None], ...], ...]] = {
    "python": ((("keyword_argument", "name"),),),
    "go": ((("literal_element", None), ("keyed_element", "key")),),
}
# Shorthands whose one token is both a key and a reference: renaming the
# reference there must keep the key, so ``Foo { auth_check }`` becomes
# ``Foo { auth_check: new_name }`` (the struct's field keeps its name).
# JavaScript's shorthands are renamed whole instead, keys with references,
# so that an exported object and its destructuring stay in step.
_KEEP_KEY = {"rust": frozenset({"shorthand_field_initializer"})}


def _reference_nodes(
    language: str, kind: str, root: Any, name: str, watch: Watch = NO_WATCH
) -> list[Any]:
    raw = name.encode("utf-8")
    skip = _NOT_REFERENCES.get(language, ())
    return [
        n
        for n in _nodes_of_types(language, root, identifier_types(language, kind), watch)
        if n.end_byte - n.start_byte == len(raw)
        and n.text == raw
        and not any(_placed(n, way) for way in skip)
    ]


def _placed(node: Any, way: tuple[tuple[str, str | None], ...]) -> bool:
    """Whether ``node`` sits where ``way`` says, step by step up the tree."""
    for parent_type, slot in way:
        parent = node.parent
        if parent is None or parent.type != parent_type:
            return False
        if slot is not None:
            child = parent.child_by_field_name(slot)
            if child is None or child.start_byte != node.start_byte:
                return False
        node = parent
    return True


def identifier_sites(
    language: str, kind: str, root: Any, name: str, watch: Watch = NO_WATCH
) -> list[tuple[int, int]]:
    """Byte spans of every identifier token spelled ``name`` that a rename of a ``kind``
    definition changes."""
    return [(n.start_byte, n.end_byte) for n in _reference_nodes(language, kind, root, name, watch)]


def rename_sites(
    language: str, kind: str, root: Any, name: str, new_name: str, watch: Watch = NO_WATCH
) -> list[tuple[int, int, bytes]]:
    """Each site of :func:`identifier_sites` with the bytes that replace it."""
    keep = _KEEP_KEY.get(language, frozenset())
    plain = new_name.encode("utf-8")
    keyed = f"{name}: {new_name}".encode()
    return [
        (
            n.start_byte,
            n.end_byte,
            keyed if n.parent is not None and n.parent.type in keep else plain,
        )
        for n in _reference_nodes(language, kind, root, name, watch)
    ]


def bad_language(language: str) -> ToolFailure:
    return errors.bad_args(
        f"Unknown language {language!r}; the AST tools read: {', '.join(LANGUAGES)}",
        recovery=[
            "Leave language out (it follows from each file's extension), or name one of those"
        ],
    )
