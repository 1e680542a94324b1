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
_GIT_ALWAYS_DENY = (
    "output",
    "no-index",
    "ext-diff",
    "textconv",
    "open-files-in-pager",
    # run a program named in the repository's config
    "filters",  # cat-file: clean/smudge filters
    "show-signature",  # gpg.program
    # run git again inside each submodule, under that repository's own config
    "submodule",
    "recurse-submodules",
)
# -O<orderfile> reads the order of paths from a file.
_GIT_DIFF_DENY = ("orderfile",)
_GIT_SUBCOMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    # subcommand: (denied long options, denied short letters)
    "status": ((), ""),
    "diff": (_GIT_DIFF_DENY, "O"),
    "log": (_GIT_DIFF_DENY, "O"),
    "show": (_GIT_DIFF_DENY, "O"),
    "whatchanged": (_GIT_DIFF_DENY, "O"),
    "diff-tree": (_GIT_DIFF_DENY, "O"),
    "diff-index": (_GIT_DIFF_DENY, "O"),
    "diff-files": (_GIT_DIFF_DENY, "O"),
    "shortlog": ((), ""),
    # --contents FILE, -S REVS-FILE and --ignore-revs-file FILE read files.
    "blame": (("contents", "ignore-revs-file"), "S"),
    "annotate": (("contents", "ignore-revs-file"), "S"),
    # --exclude-from / -X read patterns from a file, --exclude-per-directory
    # from every file of that name (.env too).
    "ls-files": (("exclude-from", "exclude-per-directory"), "X"),
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
    # -f reads patterns from a file.
    "grep": (("untracked", "no-exclude-standard", "file"), "Of"),
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
            if sub == "tag" and name in ("-v", "--verify", "--verbose"):
                return (
                    f"git tag {arg} verifies signatures, which runs the gpg program "
                    "the repository's config names"
                )
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
        signature = next((a for a in rest if "%G" in a or "%(signature" in a), None)
        if signature is not None:
            reason = (
                f"git {sub} {signature} verifies signatures, which runs the gpg program "
                "the repository's config names"
            )
    if reason is None:
        # REV:path names a file's content at a revision, where the sandbox
        # cannot see it (a committed .env).
        revision_path = next((a for a in rest if not a.startswith("-") and ":" in a), None)
        if revision_path is not None:
            reason = f"git {sub} {revision_path} reads a file's content at a revision"
    return reason or _git_special(sub, rest)


def _check_strings(args: list[str], paths: list[str]) -> str | None:
    # binutils reads "@FILE" as more arguments: names the sandbox never sees.
    response = next((a for a in args if a.startswith("@")), None)
    if response is not None:
        return f"strings {response} reads more arguments (files to read) from a file"
    return _options(args, Spec(), "strings", paths=paths)


# --- the list ---------------------------------------------------------------------------

_RG_DENY = (
    "pre",  # runs a program on every file
    "pre-glob",  # chooses the files --pre runs on
    "search-zip",  # runs gzip, xz, bzip2... on compressed files
    "hostname-bin",  # runs a program
    "follow",  # follows symlinks out of the project
    "hidden",  # .env, .ssh, .aws are hidden files
    # globs override the ignore rules, so they can re-include ignored files
    "glob",
    "iglob",
    "ignore-file",  # reads ignore rules from a file it names
    "file",  # reads patterns from a file it names
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
            "pwd",
            "cat",
            "head",
            "tail",
            "stat",
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
        )
    },
    # -L follows symlinks (with -R, out of the project).
    "ls": _spec(("dereference",), "L"),
    # --files0-from reads the names of the files to read from a file: names
    # the sandbox never sees.  The same in du, sort and wc.
    "wc": _spec(("files0-from",)),
    # -X reads patterns from a file; -L follows symlinks out of the project.
    "du": _spec(("files0-from", "exclude-from", "dereference"), "XL"),
    # --check reads a list of files to read from the file it is given.
    **{
        name: _spec(("check",), "c")
        for name in (
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
    "hexdump": _spec(("format-file",), "f"),  # -f reads its format from a file
    "strings": _spec(check=_check_strings),
    # -f reads the names to examine from a file, -m magic from a file; -z
    # runs decompression programs; -L follows symlinks out of the project.
    "file": _spec(
        ("compile", "files-from", "magic-file", "uncompress", "uncompress-noreport", "dereference"),
        "CfmzZL",
    ),
    # --fromfile reads the listing from files, --gitfile ignore rules from a
    # file, -l follows symlinks.
    "tree": _spec(("output", "fromfile", "gitfile"), "oRHl"),
    "date": _spec(("set", "file"), "sf"),  # -f prints each line of a file (as a bad date)
    "hostname": _spec(("file", "boot"), "Fb", max_positionals=0),
    # -T puts temporary files anywhere, --random-source reads a file.
    "sort": _spec(
        (
            "output",
            "compress-program",
            "files0-from",
            "temporary-directory",
            "random-source",
        ),
        "oT",
    ),
    "uniq": _spec(max_positionals=1),  # a second name is the output file
    "xxd": _spec(max_positionals=1),
    # -r reads whole trees, -N prints absent files' partners whole (denied
    # ones too); directory operands are refused before an unreviewed run.
    # -X / --exclude-from read patterns from a file.
    "diff": _spec(("recursive", "new-file", "unidirectional-new-file", "exclude-from"), "rNX"),
    # -f / --file read patterns from a file, --exclude-from too.
    **{
        name: _spec(
            ("recursive", "dereference-recursive", "directories", "file", "exclude-from"),
            "rRdf",
        )
        for name in ("grep", "egrep", "fgrep")
    },
    # -L follows symlinks, -u/-uu/-uuu and -. unhide and unignore, -g globs
    # re-include, -f reads a pattern file, -z runs decompressors.
    "rg": _spec(_RG_DENY, "Lu.gfz"),
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
            # follow symlinks out of the project; read names from a file
            "-L",
            "-follow",
            "-files0-from",
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


# Why an option is refused, by its name ("--long" or "-x"), with the
# program's name for the few letters that mean different things.
_WHY = {
    "--pre": "runs a program on each file",
    "--pre-glob": "runs a program on each file (the files --pre is given)",
    "--search-zip": "runs a decompression program on compressed files",
    "--hostname-bin": "runs a program",
    "--follow": "follows symlinks out of the project",
    "--dereference": "follows symlinks out of the project",
    "--hidden": "searches hidden files (.env, .ssh, .aws)",
    "--glob": "takes globs that override the ignore rules (re-including ignored files)",
    "--iglob": "takes globs that override the ignore rules (re-including ignored files)",
    "--ignore-file": "reads ignore rules from a file it names",
    "--unrestricted": "searches ignored and hidden files",
    "--files0-from": "reads the names of files to read from a file, names the sandbox never sees",
    "--files-from": "reads the names of files to read from a file, names the sandbox never sees",
    "--fromfile": "reads the names of files from a file, names the sandbox never sees",
    "--check": "reads each file named in a list file, names the sandbox never sees",
    "--exclude-from": "reads patterns from a file it names",
    "--exclude-per-directory": "reads patterns from every file of the name it is given",
    "--uncompress": "runs a decompression program on compressed files",
    "--uncompress-noreport": "runs a decompression program on compressed files",
    "file -z": "runs a decompression program on compressed files",
    "file -Z": "runs a decompression program on compressed files",
    "file -L": "follows symlinks out of the project",
    "--file": "reads from a file it names",
    "--format-file": "reads its format from a file it names",
    "--magic-file": "reads magic rules from a file it names",
    "--gitfile": "reads ignore rules from a file it names",
    "--random-source": "reads a file it names",
    "--temporary-directory": "writes temporary files where it is told",
    "--compress-program": "runs a program",
    "--output": "writes a file",
    "--orderfile": "reads the order of paths from a file it names",
    "--contents": "reads a file it names",
    "--ignore-revs-file": "reads a file it names",
    "--ext-diff": "runs the external diff program of the repository's config",
    "--textconv": "runs the textconv program of the repository's config",
    "--filters": "runs the filter programs of the repository's config",
    "--show-signature": "runs the gpg program of the repository's config",
    "--submodule": "runs git in each submodule, under that repository's own config",
    "--recurse-submodules": "runs git in each submodule, under that repository's own config",
    "--no-index": "reads files git does not track (.env, keys)",
    "--open-files-in-pager": "runs a program",
    "rg -u": "searches ignored (-u), hidden (-uu) and binary (-uuu) files",
    "rg -.": "searches hidden files (.env, .ssh, .aws)",
    "rg -g": "takes globs that override the ignore rules (re-including ignored files)",
    "rg -f": "reads patterns from a file it names",
    "rg -z": "runs a decompression program on compressed files",
    "rg -L": "follows symlinks out of the project",
    "ls -L": "follows symlinks out of the project",
    "du -L": "follows symlinks out of the project",
    "du -X": "reads patterns from a file it names",
    "diff -X": "reads patterns from a file it names",
    "file -f": "reads the names of files to read from a file, names the sandbox never sees",
    "file -m": "reads magic rules from a file it names",
    "hexdump -f": "reads its format from a file it names",
    "date -f": "prints each line of a file it names (as an invalid date)",
    "sort -T": "writes temporary files where it is told",
    "tree -l": "follows symlinks out of the project",
    "git blame -S": "reads revisions from a file it names",
    "git annotate -S": "reads revisions from a file it names",
    "git ls-files -X": "reads patterns from a file it names",
    "git grep -f": "reads patterns from a file it names",
    "git grep -O": "runs the program it is given on the matching files",
}
for _name in ("grep", "egrep", "fgrep"):
    _WHY[f"{_name} -f"] = "reads patterns from a file it names"
for _name in ("md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum"):
    _WHY[f"{_name} -c"] = _WHY["--check"]
for _name in ("b2sum", "cksum"):
    _WHY[f"{_name} -c"] = _WHY["--check"]
for _name in ("diff", "log", "show", "whatchanged", "diff-tree", "diff-index", "diff-files"):
    _WHY[f"git {_name} -O"] = _WHY["--orderfile"]
_WHY_DEFAULT = "may write, run code or read hidden files"


def _why(program: str, option: str) -> str:
    if option.startswith("--no-ignore"):
        return "searches files the ignore rules hide"
    return _WHY.get(f"{program} {option}") or _WHY.get(option) or _WHY_DEFAULT


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
            for denied in sorted(spec.deny_long):
                if name == denied or (name and denied.startswith(name)):
                    return f"{program} --{denied} {_why(program, '--' + denied)}"
            if program == "rg" and name.startswith("no-ignore"):
                # --no-ignore, -vcs, -dot, -files, -parent... and any later
                # one: each shows files the ignore rules hide.
                return f"rg {arg} searches files the ignore rules hide"
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
                return f"{program} -{letter} {_why(program, '-' + letter)}"
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
