"""read_file through the real worker."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
from conftest import MakeWorker, call, run, user_config, write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.tools._encoding import Detected, detect, first_invalid_utf8


def _read(worker, **args):  # type: ignore[no-untyped-def]
    _, result = run(worker, [call("r", "read_file", **args)], capacity_bytes=10_000_000)
    return result["results"][0]


def test_forj_test_tools_read_file_basic(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    r = _read(worker, path="README.md")
    assert r == {
        "id": "r",
        "name": "read_file",
        "ok": True,
        "result": {
            "path": "README.md",
            "encoding": "utf-8",
            "content": "# demo\n",
            "truncated": False,
            "size": 7,
            "total_lines": 1,
        },
    }
    canonical = str((project / "README.md").resolve())
    assert worker.session.file_reads[canonical] == hashlib.sha256(b"# demo\n").hexdigest()


def test_t_read_01_line_ranges_and_bad_ranges(make_worker: MakeWorker) -> None:
    worker = make_worker()
    r = _read(worker, path="src/main.py", start_line=3, end_line=5)["result"]
    assert r["content"] == "line 3\nline 4\nline 5\n"
    assert r["range"] == {"start_line": 3, "end_line": 5}
    # past the end: through the end
    r = _read(worker, path="src/main.py", start_line=99, end_line=500)["result"]
    assert r["content"] == "line 99\nline 100\n"
    assert r["range"] == {"start_line": 99, "end_line": 100}
    assert r["total_lines"] == 100
    # only a start
    r = _read(worker, path="src/main.py", start_line=100)["result"]
    assert r["content"] == "line 100\n"
    # context around a range
    r = _read(worker, path="src/main.py", start_line=10, end_line=10, include_context=2)["result"]
    assert r["content"] == "line 8\nline 9\nline 10\nline 11\nline 12\n"
    assert r["range"] == {"start_line": 8, "end_line": 12}
    # start after end is BadArgs
    bad = _read(worker, path="src/main.py", start_line=5, end_line=4)
    assert bad["error"]["details"]["kind"] == "BadArgs"
    assert bad["error"]["type"] == "validation-error"
    zero = _read(worker, path="src/main.py", start_line=0)
    assert zero["error"]["details"]["kind"] == "BadArgs"


def test_t_read_01_ranges_past_the_end_without_a_final_newline(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "nonl.txt").write_text("a\nb\nc")
    worker = make_worker()
    past = _read(worker, path="nonl.txt", start_line=5, end_line=9)["result"]
    assert past["content"] == "" and past["total_lines"] == 3
    last = _read(worker, path="nonl.txt", start_line=3)["result"]
    assert last["content"] == "c" and last["total_lines"] == 3
    big = "".join(f"{i}\n" for i in range(1, 300_001))
    (project / "big.txt").write_text(big + "tail")
    user_config("[tools.read_file]\nmax_scan_bytes = 100000000\n")
    worker = make_worker()
    end = _read(worker, path="big.txt", start_line=299_999)["result"]
    assert end["content"] == "299999\n300000\ntail" and end["total_lines"] == 300_001


def test_t_read_02_scan_limit_enforced_for_large_files(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config("[tools.read_file]\nmax_scan_bytes = 4096\n")
    (project / "big.txt").write_text("".join(f"{i:09d}\n" for i in range(10_000)))
    worker = make_worker()
    ok = _read(worker, path="big.txt", start_line=1, end_line=300)
    assert ok["ok"] and ok["result"]["range"]["end_line"] == 300
    far = _read(worker, path="big.txt", start_line=5000, end_line=5001)
    assert far["ok"] is False
    assert "Narrow the range" in far["error"]["recovery"][0]
    assert far["error"]["details"]["scan_limit"] == 4096


def test_whole_file_over_read_limit_asks_for_a_range(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config("[tools.read_file]\nmax_file_read_bytes = 2048\n")
    (project / "big.txt").write_text("x\n" * 5000)
    r = _read(make_worker(), path="big.txt")
    assert r["ok"] is False
    assert "limit for reading a whole file" in r["error"]["message"]
    assert any("start_line" in step for step in r["error"]["recovery"])


def test_max_bytes_truncates_content_without_splitting_characters(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "u.txt").write_text("é" * 100)
    r = _read(make_worker(), path="u.txt", max_bytes=51)["result"]
    assert r["truncated"] is True
    assert len(r["content"].encode()) <= 51
    assert r["content"].startswith("é") and "\ufffd" not in r["content"]


def test_output_limit_truncates_the_whole_result(make_worker: MakeWorker, project: Path) -> None:
    (project / "q.txt").write_text('"\\' * 20_000)  # doubles under JSON escaping
    worker = make_worker()
    _, result = run(worker, [call("r", "read_file", path="q.txt")], capacity_bytes=4000)
    r = result["results"][0]
    import json

    assert len(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode()) <= 4000
    assert r["result"]["truncated"] is True
    assert r["result"]["content"].endswith("... [output truncated]")


def test_binary_files_come_back_as_self_limited_base64(
    make_worker: MakeWorker, project: Path
) -> None:
    blob = bytes(range(256)) * 200
    (project / "img.bin").write_bytes(blob)
    worker = make_worker()
    _, result = run(worker, [call("b", "read_file", path="img.bin")], capacity_bytes=8000)
    r = result["results"][0]["result"]
    assert r["encoding"] == "base64" and r["binary"] is True
    assert r["truncated"] is True
    data = base64.b64decode(r["content"])
    assert blob.startswith(data) and len(data) > 4000
    ranged = _read(worker, path="img.bin", start_line=1, end_line=2)
    assert "binary" in ranged["error"]["message"]


def test_encodings_beyond_utf8_are_detected(make_worker: MakeWorker, project: Path) -> None:
    text = "こんにちは世界。これは日本語のテキストです。\n" * 30
    (project / "sjis.txt").write_bytes(text.encode("shift_jis"))
    (project / "u16.txt").write_bytes("héllo\nwörld\n".encode("utf-16"))
    worker = make_worker()
    sjis = _read(worker, path="sjis.txt")["result"]
    assert sjis["encoding"].lower() in ("shift_jis", "cp932")
    assert sjis["content"] == text
    u16 = _read(worker, path="u16.txt")["result"]
    assert u16["encoding"] == "utf-16" and u16["content"] == "héllo\nwörld\n"
    ranged = _read(worker, path="u16.txt", start_line=2, end_line=2)["result"]
    assert ranged["content"] == "wörld\n"
    (project / "noise.bin").write_bytes(bytes(range(1, 256)) * 40)
    assert _read(worker, path="noise.bin")["result"]["encoding"] == "base64"


def test_file_errors_are_precise(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    missing = _read(worker, path="nope.txt")
    assert missing["error"]["type"] == "file-error"
    assert missing["error"]["message"] == "File not found: nope.txt"
    directory = _read(worker, path="src")
    assert "is a directory" in directory["error"]["message"]
    assert "list_files" in directory["error"]["recovery"][0]
    os.mkfifo(project / "fifo")
    fifo = _read(worker, path="fifo")  # must not hang waiting for a writer
    assert "not a regular file" in fifo["error"]["message"]


def test_permission_denied_is_a_file_error(tmp_path: Path) -> None:
    """A file the worker's user may not read, for real: as root, the worker runs as nobody."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from forj_py.transport.client import Client

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        root, state = base / "project", base / "state"
        root.mkdir()
        state.mkdir()
        for d in (base, root):
            d.chmod(0o755)
        state.chmod(0o777)
        (root / "open.txt").write_text("ok\n")
        (root / "locked.txt").write_text("secret\n")
        (root / "locked.txt").chmod(0o600 if os.geteuid() == 0 else 0)
        cmd = [sys.executable, "-m", "forj_py", "--root", str(root), "--state-dir", str(state)]
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv to drop privileges")
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        env = dict(os.environ, FORJ_TOKEN="p" * 32, FORJ_CONFIG=str(base / "none.toml"))
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            with Client(port) as c:
                c.call("hello", {"token": "p" * 32})
                plan = c.call(
                    "plan",
                    {
                        "calls": [
                            call("1", "read_file", path="locked.txt"),
                            call("2", "read_file", path="open.txt"),
                        ]
                    },
                )
                res = c.call("execute", {"batch_id": plan["batch_id"]})
            locked, opened = res["results"]
            assert locked["error"]["type"] == "file-error"
            assert locked["error"]["message"] == "Permission denied: locked.txt"
            assert locked["error"]["recovery"] == ["Check file permissions", "Try a different file"]
            assert opened["result"]["content"] == "ok\n"
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_non_utf8_file_names_are_reachable_and_reported(
    make_worker: MakeWorker, project: Path
) -> None:
    raw = os.fsencode(str(project)) + b"/caf\xe9.txt"
    with open(raw, "wb") as fh:
        fh.write(b"hello\n")
    # Python names it with a surrogate escape; the model can never send that.
    r = _read(make_worker(), path=os.fsdecode(raw).rsplit("/", 1)[1])
    assert r["error"]["details"]["kind"] == "BadArgs"


def test_terminal_controls_in_files_are_sanitized(make_worker: MakeWorker, project: Path) -> None:
    write_tree(project, {"evil.txt": "ok\x1b]0;title\x07 \x1b[2Jclear\u202eevil\n"})
    r = _read(make_worker(), path="evil.txt")["result"]
    assert r["content"] == "ok clearevil\n"


# --- encodings ------------------------------------------------------------------

WESTERN = (
    "Ça a été dit: le garçon a mangé une crème brûlée à la fenêtre; où est l'hôtel? "
    "Die Straße ist schön, die Bäume blühen über dem Fluß. ¿Dónde está el niño?\n"
)


_LARGE_READS = """
[tools.read_file]
max_file_read_bytes = 262144
[tools.output]
max_bytes = 1048576
"""


@pytest.mark.parametrize("size", [1, 2, 5, 11, 40, 200, 3_000, 150_000])
def test_fr_tool_read_01_latin1_files_of_every_size_read_as_written(
    make_worker: MakeWorker, project: Path, size: int
) -> None:
    """Short Latin-1 is where detectors fail ("Café" came back as cp1006)."""
    text = "é" if size == 1 else (WESTERN * (size // len(WESTERN) + 1))[:size]
    (project / "latin1.txt").write_bytes(text.encode("latin-1"))
    user_config(_LARGE_READS)
    worker = make_worker()
    r = _read(worker, path="latin1.txt", max_bytes=1 << 20)["result"]
    assert r["content"] == text, r["encoding"]
    assert r["encoding"] in ("cp1252", "latin-1")
    ranged = _read(worker, path="latin1.txt", start_line=1, end_line=1)["result"]
    assert ranged["content"] == text.split("\n")[0] + ("\n" if "\n" in text else "")
    assert ranged["encoding"] == r["encoding"]


def test_fr_tool_read_01_cp1252_punctuation_and_latin1_control_bytes(
    make_worker: MakeWorker, project: Path
) -> None:
    quotes = "“Smart quotes” — the euro € sign… ‘ok’\n"
    (project / "q.txt").write_bytes(quotes.encode("cp1252"))
    # 0x81 is undefined in cp1252: only Latin-1 decodes it.
    (project / "c1.txt").write_bytes("x = 'caf\x81 é'\n".encode("latin-1"))
    worker = make_worker()
    q = _read(worker, path="q.txt")["result"]
    assert (q["encoding"], q["content"]) == ("cp1252", quotes)
    c1 = _read(worker, path="c1.txt")["result"]
    assert c1["encoding"] == "latin-1" and c1["encoding_guessed"] is True
    assert c1["content"].startswith("x = 'caf") and c1["content"].endswith(" é'\n")


def test_fr_tool_read_01_a_short_sample_says_its_encoding_was_guessed(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "short.txt").write_bytes("Café crème\n".encode("latin-1"))
    (project / "long.txt").write_bytes((WESTERN * 40).encode("latin-1"))
    worker = make_worker()
    short = _read(worker, path="short.txt")["result"]
    assert short["content"] == "Café crème\n"
    assert short["encoding"] == "cp1252" and short["encoding_guessed"] is True
    long = _read(worker, path="long.txt")["result"]
    assert long["content"] == WESTERN * 40 and "encoding_guessed" not in long


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        ("Съешь же ещё этих мягких французских булок, да выпей чаю. " * 10, "cp1251"),
        ("Καλημέρα κόσμε, αυτό είναι ένα κείμενο. " * 5, "cp1253"),
        ("こんにちは世界。これは日本語のテキストです。\n" * 3, "shift_jis"),
        ("你好，世界。这是一个中文文本的例子。\n" * 3, "gb2312"),
        ("你好，世界。這是一個中文文本的例子。\n" * 3, "big5"),
        ("안녕하세요 세계. 이것은 한국어 텍스트입니다.\n" * 3, "euc_kr"),
        ("Привет, мир!\n", "cp1251"),
        ("日本語\n", "shift_jis"),
        ("中文\n", "gbk"),
        ("Türkçe metin: ığüşöç İĞÜŞÖÇ. " * 5, "cp1254"),
        ("Dzień dobry, proszę pana. Gdzie jest dworzec? Muszę jechać.\n" * 3, "cp1250"),
    ],
)
def test_fr_tool_read_01_other_encodings_are_right_or_say_they_were_guessed(
    make_worker: MakeWorker, project: Path, text: str, codec: str
) -> None:
    """Where the detector cannot tell (short CJK, Turkish, Polish), the result says so."""
    (project / "f.txt").write_bytes(text.encode(codec))
    r = _read(make_worker(), path="f.txt")["result"]
    assert r["content"] == text or r.get("encoding_guessed") is True, r
    if r["content"] == text:
        assert text.encode(codec).decode(r["encoding"]) == text


def test_fr_tool_read_01_utf16_with_a_bom(make_worker: MakeWorker, project: Path) -> None:
    text = "Grüße, 世界\nline two\n"
    (project / "le.txt").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    (project / "be.txt").write_bytes(b"\xfe\xff" + text.encode("utf-16-be"))
    worker = make_worker()
    for name in ("le.txt", "be.txt"):
        r = _read(worker, path=name)["result"]
        assert (r["encoding"], r["content"]) == ("utf-16", text)
        assert "encoding_guessed" not in r
        assert _read(worker, path=name, start_line=2)["result"]["content"] == "line two\n"


def test_fr_tool_read_01_latin1_after_a_long_ascii_start_is_not_replaced(
    make_worker: MakeWorker, project: Path
) -> None:
    """The first 64 KiB are ASCII; the accented letters come after them."""
    text = "x = 1\n" * 20_000 + "name = 'José Müller'\n"
    (project / "late.py").write_bytes(text.encode("latin-1"))
    user_config(_LARGE_READS)
    r = _read(make_worker(), path="late.py", max_bytes=1 << 20)["result"]
    assert r["content"].endswith("name = 'José Müller'\n")
    assert "\ufffd" not in r["content"] and r["encoding"] in ("cp1252", "latin-1")


_NO_NUL_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\ufeff"), max_size=300
)


@given(text=_NO_NUL_TEXT)
@settings(max_examples=400, deadline=None)
def test_fr_tool_read_01_property_utf8_is_never_decoded_as_anything_else(text: str) -> None:
    data = text.encode("utf-8")
    found = detect(data, complete=True)
    assert found == Detected("utf-8", False)
    assert data.decode(found.encoding) == text
    # A sample cut anywhere, even inside a character, is still UTF-8 (the file goes on).
    for cut in {len(data) // 2, max(len(data) - 1, 0)}:
        assert detect(data[:cut], complete=False) == Detected("utf-8", False)


@given(data=st.binary(max_size=400))
@settings(max_examples=400, deadline=None)
def test_fr_tool_read_01_property_a_legacy_answer_means_the_bytes_are_not_utf8(
    data: bytes,
) -> None:
    found = detect(data, complete=True)
    if found is not None and found.encoding not in ("utf-8", "utf-8-sig", "utf-16", "utf-32"):
        assert first_invalid_utf8(data, complete=True) is not None
        with pytest.raises(UnicodeDecodeError):
            data.decode("utf-8")


def test_fr_tool_read_small_max_bytes_returns_the_files_own_bytes(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    (r,) = run(worker, [call("r", "read_file", path="src/main.py", max_bytes=20)])[1]["results"]
    assert r["result"]["content"] == "line 1\nline 2\nline 3"[:20]
    assert r["result"]["truncated"] is True
    (big,) = run(worker, [call("b", "read_file", path="src/main.py", max_bytes=200)])[1]["results"]
    assert big["result"]["content"].endswith("[output truncated]")
    assert len(big["result"]["content"].encode()) <= 200
