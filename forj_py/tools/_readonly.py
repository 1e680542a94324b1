"""Which commands only read: the argument-aware classifier behind ``run_shell``'s risk.

A command is read-only when its program is on the list below *and* none of
its arguments turns it into something that writes, deletes, runs another
program or reads outside the project.  The rules, for every program:

- the program is a bare name (``ls``, not ``./ls`` or ``/tmp/ls``); at run
  time it must also resolve, on ``PATH``, to a file outside the project;
- every argument that could name a file (every non-option argument and
  every option value) is relative, has no ``..`` component and does not
  start with ``~``; at run time each one that exists must pass the sandbox
  (inside an allowed root, not denied);
- options are matched by prefix as well as whole, because GNU tools and git
  accept unambiguous abbreviations (``sort --out=f`` is ``--output=f``);
- anything not understood is not read-only.

Then per program: options that write (``sort -o``, ``sed -i``, ``tree -o``,
``git log --output``), run programs (``find -exec``, ``rg --pre``,
``git grep -O``, every ``git -c``), follow symlinks or read what the sandbox
hides (``rg --hidden``/``--no-ignore``/``-L``, ``grep -r``), or change state
(``date -s``, ``hostname NAME``, ``git branch NAME``) make the call need
approval.  ``sed`` is read-only only for scripts made of the commands
``p d q Q = l n N g G h H x P D z``, ``s///`` without the ``e`` and ``w``
flags, and ``y///``, with line-number, ``$`` and ``/regex/`` addresses.

A string command (``sh -c``) is classified by splitting it like the shell
would, but only when it holds no shell syntax at all: no ``$ ` | & ; < > ( )
{ } * ? [ ] ~ ! # \\`` and no newline.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    read_only: bool
    reason: str  # why not; or what it is when it is read-only
    # Arguments that may name files: checked against the sandbox before an
    # unreviewed (auto-approved) call runs.
    paths: tuple[str, ...] = ()


def _no(reason: str) -> Verdict:
    return Verdict(False, reason)


Check = Callable[[list[str], list[str]], str | None]


@dataclass(frozen=True)
class Spec:
    deny_long: frozenset[str] = frozenset()  # long option names (without "--")
    deny_short: str = ""  # short option letters
    deny_exact: frozenset[str] = frozenset()  # whole tokens (find's "-exec")
    max_positionals: int | None = None
    single_dash_words: bool = False  # find: "-name" is a word, not "-n -a -m -e"
    # Its own reading of the arguments (sed: the script is not a path): fills
    # the path list and returns a reason to refuse, or None.
    check: Check | None = None


def _spec(
    deny_long: tuple[str, ...] = (),
    deny_short: str = "",
    *,
    deny_exact: tuple[str, ...] = (),
    max_positionals: int | None = None,
    single_dash_words: bool = False,
    check: Check | None = None,
) -> Spec:
    return Spec(
        frozenset(deny_long),
        deny_short,
        frozenset(deny_exact),
        max_positionals,
        single_dash_words,
        check,
    )


# --- sed --------------------------------------------------------------------------------

_SED_SIMPLE = set("pdqQ=lnNgGhHxPDz{}")
_SED_S_FLAGS = set("gpiIm0123456789")
_SED_OPTIONS_SHORT = set("nErsuz")
_SED_OPTIONS_LONG = {
    "quiet",
    "silent",
    "regexp-extended",
    "separate",
    "unbuffered",
    "null-data",
    "posix",
    "debug",
    "expression",
}


def _sed_delimited(script: str, i: int, delim: str, parts: int) -> int | None:
    """Skip ``parts`` delimited sections starting after the delimiter at ``i``; end index."""
    for _ in range(parts):
        i += 1
        while i < len(script) and script[i] != delim:
            if script[i] == "\n":
                return None
            i += 2 if script[i] == "\\" else 1
        if i >= len(script):
            return None
    return i + 1


def _sed_address(script: str, i: int) -> int | None:
    if i < len(script) and script[i] == "$":
        return i + 1
    if i < len(script) and script[i].isdigit():
        while i < len(script) and (script[i].isdigit() or script[i] == "~"):
            i += 1
        return i
    if i < len(script) and script[i] == "/":
        end = _sed_delimited(script, i, "/", 1)
        if end is None:
            return None
        while end < len(script) and script[end] in "IM":
            end += 1
        return end
    return i


def sed_script_is_read_only(script: str) -> bool:
    """Whether a sed script only prints: no w/W/r/R/e commands, no ``s///e`` or ``s///w``."""
    i, n = 0, len(script)
    while i < n:
        while i < n and script[i] in " \t\n;":
            i += 1
        if i >= n:
            break
        end = _sed_address(script, i)
        if end is None:
            return False
        if end != i and end < n and script[end] == ",":
            j = end + 1
            if j < n and script[j] in "+~":
                j += 1
            after = _sed_address(script, j)
            if after is None or after == j:
                return False
            end = after
        i = end
        while i < n and script[i] in " \t":
            i += 1
        if i < n and script[i] == "!":
            i += 1
            while i < n and script[i] in " \t":
                i += 1
        if i >= n:
            return False
        cmd = script[i]
        if cmd in _SED_SIMPLE:
            i += 1
            if cmd == "{":
                continue  # a block: its first command follows without a separator
            if cmd in "qQ":
                while i < n and (script[i].isdigit() or script[i] in " \t"):
                    i += 1
        elif cmd in "sy":
            if i + 1 >= n or script[i + 1] in "\\\n ":
                return False
            end = _sed_delimited(script, i + 1, script[i + 1], 2)
            if end is None:
                return False
            i = end
            if cmd == "s":
                while i < n and script[i] in _SED_S_FLAGS:
                    i += 1
        else:
            return False  # w, r, e, a, i, c, b, t, :, and anything else
        while i < n and script[i] in " \t":
            i += 1
        if i < n and script[i] not in ";\n}":
            return False
    return True


def _check_sed(args: list[str], paths: list[str]) -> str | None:
    scripts: list[str] = []
    positionals: list[str] = []
    i = 0
    ended = False
    while i < len(args):
        arg = args[i]
        i += 1
        if ended or arg == "-" or not arg.startswith("-"):
            positionals.append(arg)
            continue
        if arg == "--":
            ended = True
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            full = [o for o in _SED_OPTIONS_LONG if o.startswith(name)] if name else []
            if len(full) != 1:
                return f"sed option {arg} is not known to only read"
            if full[0] == "expression":
                if eq:
                    scripts.append(value)
                elif i < len(args):
                    scripts.append(args[i])
                    i += 1
                else:
                    return "sed --expression without a script"
            continue
        letters = arg[1:]
        for k, letter in enumerate(letters):
            if letter == "e":
                rest = letters[k + 1 :]
                if rest:
                    scripts.append(rest)
                elif i < len(args):
                    scripts.append(args[i])
                    i += 1
                else:
                    return "sed -e without a script"
                break
            if letter not in _SED_OPTIONS_SHORT:
                return f"sed option -{letter} may write or run code (-i edits files in place)"
    if not scripts:
        if not positionals:
            return "sed without a script"
        scripts.append(positionals.pop(0))
    for script in scripts:
        if not sed_script_is_read_only(script):
            return "the sed script is not one of the print-only forms"
    for name in positionals:
        reason = bad_path(name)
        if reason:
            return reason
        paths.append(name)
    return None


# --- git --------------------------------------------------------------------------------

_GIT_GLOBAL_OK = {
    "--no-pager",
    "-P",
    "--no-optional-locks",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-replace-objects",
}
# Denied for every subcommand: --output writes a file (log, show, diff,
# reflog, rev-list, shortlog, stash show all take it), --no-index reads
# files git does not track (.env, keys), --ext-diff / --textconv run
# programs named in config.
_GIT_ALWAYS_DENY = ("output", "no-index", "ext-diff", "textconv", "open-files-in-pager")
_GIT_DIFF_DENY = ()
_GIT_SUBCOMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    # subcommand: (denied long options, denied short letters)
    "status": ((), ""),
    "diff": (_GIT_DIFF_DENY, ""),
    "log": (_GIT_DIFF_DENY, ""),
    "show": (_GIT_DIFF_DENY, ""),
    "whatchanged": (_GIT_DIFF_DENY, ""),
    "diff-tree": (_GIT_DIFF_DENY, ""),
    "diff-index": (_GIT_DIFF_DENY, ""),
    "diff-files": (_GIT_DIFF_DENY, ""),
    "shortlog": ((), ""),
    "blame": ((), ""),
    "annotate": ((), ""),
    "ls-files": ((), ""),
    "ls-tree": ((), ""),
    "rev-parse": ((), ""),
    "rev-list": ((), ""),
    "cat-file": ((), ""),
    "describe": ((), ""),
    "merge-base": ((), ""),
    "name-rev": ((), ""),
    "show-ref": ((), ""),
    "for-each-ref": ((), ""),
    "check-ignore": ((), ""),
    "check-attr": ((), ""),
    "count-objects": ((), ""),
    # -O / --open-files-in-pager runs the program given; --no-index and
    # --untracked search files git does not track (.env, keys).
    "grep": (("untracked", "no-exclude-standard"), "O"),
    "version": ((), ""),
    "branch": ((), ""),
    "tag": ((), ""),
    "stash": ((), ""),
    "remote": ((), ""),
    "reflog": ((), ""),
    "worktree": ((), ""),
}
_BRANCH_LISTING = {
    "-a",
    "--all",
    "-r",
    "--remotes",
    "-v",
    "-vv",
    "--verbose",
    "-l",
    "--list",
    "--show-current",
    "--color",
    "--no-color",
    "--column",
    "--no-column",
    "-i",
    "--ignore-case",
    "--contains",
    "--no-contains",
    "--merged",
    "--no-merged",
    "--points-at",
    "--sort",
    "--format",
    "-n",
}
_LIST_WITH_VALUE = {"--contains", "--no-contains", "--merged", "--no-merged", "--points-at"}


def _listing_only(sub: str, args: list[str]) -> str | None:
    """``git branch`` / ``git tag`` that list, never create, delete or move."""
    listing = any(a in ("-l", "--list") for a in args)
    expecting_value = False
    for arg in args:
        if expecting_value:
            expecting_value = False
            continue
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            if sub == "tag" and name.startswith("-n") and name[2:].isdigit():
                continue
            if name not in _BRANCH_LISTING:
                return f"git {sub} {arg} may change refs"
            if name in _LIST_WITH_VALUE and "=" not in arg:
                expecting_value = True
            if name in ("--sort", "--format") and "=" not in arg:
                expecting_value = True
            continue
        if not listing:
            return f"git {sub} with a name creates, unless --list is given"
    return None


def _git_special(sub: str, args: list[str]) -> str | None:
    positional = [a for a in args if not a.startswith("-")]
    if sub in ("branch", "tag"):
        return _listing_only(sub, args)
    if sub == "stash":
        return None if args and args[0] in ("list", "show") else "git stash changes the tree"
    if sub == "remote":
        if not args or set(args) <= {"-v", "--verbose"} or (args[0] == "get-url"):
            return None
        return "git remote may change remotes or reach the network"
    if sub == "reflog":
        return None if not positional or args[0] == "show" else "git reflog may expire entries"
    if sub == "worktree":
        return None if args and args[0] == "list" else "git worktree changes worktrees"
    return None


def _check_git(args: list[str], paths: list[str]) -> str | None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in _GIT_GLOBAL_OK:
            # -c, --config-env, -C, --git-dir, --work-tree, --exec-path, -p, ...:
            # each can point git at other config, hooks, pagers or programs.
            return f"git option {args[i]} can change what git runs or where"
        i += 1
    if i >= len(args):
        return "git without a subcommand"
    sub, rest = args[i], args[i + 1 :]
    if sub not in _GIT_SUBCOMMANDS:
        return f"git {sub} is not on the read-only list"
    deny_long, deny_short = _GIT_SUBCOMMANDS[sub]
    spec = Spec(frozenset(deny_long + _GIT_ALWAYS_DENY), deny_short)
    reason = _options(rest, spec, f"git {sub}", paths=paths)
    if reason is None:
        # REV:path names a file's content at a revision, where the sandbox
        # cannot see it (a committed .env).
        revision_path = next((a for a in rest if not a.startswith("-") and ":" in a), None)
        if revision_path is not None:
            reason = f"git {sub} {revision_path} reads a file's content at a revision"
    return reason or _git_special(sub, rest)


# --- the list ---------------------------------------------------------------------------

_RG_DENY = (
    "pre",  # runs a program on every file
    "hostname-bin",  # runs a program
    "follow",  # follows symlinks out of the project
    "hidden",  # .env, .ssh, .aws are hidden files
    "no-ignore",
    "no-ignore-vcs",
    "no-ignore-dot",
    "no-ignore-files",
    "no-ignore-global",
    "no-ignore-parent",
    "no-ignore-exclude",
    "unrestricted",
)

PROGRAMS: dict[str, Spec] = {
    **{
        name: _spec()
        for name in (
            "ls",
            "pwd",
            "cat",
            "head",
            "tail",
            "wc",
            "stat",
            "du",
            "df",
            "which",
            "realpath",
            "readlink",
            "dirname",
            "basename",
            "whoami",
            "id",
            "uname",
            "nproc",
            "true",
            "false",
            "echo",
            "printf",
            "cut",
            "tr",
            "nl",
            "od",
            "hexdump",
            "strings",
            "rev",
            "tac",
            "fold",
            "fmt",
            "expand",
            "unexpand",
            "column",
            "paste",
            "comm",
            "cmp",
            "md5sum",
            "sha1sum",
            "sha224sum",
            "sha256sum",
            "sha384sum",
            "sha512sum",
            "b2sum",
            "cksum",
        )
    },
    "file": _spec(("compile",), "C"),
    "tree": _spec(("output",), "oRH"),
    "date": _spec(("set",), "s"),
    "hostname": _spec(("file", "boot"), "Fb", max_positionals=0),
    "sort": _spec(("output", "compress-program"), "o"),
    "uniq": _spec(max_positionals=1),  # a second name is the output file
    "xxd": _spec(max_positionals=1),
    # -r reads whole trees, -N prints absent files' partners whole (denied
    # ones too); directory operands are refused before an unreviewed run.
    "diff": _spec(("recursive", "new-file", "unidirectional-new-file"), "rN"),
    "grep": _spec(("recursive", "dereference-recursive", "directories"), "rRd"),
    "egrep": _spec(("recursive", "dereference-recursive", "directories"), "rRd"),
    "fgrep": _spec(("recursive", "dereference-recursive", "directories"), "rRd"),
    "rg": _spec(_RG_DENY, "Lu."),
    "find": _spec(
        deny_exact=(
            "-exec",
            "-execdir",
            "-ok",
            "-okdir",
            "-delete",
            "-fprint",
            "-fprint0",
            "-fprintf",
            "-fls",
        ),
        single_dash_words=True,
    ),
    "sed": _spec(check=_check_sed),
    "git": _spec(check=_check_git),
}


# --- classification -----------------------------------------------------------------------


def bad_path(arg: str) -> str | None:
    """Why ``arg``, read as a path, could leave the project; None if it cannot."""
    if arg.startswith("/"):
        return f"{arg!r} is an absolute path"
    if arg.startswith("~"):
        return f"{arg!r} names a home directory"
    if ".." in arg.split("/"):
        return f"{arg!r} climbs out with '..'"
    return None


def _options(
    args: list[str],
    spec: Spec,
    program: str,
    *,
    paths: list[str],
    positionals: list[str] | None = None,
) -> str | None:
    """Apply ``spec`` to ``args``; collect path-like tokens. A reason to refuse, or None."""
    ended = False
    for arg in args:
        if ended or arg == "-" or not arg.startswith("-") or len(arg) == 1:
            reason = bad_path(arg)
            if reason:
                return reason
            paths.append(arg)
            if positionals is not None:
                positionals.append(arg)
            continue
        if arg == "--":
            ended = True
            continue
        if arg in spec.deny_exact:
            return f"{program} {arg} runs a program or writes"
        if spec.single_dash_words and not arg.startswith("--"):
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            for denied in spec.deny_long:
                if name == denied or (name and denied.startswith(name)):
                    return f"{program} --{denied} may write, run code or read hidden files"
            if eq:
                reason = bad_path(value)
                if reason:
                    return reason
                paths.append(value)
            continue
        letters = arg[1:]
        # An option value glued to its letter (-f/etc/passwd, -f.env): check
        # each tail, and let the sandbox see those that name files.
        for k in range(1, len(letters)):
            reason = bad_path(letters[k:])
            if reason:
                return reason
            paths.append(letters[k:])
        for letter in letters:
            if letter in spec.deny_short:
                return f"{program} -{letter} may write, run code or read hidden files"
    return None


def classify(argv: list[str]) -> Verdict:
    """Is running ``argv`` (no shell) read-only?  See the module docstring."""
    if not argv or not argv[0]:
        return _no("no program")
    program = argv[0]
    if "/" in program:
        return _no(f"{program!r} is a path, not a program name from the read-only list")
    spec = PROGRAMS.get(program)
    if spec is None:
        return _no(f"{program} is not on the read-only list")
    args = argv[1:]
    paths: list[str] = []
    positionals: list[str] = []
    if spec.check is not None:
        reason = spec.check(args, paths)
    else:
        reason = _options(args, spec, program, paths=paths, positionals=positionals)
    limit = spec.max_positionals
    if reason is None and limit is not None and len(positionals) > limit:
        reason = (
            f"{program} with {len(positionals)} arguments writes or changes something "
            f"(at most {limit} to only read)"
        )
    if reason is not None:
        return _no(reason)
    return Verdict(True, f"{program}: read-only", tuple(dict.fromkeys(paths)))


_SHELL_SAFE = set(string.ascii_letters + string.digits + " \t_-./=:,@%+^'\"")


def split_plain_shell(command: str) -> list[str] | None:
    """``command`` split as ``sh`` would, if it uses no shell syntax at all; else None."""
    if not command.strip() or any(c not in _SHELL_SAFE for c in command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


def classify_shell(command: str) -> Verdict:
    argv = split_plain_shell(command)
    if argv is None:
        return _no("the command uses shell syntax (expansions, pipes, redirections, globs)")
    return classify(argv)


def classify_cmd(cmd: list[str] | str) -> Verdict:
    return classify_shell(cmd) if isinstance(cmd, str) else classify(cmd)
