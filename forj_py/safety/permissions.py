"""Permission rules: ``TOOL``, ``TOOL(PATTERN)`` and ``files(PATTERN)``, and what they match.

A rule names a tool (or ``files``: every tool that changes files) and,
optionally, a pattern.  What the pattern is matched against depends on the
call:

- a command (``run_shell``'s ``cmd``, ``run_tests``'s ``command``) is
  matched word by word: the pattern is split like a shell would split it,
  each word is a glob matched against one argv element, and a last word
  ending in ``*`` also takes every further element (``git status*``
  matches ``git status --short``; ``pytest *`` matches ``pytest`` and
  ``pytest -q tests``).  A string command is split into its parts at
  ``&&``, ``||``, ``;`` and ``|``;
- anything else is matched on its paths: gitignore-style, relative to the
  project root, after symlinks are resolved.

Matching comes in two strengths.  *Strict* (``allow`` rules, grants, the
network list) says yes only when the whole call is covered: every part of
a compound command, every path of a multi-file call, and a string command
made of nothing but plain words and those four operators (a ``$()``, a
backtick, ``&``, a newline, a redirection, a subshell, a glob, a quote
holding ``$`` never matches).  A command call that sets environment
variables of its own (``run_shell``'s ``env``) never matches a command
pattern strictly, whatever the variables: ``GIT_CONFIG_*``, ``LD_PRELOAD``,
``PATH``, ``PYTHON*``, ``BASH_ENV`` and many more change what a program
does.  *Loose* (``deny`` and ``ask`` rules) says yes when any part or any
path matches, and looks into shell syntax as best it can.  Loose matching
is a convenience, not a boundary: the sandbox is the boundary.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..patterns import gitignore_spec

FILES_GROUP = "files"

_RULE = re.compile(r"(?P<tool>[A-Za-z_][A-Za-z0-9_.-]*)(?:\((?P<pattern>(?s:.*))\))?\Z")
_OPERATORS = ("&&", "||", ";", "|")
# Words that would make a part something other than one command.
_RESERVED = frozenset(
    {
        "!",
        "{",
        "}",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "case",
        "esac",
        "while",
        "until",
        "for",
        "in",
        "function",
        "select",
        "time",
    }
)
# Characters that mean shell syntax outside quotes (besides the operators).
_SYNTAX = set("$`\\<>()&{}*?[]#!~\n\r")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"})


@dataclass(frozen=True)
class Subject:
    """What permission rules see of one call."""

    tool: str
    # A member of the ``files`` group: the tool changes files (not commands).
    changes_files: bool = False
    # The command a command tool runs: an argv list, or a string for ``sh -c``.
    command: list[str] | str | None = None
    # Project-relative paths after symlink resolution, and as the call named them.
    paths: tuple[str, ...] = ()
    given_paths: tuple[str, ...] = ()
    network: bool = False
    # The call also names files by glob ("*", "src/**"): which files those
    # are is known only when it runs, so no path rule can vouch for it.
    globs: bool = False
    # What a TOOL(PATTERN) rule matches for a tool that names neither files
    # nor a command: git_push's remote and refspec, curl's host and method.
    words: tuple[str, ...] | None = None
    # The names of the environment variables a command call sets itself
    # (``run_shell``'s ``env``).  Any of them can change what the matched
    # program does (GIT_CONFIG_*, LD_PRELOAD, PATH, PYTHONPATH, BASH_ENV ...),
    # so a strict match never covers a call that sets one.
    env: tuple[str, ...] = ()


@dataclass
class PermissionRule:
    """One parsed rule; ``source`` says where it came from, for reasons and warnings."""

    text: str
    tool: str
    pattern: str | None
    source: str
    _words: list[str] | None = field(default=None, repr=False)
    _spec: Any = field(default=None, repr=False)

    def check(self, command_tool: bool) -> None:
        """Compile the pattern for the kind of tool it names; ValueError if it cannot be."""
        if self.pattern is None:
            return
        if command_tool:
            self.words()
        else:
            self.spec()

    def words(self) -> list[str]:
        if self._words is None:
            try:
                words = shlex.split(self.pattern or "")
            except ValueError as exc:
                raise ValueError(
                    f"{self.text!r}: the command pattern cannot be split: {exc}"
                ) from None
            if not words:
                raise ValueError(f"{self.text!r}: the command pattern is empty")
            self._words = words
        return self._words

    def spec(self) -> Any:
        if self._spec is None:
            pattern = (self.pattern or "").strip()
            if not pattern or pattern.startswith("!"):
                raise ValueError(
                    f"{self.text!r}: a path pattern must be a gitignore-style pattern, not "
                    "empty or negated"
                )
            try:
                self._spec = gitignore_spec([pattern])
            except ValueError as exc:
                raise ValueError(f"{self.text!r}: {exc}") from None
        return self._spec

    def names(self, subject: Subject) -> bool:
        """Whether the rule is about this call's tool."""
        if self.tool == FILES_GROUP:
            return subject.changes_files
        return self.tool == subject.tool

    def matches(self, subject: Subject, *, strict: bool) -> bool:
        if not self.names(subject):
            return False
        if self.pattern is None:
            return True
        if subject.words is not None:
            return argv_matches(self.words(), list(subject.words))
        if subject.command is not None:
            if strict and subject.env:
                # The rule vouches for a command line, not for what the
                # environment makes of it: none of the variables is covered.
                return False
            return command_matches(self.words(), subject.command, strict=strict)
        return paths_match(self.spec(), subject, strict=strict)


def network_rule_covers(network_rules: list[str], tool: str, words: list[str]) -> bool:
    """Whether one of ``[permissions] network`` covers a call of a ``matches_words`` tool.

    ``git_push(origin *)``, ``curl(docs.python.org GET)``: the pattern is
    matched word by word against the call's rule words (strictly, like an
    allow rule); a rule without a pattern covers every call of the tool.
    """
    for text in network_rules:
        try:
            rule = parse_rule(text, "[permissions] network")
            if rule.tool != tool:
                continue
            if rule.pattern is None or argv_matches(rule.words(), words):
                return True
        except ValueError:
            continue
    return False


def parse_rule(text: str, source: str) -> PermissionRule:
    """``TOOL`` or ``TOOL(PATTERN)``; ValueError with an example otherwise."""
    found = _RULE.match(text.strip())
    if found is None or (found.group("pattern") is not None and not found.group("pattern").strip()):
        raise ValueError(
            f"{text!r} is not a permission rule; write TOOL or TOOL(PATTERN), e.g. "
            "'read_file', 'run_shell(git status*)', 'edit(src/**)', 'files(docs/**)'"
        )
    return PermissionRule(text.strip(), found.group("tool"), found.group("pattern"), source)


# --- commands -------------------------------------------------------------------


def split_command(text: str) -> list[list[str]] | None:
    """A string command's parts, split at ``&&`` ``||`` ``;`` ``|``; None for other syntax.

    Only plain words (quoted or not) and those operators are understood.
    Anything else the shell would interpret (expansions, redirections,
    subshells, background jobs, globs, comments, assignments, keywords,
    escapes, newlines) makes the answer None.
    """
    parts: list[list[str]] = [[]]
    word: list[str] | None = None  # None: between words
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            if word is not None:
                parts[-1].append("".join(word))
                word = None
            i += 1
            continue
        op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
        if op is not None:
            if op == "|" and text.startswith("|&", i):
                return None
            if word is not None:
                parts[-1].append("".join(word))
                word = None
            if not parts[-1]:
                return None  # an empty part: "; ls", "a && && b"
            parts.append([])
            i += len(op)
            continue
        if word is None:
            word = []
            if not parts[-1] and "=" in _until_space(text, i):
                return None  # an assignment before the command: "PATH=x git status"
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            word.append(text[i + 1 : end])
            i = end + 1
            continue
        if c == '"':
            end = text.find('"', i + 1)
            if end < 0:
                return None
            inner = text[i + 1 : end]
            if any(ch in inner for ch in "$`\\"):
                return None
            word.append(inner)
            i = end + 1
            continue
        if c in _SYNTAX or (c == "&" and not text.startswith("&&", i)):
            return None
        word.append(c)
        i += 1
    if word is not None:
        parts[-1].append("".join(word))
    if not parts[-1]:
        return None  # nothing after the last operator
    for part in parts:
        if part[0] in _RESERVED:
            return None
    return parts


def _until_space(text: str, i: int) -> str:
    end = i
    while end < len(text) and text[end] not in " \t;|&":
        end += 1
    return text[i:end]


def loose_parts(text: str) -> list[list[str]]:
    """Best-effort commands inside any shell text, for deny and ask rules."""
    pieces = re.split(r"&&|\|\||[;|&\n()`{}]|\$\(", text)
    out: list[list[str]] = []
    for piece in pieces:
        try:
            words = shlex.split(piece)
        except ValueError:
            words = piece.split()
        while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # assignments before the command
        if words and words[0] in _RESERVED:
            words = words[1:]
        if words:
            out.append(words)
    return out


def argv_matches(words: list[str], argv: list[str]) -> bool:
    """Element by element; a last word ending in ``*`` also takes the rest."""
    if not argv:
        return False
    last = words[-1]
    if last == "*":
        head = words[:-1]
        return len(argv) >= len(head) and all(
            fnmatch.fnmatchcase(a, w) for a, w in zip(argv, head, strict=False)
        )
    if len(argv) < len(words) or (len(argv) > len(words) and not last.endswith("*")):
        return False
    return all(fnmatch.fnmatchcase(a, w) for a, w in zip(argv, words, strict=False))


def command_matches(words: list[str], command: list[str] | str, *, strict: bool) -> bool:
    if strict:
        if isinstance(command, list):
            return argv_matches(words, command)
        parts = split_command(command)
        return parts is not None and all(argv_matches(words, part) for part in parts)
    for part in _loose_candidates(command):
        if argv_matches(words, part):
            return True
        # "/usr/bin/rm -rf x" is still rm for a deny rule.
        base = os.path.basename(part[0])
        if base != part[0] and argv_matches(words, [base, *part[1:]]):
            return True
    return False


def _loose_candidates(command: list[str] | str) -> list[list[str]]:
    if isinstance(command, str):
        parts = split_command(command)
        found = parts if parts is not None else loose_parts(command)
    else:
        found = [command] if command else []
    # A shell run with -c: its script holds commands too.
    more: list[list[str]] = []
    for part in found:
        if os.path.basename(part[0]) in _SHELLS and "-c" in part[1:-1]:
            more.extend(_loose_candidates(part[part.index("-c", 1) + 1]))
    return found + more


# --- paths ----------------------------------------------------------------------


def paths_match(spec: Any, subject: Subject, *, strict: bool) -> bool:
    if strict:
        # An allow rule must cover every file; a glob may name any file.
        return (
            not subject.globs
            and bool(subject.paths)
            and all(spec.match_file(p) for p in subject.paths)
        )
    # A deny or ask rule holds if it may name any file of the call: a glob may.
    return subject.globs or any(spec.match_file(p) for p in (*subject.paths, *subject.given_paths))
