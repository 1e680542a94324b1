"""``search``: find text in the project.

Two engines, one answer.  ripgrep (``rg --json``) when it can be found:
the one in the worker's own environment (the ``ripgrep`` wheel), else on
``PATH``; otherwise a pure-Python search over :class:`forj_py.system.walk.Walker`.
rg is given flags that make it walk exactly as the walker does (ignore
files, hidden files, ``.git``, denied patterns, size limit, no symlinks,
no transcoding), and both return the same matches for the same tree: a
test checks it on a generated project.  The differences that remain: a
regex is Rust syntax for rg and Python ``regex`` syntax (a superset of
``re``) for the fallback (each
refuses what it cannot parse, quoting its own message), and a file whose
first NUL byte comes late may show rg's matches from before the NUL where
the fallback skips the file as binary.

Matches are ``{path, line, column, match_text, before, after}``: ``line``
and ``column`` 1-based (column in characters), ``before``/``after`` the
rest of the matched line on either side (each cut to 200 characters).
Results are sorted by path, line and column; at most ``max_results``
come back, with ``truncated`` when there were more.  "By path" is
directory by directory, each directory's names in code-point order
(``a/z.py`` before ``a-b.py``, as a tree lists them): the order in which
``rg --sort path`` prints its matches.

ripgrep runs once or twice.  First on all its threads, in no order: most
searches find few matches, and those are all read.  Once that run has
printed more matching lines than can be returned, it is stopped and rg
runs again with ``--sort path`` (one thread), stopped as soon as it has
printed one match more than can be returned: the first by path are then
certain, the one more says there were more, and the later lines are
never printed nor read (measured: docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import pathspec
from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..config import Config
from ..errors import ToolFailure
from ..output import URL_CREDENTIAL_MARK, credential_spans, redact_url_credentials, say_redacted
from ..patterns import PatternTooComplex, gitignore_spec
from ..protocol import ErrorKind, ErrorType
from ..safety.programs import program_path
from ..system.walk import Excludes, Walker
from ._skipped import describe, skipped_files
from .listing import default_excludes, git_dir_refused, names_git_dir
from .registry import Tool, ToolContext

SIDE_CONTEXT = 200
# Past this many matches the search stops reading; which matches come back
# is then only as deterministic as the engine's order.
CEILING = 20_000
REGEX_TIMEOUT = 2.0


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=10_000, description="Text or regex to find")
    is_regex: bool = Field(default=False, description="Treat query as a regular expression")
    case_sensitive: bool = Field(default=False, description="Match case exactly")
    include_paths: list[str] | None = Field(
        default=None,
        max_length=100,
        description="Only files matching one of these gitignore-style globs ('src/**', '*.py')",
    )
    exclude_paths: list[str] | None = Field(
        default=None, max_length=100, description="Skip files matching these globs"
    )
    max_results: int = Field(default=200, ge=1, le=10_000)


def find_rg(root: str | None = None) -> str | None:
    """The rg next to this Python (the ripgrep wheel), else the one on PATH.

    It runs outside the sandbox: never one found in ``root`` (the project)
    or through a relative entry (see ``safety.programs``).
    """
    here = os.path.dirname(sys.executable)
    path = program_path(os.pathsep.join([here, os.environ.get("PATH", "")]), root)
    return shutil.which("rg", path=path)


class Search(Tool[SearchArgs]):
    name = "search"
    description = (
        "Search the project's files for text (or a regex with is_regex), honouring "
        ".gitignore/.ignore, never inside .git, skipping binary and huge files. Returns matches "
        "{path, line, column, match_text, before, after}."
    )
    Args = SearchArgs
    timeout_kind = "file"

    def timeout(self, config: Config) -> float:
        # Its own limit ([tools.search] timeout_seconds, 10 s), shorter than the
        # other file operations': a slow search is one to narrow.
        return config.tools.search.timeout_seconds

    def summary(self, args: SearchArgs) -> str:
        kind = "regex" if args.is_regex else "text"
        where = f" in {', '.join(args.include_paths)}" if args.include_paths else ""
        return f"Search for {kind} {args.query!r}{where}"

    def execute(self, args: SearchArgs, ctx: ToolContext) -> Any:
        for glob in [*(args.include_paths or []), *(args.exclude_paths or [])]:
            if glob.startswith("!") or ".." in glob.split("/") or "{" in glob or "}" in glob:
                raise errors.bad_args(
                    f"Path glob {glob!r} may not start with '!', contain '..' or use {{a,b}}",
                    recovery=[
                        "Use exclude_paths to leave files out",
                        "Instead of {a,b}, list each pattern separately",
                    ],
                )
        for glob in args.include_paths or []:
            if names_git_dir(glob):
                raise git_dir_refused("search", f"include_paths entry {glob!r}")
        engine = ctx.config.tools.search.engine
        rg = find_rg(ctx.sandbox.project_root) if engine in ("auto", "ripgrep") else None
        if engine == "ripgrep" and rg is None:
            raise ToolFailure(
                ErrorType.PROCESS,
                "ripgrep (rg) was not found, and [tools.search] engine is 'ripgrep'",
                kind=ErrorKind.EXECUTION_FAILED,
                recovery=["Ask the user to install ripgrep or set engine = 'auto'"],
            )
        skip = _Skip(default_excludes(ctx), args.include_paths or [])
        if rg is not None:
            found = _search_rg(rg, args, ctx, skip, ordered=False)
            if found is None:  # more than can be returned: again in order, stopped early
                found = _search_rg(rg, args, ctx, skip, ordered=True)
                assert found is not None
            matches, truncated = found
            used = "ripgrep"
        else:
            matches, truncated = _search_python(args, ctx, skip)
            used = "python"
        # Before the cut: a match hidden inside a credential must not even
        # take the place of one that is shown.
        matches = [m for m in matches if not m.get(_HIDDEN)]
        matches.sort(key=_order)
        if len(matches) > args.max_results:
            matches = matches[: args.max_results]
            truncated = True
        redacted = sum(m.pop(_REDACTED, 0) for m in matches)
        result: dict[str, Any] = {"matches": matches, "truncated": truncated, "engine": used}
        say_redacted(result, redacted, "; text inside a credential is never matched")
        if not truncated:
            # Only a complete answer needs it: a cut one already says there is more.
            skipped = skipped_files(ctx, skip.walk, _wanted(args, skip))
            if skipped is not None:
                result["skipped"] = skipped
                note = describe(skipped)
                result["note"] = f"{result['note']}. {note}" if "note" in result else note
        if truncated:
            more = (
                f"There are more matches than the {len(matches)} shown (the first by path "
                "and line); narrow the search with include_paths or a more specific query"
            )
            result["note"] = f"{result['note']}. {more}" if "note" in result else more
        return result


class _Skip:
    """The default excludes for one search: what its include_paths name is searched.

    The walk (or rg) leaves out only what no include glob names; a file it
    returns from a named exclusion is kept only if a glob that names every
    exclusion over it also matches it, so ``node_modules/react/**`` does
    not let ``*.py`` reach into the rest of node_modules.
    """

    def __init__(self, excludes: Excludes, include: list[str]) -> None:
        self.all = excludes
        self.named = [(excludes.named_by(glob), glob) for glob in include]
        lifted: set[int] = set()
        for found, _ in self.named:
            lifted |= found
        self.walk = excludes.without(lifted)
        self._specs = {glob: _spec([glob]) for found, glob in self.named if found}
        self._lifting = bool(lifted)

    def keeps(self, path: str) -> bool:
        if not self._lifting:
            return True  # the walk already left out everything excluded
        over = self.all.under(path, False)
        if not over:
            return True
        for found, glob in self.named:
            spec = self._specs.get(glob)
            if over <= found and spec is not None and spec.match_file(path):
                return True
        return False


def _match(path: str, line_no: int, line: str, start: int, end: int) -> dict[str, Any]:
    """One match; credentials in URLs on its line are never shown (see below)."""
    spans = credential_spans(line)
    if spans:
        return _match_redacted(path, line_no, line, start, end, spans)
    return {
        "path": path,
        "line": line_no,
        "column": start + 1,
        "match_text": line[start:end],
        "before": line[max(0, start - SIDE_CONTEXT) : start],
        "after": line[end : end + SIDE_CONTEXT],
    }


# --- credentials in URLs ----------------------------------------------------------
#
# A line such as ``url = https://user:TOKEN@host/repo`` shows the model its
# text around the secret with the secret as ``***``, as read_file does.  A
# match that touches the secret itself is dropped without a trace: showing
# it, its position or even a count would let a search for "://user:a",
# "://user:b"... spell the secret out one character at a time.  For the
# same reason the pure-Python engine matches against the redacted line (its
# look-arounds could otherwise test the secret without matching it);
# ripgrep has none.

_REDACTED = "_redacted"  # markers in a match, summed into the result, then removed
_HIDDEN = "_hidden"  # a match inside a credential: dropped


def _redact_slice(line: str, a: int, b: int, spans: list[tuple[int, int]]) -> tuple[str, int]:
    """``line[a:b]`` with each secret it overlaps replaced by the marker; and how many."""
    out: list[str] = []
    count = 0
    at = a
    for s, e in spans:
        if e <= at or s >= b:
            continue
        out.append(line[at:s] if s > at else "")
        out.append(URL_CREDENTIAL_MARK)
        count += 1
        at = min(e, b)
    out.append(line[at:b])
    return "".join(out), count


def _match_redacted(
    path: str, line_no: int, line: str, start: int, end: int, spans: list[tuple[int, int]]
) -> dict[str, Any]:
    if any(s < end and start < e for s, e in spans):
        return {"path": path, "line": line_no, "column": start + 1, _HIDDEN: True}
    before, n1 = _redact_slice(line, max(0, start - SIDE_CONTEXT), start, spans)
    after, n2 = _redact_slice(line, end, end + SIDE_CONTEXT, spans)
    return {
        "path": path,
        "line": line_no,
        "column": start + 1,
        "match_text": line[start:end],
        "before": before,
        "after": after,
        _REDACTED: n1 + n2,
    }


def _strip_eol(line: str) -> str:
    return line[:-1] if line.endswith("\n") else line


# --- ripgrep ---------------------------------------------------------------------


def _rg_command(
    rg: str, args: SearchArgs, ctx: ToolContext, skip: _Skip, ordered: bool = False
) -> list[str]:
    cmd = [
        rg,
        "--json",
        "--no-config",
        "--no-ignore-global",
        "--no-ignore-parent",
        "--no-require-git",
        "--encoding",
        "none",
        "--max-filesize",
        str(ctx.config.tools.read_file.max_scan_bytes),
        "--max-count",
        str(args.max_results + 1),  # one more than needed: tells whether there were more
        "--case-sensitive" if args.case_sensitive else "--ignore-case",
        "--glob-case-insensitive",
    ]
    if not args.is_regex:
        cmd.append("--fixed-strings")
    if ordered:
        # In the results' order (one thread), so the search stops once it has enough.
        cmd += ["--sort", "path"]
    # include_paths are applied to rg's output instead: an rg --glob would
    # also re-include files the ignore rules leave out.
    for glob in [*(args.exclude_paths or []), *_joined_suffixes(skip.walk.patterns)]:
        cmd += ["--glob", "!" + glob]
    # Last, so nothing before them can re-include: .git and every denied pattern.
    for glob in [".git", *ctx.sandbox.denied_patterns]:
        cmd += ["--glob", "!" + glob]
    cmd += ["--regexp", args.query, "--", "."]
    return cmd


_PLAIN_SUFFIX = re.compile(r"\*\.[^*?\[\]{},\\!/]+")


def _joined_suffixes(patterns: list[str]) -> list[str]:
    """The excludes with every ``*.ext`` made one ``*.{a,b,...}``: the same files.

    rg compiles each glob on every run, and the default excludes hold some
    sixty suffixes: one alternation costs rg less (measured:
    docs/benchmarks.md).
    """
    suffixes = [p[2:] for p in patterns if _PLAIN_SUFFIX.fullmatch(p)]
    rest = [p for p in patterns if not _PLAIN_SUFFIX.fullmatch(p)]
    if len(suffixes) < 2:
        return list(patterns)
    return ["*.{" + ",".join(suffixes) + "}", *rest]


def _search_rg(
    rg: str, args: SearchArgs, ctx: ToolContext, skip: _Skip, *, ordered: bool
) -> tuple[list[dict[str, Any]], bool] | None:
    """The first matches by path, and whether there were more.

    ``ordered`` False: rg on all its threads, in no order, and None as soon
    as it has printed more matching lines than can be returned (search
    again ``ordered``: stopped at the first ``max_results`` + 1).
    """
    patience = None if ordered else args.max_results + 1
    # stderr to a file: rg can print more warnings than a pipe holds, and
    # nothing reads the pipe until stdout is done.
    errfile = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        _rg_command(rg, args, ctx, skip, ordered),
        cwd=ctx.sandbox.project_root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=errfile,
        start_new_session=True,
    )
    done = threading.Event()

    def stop_on_cancel() -> None:
        while not done.wait(0.05):
            if ctx.cancel.is_set():
                _kill(proc)
                return

    threading.Thread(target=stop_on_cancel, daemon=True, name="forj-rg-cancel").start()
    include = _spec(args.include_paths)
    within = _root_prefixes(ctx)
    best = _Best(args.max_results)
    decoded = 0
    matched = 0
    truncated = False
    stderr = b""
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            decoded += 1
            if not raw.startswith(_MATCH):
                continue  # begin, end, context and summary messages
            matched += 1
            if patience is not None and matched > patience:
                return None  # rg is stopped below
            data = json.loads(raw)["data"]
            path = _rg_text(data["path"])
            path = path[2:] if path.startswith("./") else path
            if include is not None and not include.match_file(path):
                continue
            if not skip.keeps(path):
                continue
            if "\ufffd" in path or ctx.sandbox.denied_inside(path) is not None:
                # rg's globs are a first filter; this is the sandbox's own word
                # (case-insensitive, nested roots), and a name that is not
                # UTF-8 could never be named back.
                continue
            if within is not None and not any(
                path == p or path.startswith(p + "/") for p in within
            ):
                continue
            line_bytes = _rg_bytes(data["lines"])
            line = line_bytes.decode("utf-8", "replace")
            text = _strip_eol(line)
            for sub in data["submatches"]:
                start_b, end_b = sub["start"], sub["end"]
                if start_b == end_b:
                    continue
                start = len(line_bytes[:start_b].decode("utf-8", "replace"))
                end = start + len(line_bytes[start_b:end_b].decode("utf-8", "replace"))
                best.add(_match(path, data["line_number"], text, start, end))
            if ordered and best.enough:
                # rg prints in the results' order: all that is left sorts after
                # these, and the one past max_results says there is more.
                _kill(proc)
                break
            if decoded >= CEILING:
                truncated = True
                _kill(proc)
                break
        code = proc.wait()
        errfile.seek(0)
        stderr = errfile.read(64 * 1024)
    finally:
        done.set()
        _kill(proc)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        errfile.close()
    ctx.check_cancelled()
    matches = best.matches()
    truncated = truncated or best.dropped
    if code == 2 and not matches and not truncated:
        message = stderr.decode("utf-8", "replace").strip()
        if "regex" in message.lower() or "error parsing" in message.lower():
            raise errors.bad_args(
                f"Invalid regex for ripgrep: {message}",
                recovery=[
                    "Fix the regex (Rust syntax: no look-around, no backreferences)",
                    "Or search for plain text with is_regex false",
                ],
            )
        if "glob" in message.lower():
            raise errors.bad_args(f"Invalid path glob: {message}")
    return matches, truncated


class _Best:
    """The first ``wanted`` + 1 matches by (path, line, column) among those seen.

    The one extra tells that there were more.  Matches inside a credential
    are dropped at once (they never take a place).  Once enough are kept,
    the last kept is the bar: a file or line that sorts after it cannot
    be returned, so it need not be read.
    """

    def __init__(self, wanted: int) -> None:
        self.keep = wanted + 1
        self._items: list[dict[str, Any]] = []
        self._bar: tuple[tuple[str, ...], int] | None = None
        self.dropped = False  # some kept match was pushed out by better ones

    @property
    def enough(self) -> bool:
        """As many are kept as can be returned, and one more."""
        return len(self._items) >= self.keep

    def beyond(self, path: str, line: int) -> bool:
        return self._bar is not None and (path_key(path), line) > self._bar

    def add(self, match: dict[str, Any]) -> None:
        if match.get(_HIDDEN):
            return
        self._items.append(match)
        # The first time enough are kept, and then each time twice as many are.
        limit = self.keep if self._bar is None else 2 * self.keep
        if len(self._items) >= limit:
            self._trim()

    def _trim(self) -> None:
        self._items.sort(key=_order)
        if len(self._items) > self.keep:
            self.dropped = True
            del self._items[self.keep :]
        last = self._items[-1]
        self._bar = (path_key(last["path"]), last["line"])

    def matches(self) -> list[dict[str, Any]]:
        self._items.sort(key=_order)
        return self._items


def path_key(path: str) -> tuple[str, ...]:
    """A path's place in the results: directory by directory, as ``rg --sort path`` walks."""
    return tuple(path.split("/"))


def _order(match: dict[str, Any]) -> tuple[tuple[str, ...], int, int]:
    return path_key(match["path"]), match["line"], match["column"]


# Every ``match`` message starts so (rg writes its keys in a fixed order).
_MATCH = b'{"type":"match"'


def _root_prefixes(ctx: ToolContext) -> list[str] | None:
    """The allowed roots as project-relative prefixes; None when the whole project is."""
    sandbox = ctx.sandbox
    shown = [sandbox.display(r) for r in sandbox.allowed_roots]
    if "." in shown:
        return None
    return [p for p in shown if not os.path.isabs(p)]


def _rg_text(value: dict[str, Any]) -> str:
    return value["text"] if "text" in value else _rg_bytes(value).decode("utf-8", "replace")


def _rg_bytes(value: dict[str, Any]) -> bytes:
    if "text" in value:
        return str(value["text"]).encode("utf-8")
    return base64.b64decode(value["bytes"])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


# --- pure Python -----------------------------------------------------------------


def _search_python(
    args: SearchArgs, ctx: ToolContext, skip: _Skip
) -> tuple[list[dict[str, Any]], bool]:
    import regex  # the fallback engine only: keeps start-up fast

    flags = 0 if args.case_sensitive else regex.IGNORECASE
    source = args.query if args.is_regex else regex.escape(args.query)
    try:
        pattern = regex.compile(source, flags)
    except regex.error as exc:
        raise errors.bad_args(
            f"Invalid regex: {exc}",
            recovery=["Fix the regex (Python re syntax)", "Or search for plain text"],
        ) from None
    include = _spec(args.include_paths)
    exclude = _spec(args.exclude_paths)
    max_size = ctx.config.tools.read_file.max_scan_bytes
    walker = Walker(ctx.sandbox, excludes=skip.walk)
    best = _Best(args.max_results)
    found_lines = 0
    for count, entry in enumerate(walker.walk("", files_only=True)):
        if count % 256 == 0:
            ctx.check_cancelled()
        if entry.kind != "file" or entry.size > max_size:
            continue
        if best.beyond(entry.rel, 0):
            continue  # every match in it would sort after every match kept: not read
        if include is not None and not include.match_file(entry.rel):
            continue
        if exclude is not None and exclude.match_file(entry.rel):
            continue
        if not skip.keeps(entry.rel):
            continue
        data = _read_regular(os.path.join(ctx.sandbox.project_root, entry.rel), max_size)
        if data is None:
            continue
        if b"\x00" in data:
            continue  # binary, as rg judges it
        text = data.decode("utf-8", "replace")
        matched_lines = 0  # like rg's --max-count: lines, not matches
        for line_no, line in enumerate(text.split("\n"), start=1):
            found = False
            spans = credential_spans(line)
            subject = redact_url_credentials(line)[0] if spans else line
            try:
                # concurrent: the GIL is released while matching, so a slow
                # regex cannot stall the worker's other threads; and it is
                # cut off after a while.
                hits = list(pattern.finditer(subject, concurrent=True, timeout=REGEX_TIMEOUT))
            except TimeoutError:
                raise errors.bad_args(
                    f"The regex took more than {REGEX_TIMEOUT:g} s on one line of {entry.rel}",
                    recovery=["Simplify the regex (avoid nested repetition like (a+)+)"],
                ) from None
            for m in hits:
                if m.start() == m.end():
                    continue
                start, end = m.start(), m.end()
                if spans:
                    start, end = _original_span(start, end, spans)
                best.add(_match(entry.rel, line_no, line, start, end))
                found = True
            matched_lines += found
            if matched_lines > args.max_results:
                break
        found_lines += matched_lines
        if found_lines >= CEILING:
            return best.matches(), True
    return best.matches(), best.dropped


def _original_span(start: int, end: int, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """Map a match in the redacted line back to the original line.

    A match that covers part of a marker maps onto the whole secret, so it
    is counted as a match inside a credential.
    """
    mark = len(URL_CREDENTIAL_MARK)
    shift = 0  # original minus redacted, left of the current position
    new_start = new_end = None
    for s, e in spans:
        rs, re_ = s - shift, s - shift + mark  # the marker in the redacted line
        if new_start is None:
            if start < rs:
                new_start = start + shift
            elif start < re_:
                new_start = s
        if new_end is None:
            if end <= rs:
                new_end = end + shift
            elif end <= re_:
                new_end = e
        shift += (e - s) - mark
    if new_start is None:
        new_start = start + shift
    if new_end is None:
        new_end = end + shift
    return new_start, new_end


def _read_regular(path: str, max_size: int) -> bytes | None:
    """Read a file the walker found, refusing a symlink or FIFO swapped in since."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read(max_size + 1)


def _wanted(args: SearchArgs, skip: _Skip) -> Callable[[str], bool]:
    """Whether the search's own path filters keep a file (the walk did the rest)."""
    include = _spec(args.include_paths)
    exclude = _spec(args.exclude_paths)

    def wanted(path: str) -> bool:
        return (
            (include is None or include.match_file(path))
            and (exclude is None or not exclude.match_file(path))
            and skip.keeps(path)
        )

    return wanted


def _spec(globs: list[str] | None) -> pathspec.GitIgnoreSpec | None:
    if not globs:
        return None
    try:
        return gitignore_spec(globs)
    except PatternTooComplex as exc:
        raise errors.bad_args(
            f"Path glob too complex: {exc}",
            recovery=["Use fewer '*' per glob; several simpler globs can be listed"],
        ) from None
    except ValueError as exc:
        raise errors.bad_args(f"Invalid path glob: {exc}") from None
