"""Output rules: sanitize, truncate, fit, redact."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.output import (
    REDACTED,
    TRUNCATION_MARKER,
    fit_json,
    json_size,
    redact,
    sanitize,
    sanitize_value,
    short_summary,
    truncate_text,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text\twith tab\nand newline", "plain text\twith tab\nand newline"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[?1049h\x1b[2J\x1b[H", ""),
        ("a\x1b]0;set title\x07b", "ab"),
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),
        ("a\x1b_apc payload\x1b\\b", "ab"),
        ("a\x1b^pm\x1b\\b", "ab"),
        ("a\x1bXsos\x1b\\b", "ab"),
        ("a\x1b(Bb", "ab"),
        ("a\x1b#8b", "ab"),
        ("a\x1bcb", "ab"),
        ("a\x1b", "a"),
        ("a\x9b31mb", "ab"),
        ("a\x9d0;title\x9cb", "ab"),
        ("a\x85b\x90dcs\x9c", "ab"),
        ("nul\x00 bel\x07 bs\x08 cr\r del\x7f", "nul bel bs cr del"),
        ("safe \u202eevil\u202c text", "safe evil text"),
        ("\u2066iso\u2069 \u202a\u202b\u202d", "iso "),
        ("unclosed \x1b]0;title forever", "unclosed "),
        ("keeps é 中 😀 and \u200d joiner", "keeps é 中 😀 and \u200d joiner"),
        ("lone \udce9 surrogate", "lone \ufffd surrogate"),
    ],
)
def test_t_out_02_sanitization_removes_terminal_controls(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


@given(st.text())
def test_t_out_02_property_no_control_survives(text: str) -> None:
    out = sanitize(text)
    out.encode("utf-8")
    for ch in out:
        code = ord(ch)
        assert ch in "\t\n" or not (code < 0x20 or 0x7F <= code <= 0x9F)
        assert not (0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069)


@given(st.text(alphabet=st.characters(blacklist_categories=["Cc", "Cs"])))
def test_sanitize_keeps_printable_text_unchanged(text: str) -> None:
    text = "".join(
        c for c in text if not (0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069)
    )
    assert sanitize(text) == text


@settings(max_examples=500)
@given(text=st.text(), limit=st.integers(min_value=0, max_value=200))
def test_t_out_01_truncation_marker_within_effective_limit(text: str, limit: int) -> None:
    text = sanitize(text)
    out = truncate_text(text, limit)
    assert len(out.encode("utf-8")) <= limit
    if len(text.encode("utf-8")) <= limit:
        assert out == text
    elif limit >= len(TRUNCATION_MARKER):
        assert out.endswith(TRUNCATION_MARKER)
        assert text.startswith(out[: -len(TRUNCATION_MARKER)])
    else:
        assert TRUNCATION_MARKER.startswith(out)


def test_truncation_never_splits_a_character() -> None:
    text = "€" * 100  # three bytes each
    for limit in range(len(TRUNCATION_MARKER), 120):
        out = truncate_text(text, limit)
        out.encode("utf-8")
        assert len(out.encode()) <= limit
        assert set(out[: -len(TRUNCATION_MARKER)]) <= {"€"}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=300)
@given(value=_json, limit=st.integers(min_value=16, max_value=2000))
def test_fit_json_never_exceeds_the_limit(value: object, limit: int) -> None:
    fitted, cut = fit_json(value, limit)
    assert json_size(fitted) <= limit
    if not cut:
        assert fitted == value


def test_fit_json_cuts_the_big_string_and_keeps_the_skeleton() -> None:
    value = {"id": "1", "result": {"path": "a.txt", "content": 'x"\\' * 10_000, "size": 30000}}
    fitted, cut = fit_json(value, 2000)
    assert cut
    assert fitted["id"] == "1" and fitted["result"]["path"] == "a.txt"
    assert fitted["result"]["content"].endswith(TRUNCATION_MARKER)
    assert 1500 < len(json.dumps(fitted, separators=(",", ":"))) <= 2000


def test_fit_json_shortens_long_lists() -> None:
    value = {"files": [{"path": f"f{i}.txt", "size": i} for i in range(1000)]}
    fitted, cut = fit_json(value, 1000)
    assert cut and 0 < len(fitted["files"]) < 1000
    assert json_size(fitted) <= 1000


@pytest.mark.parametrize(
    "secret",
    [
        "AKIAIOSFODNN7EXAMPLE",
        "sk-proj-abcdefghijklmnop1234",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "xoxb-1234567890-abcdef",
        "AIzaSyA1234567890abcdefghijklmnopqrstu",
    ],
)
def test_fr_apr_01_summaries_redact_credentials(secret: str) -> None:
    out = redact(f"run with {secret} please")
    assert secret not in out and REDACTED in out


def test_redact_key_value_and_urls() -> None:
    assert redact("password=hunter2 x") == f"password={REDACTED} x"
    assert redact('API_KEY: "abc def"') == f"API_KEY: {REDACTED}"
    assert redact("Authorization: Bearer abc.def.ghi") == f"Authorization: Bearer {REDACTED}"
    assert redact("https://user:pa55@host/x") == f"https://user:{REDACTED}@host/x"
    assert (
        redact("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----") == REDACTED
    )
    assert redact("nothing to see") == "nothing to see"
    # Quoted keys, as JSON, YAML and Python write them; JSON stays JSON.
    assert redact('{"api_key": "sk-live-abc123"}') == f'{{"api_key": "{REDACTED}"}}'
    assert json.loads(redact('{"token":"a b","n":1}')) == {"token": REDACTED, "n": 1}
    assert redact('{"pin": 1234, "n": 1}') == '{"pin": 1234, "n": 1}'  # not a secret key
    assert redact('{"token": 1234}') == f'{{"token": {REDACTED}}}'
    assert redact('{"token":1234,"n":1}') == f'{{"token":{REDACTED},"n":1}}'
    assert redact("  'client_secret' : 'xyz',") == f"  'client_secret' : '{REDACTED}',"
    assert redact('x = d["token"]') == 'x = d["token"]'  # a key, with no value to hide


def test_short_summary_is_one_line_capped_in_the_middle_and_keeps_the_end() -> None:
    s = short_summary("a\nb\tc " + "z" * 500 + " END")
    assert "\n" not in s and len(s) <= 200
    assert s.startswith("a ⏎ b")
    assert s.endswith(" END")  # what a long command does last stays in view
    assert "chars⟩" in s  # and the cut says how much is left out


@settings(max_examples=500)
@given(st.text())
def test_json_control_check_never_misses_what_sanitize_would_change(text: str) -> None:
    from forj_py.output import dumps, json_has_controls

    if sanitize(text) != text:
        assert json_has_controls(dumps({"k": [text]}))


@settings(max_examples=500)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_json_control_check_on_ascii_never_misses_what_sanitize_would_change(text: str) -> None:
    # ASCII text takes the substring shortcut; it must miss nothing either.
    from forj_py.output import dumps, json_has_controls

    if sanitize(text) != text:
        assert json_has_controls(dumps({"k": [text]}))


_BACKSLASHY = st.text(
    alphabet=st.sampled_from(
        [
            "\\",
            "r",
            "b",
            "f",
            "n",
            "t",
            "u",
            "0",
            "1",
            "b",
            "e",
            "\r",
            "\x1b",
            "\x7f",
            "\x85",
            "\u202e",
            "\u2067",
            "\u2028",
            "é",
            "°",
            "\ud800",
            '"',
            "a",
        ]
    )
)


@settings(max_examples=1000)
@given(st.one_of(st.text(), _BACKSLASHY), st.one_of(st.text(), _BACKSLASHY))
def test_json_control_check_says_yes_exactly_when_sanitize_would_change_something(
    key: str, text: str
) -> None:
    # No false negatives (a control would reach the model), and no false
    # positives either: a megabyte of source that spells "\\r" or holds a
    # Windows path must not take the slow path of sanitizing every string.
    from forj_py.output import dumps, json_has_controls

    value = {key: [text, "x"]}
    assert json_has_controls(dumps(value)) == (sanitize_value(value) != value)


def test_json_control_check_tells_escaped_backslashes_from_escapes() -> None:
    from forj_py.output import dumps, json_has_controls

    assert not json_has_controls(dumps("C:\\files\\bin\\run 'a\\r\\n' \\\\u001b"))
    assert json_has_controls(dumps("a\\\rb"))  # a backslash, then a real carriage return
    assert json_has_controls(dumps("\\\\\x1b[31m"))
    assert json_has_controls(dumps("é\x85"))
    assert not json_has_controls(dumps("é° — ok"))


# --- credentials in URLs -------------------------------------------------------------------


def test_url_credentials_are_redacted_and_restored() -> None:
    from forj_py.output import redact_url_credentials, restore_url_credentials

    text = (
        "url = https://bob:tok3n-secret@github.com/a/b.git\n"
        "cache = redis://:pw-secret@cache:6379\n"
        "pat = https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/c\n"
        "ssh = ssh://git@github.com/d\n"
    )
    shown, count = redact_url_credentials(text)
    assert count == 3
    assert "secret" not in shown and "ghp_" not in shown
    assert "ssh://git@github.com/d" in shown  # a user name alone is no secret
    back, restored = restore_url_credentials(text, shown.replace("a/b.git", "a/c.git"))
    assert restored == 3
    assert back == text.replace("a/b.git", "a/c.git")


def test_a_marker_already_in_the_original_stays_and_an_ambiguous_one_is_refused() -> None:
    from forj_py.output import CredentialRestoreError, restore_url_credentials

    original = "example: https://user:***@example.com\n"
    assert restore_url_credentials(original, original + "x\n") == (original + "x\n", 0)
    two = "a = https://bob:one@h/x\nb = https://bob:two@h/y\n"
    with pytest.raises(CredentialRestoreError) as exc:
        restore_url_credentials(two, "c = https://bob:***@h/z\n")
    assert exc.value.line == 1
    with pytest.raises(CredentialRestoreError):
        restore_url_credentials("nothing here\n", "https://eve:***@h/\n")


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["https", "postgres", "redis"]),
            st.from_regex(r"[a-z]{1,6}", fullmatch=True),
            st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
            st.sampled_from(["h1", "h2.example", "db:5432"]),
        ),
        max_size=6,
    ),
    st.text(alphabet="ab \n/:@", max_size=30),
)
def test_restoring_what_was_redacted_gives_the_original_back(
    urls: list[tuple[str, str, str, str]], filler: str
) -> None:
    from forj_py.output import (
        CredentialRestoreError,
        redact_url_credentials,
        restore_url_credentials,
    )

    text = filler + "\n".join(f"{s}://{u}:{p}@{h}/r" for s, u, p, h in urls) + "\n"
    shown, _ = redact_url_credentials(text)
    try:
        back, _ = restore_url_credentials(text, shown)
    except CredentialRestoreError:
        # Only when one user at one host has two different secrets.
        pairs: dict[tuple[str, str, str], set[str]] = {}
        for s, u, p, h in urls:
            pairs.setdefault((s, u, h), set()).add(p)
        assert any(len(v) > 1 for v in pairs.values())
        return
    assert back == text
