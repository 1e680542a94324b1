"""The EPC codec: agrees with sexpdata, reads what Emacs prints, refuses the rest."""

from __future__ import annotations

import contextlib
import json

import pytest
import sexpdata
from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.transport import sexp
from forj_py.transport.sexp import SexpError, Symbol

_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=400)


@settings(max_examples=400)
@given(payload=_text, uid=st.integers(min_value=0, max_value=2**40))
def test_round_trip_any_string(payload: str, uid: int) -> None:
    msg = [Symbol("return"), uid, payload]
    assert sexp.loads(sexp.dumps(msg)) == msg


@settings(max_examples=300)
@given(payload=_text)
def test_reads_what_sexpdata_prints_and_sexpdata_reads_ours(payload: str) -> None:
    theirs = sexpdata.dumps([sexpdata.Symbol("call"), 3, sexpdata.Symbol("plan"), [payload]])
    assert sexp.loads(theirs) == [Symbol("call"), 3, Symbol("plan"), [payload]]
    ours = sexp.dumps([Symbol("return"), 3, payload])
    back = sexpdata.loads(ours)
    assert back[2] == payload


@given(st.recursive(st.text(max_size=30), lambda c: st.lists(c, max_size=4), max_leaves=10))
def test_long_string_fast_path_matches_slow_path(inner: object) -> None:
    big = json.dumps(inner) * 50  # long enough for the bulk decoder
    msg = [Symbol("return"), 1, big]
    assert sexp.loads(sexp.dumps(msg)) == msg


def test_emacs_style_escapes() -> None:
    # What prin1 can produce with various print-escape-* settings.
    assert sexp.loads(r'"a\nb\tc\"d\\e"') == 'a\nb\tc"d\\e'
    assert sexp.loads(r'"\x41\u00e9\U0001F600\101\ "') == "Aé😀A"
    assert sexp.loads('"line\\\ncontinued"') == "linecontinued"
    assert sexp.loads(r'"\N{U+263A}\e\s\d"') == "☺\x1b \x7f"
    assert sexp.loads("(1 -2 3. 4.5 1e3 nil t)") == [1, -2, 3, 4.5, 1000.0, [], Symbol("t")]
    assert sexp.loads("  ( x ; comment\n y )  ") == [Symbol("x"), Symbol("y")]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "(",
        ")",
        "(a",
        '"unterminated',
        "(a) b",
        "#<buffer x>",
        "'(quoted)",
        "[1 2]",
        "?a",
        r"\x",
        "(a . b)",
    ],
)
def test_refuses_what_it_does_not_read(bad: str) -> None:
    with pytest.raises(SexpError):
        sexp.loads(bad)


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_fuzz_bytes_never_crash_with_anything_but_sexp_error(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    with contextlib.suppress(SexpError):
        sexp.loads(text)


def test_frame_and_header() -> None:
    framed = sexp.frame([Symbol("return"), 1, "é"])
    assert framed[:6] == b"%06x" % (len(framed) - 6)
    assert sexp.parse_header(framed[:6]) == len(framed) - 6
    with pytest.raises(SexpError):
        sexp.parse_header(b"zzzzzz")
    with pytest.raises(SexpError):
        sexp.frame("x" * (sexp.MAX_FRAME + 1))


def test_printer_refuses_what_emacs_could_not_read_back() -> None:
    for bad in [Symbol("has space"), float("nan"), object()]:
        with pytest.raises(SexpError):
            sexp.dumps(bad)
    assert sexp.dumps([None, True, False, 1.5, (1, 2)]) == "(nil t nil 1.5 (1 2))"
