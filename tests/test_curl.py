"""curl (seed 004 section 5.3, sec.network.allowlist) against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import MakeWorker, call, project_config, user_config

from forj_py.config import load
from forj_py.safety.network import DomainPolicy
from forj_py.service import Worker
from forj_py.tools.curl import Curl


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drip(self, data: bytes) -> None:
        for byte in data:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.1)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/ok":
            self._send(200, b"hello \x1b[31mred\x1b[0m world\n", Set_Cookie="sid=abcdef123456")
        elif parts.path == "/echo":
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else None
            key = self.headers.get("X-Api-Key") or ""
            seen = {
                "method": self.command,
                "headers": dict(self.headers.items()),
                "body": body,
                "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
            }
            self._send(200, json.dumps(seen).encode(), "application/json")
        elif parts.path == "/big":
            self._send(200, b"x" * 10_000)
        elif parts.path == "/bin":
            self._send(200, bytes(range(256)), "application/octet-stream")
        elif parts.path == "/slow":
            time.sleep(3)
            self._send(200, b"late")
        elif parts.path == "/sink":
            # What arrived, by digest only: the reply carries no secret back.
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            note = self.headers.get("X-Note") or ""
            digests = {
                "body": hashlib.sha256(body).hexdigest(),
                "query": hashlib.sha256(parts.query.encode()).hexdigest(),
                "note": hashlib.sha256(note.encode()).hexdigest(),
            }
            self._send(200, json.dumps(digests).encode(), "application/json")
        elif parts.path == "/drip":
            # Headers at once, then the body one byte at a time: every recv
            # returns well within any per-read timeout.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self._drip(b"x" * 1000)
        elif parts.path == "/drip-head":
            # The status line, then one header a byte at a time, never ending.
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self._drip(b"X-Slow: " + b"y" * 1000)
        elif parts.path == "/to":
            self._send(int(query.get("status", ["302"])[0]), b"", Location=query["url"][0])
        elif parts.path.startswith("/loop/"):
            n = int(parts.path.rsplit("/", 1)[1])
            self._send(302, b"", Location=f"/loop/{n + 1}")
        else:
            self._send(404, b"not here")


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def other() -> Iterator[str]:
    """A second server: a host:port the list does not name."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def allow(*domains: str, extra: str = "") -> None:
    listed = ", ".join(json.dumps(d) for d in domains)
    user_config(f"[network]\nallowed_domains = [{listed}]\n{extra}")


def plan1(worker: Worker, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("c", "curl", **args)]})
    return dict(plan)


def run1(worker: Worker, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("c", "curl", **args)]})
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    (entry,) = reply["results"]
    return dict(entry)


def test_sec_network_allowlist_curl_is_off_without_allowed_domains(
    make_worker: MakeWorker, server: str
) -> None:
    plan = plan1(make_worker(), url=f"http://{server}/ok")
    (item,) = plan["items"]
    assert item["disposition"] == "resolved"  # an error result, never a prompt
    error = item["result"]["error"]
    assert error["type"] == "permission-error"
    assert "allowed_domains" in error["message"] and "nothing was sent" in error["message"]


def test_sec_network_allowlist_an_allowed_request_is_reviewed_and_runs(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    w = make_worker()
    (item,) = plan1(w, url=f"http://{server}/ok")["items"]
    assert item["disposition"] == "confirm"
    assert item["summary"].startswith("[network] curl GET")
    assert any("reaches the network" in n for n in item["warnings"])
    entry = run1(w, url=f"http://{server}/ok")
    assert entry["ok"], entry
    result = entry["result"]
    assert result["status"] == 200 and result["truncated"] is False
    # Sanitized like every other output: the terminal escapes are gone.
    assert "\x1b" not in result["body"] and "hello" in result["body"]
    assert result["headers"]["set-cookie"] == "[REDACTED]"
    assert result["bytes"] == len(b"hello \x1b[31mred\x1b[0m world\n")


def test_sec_network_allowlist_a_denied_domain_is_refused_before_review(
    make_worker: MakeWorker, server: str, other: str
) -> None:
    allow(server)
    (item,) = plan1(make_worker(), url=f"http://{other}/ok")["items"]
    assert item["disposition"] == "resolved"
    error = item["result"]["error"]
    assert error["type"] == "permission-error"
    assert error["details"]["rule"] == "sec.network.allowlist"
    assert other in error["message"]


def test_sec_network_allowlist_other_schemes_are_refused(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    for url in ("file:///etc/passwd", f"ftp://{server}/x", "gopher://127.0.0.1/"):
        (item,) = plan1(make_worker(), url=url)["items"]
        assert item["disposition"] == "resolved", url
        assert "http and https only" in item["result"]["error"]["message"]


def test_sec_network_allowlist_every_redirect_is_checked_again(
    make_worker: MakeWorker, server: str, other: str
) -> None:
    allow(server)
    w = make_worker()
    good = run1(w, url=f"http://{server}/to?url=/ok")
    assert good["ok"] and good["result"]["status"] == 200
    assert good["result"]["redirects"] == [f"http://{server}/to?url=/ok"]
    bad = run1(w, url=f"http://{server}/to?url=http://{other}/ok")
    assert not bad["ok"]
    assert bad["error"]["type"] == "permission-error"
    assert "a redirect from" in bad["error"]["message"] and other in bad["error"]["message"]


def test_sec_network_allowlist_more_than_three_redirects_are_refused(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    w = make_worker()
    # Three redirects are fine: /to -> /loop/1 would go on for ever, so count.
    entry = run1(w, url=f"http://{server}/loop/0")
    assert not entry["ok"]
    assert entry["error"]["details"]["code"] == "E_HTTP"
    assert entry["error"]["details"]["failure"] == "too-many-redirects"
    assert len(entry["error"]["details"]["redirects"]) == 4
    assert "more than 3 redirects" in entry["error"]["message"]


def test_curl_max_bytes_cuts_the_body_with_a_truthful_note(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    entry = run1(make_worker(), url=f"http://{server}/big", max_bytes=1000)
    result = entry["result"]
    assert result["truncated"] is True and result["bytes"] == 1000
    assert result["body"] == "x" * 1000
    assert "max_bytes = 1000" in result["note"] and "10000 (Content-Length)" in result["note"]
    whole = run1(make_worker(), url=f"http://{server}/big")["result"]
    assert whole["truncated"] is False and whole["bytes"] == 10_000 and "note" not in whole


def test_curl_a_binary_body_comes_back_as_base64(make_worker: MakeWorker, server: str) -> None:
    import base64

    allow(server)
    result = run1(make_worker(), url=f"http://{server}/bin")["result"]
    assert "body" not in result
    assert base64.b64decode(result["body_b64"]) == bytes(range(256))


def test_curl_timeout_is_enforced(make_worker: MakeWorker, server: str) -> None:
    allow(server)
    entry = run1(make_worker(), url=f"http://{server}/slow", timeout_ms=500)
    assert not entry["ok"]
    assert entry["error"]["type"] == "timeout-error"
    assert entry["error"]["details"]["timeout_s"] == 0.5


def _tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("forj-tool-curl", "forj-curl"))]


@pytest.mark.parametrize("path", ["/drip", "/drip-head"])
def test_curl_one_deadline_covers_a_server_that_sends_a_byte_at_a_time(
    make_worker: MakeWorker, server: str, path: str
) -> None:
    # The executor's backstop is timeout_seconds + 5 = 7 s; the call's own
    # deadline (1 s) must end it well before that, and leave no thread.
    allow(server, extra="[tools.curl]\ntimeout_seconds = 2\n")
    w = make_worker()
    plan = w.plan({"calls": [call("c", "curl", url=f"http://{server}{path}", timeout_ms=1000)]})
    started = time.monotonic()
    reply = w.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    took = time.monotonic() - started
    (entry,) = reply["results"]
    assert not entry["ok"]
    error = entry["error"]
    assert error["type"] == "timeout-error"
    # The tool's own timeout result, not the executor's backstop.
    assert error["details"]["timeout_s"] == 1 and "127.0.0.1" in error["message"]
    assert took < 7
    for _ in range(50):
        if not _tool_threads():
            break
        time.sleep(0.05)
    assert _tool_threads() == []


def test_curl_the_deadline_covers_a_tls_handshake_sent_a_byte_at_a_time(
    make_worker: MakeWorker,
) -> None:
    """A server that starts a TLS record and then sends the rest a byte every 0.1 s."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record, 16 KiB long
                for _ in range(150):
                    conn.sendall(b"\x02")
                    time.sleep(0.1)

    threading.Thread(target=serve, daemon=True).start()
    allow(f"127.0.0.1:{port}", extra="[tools.curl]\ntimeout_seconds = 2\n")
    w = make_worker()
    url = f"https://127.0.0.1:{port}/"
    plan = w.plan({"calls": [call("c", "curl", url=url, timeout_ms=1000)]})
    started = time.monotonic()
    reply = w.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    took = time.monotonic() - started
    listener.close()
    (entry,) = reply["results"]
    assert entry["error"]["type"] == "timeout-error", entry
    assert entry["error"]["details"]["timeout_s"] == 1
    assert took < 7  # the executor's backstop: timeout_seconds + 5
    for _ in range(50):
        if not _tool_threads():
            break
        time.sleep(0.05)
    assert _tool_threads() == []


def test_curl_a_slow_name_lookup_counts_against_the_deadline() -> None:
    """getaddrinfo takes no timeout: the lookup is bounded by the call's deadline."""

    def slow(host: str, port: int) -> list[str]:
        time.sleep(2)
        return ["93.184.215.14"]

    policy = DomainPolicy(["docs.example.com"], resolve=slow)
    target = policy.check_url("https://docs.example.com/")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        policy.addresses(target, timeout=0.2)
    assert time.monotonic() - started < 1.5


def test_curl_secrets_in_the_url_other_headers_and_the_body_stay_out_of_the_journal(
    make_worker: MakeWorker, server: str, project: Path
) -> None:
    allow(server)
    w = make_worker()
    token = "ghp_" + "T" * 36
    query = "access_token=Qu3ryT0kenValue&q=kept&sig=S1gnatureValue"
    url = f"http://{server}/sink?{query}"
    args = {
        "url": url,
        "method": "POST",
        "headers": {"X-Note": f"ci {token}", "Accept": "application/json"},
        "body": '{"password": "B0dyPassw0rdValue", "name": "kept-name"}',
    }
    journaled = w.journal_calls({"calls": [call("c", "curl", **args)]})
    plan = w.plan({"batch_id": journaled["batch_id"]})
    reply = w.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    (entry,) = reply["results"]
    assert entry["ok"], entry
    seen = json.loads(entry["result"]["body"])
    # Sent for real, as given.
    assert seen["body"] == hashlib.sha256(args["body"].encode()).hexdigest()
    assert seen["query"] == hashlib.sha256(query.encode()).hexdigest()
    assert seen["note"] == hashlib.sha256(f"ci {token}".encode()).hexdigest()
    secrets = ("Qu3ryT0kenValue", "S1gnatureValue", token, "B0dyPassw0rdValue")
    recorded = json.dumps(w.journal.batch(journaled["batch_id"]))
    shown = json.dumps(plan["items"][0]) + json.dumps(entry)
    for secret in secrets:
        assert secret not in recorded
        assert secret not in shown
    assert "q=kept" in recorded and "kept-name" in recorded and "application/json" in recorded
    # Nothing on disk either: the journal's files (its WAL too) hold no secret in clear.
    for path in Path(os.environ["FORJ_STATE_DIR"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, path


def test_curl_refuses_a_marker_in_the_url_or_the_body(make_worker: MakeWorker, server: str) -> None:
    allow(server)
    w = make_worker()
    entry = run1(w, url=f"http://{server}/echo?access_token=[REDACTED]")
    assert not entry["ok"] and "the url holds the redaction marker" in entry["error"]["message"]
    entry = run1(w, url=f"http://{server}/echo", method="POST", body='{"password": "[REDACTED]"}')
    assert not entry["ok"] and "the body holds the redaction marker" in entry["error"]["message"]


def test_curl_a_header_outside_latin1_is_a_clear_bad_args_error(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    entry = run1(make_worker(), url=f"http://{server}/echo", headers={"X-Name": "€"})
    assert not entry["ok"]
    assert entry["error"]["type"] == "validation-error", entry
    assert "outside Latin-1" in entry["error"]["message"]


def test_curl_a_redirect_to_another_origin_carries_only_content_headers_and_no_body(
    make_worker: MakeWorker, server: str, other: str
) -> None:
    allow(server, other)
    w = make_worker()
    target = f"http://{other}/echo"
    entry = run1(
        w,
        url=f"http://{server}/to?url={target}",
        headers={"X-Tenant": "tenant-0005", "Accept": "text/plain", "Content-Type": "text/plain"},
    )
    seen = json.loads(entry["result"]["body"])
    assert "X-Tenant" not in seen["headers"] and seen["headers"]["Accept"] == "text/plain"
    # 307/308 would send the body again, to an origin it was not written for.
    for status in (307, 308):
        entry = run1(
            w, url=f"http://{server}/to?status={status}&url={target}", method="POST", body="data"
        )
        assert not entry["ok"]
        assert entry["error"]["details"]["failure"] == "cross-origin-body"
        assert "call its URL directly" in entry["error"]["recovery"][0]
    # Within one origin a 307 keeps the body, as the status means.
    same = f"http://{server}/echo"
    entry = run1(w, url=f"http://{server}/to?status=307&url={same}", method="POST", body="data")
    assert json.loads(entry["result"]["body"])["body"] == "data"


def test_curl_a_wildcard_never_reaches_an_ipv4_address_wrapped_in_ipv6() -> None:
    wrapped = {
        "nat64.example.com": ["64:ff9b::a9fe:a9fe"],
        "sixtofour.example.com": ["2002:a9fe:a9fe::1"],
        "mapped.example.com": ["::ffff:127.0.0.1"],
        "teredo.example.com": ["2001:0:4136:e378:8000:63bf:f5ff:fffe"],  # client 10.0.0.1
        "public.example.com": ["64:ff9b::5db8:d70e"],  # NAT64 of 93.184.215.14
    }
    policy = DomainPolicy(["*.example.com"], resolve=lambda host, port: wrapped[host])
    for host in ("nat64", "sixtofour", "mapped", "teredo"):
        target = policy.check_url(f"https://{host}.example.com/")
        with pytest.raises(Exception) as refused:
            policy.addresses(target)
        assert "never reaches loopback" in str(refused.value), host
    public = policy.check_url("https://public.example.com/")
    assert policy.addresses(public) == ["64:ff9b::5db8:d70e"]


def test_curl_credential_headers_are_redacted_in_the_journal_and_the_review(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server)
    w = make_worker()
    headers = {
        "Authorization": "Bearer s3cr3t-v4lue-0001",
        "X-Api-Key": "k3y-v4lue-0002",
        "Cookie": "sid=c00kie-0003",
        "Accept": "application/json",
    }
    journaled = w.journal_calls(
        {
            "calls": [
                call(
                    "c",
                    "curl",
                    url=f"http://{server}/echo",
                    method="POST",
                    headers=headers,
                    body="hi",
                )
            ]
        }
    )
    plan = w.plan({"batch_id": journaled["batch_id"]})
    (item,) = plan["items"]
    shown = json.dumps(item)
    for secret in ("s3cr3t-v4lue-0001", "k3y-v4lue-0002", "c00kie-0003"):
        assert secret not in shown
    assert "Authorization: [REDACTED]" in item["preview"]
    assert "Accept: application/json" in item["preview"]
    recorded = json.dumps(w.journal.batch(journaled["batch_id"]))
    for secret in ("s3cr3t-v4lue-0001", "k3y-v4lue-0002", "c00kie-0003"):
        assert secret not in recorded
    assert "application/json" in recorded
    # The request itself carried the real values (held in memory, not the journal).
    reply = w.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    (entry,) = reply["results"]
    seen = json.loads(entry["result"]["body"])
    assert seen["method"] == "POST" and seen["body"] == "hi"
    # Sent for real (the server saw it), and its echo comes back redacted.
    assert seen["key_sha256"] == hashlib.sha256(b"k3y-v4lue-0002").hexdigest()
    assert seen["headers"]["X-Api-Key"] == "[REDACTED]"
    assert "k3y-v4lue-0002" not in json.dumps(entry)
    assert "s3cr3t-v4lue-0001" not in json.dumps(w.journal.batch(journaled["batch_id"]))


def test_curl_refuses_to_send_the_redaction_marker(make_worker: MakeWorker, server: str) -> None:
    allow(server)
    entry = run1(
        make_worker(), url=f"http://{server}/echo", headers={"Authorization": "[REDACTED]"}
    )
    assert not entry["ok"] and "redaction marker" in entry["error"]["message"]


def test_curl_credentials_are_dropped_when_a_redirect_leaves_the_host(
    make_worker: MakeWorker, server: str, other: str
) -> None:
    allow(server, other)
    target = f"http://{other}/echo"
    entry = run1(
        make_worker(),
        url=f"http://{server}/to?url={target}",
        headers={"Authorization": "Bearer t0ken-0004", "Accept": "text/plain"},
    )
    seen = json.loads(entry["result"]["body"])
    assert "Authorization" not in seen["headers"] and seen["headers"]["Accept"] == "text/plain"


def test_sec_network_allowlist_a_project_file_cannot_set_or_widen_the_list(
    make_worker: MakeWorker, project: Path, server: str, other: str
) -> None:
    project_config(project, f'[network]\nallowed_domains = ["{server}"]\n')
    (item,) = plan1(make_worker(), url=f"http://{server}/ok")["items"]
    assert item["disposition"] == "resolved"  # still off
    allow(server, extra=f'[trust]\nprojects = ["{project}"]\n')
    project_config(project, f'[network]\nallowed_domains = ["{server}", "{other}"]\n')
    w = make_worker()
    assert w.config.network.allowed_domains == [server]
    (item,) = plan1(w, url=f"http://{other}/ok")["items"]
    assert item["disposition"] == "resolved"


def test_sec_network_allowlist_ip_literals_and_exact_names(
    make_worker: MakeWorker, server: str
) -> None:
    port = server.rsplit(":", 1)[1]
    # The name is listed: it resolves to 127.0.0.1, which is fine because the
    # user named it exactly.
    allow(f"localhost:{port}")
    w = make_worker()
    assert run1(w, url=f"http://localhost:{port}/ok")["ok"]
    # The address itself is not listed: an IP literal matches only itself.
    (item,) = plan1(w, url=f"http://127.0.0.1:{port}/ok")["items"]
    assert item["disposition"] == "resolved"
    # Without a port an entry allows only the scheme's default port.
    allow("localhost")
    (item,) = plan1(make_worker(), url=f"http://localhost:{port}/ok")["items"]
    assert item["disposition"] == "resolved"


def test_sec_network_allowlist_a_wildcard_never_reaches_loopback() -> None:
    """DNS rebinding: a subdomain's owner points it at 127.0.0.1 (their DNS answer, given here)."""
    answers = {"evil.example.com": ["127.0.0.1"], "docs.example.com": ["93.184.215.14"]}
    policy = DomainPolicy(["*.example.com"], resolve=lambda host, port: answers[host])
    target = policy.check_url("https://evil.example.com/")
    with pytest.raises(Exception) as refused:
        policy.addresses(target)
    assert "never reaches loopback" in str(refused.value)
    assert policy.addresses(policy.check_url("https://docs.example.com/")) == ["93.184.215.14"]
    # Listed exactly, the same answer is the user's intent.
    exact = DomainPolicy(["evil.example.com"], resolve=lambda host, port: answers[host])
    assert exact.addresses(exact.check_url("https://evil.example.com/")) == ["127.0.0.1"]
    # A wildcard never matches the bare name or an IP address.
    assert policy.match("example.com", 443, "https") is None
    assert DomainPolicy(["*.0.0.1"]).match("127.0.0.1", 80, "http") is None


def test_curl_network_rule_lifts_the_forced_review_and_an_allow_rule_runs_it(
    make_worker: MakeWorker, server: str
) -> None:
    allow(
        server,
        extra='[permissions]\nnetwork = ["curl(127.0.0.1 GET)"]\nallow = ["curl(127.0.0.1 GET)"]\n',
    )
    w = make_worker()
    (item,) = plan1(w, url=f"http://{server}/ok")["items"]
    assert item["disposition"] == "execute", item
    assert not item.get("warnings")
    # POST is not covered: the forced review stays.
    (item,) = plan1(w, url=f"http://{server}/echo", method="POST")["items"]
    assert item["disposition"] == "confirm"
    assert any("reaches the network" in n for n in item["warnings"])


def test_curl_a_network_rule_alone_leaves_the_mode_default(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server, extra='[permissions]\nnetwork = ["curl(127.0.0.1 *)"]\n')
    (item,) = plan1(make_worker(), url=f"http://{server}/ok")["items"]
    assert item["disposition"] == "confirm"
    assert not item.get("warnings")
    assert item["grant_pattern"] == "curl(127.0.0.1 *)"


def test_curl_a_grant_records_network_and_covers_the_next_call(
    make_worker: MakeWorker, server: str
) -> None:
    allow(server, extra='[permissions]\nnetwork = ["curl(127.0.0.1 GET)"]\n')
    w = make_worker()
    plan = w.plan({"calls": [call("c", "curl", url=f"http://{server}/ok")], "session": "s"})
    assert plan["items"][0]["grant_pattern"] == "curl(127.0.0.1 *)"
    done = w.execute(
        {"batch_id": plan["batch_id"], "approved": ["c"], "grants": {"c": {"scope": "session"}}},
        lambda e: None,
    )
    assert done["results"][0]["ok"]
    assert done["grants"][0]["network"] is True
    again = w.plan({"calls": [call("c", "curl", url=f"http://{server}/big")], "session": "s"})
    assert again["items"][0]["disposition"] == "execute"
    # The grant does not lift the forced review of a call no network rule covers.
    post = w.plan(
        {"calls": [call("c", "curl", url=f"http://{server}/echo", method="POST")], "session": "s"}
    )
    assert post["items"][0]["disposition"] == "confirm"


@pytest.mark.parametrize("trusted", [False, True])
def test_curl_a_project_may_only_lower_the_limits(project: Path, trusted: bool) -> None:
    """[tools.curl] timeout_seconds and max_bytes: a project file lowers them, never raises."""
    user_config(
        "[tools.curl]\ntimeout_seconds = 20\nmax_bytes = 1048576\n"
        + (f"[trust]\nprojects = [{str(project)!r}]\n" if trusted else "")
    )
    project_config(project, "[tools.curl]\ntimeout_seconds = 600\nmax_bytes = 67108864\n")
    loaded = load(project)
    curl = loaded.config.tools.curl
    assert curl.timeout_seconds == 20 and curl.max_bytes == 1 << 20
    raised = [w for w in loaded.warnings if "tools.curl." in w]
    assert len(raised) == 2 and all("Only your own config file" in w for w in raised)
    project_config(project, "[tools.curl]\ntimeout_seconds = 5\nmax_bytes = 4096\n")
    loaded = load(project)
    curl = loaded.config.tools.curl
    assert curl.timeout_seconds == 5 and curl.max_bytes == 4096
    assert not [w for w in loaded.warnings if "tools.curl." in w]


def test_curl_the_journal_keeps_a_url_with_nothing_to_hide_exactly() -> None:
    """A journaled call replayed after a restart must request the URL it was given."""
    plain = {"url": "https://docs.example.org/x?a&b=%20c+d&page=2#top", "headers": {"A": "b"}}
    assert Curl.journal_args(plain) is plain
    hidden = Curl.journal_args({"url": "https://docs.example.org/x?page=2&api_key=K3yValue"})
    assert hidden["url"] == "https://docs.example.org/x?page=2&api_key=[REDACTED]"
