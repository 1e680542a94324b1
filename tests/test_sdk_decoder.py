"""The SDK transport's line decoder, under generated input: it never raises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forj_py.protocol import ErrorCode
from forj_py.transport.sdk import (
    ENVELOPES,
    MAX_LINE_BYTES,
    LineError,
    ToolRequest,
    decode_line,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)

session_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,30}\Z")


def _answerable(decoded: Any) -> None:
    assert decoded is None or isinstance(decoded, (LineError, *ENVELOPES.values()))
    if isinstance(decoded, LineError):
        wire = decoded.wire()
        assert wire["type"] == "ErrorMessage" and wire["code"] in {c.value for c in ErrorCode}
        assert wire["message"] and wire["recovery"]
        json.dumps(wire)  # always sendable


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fr_sdk_10_any_bytes_decode_to_an_envelope_or_an_error(line: bytes) -> None:
    _answerable(decode_line(line))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_fr_sdk_10_any_json_decodes_to_an_envelope_or_an_error(value: Any) -> None:
    _answerable(decode_line(json.dumps(value).encode() + b"\n"))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(ENVELOPES)),
    st.dictionaries(
        st.sampled_from(
            ["tool", "args", "request_id", "session_id", "timestamp", "permission_mode", "x"]
        ),
        json_values,
        max_size=6,
    ),
)
def test_fr_sdk_10_envelopes_with_any_fields_never_raise(kind: str, fields: dict[str, Any]) -> None:
    decoded = decode_line(json.dumps({"type": kind, **fields}).encode())
    _answerable(decoded)
    if isinstance(decoded, LineError):
        assert decoded.code is ErrorCode.VALIDATION_FAIL


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=50),
    st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    st.text(min_size=1, max_size=50),
    session_ids,
)
def test_fr_sdk_10_valid_tool_requests_round_trip(
    tool: str, args: dict[str, Any], request_id: str, session: str
) -> None:
    envelope = {
        "type": "ToolRequest",
        "tool": tool,
        "args": args,
        "request_id": request_id,
        "session_id": session,
    }
    for text in (json.dumps(envelope), json.dumps(envelope, ensure_ascii=False)):
        decoded = decode_line(text.encode("utf-8", "surrogatepass"))
        if any("\ud800" <= ch <= "\udfff" for ch in text):
            continue  # not UTF-8: refused above, which _answerable covers
        assert isinstance(decoded, ToolRequest)
        assert (decoded.tool, decoded.args, decoded.request_id, decoded.session_id) == (
            tool,
            args,
            request_id,
            session,
        )


def test_fr_sdk_10_hostile_shapes_are_errors() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    for line in (deep, b"1" * 5000, b'{"type": null}', b"\x00\n", b'{"type":"ToolRequest"'):
        result = decode_line(line)
        assert isinstance(result, LineError), line[:40]
    assert decode_line(b"   \n") is None
    huge = decode_line(b" " * (MAX_LINE_BYTES + 1))
    assert isinstance(huge, LineError) and "limit" in huge.message
