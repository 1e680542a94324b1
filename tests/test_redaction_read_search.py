"""Credentials in URLs never reach the model through read_file or search.

A remote in ``.git/config`` (``https://user:TOKEN@host/repo``), a DSN in a
settings file: the text around them is shown, the secret as ``***``, and
the result says how many were replaced.  Both search engines agree, and a
search cannot spell a secret out by matching inside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, run, user_config, write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py import output
from forj_py.output import redact_url_credentials
from forj_py.service import Worker
from forj_py.tools.search import find_rg

TOKEN = "ghp_R3alT0kenValue1234567890abcdef"
PASSWORD = "s3cr3t-Pa55"
GIT_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n"
    '[remote "origin"]\n'
    f"\turl = https://alice:{TOKEN}@github.com/acme/app.git\n"
    "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    '[remote "mirror"]\n'
    "\turl = git@github.com:acme/app.git\n"
)
SETTINGS = (
    "DEBUG = True\n"
    f"DATABASE = 'postgres://app:{PASSWORD}@db.internal:5432/app'  # primary\n"
    "DOCS = 'https://example.com/docs'\n"
)


def _one(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    _, result = run(worker, [call("x", name, **args)], capacity_bytes=8_000_000)
    r = result["results"][0]
    assert r["ok"], r
    return dict(r["result"])


@pytest.fixture
def secrets_project(project: Path) -> Path:
    write_tree(project, {".git": {"config": GIT_CONFIG}, "settings.py": SETTINGS})
    return project


def test_attack_read_file_git_config_credential_is_redacted(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    r = _one(make_worker(), "read_file", path=".git/config")
    assert TOKEN not in r["content"]
    assert "url = https://alice:***@github.com/acme/app.git" in r["content"]
    assert "git@github.com:acme/app.git" in r["content"]  # no secret there: untouched
    assert r["redacted_credentials"] == 1
    assert "***" in r["note"] and "credential" in r["note"]
    # Everything else is the file as it is.
    assert r["content"] == GIT_CONFIG.replace(TOKEN, "***")
    assert r["size"] == len(GIT_CONFIG.encode())


def test_attack_read_file_range_read_credential_is_redacted(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    worker = make_worker()
    r = _one(worker, "read_file", path=".git/config", start_line=4, end_line=4)
    assert r["content"] == "\turl = https://alice:***@github.com/acme/app.git\n"
    assert r["redacted_credentials"] == 1
    r = _one(worker, "read_file", path="settings.py", start_line=1, end_line=1, include_context=5)
    assert PASSWORD not in r["content"]
    assert "postgres://app:***@db.internal:5432/app" in r["content"]
    assert r["redacted_credentials"] == 1
    # A range without a credential says nothing about credentials.
    r = _one(worker, "read_file", path="settings.py", start_line=3, end_line=3)
    assert "redacted_credentials" not in r and "note" not in r


def test_attack_read_file_truncation_cannot_cut_a_credential_out_of_its_url(
    make_worker: MakeWorker, project: Path
) -> None:
    # A cut just before the "@" would leave a secret the redactor cannot
    # recognise; redaction comes first, so no prefix of it shows either.
    line = f"url = https://alice:{TOKEN}@github.com/x.git\n"
    write_tree(project, {"remote.txt": line})
    worker = make_worker()
    for max_bytes in range(24, len(line) + 30):
        r = _one(worker, "read_file", path="remote.txt", max_bytes=max_bytes)
        assert TOKEN[:4] not in r["content"], max_bytes


def test_read_file_without_credentials_is_unchanged(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    r = _one(make_worker(), "read_file", path="README.md")
    assert r == {
        "path": "README.md",
        "encoding": "utf-8",
        "content": "# demo\n",
        "truncated": False,
        "size": 7,
        "total_lines": 1,
    }


def test_edit_after_read_file_still_needs_no_secret(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    # The read still counts as a read of the real file (its hash is of the
    # bytes on disk), so edits after it are not refused as stale.
    import hashlib

    worker = make_worker()
    _one(worker, "read_file", path="settings.py")
    canonical = str((secrets_project / "settings.py").resolve())
    assert worker.session.file_reads[canonical] == hashlib.sha256(SETTINGS.encode()).hexdigest()


def _engines() -> list[str]:
    return ["python", "ripgrep"] if find_rg() else ["python"]


@pytest.fixture(params=_engines())
def engine_worker(request: pytest.FixtureRequest, make_worker: MakeWorker) -> Worker:
    user_config(f"[tools.search]\nengine = '{request.param}'\n")
    return make_worker()


def test_attack_search_match_and_context_credentials_are_redacted(
    engine_worker: Worker, secrets_project: Path
) -> None:
    _, refused = run(
        engine_worker,
        [call("x", "search", query="github.com/acme", include_paths=[".git/**"])],
    )
    # .git is never searched: a glob naming it is refused; the settings file is searched.
    assert "names .git" in refused["results"][0]["error"]["message"]
    assert "github.com/acme" not in str(refused["results"][0])
    assert _one(engine_worker, "search", query="github.com/acme")["matches"] == []
    r = _one(engine_worker, "search", query="db.internal")
    (m,) = r["matches"]
    assert m["path"] == "settings.py" and m["line"] == 2
    assert m["match_text"] == "db.internal"
    assert m["before"] == "DATABASE = 'postgres://app:***@"
    assert m["after"] == ":5432/app'  # primary"
    # The column is the file's own: the redaction does not shift it.
    assert m["column"] == SETTINGS.splitlines()[1].index("db.internal") + 1
    assert r["redacted_credentials"] == 1
    assert "***" in r["note"]
    r = _one(engine_worker, "search", query="primary")
    (m,) = r["matches"]
    assert PASSWORD not in m["before"] and "app:***@db" in m["before"]


def test_attack_search_for_the_secret_itself_shows_nothing_of_it(
    engine_worker: Worker, secrets_project: Path
) -> None:
    for query, is_regex in [
        (PASSWORD, False),
        ("s3cr3t", False),
        ("app:s", False),  # one character of the secret at a time
        ("app:t", False),
        (r"://app:[^@]+", True),
        (r"app:s3", True),
    ]:
        r = _one(engine_worker, "search", query=query, is_regex=is_regex)
        # Nothing on the secret's line answers a probe of the secret: no
        # match, no count, no note that would differ with its letters.
        assert not [m for m in r["matches"] if m["path"] == "settings.py"], (query, r)
        assert PASSWORD not in repr(r) and "matches_in_credentials" not in r, query
    same = [
        _one(engine_worker, "search", query=q)
        for q in ("app:s", "app:x")  # the secret starts with "s", not "x"
    ]
    assert same[0] == same[1] == {"matches": [], "truncated": False, "engine": same[0]["engine"]}


def test_attack_search_lookaround_cannot_probe_a_secret(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    # Only the pure-Python engine has look-arounds: it matches the redacted
    # line, so a look-ahead sees "***", never the secret.
    user_config("[tools.search]\nengine = 'python'\n")
    worker = make_worker()
    hit = _one(worker, "search", query=r"postgres://app:(?=\*\*\*@)", is_regex=True)
    assert len(hit["matches"]) == 1
    for probe in ("s", "x"):
        r = _one(worker, "search", query=rf"postgres://app:(?={probe})", is_regex=True)
        assert r["matches"] == [], probe


def test_search_engines_agree_on_lines_with_credentials(
    make_worker: MakeWorker, secrets_project: Path
) -> None:
    if not find_rg():
        pytest.skip("ripgrep is not installed")
    write_tree(
        secrets_project,
        {
            "multi.txt": (
                f"a https://u:{PASSWORD}@h1/x b ftp://k:{PASSWORD}2@h2 c https://h3/p d\n"
                f"token https://{TOKEN}@gitlab.com/g.git tail\n"
            )
        },
    )
    results = {}
    for engine in ("python", "ripgrep"):
        user_config(f"[tools.search]\nengine = '{engine}'\n")
        worker = make_worker()
        results[engine] = [
            {k: v for k, v in _one(worker, "search", query=q).items() if k != "engine"}
            for q in ("https", "h2", "b", "tail", "gitlab", "u:", "://", "k:s")
        ]
    assert results["python"] == results["ripgrep"]
    for r in results["python"]:
        assert PASSWORD not in repr(r) and TOKEN not in repr(r)


def test_redact_url_credentials_shapes() -> None:
    # The function both tools rely on, on the shapes they meet.
    assert redact_url_credentials("no url here") == ("no url here", 0)
    assert redact_url_credentials(f"https://x:{PASSWORD}@h/p") == ("https://x:***@h/p", 1)
    assert redact_url_credentials(f"https://{TOKEN}@h") == ("https://***@h", 1)
    assert redact_url_credentials("ssh://git@host/x") == ("ssh://git@host/x", 0)
    assert redact_url_credentials("https://x:***@h") == ("https://x:***@h", 0)
    two = f"a=redis://:{PASSWORD}@r:6379 b=amqp://guest:{PASSWORD}@mq/v"
    text, n = redact_url_credentials(two)
    assert n == 2 and PASSWORD not in text


_URL_TEXT = st.lists(
    st.sampled_from([*"ab:/@ .\t\n\"'<>x1_-~+=%", "://", "https", "\x1c", "é", "t" * 20]),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=_URL_TEXT)
def test_redaction_quick_scan_never_skips_a_credential(text: str) -> None:
    # The quick scan may only skip text in which the full expression finds
    # no user information at all.
    if output._userinfo_hint_re().search(text) is None:
        assert output._url_userinfo_re().search(text) is None, text
    _redacted, n = redact_url_credentials(text)
    assert n == len([m for m in output._url_userinfo_re().finditer(text) if output._url_secret(m)])
