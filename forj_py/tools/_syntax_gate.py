"""``code.ast.parsed`` after writes: a write may not leave source code unparsable.

When the user's rule pack holds ``code.ast.parsed`` at the blocking level,
every writing tool (write_file, edit, edit_region, multi_edit, apply_patch,
file_patch, plan exports) parses the new text of a file in a language the
AST tools read, and refuses it when it has more syntax errors than the
file had before: a file that was already broken may still be mended a
step at a time. The same rule runs on the staged files at commit time
(``_validators``); here it runs before anything is written.

What cannot be checked passes: no grammar installed, a file over
``[tools.ast] max_file_bytes``, a parse that outlasts its short deadline.
"""

from __future__ import annotations

import time

from .. import errors
from ..config import Config
from ..safety.paths import SafePath

# A write waits on this check; a syntax tree that takes longer to search
# than this is let through (the commit-time rule still sees it).
DEADLINE_SECONDS = 2.0


def _blocking(config: Config) -> bool:
    # No enforcement given: the catalog's level for this rule, blocking
    # (``_validators.CATALOG_LEVEL``; not imported here, a write must not
    # load the git and validator machinery).
    return any(
        v.rule == "code.ast.parsed" and (v.enforcement or "blocking") == "blocking"
        for v in config.validators
    )


def check_write(config: Config, sp: SafePath, new_text: str, old_text: str | None) -> None:
    """Refuse ``new_text`` for ``sp`` when it parses worse than ``old_text`` did."""
    if not _blocking(config):
        return
    from . import _ast_lang as L

    language = L.language_of(sp.display)
    if language is None:
        return
    new = new_text.encode("utf-8", "surrogatepass")
    if len(new) > config.tools.ast.max_file_bytes or L.available() is not None:
        return
    watch = L.Watch(deadline=time.monotonic() + DEADLINE_SECONDS)
    try:
        problems, count = L.problems_of(L.tree_of(language, new).root_node, watch)
        if count == 0:
            return
        before = 0
        if old_text is not None:
            old = old_text.encode("utf-8", "surrogatepass")
            _, before = L.problems_of(L.tree_of(language, old).root_node, watch)
    except L.OutOfTime:
        return
    if count <= before:
        return
    first = problems[0]
    raise errors.bad_args(
        f"The new content of {sp.display} does not parse as {language} "
        f"({count} syntax error(s), {before} before; line {first.line}, column "
        f"{first.column}: {first.message}); the rule code.ast.parsed refuses it",
        recovery=[
            "Fix the syntax at the line and column given (a missing bracket, quote or "
            "colon is the usual cause), then retry",
            "Send the whole construct you change, not a part of it",
        ],
        path=sp.display,
        line=first.line,
        column=first.column,
        rule="code.ast.parsed",
    )
