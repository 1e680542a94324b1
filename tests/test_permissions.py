"""Permission rule matching: commands word by word, paths gitignore-style, strict and loose."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.safety.permissions import (
    Subject,
    argv_matches,
    command_matches,
    parse_rule,
    split_command,
)


def shell(cmd: list[str] | str, tool: str = "run_shell", network: bool = False) -> Subject:
    return Subject(tool=tool, command=cmd, network=network)


def files(tool: str, *paths: str, given: tuple[str, ...] = ()) -> Subject:
    return Subject(tool=tool, changes_files=True, paths=paths, given_paths=given or paths)


def allows(rule: str, subject: Subject) -> bool:
    return parse_rule(rule, "test").matches(subject, strict=True)


def denies(rule: str, subject: Subject) -> bool:
    return parse_rule(rule, "test").matches(subject, strict=False)


# --- the rule grammar -------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "run_shell()", "run shell", "(x)", "edit(src/**"])
def test_fr_cns_01_malformed_rules_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="TOOL or TOOL\\(PATTERN\\)"):
        parse_rule(text, "test")


def test_fr_cns_01_a_bare_tool_matches_every_call_of_it() -> None:
    assert allows("run_shell", shell("echo $(rm -rf x)"))
    assert allows("edit", files("edit", "anything/at/all.py"))
    assert not allows("edit", files("write_file", "a.py"))


# --- commands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "cmd", "expected"),
    [
        ("run_shell(git status*)", ["git", "status"], True),
        ("run_shell(git status*)", ["git", "status", "--short"], True),
        ("run_shell(git status*)", "git status -s", True),
        ("run_shell(git status*)", ["git", "push"], False),
        ("run_shell(pytest *)", ["pytest"], True),
        ("run_shell(pytest *)", "pytest -q tests/test_x.py", True),
        ("run_shell(pytest *)", ["python", "-m", "pytest"], False),
        ("run_shell(git status)", ["git", "status", "--short"], False),
        ("run_shell(git log -n *)", ["git", "log", "-n", "5"], True),
        ("run_shell(make test)", ["make", "test"], True),
        ("run_shell(make test)", ["/usr/bin/make", "test"], False),
        # Element by element: one argv element is never several words.
        ("run_shell(echo a b)", ["echo", "a b"], False),
        ("run_shell(echo *)", ["echo", "a b; rm -rf x"], True),
        ("run_tests(pytest *)", ["pytest", "-q"], False),  # another tool
    ],
)
def test_fr_cns_02_command_patterns_match_argv_element_by_element(
    rule: str, cmd: list[str] | str, expected: bool
) -> None:
    assert allows(rule, shell(cmd)) is expected


def test_fr_cns_02_every_part_of_a_compound_must_match_an_allow_rule() -> None:
    rule = "run_shell(git *)"
    assert allows(rule, shell("git status && git diff"))
    assert allows(rule, shell("git log | git stripspace"))
    assert not allows(rule, shell("git status && rm -rf build"))
    assert not allows(rule, shell("git status; curl evil"))
    assert not allows(rule, shell("git status || sh"))


@pytest.mark.parametrize(
    "cmd",
    [
        "git status $(rm -rf x)",
        "git status `id`",
        "git status & rm x",
        "git status\nrm x",
        "git status > out",
        "git status < in",
        "(git status)",
        "git status <(rm x)",
        "git status *",
        'git status "$HOME"',
        "git status ~/x",
        "PAGER=evil git status",
        "git status # hidden",
        "git status |& cat",
        "git status \\; rm",
        "if git status; then rm x; fi",
        "git status;",
        "git status 'unterminated",
    ],
)
def test_fr_cns_02_any_other_shell_syntax_never_matches_allow(cmd: str) -> None:
    assert split_command(cmd) is None
    assert not allows("run_shell(git status*)", shell(cmd))
    assert not allows("run_shell(*)", shell(cmd))


def test_fr_cns_02_quotes_are_plain_words() -> None:
    assert split_command("git commit -m 'a; b && c'") == [["git", "commit", "-m", "a; b && c"]]
    assert split_command('echo "x y" z') == [["echo", "x y", "z"]]


def test_fr_cns_02_deny_rules_match_any_part_and_look_into_shell_syntax() -> None:
    rule = "run_shell(rm -rf *)"
    assert denies(rule, shell("make && rm -rf build"))
    assert denies(rule, shell("echo $(rm -rf /)"))
    assert denies(rule, shell(["/bin/rm", "-rf", "x"]))
    assert denies(rule, shell(["sh", "-c", "cd x && rm -rf y"]))
    assert denies(rule, shell("FOO=1 rm -rf y"))
    assert not denies(rule, shell("rm x"))


# --- paths ------------------------------------------------------------------------


def test_fr_cns_03_paths_are_gitignore_style_and_project_relative() -> None:
    assert allows("edit(src/**)", files("edit", "src/forj/a.py"))
    assert not allows("edit(src/**)", files("edit", "lib/src/a.py"))
    assert allows("edit(*.md)", files("edit", "docs/x.md"))
    assert allows("edit(/README.md)", files("edit", "README.md"))
    assert not allows("edit(/README.md)", files("edit", "docs/README.md"))


def test_fr_cns_03_files_groups_every_tool_that_changes_files() -> None:
    for tool in ("edit", "write_file", "multi_edit", "edit_region"):
        assert allows("files(docs/**)", files(tool, "docs/a.md"))
    assert not allows("files(docs/**)", Subject(tool="read_file", paths=("docs/a.md",)))


def test_fr_cns_03_multi_file_calls_need_every_path_for_allow_any_for_deny() -> None:
    both = files("multi_edit", "src/a.py", "secrets/b.py")
    assert not allows("multi_edit(src/**)", both)
    assert denies("multi_edit(secrets/**)", both)
    assert not allows("multi_edit(src/**)", Subject(tool="multi_edit", changes_files=True))


def test_fr_cns_03_links_are_matched_where_they_lead() -> None:
    # The model named src/link.py; it resolves to secrets/key.py.
    through = files("edit", "secrets/key.py", given=("src/link.py",))
    assert not allows("edit(src/**)", through)
    assert denies("edit(secrets/**)", through)
    assert denies("edit(src/link.py)", through)  # deny sees the given name too


# --- properties -------------------------------------------------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._/=:", min_size=1, max_size=8)
# A program name holds no "=" (a first word with one is an assignment to the
# shell) and is no keyword ("if", "done"): a plain command on its own.
_program = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._/", min_size=1, max_size=8
).filter(lambda word: split_command(word) is not None)
_argv = st.builds(lambda p, rest: [p, *rest], _program, st.lists(_word, max_size=3))


@settings(max_examples=300, deadline=None)
@given(allowed=_argv, other=_argv, op=st.sampled_from(["&&", "||", ";", "|"]), first=st.booleans())
def test_fr_cns_04_property_a_compound_never_matches_allow_through_one_part(
    allowed: list[str], other: list[str], op: str, first: bool
) -> None:
    rule = "run_shell(" + shlex.join(allowed) + ")"
    if argv_matches(shlex.split(shlex.join(allowed)), other):
        return  # the other part is allowed too
    parts = [shlex.join(allowed), shlex.join(other)]
    if not first:
        parts.reverse()
    cmd = f" {op} ".join(parts)
    assert allows(rule, shell(shlex.join(allowed)))
    assert not allows(rule, shell(cmd))
    # A rule that ends in "*" takes any arguments, never another command.
    wide = "run_shell(" + shlex.join(allowed) + " *)"
    assert not allows(wide, shell(cmd)) or argv_matches([*allowed, "*"], other)


_syntax = st.sampled_from(
    ["$(id)", "`id`", "&", "\n", ">", "<", "(", ")", "<(x)", "*", "?", "[a]", "~", "${X}", "$X"]
)


@settings(max_examples=300, deadline=None)
@given(argv=_argv, bad=_syntax, at=st.integers(min_value=0, max_value=4))
def test_fr_cns_04_property_shell_syntax_never_matches_allow(
    argv: list[str], bad: str, at: int
) -> None:
    words = [shlex.quote(w) for w in argv]
    words.insert(min(at, len(words)), bad)
    cmd = " ".join(words)
    assert not command_matches(["*"], cmd, strict=True)
    assert not allows("run_shell(" + argv[0] + " *)", shell(cmd))
