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
    ["rg", "--json", "-e", "foo", "--glob", "*.py"],
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
    for argv in (["date", "-f.env"], ["file", "-f.env"]):
        verdict = classify(argv)
        assert ".env" in verdict.paths, verdict


def test_path_arguments_are_collected_for_the_sandbox_check() -> None:
    assert classify(["cat", "a.txt", "--", "-b"]).paths == ("a.txt", "-b")
    assert classify(["rg", "--ignore-file=.ig", "x", "src"]).paths == (".ig", "x", "src")
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
