"""JSON frames: negotiated in hello, raw JSON replies and raw output events.

A client that offers ``client.frames = ["json"]`` in hello gets replies as
``(return-json UID)`` frames and events as ``(event-json [N])`` frames; a
client that does not (python-epc's, or ours with ``json_frames=False``)
gets standard EPC frames only.  Against the real worker process.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from epc.client import EPCClient

from forj_py.transport import sexp
from forj_py.transport.client import Client, WorkerProcess, _json_event
from forj_py.transport.sexp import Symbol

HANG = 30.0
# Non-ASCII, quotes, backslashes, a JSON-looking line and a line of the
# frame's own header: none of it may confuse either framing.
TRICKY = 'é ✓ 😀 "quoted" back\\slash {"a": 1}\n(return-json 7)\n'


class RawConnection:
    """A bare socket speaking EPC by hand, to see the frames as sent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=HANG)
        self.rfile = self.sock.makefile("rb")
        self.uid = 0

    def call(self, method: str, body: Any) -> None:
        self.uid += 1
        self.sock.sendall(
            sexp.frame([Symbol("call"), self.uid, Symbol(method), [json.dumps(body)]])
        )

    def frame(self) -> bytes:
        head = self.rfile.read(6)
        return self.rfile.read(sexp.parse_header(head))

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


def _read_call(project: Path, c: Client) -> dict[str, Any]:
    plan = c.call(
        "plan", {"calls": [{"id": "r", "name": "read_file", "args": {"path": "tricky.txt"}}]}
    )
    reply: dict[str, Any] = c.call("execute", {"batch_id": plan["batch_id"]})
    return reply


def test_a_client_that_asks_gets_json_frames_and_one_that_does_not_gets_standard_ones(
    project: Path,
) -> None:
    (project / "tricky.txt").write_text(TRICKY * 50)
    with WorkerProcess(project) as proc:
        asking = RawConnection(proc.port)
        plain = RawConnection(proc.port)
        try:
            asking.call("hello", {"token": proc.token, "client": {"frames": ["json"]}})
            data = asking.frame()
            assert data.startswith(b"(return-json 1)\n")
            header, body = sexp.split_json_frame(data) or (None, b"")
            assert header == [Symbol("return-json"), 1]
            assert json.loads(body)["frames"] == ["json"]

            plain.call("hello", {"token": proc.token, "client": {"name": "plain"}})
            data = plain.frame()
            assert data.startswith(b'(return 1 "')
            assert sexp.split_json_frame(data) is None
            msg = sexp.loads(data.decode())
            assert "frames" not in json.loads(msg[2])
            plain.call("ping", {})
            assert sexp.loads(plain.frame().decode()) == [Symbol("return"), 2, "{}"]
            # Errors stay standard frames for everyone: they are small.
            asking.call("plan", {"calls": "not a list"})
            assert asking.frame().startswith(b"(return-error 2 ")
        finally:
            asking.close()
            plain.close()


def test_python_epc_client_keeps_working_with_standard_frames(project: Path) -> None:
    (project / "tricky.txt").write_text(TRICKY)
    with WorkerProcess(project) as proc:
        epc = EPCClient(("127.0.0.1", proc.port))
        try:
            hello = json.loads(epc.call_sync("hello", [json.dumps({"token": proc.token})], 10))
            assert "frames" not in hello
            plan = json.loads(
                epc.call_sync(
                    "plan",
                    [
                        json.dumps(
                            {
                                "calls": [
                                    {"id": "r", "name": "read_file", "args": {"path": "tricky.txt"}}
                                ]
                            }
                        )
                    ],
                    10,
                )
            )
            reply = json.loads(
                epc.call_sync("execute", [json.dumps({"batch_id": plan["batch_id"]})], 10)
            )
            assert reply["results"][0]["result"]["content"] == TRICKY
        finally:
            epc.close()
            epc.socket.close()


@pytest.mark.parametrize("json_frames", [True, False])
def test_replies_and_streamed_output_are_the_same_over_either_framing(
    project: Path, json_frames: bool
) -> None:
    (project / "tricky.txt").write_text(TRICKY * 500)
    (project / "out.txt").write_text(TRICKY * 3000)
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_event(event: dict[str, Any]) -> None:
        with lock:
            events.append(event)

    with (
        WorkerProcess(project) as proc,
        Client(proc.port, on_event=on_event, json_frames=json_frames) as c,
    ):
        hello = c.call("hello", {"token": proc.token})
        assert ("frames" in hello) is json_frames
        reply = _read_call(project, c)
        assert reply["results"][0]["result"]["content"] == TRICKY * 500
        script = "cat out.txt; printf 'to stderr é\\n' >&2"
        plan = c.call(
            "plan", {"calls": [{"id": "s", "name": "run_shell", "args": {"cmd": script}}]}
        )
        c.call("execute", {"batch_id": plan["batch_id"], "approved": ["s"]})
    with lock:
        shell = [e for e in events if e["call_id"] == "s"]
    stdout = "".join(e["data"] for e in shell if e["kind"] == "stdout")
    stderr = "".join(e["data"] for e in shell if e["kind"] == "stderr")
    kinds = [e["kind"] for e in shell]
    assert stdout == TRICKY * 3000
    assert stderr == "to stderr é\n"
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert all(isinstance(e["seq"], int) and e["batch_id"] for e in shell)


def test_an_event_frame_carries_its_output_raw_after_the_json() -> None:
    data = TRICKY.encode()
    meta = json.dumps({"batch_id": "b", "call_id": "c", "seq": 3, "kind": "stdout"}).encode()
    frame = sexp.json_frame([Symbol("event-json"), len(data)], meta + b"\n" + data)
    assert frame[:6] == b"%06x" % (len(frame) - 6)
    split = sexp.split_json_frame(frame[6:])
    assert split is not None
    header, body = split
    event = _json_event(header, body)
    assert event == {"batch_id": "b", "call_id": "c", "seq": 3, "kind": "stdout", "data": TRICKY}
    ascii_frame = sexp.json_frame(
        [Symbol("event-json"), 4, Symbol("ascii")], meta + b"\n" + b"a\nb\n"
    )
    split = sexp.split_json_frame(ascii_frame[6:])
    assert split is not None
    assert _json_event(*split)["data"] == "a\nb\n"
    # A header that claims more raw bytes than the frame holds is refused.
    with pytest.raises(sexp.SexpError):
        _json_event([Symbol("event-json"), len(body) + 5], body)


def test_json_frames_keep_the_six_digit_limit_and_standard_frames_are_not_mistaken() -> None:
    with pytest.raises(sexp.SexpError):
        sexp.json_frame([Symbol("return-json"), 1], b"x" * sexp.MAX_FRAME)
    # A standard frame whose string holds a line like a JSON frame's header.
    standard = sexp.frame([Symbol("return"), 1, "(return-json 2)\n{}"])[6:]
    assert sexp.split_json_frame(standard) is None
    with pytest.raises(sexp.SexpError):
        sexp.split_json_frame(b"(return-json \xff)\n{}\n")


# --- raw long strings ----------------------------------------------------------------------


def _put_raw(value: Any, specs: list[Any], tail: bytes) -> Any:
    """What a reader does with a reply's raw strings: each into its null, in order."""
    at = 0
    for path, size, _ascii in specs:
        text = tail[at : at + size].decode("utf-8")
        at += size
        container = value
        for step in path[:-1]:
            container = container[step]
        assert container[path[-1]] is None
        container[path[-1]] = text
    assert at == len(tail)
    return value


def _split_raw_frame(data: bytes) -> tuple[Any, Any]:
    """A raw-string reply frame's header and the reply it stands for."""
    end = data.index(b"\n")
    header = sexp.loads(data[:end].decode())
    specs = header[2][1:]
    total = sum(size for _, size, _ in specs)
    payload = data[end + 1 : -1]
    body, tail = payload[: len(payload) - total], payload[len(payload) - total :]
    return header, _put_raw(json.loads(body), specs, tail)


def test_long_strings_go_raw_to_a_client_that_offers_it_and_read_the_same(
    project: Path,
) -> None:
    big = TRICKY + "x" * 70_000 + "\n" + TRICKY
    (project / "big.txt").write_text(big)
    with WorkerProcess(project) as proc:
        conns = {name: RawConnection(proc.port) for name in ("raw", "json")}
        try:
            replies = {}
            for name, frames in (("raw", ["json", "raw"]), ("json", ["json"])):
                conn = conns[name]
                conn.call("hello", {"token": proc.token, "client": {"frames": frames}})
                _, body = sexp.split_json_frame(conn.frame()) or (None, b"")
                assert json.loads(body)["frames"] == frames
                read = {"id": "r", "name": "read_file", "args": {"path": "big.txt"}}
                conn.call("plan", {"calls": [read]})
                _, body = sexp.split_json_frame(conn.frame()) or (None, b"")
                conn.call(
                    "execute", {"batch_id": json.loads(body)["batch_id"], "capacity_bytes": 1 << 20}
                )
                data = conn.frame()
                while data.startswith(b"(event-json"):
                    data = conn.frame()
                replies[name] = data
            header, reply = _split_raw_frame(replies["raw"])
            assert header[:2] == [Symbol("return-json"), 3]
            ((path, size, ascii_),) = header[2][1:]
            assert path == ["results", 0, "result", "content"]
            assert size == len(big.encode()) and ascii_ == []  # not all ASCII: nil
            assert reply["results"][0]["result"]["content"] == big
            # The same reply as the client that takes every string inside the JSON.
            _, inline_body = sexp.split_json_frame(replies["json"]) or (None, b"")
            inline = json.loads(inline_body)
            for one in (reply, inline):  # two batches: their ids differ
                del one["batch_id"], one["turn"]["id"]
            assert reply == inline
        finally:
            for conn in conns.values():
                conn.close()


def test_lifting_long_strings_keeps_everything_else_and_changes_nothing() -> None:
    long = "é" + "y" * sexp.RAW_MIN_CHARS
    value = {
        "a": [1, {"b": long, "c": "short"}, long],
        "odd key": long,  # not a plain key: stays in the JSON
        "deep": {"x": {"x": {"x": {"x": {"x": {"x": {"x": {"x": long}}}}}}}},
        "many": ["z"] * 100 + [long],  # a long list is not searched
    }
    before = json.dumps(value)
    lifted, found = sexp.lift_long_strings(value)
    assert json.dumps(value) == before  # the original is untouched
    assert [path for path, _ in found] == [["a", 1, "b"], ["a", 2]]
    assert lifted["a"][1] == {"b": None, "c": "short"} and lifted["a"][2] is None
    assert lifted["odd key"] == long and lifted["many"][-1] == long
    frame = sexp.raw_reply_frame(9, value)
    assert frame is not None
    header, rebuilt = _split_raw_frame(frame[6:])
    assert rebuilt == value
    assert header[2][1:] == [
        [["a", 1, "b"], len(long.encode()), []],
        [["a", 2], len(long.encode()), []],
    ]
    # Nothing long, or a string UTF-8 cannot carry: the usual frame is used.
    assert sexp.raw_reply_frame(1, {"a": "short"}) is None
    assert sexp.raw_reply_frame(1, {"a": "\ud800" * sexp.RAW_MIN_CHARS}) is None
    assert sexp.raw_reply_frame(1, {"a": long, "b": "\ud800"}) is None
