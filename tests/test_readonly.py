"""The read-only command classifier behind run_shell's risk, on tricky argv."""

from __future__ import annotations

import pytest

from forj_py.tools._readonly import classify, classify_shell, sed_script_is_read_only

READ_ONLY = [
    ["ls", "-la"],
    ["ls"],
    ["cat", "README.md", "src/main.py"],
    ["head", "-n5", "src/main.py"],
    ["tail", "-n", "20", "log.txt"],
    ["wc", "-l", "a", "b"],
    ["rg", "-n", "TODO", "src"],
    ["rg", "--json", "-e", "foo", "--type", "py"],
    ["rg", "--pretty", "x"],  # not --pre
    ["grep", "-n", "needle", "file.txt"],
    ["find", ".", "-name", "*.py", "-type", "f"],
    ["find", "src", "-newer", "setup.py", "-print"],
    ["git", "status", "--short"],
    ["git", "diff", "HEAD~1", "--", "src"],
    ["git", "diff", "HEAD..main"],
    ["git", "log", "--oneline", "-n", "20"],
    ["git", "--no-pager", "log", "-p", "--stat"],
    ["git", "blame", "-L", "1,20", "README.md"],
    ["git", "branch", "-a"],
    ["git", "branch", "--list", "feature/*"],
    ["git", "tag"],
    ["git", "tag", "-l", "v*"],
    ["git", "stash", "list"],
    ["git", "remote", "-v"],
    ["git", "grep", "-n", "needle"],
    ["sed", "-n", "1,20p", "file"],
    ["sed", "-n", "/start/,/end/p", "file"],
    ["sed", "-e", "s/a/b/g", "-e", "3q", "file"],
    ["sed", "-E", "s|x+|y|2", "file"],
    ["sort", "-k2", "-n", "data"],
    ["uniq", "-c", "data"],
    ["date"],
    ["hostname"],
    ["diff", "-u", "a", "b"],
    ["tree", "-L", "2"],
    ["sha256sum", "dist/a.tar"],
]

NOT_READ_ONLY = {
    # git: config on the command line runs code (pager, fsmonitor, external diff)
    "git -c core.pager": ["git", "-c", "core.pager=sh -c 'touch x'", "log"],
    "git -c fsmonitor": ["git", "-c", "core.fsmonitor=./evil", "status"],
    "git --config-env": ["git", "--config-env=core.pager=EVIL", "log"],
    "git -C elsewhere": ["git", "-C", "other", "status"],
    "git --git-dir": ["git", "--git-dir=embedded.git", "status"],
    "git --exec-path": ["git", "--exec-path=./bin", "status"],
    "git -p (pager)": ["git", "-p", "log"],
    "git diff --output": ["git", "diff", "--output=patch.txt"],
    "git log --output abbreviated": ["git", "log", "--outp=f"],
    "git diff --output separate": ["git", "diff", "--output", "f"],
    "git log --ext-diff": ["git", "log", "--ext-diff", "-p"],
    "git grep -O": ["git", "grep", "-Ovim", "x"],
    "git grep --open-files-in-pager": ["git", "grep", "--open-files-in-pager=sh", "x"],
    "git grep --no-index": ["git", "grep", "--no-index", "SECRET"],
    "git branch create": ["git", "branch", "feature"],
    "git branch -D": ["git", "branch", "-D", "main"],
    "git tag create": ["git", "tag", "v9"],
    "git stash (push)": ["git", "stash"],
    "git remote add": ["git", "remote", "add", "o", "url"],
    "git commit": ["git", "commit", "-m", "x"],
    "git config": ["git", "config", "--get", "user.name"],
    "git checkout": ["git", "checkout", "."],
    "git alone": ["git"],
    # ripgrep: preprocessors run programs; hidden/ignored files hold secrets
    "rg --pre": ["rg", "--pre", "./script", "x"],
    "rg --pre=": ["rg", "--pre=sh", "x"],
    "rg --hostname-bin": ["rg", "--hostname-bin=./x", "y"],
    "rg -uu": ["rg", "-uu", "x"],
    "rg --hidden": ["rg", "--hidden", "x"],
    "rg -.": ["rg", "-.", "x"],
    "rg --no-ignore": ["rg", "--no-ignore", "x"],
    "rg -L": ["rg", "-L", "x"],
    "grep -r": ["grep", "-r", "x", "."],
    "grep -Rn": ["grep", "-Rn", "x"],
    "grep --directories=recurse": ["grep", "--directories=recurse", "x", "."],
    # find: actions that run or write
    "find -exec": ["find", ".", "-exec", "rm", "{}", ";"],
    "find -execdir": ["find", ".", "-execdir", "sh", "-c", "x", ";"],
    "find -ok": ["find", ".", "-ok", "rm", "{}", ";"],
    "find -delete": ["find", ".", "-name", "*.o", "-delete"],
    "find -fprint": ["find", ".", "-fprint", "out"],
    # sed: in place, write and execute commands
    "sed -i": ["sed", "-i", "s/a/b/", "f"],
    "sed -i.bak": ["sed", "-i.bak", "s/a/b/", "f"],
    "sed -ni cluster": ["sed", "-ni", "p", "f"],
    "sed --in-place": ["sed", "--in-place", "p", "f"],
    "sed --in abbreviated": ["sed", "--in=.b", "p", "f"],
    "sed s///e": ["sed", "s/.*/id/e", "f"],
    "sed s///w": ["sed", "s/a/b/w out", "f"],
    "sed w": ["sed", "-n", "w out", "f"],
    "sed e": ["sed", "1e id", "f"],
    "sed r": ["sed", "r /etc/passwd", "f"],
    "sed -f script": ["sed", "-f", "script.sed", "f"],
    # options that write
    "sort -o": ["sort", "-o", "out", "in"],
    "sort --output abbreviated": ["sort", "--out=x", "in"],
    "sort --compress-program": ["sort", "--compress-program=./x", "in"],
    "uniq writes its second name": ["uniq", "in", "out"],
    "tree -o": ["tree", "-o", "out"],
    "date -s": ["date", "-s", "2020-01-01"],
    "hostname NAME": ["hostname", "pwned"],
    "file -C": ["file", "-C", "-m", "magic"],
    "xxd writes its second name": ["xxd", "in", "out"],
    # paths out of the project
    "absolute path": ["cat", "/etc/passwd"],
    "dot-dot": ["cat", "../secret"],
    "home": ["cat", "~/.ssh/id_rsa"],
    "glued option value": ["grep", "-f/etc/passwd", "x"],
    "option value": ["rg", "--ignore-file=/etc/x", "y"],
    "git diff --no-index outside": ["git", "diff", "--no-index", "/etc/passwd", "x"],
    # programs
    "not on the list": ["rm", "-rf", "build"],
    "a path to a program": ["./ls"],
    "an absolute program": ["/bin/cat", "x"],
    "env runs programs": ["env", "ls"],
    "xargs runs programs": ["xargs", "rm"],
    "awk can run programs": ["awk", '{system("id")}'],
    "sh": ["sh", "-c", "ls"],
    "tee writes": ["tee", "out"],
    # found in review: every git subcommand that takes --output writes with it
    "git reflog --output": ["git", "reflog", "-1", "--output=.git/config"],
    "git rev-list --output": ["git", "rev-list", "--output=a.txt", "HEAD"],
    "git shortlog --output": ["git", "shortlog", "--output=a.txt"],
    "git stash show --output": ["git", "stash", "show", "--output=a.txt"],
    "git diff --no-index": ["git", "diff", "--no-index", ".", "empty"],
    "git log --textconv": ["git", "log", "-p", "--textconv"],
    "git show REV:path": ["git", "show", "HEAD:.env"],
    "git cat-file REV:path": ["git", "cat-file", "-p", "HEAD:.env"],
    "diff -N": ["diff", "-N", ".", "empty"],
    "diff --new-file abbreviated": ["diff", "--new", "a", "b"],
    "diff --unidirectional-new-file": ["diff", "--unidirectional-new-file", "a", "b"],
    "jq reads modules from anywhere": ["jq", "-n", 'import "config" as $c {search: "~/x"}; $c'],
    "printenv shows what scrubbing missed": ["printenv"],
}


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: " ".join(a))
def test_read_only_commands(argv: list[str]) -> None:
    verdict = classify(argv)
    assert verdict.read_only, verdict.reason


@pytest.mark.parametrize("name", sorted(NOT_READ_ONLY))
def test_commands_that_write_run_code_or_leave_the_project(name: str) -> None:
    verdict = classify(NOT_READ_ONLY[name])
    assert not verdict.read_only
    assert verdict.reason


def test_glued_option_values_reach_the_sandbox_check() -> None:
    """Found in review: ``date -f.env`` reads .env; the sandbox must see '.env'."""
    for argv in (["grep", "-e.env", "x"], ["diff", "--from-file=.env", "x"]):
        verdict = classify(argv)
        assert ".env" in verdict.paths, verdict


def test_path_arguments_are_collected_for_the_sandbox_check() -> None:
    assert classify(["cat", "a.txt", "--", "-b"]).paths == ("a.txt", "-b")
    assert classify(["rg", "--sort=path", "x", "src"]).paths == ("path", "x", "src")
    assert classify(["sed", "-n", "/x/p", "f"]).paths == ("f",)  # the script is not a path


@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("ls -la", True),
        ("git log --format='%h %s' -n 5", True),
        ('cat "README.md"', True),
        ("cat x | sh", False),
        ("cat x > y", False),
        ("echo $HOME", False),
        ("ls `id`", False),
        ("ls $(id)", False),
        ("ls; rm -rf x", False),
        ("ls && rm x", False),
        ("cat *.py", False),
        ("ls ~", False),
        ("ls\nrm x", False),
        ("cat 'unbalanced", False),
        ("git -c core.pager=x log", False),
    ],
)
def test_string_commands_are_read_only_only_without_shell_syntax(
    command: str, read_only: bool
) -> None:
    assert classify_shell(command).read_only is read_only


@pytest.mark.parametrize(
    ("script", "ok"),
    [
        ("p", True),
        ("1,20p", True),
        ("$p", True),
        ("/a/,/b/d", True),
        ("s/a/b/g;p", True),
        ("1~2p", True),
        ("1!d", True),
        ("3q5", True),
        ("1,3{p;p}", True),
        ("y/abc/xyz/", True),
        ("w out", False),
        ("s/a/b/w out", False),
        ("s/a/b/e", False),
        ("e id", False),
        ("r file", False),
        ("a\\ text", False),
        ("1,3{w x}", False),
        ("s/a/b", False),  # unterminated
    ],
)
def test_sed_scripts(script: str, ok: bool) -> None:
    assert sed_script_is_read_only(script) is ok


# Options that read a file they name, read a list of files to read (names the
# sandbox never checks), run a program, or re-include what the ignore rules
# and denied patterns hide.  Each: (argv, words the reason must hold).
ATTACKS = {
    "sort --files0-from": (["sort", "--files0-from=list"], "names of files"),
    "sort --files0 abbreviated": (["sort", "--files0=list"], "names of files"),
    "wc --files0-from": (["wc", "--files0-from", "list"], "names of files"),
    "du --files0-from": (["du", "--files0-from=list"], "names of files"),
    "du --exclude-from": (["du", "--exclude-from=pats", "."], "reads patterns"),
    "du -X": (["du", "-X", "pats", "."], "reads patterns"),
    "du -L": (["du", "-L", "."], "symlinks"),
    "sort --random-source": (["sort", "--random-source=.env", "x"], "reads a file"),
    "sort -T": (["sort", "-T", "/tmp/x", "in"], "temporary files"),
    "grep -f": (["grep", "-f", "patterns", "x"], "reads patterns"),
    "grep --file": (["grep", "--file=patterns", "x"], "reads"),
    "grep --exclude-from": (["grep", "--exclude-from=x", "y", "z"], "reads patterns"),
    "egrep -f": (["egrep", "-f", "p", "x"], "reads patterns"),
    "fgrep -f": (["fgrep", "-f", "p", "x"], "reads patterns"),
    "diff -X": (["diff", "-X", "pats", "a", "b"], "reads patterns"),
    "diff --exclude-from": (["diff", "--exclude-from=pats", "a", "b"], "reads patterns"),
    "sha256sum -c": (["sha256sum", "-c", "sums"], "list file"),
    "md5sum --check": (["md5sum", "--check", "sums"], "list file"),
    "b2sum -c": (["b2sum", "-c", "sums"], "list file"),
    "cksum --check": (["cksum", "--check", "sums"], "list file"),
    "hexdump -f": (["hexdump", "-f", "fmt", "x"], "format from a file"),
    "strings @file": (["strings", "@args"], "from a file"),
    "file -f": (["file", "-f", "names"], "names of files"),
    "file --files-from": (["file", "--files-from=names"], "names of files"),
    "file -m": (["file", "-m", "magic", "x"], "magic"),
    "file -z": (["file", "-z", "x.gz"], "decompression program"),
    "file --uncompress": (["file", "--uncompress", "x.xz"], "decompression program"),
    "file -L": (["file", "-L", "link"], "symlinks"),
    "git ls-files --exclude-per-directory": (
        ["git", "ls-files", "-o", "--exclude-per-directory=.env"],
        "every file of the name",
    ),
    "git tag -v": (["git", "tag", "-l", "-v", "v1"], "gpg"),
    "git tag --verify": (["git", "tag", "--verify", "v1"], "gpg"),
    "git for-each-ref %(signature)": (
        ["git", "for-each-ref", "--format=%(signature:key)"],
        "gpg",
    ),
    "date -f": (["date", "-f.env"], "each line of a file"),
    "date --file": (["date", "--file=.env"], "reads"),
    "tree --fromfile": (["tree", "--fromfile", "list"], "names of files"),
    "tree --gitfile": (["tree", "--gitfile=x"], "ignore rules"),
    "tree -l": (["tree", "-l"], "symlinks"),
    "ls -L": (["ls", "-LR", "."], "symlinks"),
    "ls --dereference": (["ls", "--dereference", "-R"], "symlinks"),
    "find -L": (["find", "-L", ".", "-name", "x"], "runs a program or writes"),
    "find -follow": (["find", ".", "-follow"], ""),
    "find -files0-from": (["find", "-files0-from", "list"], ""),
    # ripgrep
    "rg --pre": (["rg", "--pre", "./script", "x"], "runs a program on each file"),
    "rg --pre-glob": (["rg", "--pre-glob=*.pdf", "x"], "runs a program on each file"),
    "rg --search-zip": (["rg", "--search-zip", "x"], "decompression program"),
    "rg -z": (["rg", "-z", "x"], "decompression program"),
    "rg --iglob": (["rg", "--iglob", ".env", "x"], "override the ignore rules"),
    "rg --glob": (["rg", "--glob=*.key", "x"], "override the ignore rules"),
    "rg -g": (["rg", "-g", "!x", "KEY"], "override the ignore rules"),
    "rg -u": (["rg", "-u", "x"], "ignored"),
    "rg -uuu": (["rg", "-uuu", "x"], "ignored"),
    "rg --unrestricted": (["rg", "--unrestricted", "x"], "ignored and hidden"),
    "rg --no-ignore-vcs": (["rg", "--no-ignore-vcs", "x"], "ignore rules hide"),
    "rg --no-ignore-files": (["rg", "--no-ignore-files", "x"], "ignore rules hide"),
    "rg --no-ignore-exclude": (["rg", "--no-ignore-exclude", "x"], "ignore rules hide"),
    "rg --no-ignore-future": (["rg", "--no-ignore-anything-new", "x"], "ignore rules hide"),
    "rg --ignore-file": (["rg", "--ignore-file", "rules", "x"], "ignore rules from a file"),
    "rg --follow": (["rg", "--follow", "x"], "symlinks"),
    "rg -L": (["rg", "-L", "x"], "symlinks"),
    "rg --hidden": (["rg", "--hidden", "x"], "hidden files"),
    "rg -f": (["rg", "-f", "patterns"], "reads patterns"),
    "rg --file": (["rg", "--file=patterns"], "reads from a file"),
    # git: programs from the repository's config, files named by options,
    # other repositories' config
    "git diff --ext-diff": (["git", "diff", "--ext-diff"], "external diff"),
    "git log --textconv": (["git", "log", "-p", "--textconv"], "textconv"),
    "git cat-file --filters": (["git", "cat-file", "--filters", "HEAD"], "filter programs"),
    "git log --show-signature": (["git", "log", "--show-signature"], "gpg"),
    "git log --format=%G?": (["git", "log", "--format=%h %G?"], "gpg"),
    "git show --pretty=%GS": (["git", "show", "--pretty=format:%GS"], "gpg"),
    "git diff --submodule=diff": (["git", "diff", "--submodule=diff"], "submodule"),
    "git grep --recurse-submodules": (
        ["git", "grep", "--recurse-submodules", "x"],
        "submodule",
    ),
    "git ls-files --recurse-submodules": (
        ["git", "ls-files", "--recurse-submodules"],
        "submodule",
    ),
    "git diff -O": (["git", "diff", "-Oorder.txt"], "order of paths"),
    "git log -O": (["git", "log", "-p", "-O", "order.txt"], "order of paths"),
    "git blame --contents": (["git", "blame", "--contents", "x", "f"], "reads a file"),
    "git blame --ignore-revs-file": (
        ["git", "blame", "--ignore-revs-file=revs", "f"],
        "reads a file",
    ),
    "git blame -S": (["git", "blame", "-S", "revs", "f"], "revisions from a file"),
    "git ls-files --exclude-from": (
        ["git", "ls-files", "--exclude-from=pats", "-o"],
        "reads patterns",
    ),
    "git ls-files -X": (["git", "ls-files", "-X", "pats", "-o"], "reads patterns"),
    "git grep -f": (["git", "grep", "-f", "pats"], "reads patterns"),
    "git grep --file": (["git", "grep", "--file=pats"], "reads"),
    "git grep -O": (["git", "grep", "-Ovim", "x"], "runs the program"),
    "git -c": (["git", "-c", "diff.external=./x", "diff"], "can change what git runs"),
    "git --exec-path": (["git", "--exec-path=./bin", "log"], "can change what git runs"),
    "git --git-dir": (["git", "--git-dir=x.git", "log"], "can change what git runs"),
    "git --work-tree": (["git", "--work-tree=..", "status"], "can change what git runs"),
    "git -C": (["git", "-C", "vendor/x", "log"], "can change what git runs"),
    "git --config-env": (["git", "--config-env=a.b=C", "log"], "can change what git runs"),
    "git --output": (["git", "log", "--output=x"], "writes a file"),
    "git --no-index": (["git", "diff", "--no-index", "a", "b"], "does not track"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_read_only_classifier_rejects_file_reading_and_program_running_options(
    name: str,
) -> None:
    argv, words = ATTACKS[name]
    verdict = classify(argv)
    assert not verdict.read_only, argv
    assert words in verdict.reason, verdict.reason
    # The reason names the program and the option.
    assert verdict.reason.startswith((argv[0], f"{argv[0]} ")), verdict.reason


def test_attack_read_only_classifier_keeps_the_safe_forms_of_those_commands() -> None:
    # Refusing the options above must not refuse the everyday commands.
    for argv in (
        ["sort", "-u", "-k2", "data"],
        ["wc", "-l", "a", "b"],
        ["du", "-sh", "src"],
        ["grep", "-n", "-e", "x", "f"],
        ["rg", "-n", "--type", "py", "needle"],
        ["rg", "--no-require-git", "x"],
        ["git", "log", "--format=%h %an %s", "-n", "3"],
        ["git", "diff", "--no-ext-diff", "--no-textconv"],
        ["git", "blame", "-L", "1,5", "f"],
        ["git", "ls-files", "-o", "--exclude-standard"],
        ["sha256sum", "a", "b"],
        ["strings", "-n", "8", "bin"],
        ["file", "x"],
        ["tree", "-L", "2", "-a"],
        ["ls", "-la"],
    ):
        verdict = classify(argv)
        assert verdict.read_only, (argv, verdict.reason)
