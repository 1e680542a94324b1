"""``curl``: one HTTP(S) request to a domain the user listed.

Off until the user's own config lists ``[network] allowed_domains`` (a
project's file can narrow that list, never set or widen it).  Every call
asks for network, so it is reviewed unless a ``[permissions] network``
rule (``curl(docs.python.org *)``) lifts the forced review and then an
allow rule or a standing grant lets it run; in the auto mode the network
rule alone is enough.  The address rules (DNS rebinding, IP literals) are
:mod:`forj_py.safety.network`'s.

The client is the standard library's ``http.client``, not ``urllib``'s
opener (which follows redirects by itself, reads proxies from the
environment and resolves the name again when it connects) and not an extra
dependency: each connection goes to the address the policy checked, with
the name kept for the Host header and TLS verification; redirects (at
most three) are followed here, each one checked against the list again.
No proxy from the environment is used, no cookie is kept, nothing is
decompressed (``Accept-Encoding: identity``).

Request headers named like credentials (Authorization, Cookie, anything
with token, key, secret, password, session, auth ...) are redacted in the
journal, the summary and the review; so are query parameters named like
credentials, and credential-looking text in every other header value and
in the body.  A call that carries the redaction marker back is refused.
When a redirect leaves the first origin only plain content headers
(Accept, Content-Type, User-Agent ...) go on, and a 307/308 that would
send the body to another origin is refused.  A response that echoes a
credential shows it redacted.  A response's text is sanitized and
credential-redacted like every other output; a body that is not text
comes back as ``body_b64``.

One deadline covers the whole call (the name lookup, every connection,
the TLS handshake, headers and body, every redirect): a timer shuts the
open socket when it passes, so a server that sends one byte at a time
cannot hold the call, or its thread, beyond it.
"""

from __future__ import annotations

import base64
import contextlib
import html
import http.client
import json
import re
import socket
import ssl
import threading
import time
from typing import Any, Literal
from urllib.parse import (
    parse_qsl,
    quote,
    quote_plus,
    unquote,
    unquote_plus,
    urlencode,
    urljoin,
    urlsplit,
    urlunsplit,
)

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import errors
from ..config import Config
from ..errors import ToolFailure
from ..output import (
    REDACTED,
    SHELL_CODE_RE,
    credential_spans,
    credential_values,
    quoted_block,
    redact,
    redact_url_credentials,
    sanitize,
    shown_line,
)
from ..protocol import DenialReason, ErrorKind, ErrorType, RiskLevel
from ..safety.network import DomainPolicy, Target, host_of
from ..safety.permissions import network_rule_covers
from .registry import Tool, ToolContext

MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 << 10
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}\Z")
# Parts of a header name that say its value is a credential.
_CREDENTIAL_NAME = re.compile(
    r"auth|cookie|token|key|secret|passw|session|credential|signature|csrf|xsrf|bearer",
    re.IGNORECASE,
)
# Headers the client sets itself: a Host header would send the request to a
# name the list never checked; the framing ones would desynchronise it.
_RESERVED = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "trailer"}
)
# The only headers a redirect carries to another origin: they describe the
# request's content, never who sends it.
_CROSS_ORIGIN_HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "cache-control",
        "content-language",
        "content-type",
        "pragma",
        "user-agent",
    }
)
_TEXT_TYPE = re.compile(r"^(text/|application/([\w.+-]*\+)?(json|xml|javascript|x-www-form))")
USER_AGENT = "forj-curl"


# A JSON member named like a credential ("password": "...", "api_key": 12):
# the shared redaction reads key=value and key: value, not a quoted key.
_JSON_SECRET = re.compile(
    r'(?i)("[^"\\]{0,80}?(?:passw|pwd|secret|token|api[_-]?key|auth|credential|private[_-]?key)'
    r'[^"\\]{0,80}"\s*:\s*)("(?:[^"\\]|\\.)*"|[^\s,}\]]+)'
)


# One field of a form body (name=value between &s).
_FORM_FIELD = re.compile(r"(?:^|(?<=&))([^=&\s]+)=([^&\s]*)")
# One part of a multipart body: its headers (the Content-Disposition names
# the field), a blank line, then the value up to the next boundary line.
_MULTIPART_FIELD = re.compile(
    r'(?i)content-disposition:[^\r\n]*?\bname\*?=\s*"?([^";\r\n]*)"?[^\r\n]*\r?\n'
    r"(?:[^\r\n]+\r?\n)*?\r?\n((?s:.*?))(?=\r?\n--|\Z)"
)
# An XML (or HTML) element holding text: <password>...</password>.
_XML_FIELD = re.compile(r"<([\w:.-]+)(?:\s[^<>]*)?>([^<]*)</\1\s*>")


def _named_fields(body: str) -> list[tuple[int, int]]:
    """Where the values of the body's multipart parts and XML elements named like a
    credential stand (a form's fields and JSON's members are read elsewhere)."""
    spans = [
        m.span(2)
        for m in _MULTIPART_FIELD.finditer(body)
        if m.group(2) and _credential_param(m.group(1))
    ]
    spans += [
        m.span(2)
        for m in _XML_FIELD.finditer(body)
        if m.group(2).strip() and _credential_param(m.group(1).rpartition(":")[2])
    ]
    return spans


def redact_body(text: str) -> str:
    """A request body as the journal and the review show it.

    JSON members and form fields named like credentials (``pass=...``,
    ``"client_secret": ...``, every value inside ``"auth": {...}``) and
    credential-looking text are redacted.  The text keeps its own layout:
    values are replaced where they stand, nothing is re-serialized.
    """
    found: list[str] = []
    if "<" in text or "name" in text:
        for start, end in sorted(_named_fields(text), reverse=True):
            text = text[:start] + REDACTED + text[end:]
    with contextlib.suppress(ValueError, RecursionError):
        _json_secrets(json.loads(text), False, found)
    for value in sorted(_json_spellings(found), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _JSON_SECRET.sub(lambda m: m.group(1) + f'"{REDACTED}"', text)
    if "=" in text:
        text = _FORM_FIELD.sub(
            lambda m: (
                f"{m.group(1)}={REDACTED}"
                if m.group(2) and _credential_param(unquote_plus(m.group(1)))
                else m.group()
            ),
            text,
        )
    return redact(text)


def credential_header(name: str) -> bool:
    return bool(_CREDENTIAL_NAME.search(name))


def shown_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers as the journal and the review show them: credential values redacted."""
    return {k: (REDACTED if credential_header(k) else redact(v)) for k, v in headers.items()}


def shown_url(url: str) -> str:
    """``url`` as the journal, the review and the result show it.

    The password of ``user:password@``, the value of every query parameter
    named like a credential (``access_token``, ``api_key``, ``sig`` ...) and
    any credential-looking text are replaced by the marker.
    """
    url = redact_url_credentials(url)[0]
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if not parts.query:
        return redact(url)
    # Each value on its own: a key=value pattern run over the whole URL
    # would swallow the parameters after it.
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    shown = [(k, REDACTED if _credential_param(k) else redact(v)) for k, v in pairs]
    # Re-encoded only when something was hidden: a journaled call replayed
    # after a restart must request the very URL it was given.
    query = urlencode(shown, safe="[]/:") if shown != pairs else parts.query
    base = redact(urlunsplit(parts._replace(query="", fragment="")))
    return base + "?" + query + ("#" + redact(parts.fragment) if parts.fragment else "")


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]*)@")


def _summary_url(url: str) -> str:
    """``shown_url``, but a ``user:password@`` holding shell syntax stays.

    Like every summary (``output.short_summary``), it does not hide code as
    if it were a secret.  Such a URL is refused before anything is sent.
    """
    m = _USERINFO.match(url)
    if m is None or not SHELL_CODE_RE.search(m.group(2)):
        return shown_url(url)
    rest = shown_url(m.group(1) + url[m.end() :])
    return m.group(1) + m.group(2) + "@" + rest[len(m.group(1)) :]


def _credential_param(name: str) -> bool:
    return credential_header(name) or name.lower() in ("sig", "code", "pass", "pwd")


class CurlArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = Field(
        default="GET", description="The HTTP method"
    )
    url: str = Field(
        min_length=1,
        max_length=8192,
        description="An absolute http:// or https:// URL on a domain the user allowed",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="Request headers; credentials (Authorization, Cookie, *token*, *key*) are "
        "redacted in the journal and the review",
    )
    body: str | None = Field(
        default=None, max_length=1 << 20, description="The request body (text), if any"
    )
    timeout_ms: int | None = Field(
        default=None,
        ge=100,
        le=600_000,
        description="Give up after this long; default and ceiling: the user's "
        "[tools.curl] timeout_seconds (15 s)",
    )
    max_bytes: int | None = Field(
        default=None,
        ge=1,
        le=64 << 20,
        description="Keep at most this many bytes of the body; default and ceiling: "
        "[tools.curl] max_bytes (5 MiB)",
    )

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        seen: set[str] = set()
        for name, value in headers.items():
            if not _TOKEN.match(name):
                raise ValueError(f"header name {name[:60]!r} is not a valid HTTP token")
            if name.lower() in _RESERVED:
                raise ValueError(f"header {name!r} is set by curl itself; leave it out")
            if name.lower() in seen:
                raise ValueError(f"header {name!r} is given twice (names ignore case)")
            seen.add(name.lower())
            if any(c in value for c in "\r\n\0") or len(value) > 16384:
                raise ValueError(f"header {name!r}: the value holds CR, LF or NUL, or is too long")
            try:
                value.encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    f"header {name!r}: the value holds characters outside Latin-1, which HTTP "
                    "headers cannot carry; percent-encode them (or use the RFC 8187 form "
                    "name*=UTF-8''...)"
                ) from None
        return headers


class Curl(Tool[CurlArgs]):
    name = "curl"
    description = (
        "One HTTP(S) request: {status, url, headers, body (text) or body_b64, bytes, truncated, "
        "redirects}. Only to domains the user listed in [network] allowed_domains (off "
        "otherwise); at most 3 redirects, each checked again. Reviewed unless the user's rules "
        "allow it. Response text is sanitized; a non-2xx status is a result, not an error."
    )
    Args = CurlArgs
    side_effecting = True  # a request can change a server, or carry data out
    requires_approval = True
    matches_words = True
    timeout_kind = "curl"

    def risk(self, args: CurlArgs) -> RiskLevel:
        return RiskLevel.HIGH

    def timeout(self, config: Config) -> float:
        # The call stops itself at its own deadline; the executor's is a backstop.
        return config.tools.curl.timeout_seconds + 5

    def rule_words(self, args: CurlArgs) -> list[str]:
        return [host_of(args.url) or "?", args.method]

    def network_access(self, args: CurlArgs, ctx: ToolContext) -> bool:
        return True

    @classmethod
    def journal_args(cls, raw: dict[str, Any]) -> dict[str, Any]:
        shown = dict(raw)
        if isinstance(raw.get("url"), str):
            shown["url"] = shown_url(raw["url"])
        if isinstance(raw.get("body"), str):
            shown["body"] = redact_body(raw["body"])
        headers = raw.get("headers")
        if isinstance(headers, dict):
            shown["headers"] = {
                k: (
                    REDACTED
                    if isinstance(k, str) and credential_header(k)
                    else (redact(v) if isinstance(v, str) else v)
                )
                for k, v in headers.items()
            }
        return shown if shown != raw else raw

    def summary(self, args: CurlArgs) -> str:
        return f"curl {args.method} {_summary_url(args.url)}"

    def summary_tags(self, args: CurlArgs, ctx: ToolContext) -> list[str]:
        return ["network"]

    def review_notes(self, args: CurlArgs, ctx: ToolContext) -> list[str]:
        target = _policy(ctx).check_url(args.url)  # off, or a domain not listed: refused now
        if network_rule_covers(ctx.config.permissions.network, self.name, self.rule_words(args)):
            return []
        return [
            f"This call reaches the network: {args.method} {target.scheme}://{target.host}:"
            f"{target.port} (allowed by {target.entry.text!r})."
        ]

    def preview(self, args: CurlArgs, ctx: ToolContext) -> str | None:
        url = shown_url(args.url)
        limits = _limits(args, ctx)
        lines = [shown_line(f"{args.method} {url}")]
        if args.headers:
            lines.append("headers:")
            lines += [
                "  " + shown_line(f"{k}: {v}") for k, v in shown_headers(args.headers).items()
            ]
        else:
            lines.append("headers: (none besides User-Agent)")
        if args.body is None:
            lines.append("body: none")
        else:
            # The whole body, every line behind the mark; what redaction
            # hides is counted.
            shown = redact_body(args.body)
            size = len(args.body.encode("utf-8", "surrogatepass"))
            hidden = shown.count(REDACTED) - args.body.count(REDACTED)
            about = f"{size} bytes sent"
            if hidden > 0:
                about += f"; {hidden} credential value(s) shown as {REDACTED}"
            lines += quoted_block("body", shown, about)
        lines.append(
            f"limits: {limits[0]:g} s, {limits[1]} bytes, at most {MAX_REDIRECTS} redirects "
            "(each checked against [network] allowed_domains)"
        )
        return "\n".join(lines) + "\n"

    def execute(self, args: CurlArgs, ctx: ToolContext) -> Any:
        policy = _policy(ctx)
        marked = [f"header {k!r}" for k, v in args.headers.items() if REDACTED in v]
        marked += [
            part for part, v in (("url", args.url), ("body", args.body)) if v and REDACTED in v
        ]
        if marked:
            raise errors.bad_args(
                f"the {marked[0]} holds the redaction marker {REDACTED!r}, not a credential "
                "(the journal keeps credentials redacted); nothing was sent",
                recovery=["Send the call again with the real value"],
            )
        timeout, max_bytes = _limits(args, ctx)
        secrets = sent_secrets(args)
        try:
            with _Deadline(timeout) as deadline:
                return self._run(policy, args, deadline, timeout, max_bytes, ctx, secrets)
        except ToolFailure as failure:
            # A redirect's Location can echo a credential into an error's
            # URL: errors are results, and journaled, too.
            failure.error.message = _hide_echoes(failure.error.message, secrets, False)
            failure.error.details = _hide_in(failure.error.details, secrets)
            raise

    def _run(
        self,
        policy: DomainPolicy,
        args: CurlArgs,
        deadline: _Deadline,
        timeout: float,
        max_bytes: int,
        ctx: ToolContext,
        secrets: list[str],
    ) -> Any:
        method, body = args.method, args.body
        headers = dict(args.headers)
        target = policy.check_url(args.url)
        origin = (target.scheme, target.host, target.port)
        chain: list[str] = []
        while True:
            ctx.check_cancelled()
            response = _fetch(
                policy, target, method, headers, body, max_bytes, deadline, timeout, ctx
            )
            status = response["status"]
            location = response["location"]
            if status not in REDIRECTS or not location:
                break
            chain.append(target.url)
            if len(chain) > MAX_REDIRECTS:
                raise ToolFailure(
                    ErrorType.PROCESS,
                    f"more than {MAX_REDIRECTS} redirects (the last to "
                    f"{_shown_url(urljoin(target.url, location))}); the request was given up",
                    kind=ErrorKind.EXECUTION_FAILED,
                    recovery=["Call the final URL directly, if it is on an allowed domain"],
                    code="E_HTTP",
                    failure="too-many-redirects",
                    redirects=[_shown_url(u) for u in chain],
                )
            following = urljoin(target.url, location)
            target = policy.check_url(following, redirect_from=_shown_url(chain[-1]))
            if status == 303 or (status in (301, 302) and method == "POST"):
                method = "GET" if method != "HEAD" else "HEAD"
                body = None
            if (target.scheme, target.host, target.port) != origin:
                if body is not None:
                    # 307/308 send the body again: it was meant for the first origin.
                    raise ToolFailure(
                        ErrorType.PERMISSION,
                        f"the server answered {status}, which would send the request body again "
                        f"to another origin ({_shown_url(target.url)}); the redirect was not "
                        "followed",
                        kind=ErrorKind.SANDBOX_VIOLATION,
                        recovery=[
                            "If the body is meant for that origin, call its URL directly "
                            "(it is reviewed as its own request)"
                        ],
                        code="E_HTTP",
                        failure="cross-origin-body",
                        redirects=[_shown_url(u) for u in chain],
                    )
                # Headers were written for the first origin: only content ones go on.
                headers = {k: v for k, v in headers.items() if k.lower() in _CROSS_ORIGIN_HEADERS}
        return _result(target, response, chain, max_bytes, method, secrets)


def _policy(ctx: ToolContext) -> DomainPolicy:
    policy = DomainPolicy(ctx.config.network.allowed_domains)
    if not policy.enabled:
        raise errors.denied_by_policy(
            "curl is off: the user's own config lists no [network] allowed_domains; nothing "
            "was sent",
            DenialReason.NOT_ALLOWLISTED,
            rule="sec.network.allowlist",
        )
    return policy


def _limits(args: CurlArgs, ctx: ToolContext) -> tuple[float, int]:
    cfg = ctx.config.tools.curl
    timeout = cfg.timeout_seconds
    if args.timeout_ms is not None:
        timeout = min(timeout, args.timeout_ms / 1000)
    if ctx.time_limit is not None:
        timeout = min(timeout, ctx.time_limit)
    max_bytes = min(args.max_bytes or cfg.max_bytes, cfg.max_bytes)
    return timeout, max_bytes


def _shown_url(url: str) -> str:
    return shown_url(url)


class _Deadline:
    """One deadline for a whole call: when it passes, the open socket is shut.

    A socket timeout bounds each ``recv`` alone, and ``http.client`` reads
    headers line by line and bodies in pieces, so a server sending a byte
    now and then would keep the call going.  The timer shuts the socket
    instead: whatever read is blocked ends at once, and ``expired`` tells a
    timeout from a server that closed.  The lock keeps the timer from
    shutting a descriptor after the call has closed it (and the number been
    reused).
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._done = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = "forj-curl-deadline"
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
            self._socket = None
        self._timer.cancel()
        self._timer.join()

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._socket is not None:
                _shut(self._socket)

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` when the deadline passes (at once if it has)."""
        with self._lock:
            self._socket = sock
            if self.expired:
                _shut(sock)

    def release(self) -> None:
        """Stop watching the socket: the call is about to close it."""
        with self._lock:
            self._socket = None


def _shut(sock: socket.socket) -> None:
    # socket.socket's own shutdown: an SSLSocket's would drop its TLS state
    # under a read still running in the call's thread.  An OSError means the
    # peer closed it already: nothing is blocked on it.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Pinned(http.client.HTTPConnection):
    """Plain HTTP to the checked address; the name stays in the Host header."""

    def __init__(self, target: Target, address: str, deadline: _Deadline) -> None:
        super().__init__(target.host, target.port, timeout=max(deadline.remaining(), 0.001))
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self._deadline.watch(self.sock)


class _PinnedTLS(http.client.HTTPSConnection):
    """TLS to the checked address, the certificate verified against the name."""

    def __init__(self, target: Target, address: str, deadline: _Deadline) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(
            target.host,
            target.port,
            timeout=max(deadline.remaining(), 0.001),
            context=self._tls,
        )
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self._deadline.watch(raw)
        tls = self._tls.wrap_socket(raw, server_hostname=self.host, do_handshake_on_connect=False)
        self._deadline.watch(tls)  # the raw socket's descriptor now belongs to this one
        self.sock = tls
        tls.do_handshake()


def _fetch(
    policy: DomainPolicy,
    target: Target,
    method: str,
    headers: dict[str, str],
    body: str | None,
    max_bytes: int,
    deadline: _Deadline,
    timeout: float,
    ctx: ToolContext,
) -> dict[str, Any]:
    try:
        addresses = policy.addresses(target, timeout=deadline.remaining())
    except TimeoutError:
        raise _timeout(target, timeout) from None
    payload = body.encode("utf-8") if body is not None else None
    sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
    last: OSError | None = None
    for address in addresses:
        if deadline.remaining() <= 0:
            break
        kind = _PinnedTLS if target.scheme == "https" else _Pinned
        conn = kind(target, address, deadline)
        response: http.client.HTTPResponse | None = None
        try:
            try:
                conn.request(method, target.path, body=payload, headers=sent)
                response = conn.getresponse()
                result = _read(conn, response, method, max_bytes, deadline, ctx)
            except (OSError, http.client.HTTPException):
                if deadline.expired:  # the timer shut the socket: not the server's doing
                    raise TimeoutError from None
                raise
            if deadline.expired:
                raise TimeoutError  # the timer cut the body short: not the server's end
            return result
        except TimeoutError:
            raise _timeout(target, timeout) from None
        except ssl.SSLError as exc:
            raise errors.process_error(
                f"TLS with {target.host} failed: {exc.reason or exc}; nothing was read",
                recovery=["The server's certificate does not verify; do not retry blindly"],
                code="E_HTTP",
                failure="tls",
                host=target.host,
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            last = exc if isinstance(exc, OSError) else OSError(str(exc))
            if isinstance(exc, http.client.HTTPException) or _sent(conn):
                raise _broken(target, exc) from None
        finally:
            deadline.release()
            if response is not None:
                # A response that closes the connection owns the socket now.
                response.close()
            conn.close()
    if deadline.remaining() <= 0:
        raise _timeout(target, timeout)
    raise _broken(target, last or OSError("no address to connect to"))


def _sent(conn: http.client.HTTPConnection) -> bool:
    return conn.sock is not None


def _read(
    conn: http.client.HTTPConnection,
    response: http.client.HTTPResponse,
    method: str,
    max_bytes: int,
    deadline: _Deadline,
    ctx: ToolContext,
) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    more = False
    if method != "HEAD" and response.status not in REDIRECTS:
        while True:
            ctx.check_cancelled()
            if deadline.remaining() <= 0:
                raise TimeoutError
            chunk = response.read(min(_CHUNK, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                more = True
                break
    data = b"".join(chunks)[:max_bytes]
    return {
        "status": response.status,
        "reason": response.reason,
        "headers": [(k, v) for k, v in response.getheaders()],
        "location": response.getheader("Location"),
        "body": data,
        "more": more,
        "length": response.getheader("Content-Length"),
    }


def sent_secrets(args: CurlArgs) -> list[str]:
    """Every credential the request carries, in each form a server may echo it back.

    Wherever it was sent: a header named like a credential (and the user
    and password inside ``Basic``), credential-looking text in any other
    header, the URL's ``user:password@`` and its credential-named query
    parameters, and the body's credential-named JSON members or form
    fields and credential-looking text.  Each value also counts
    percent-encoded, percent-decoded and JSON-escaped.  Longest first, so
    a value holding another is hidden whole.
    """
    found: set[str] = set()
    for name, value in args.headers.items():
        if credential_header(name):
            found.add(value)
            # Each piece too (a bearer token, a cookie's value), but not
            # the scheme's name.
            pieces = re.split(r"[\s;,=]+", value)
            found.update(p for p in pieces if p.lower() not in _AUTH_SCHEMES)
            words = value.split()
            if len(words) == 2 and words[0].lower() == "basic":
                found.update(_basic_credentials(words[1]))
        found.update(credential_values(value))
    found.update(_url_secrets(args.url))
    if args.body:
        found.update(_body_secrets(args.body))
    forms: set[str] = set()
    for value in found:
        for plain in (value, unquote_plus(value), unquote(value)):
            forms.update(
                (
                    plain,
                    quote(plain, safe=""),
                    quote_plus(plain),
                    json.dumps(plain)[1:-1],
                    json.dumps(plain, ensure_ascii=False)[1:-1],
                )
            )
    # Shorter values would blank out ordinary words of every reply.
    return sorted((f for f in forms if len(f) >= 4 and f != REDACTED), key=len, reverse=True)


_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "hoba", "mutual"})


def _basic_credentials(token: str) -> list[str]:
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return []
    password = decoded.partition(":")[2]
    return [decoded, password] if password else [decoded]


def _url_secrets(url: str) -> list[str]:
    found = [url[a:b] for a, b in credential_spans(url)]
    found += credential_values(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    for piece in (parts.query, parts.fragment):
        for name, value in parse_qsl(piece, keep_blank_values=True):
            if _credential_param(name) and value:
                found.append(value)
        for raw in piece.split("&"):
            name, _, value = raw.partition("=")
            if _credential_param(unquote_plus(name)) and value:
                found.append(value)
    return found


def _body_secrets(body: str) -> list[str]:
    found = credential_values(body)
    for start, end in _named_fields(body):
        value = body[start:end]
        # As sent, without the blanks around it, and as a server reads
        # XML's character references.
        found += [value, value.strip(), html.unescape(value.strip())]
    found += [m.group(2).strip('"') for m in _JSON_SECRET.finditer(body)]
    with contextlib.suppress(ValueError, RecursionError):  # not JSON: the other forms hold
        _json_secrets(json.loads(body), False, found)
    if "=" in body:
        for name, value in parse_qsl(body.strip(), keep_blank_values=True):
            if _credential_param(name) and value:
                found.append(value)
    return [f for f in found if f]


def _json_secrets(value: Any, secret: bool, found: list[str]) -> None:
    """The values under a credential-named member, however deep, of a parsed JSON body."""
    if isinstance(value, dict):
        for key, item in value.items():
            _json_secrets(item, secret or _credential_param(str(key)), found)
    elif isinstance(value, list):
        for item in value:
            _json_secrets(item, secret, found)
    elif secret and value is not None and not isinstance(value, bool):
        found.append(value if isinstance(value, str) else json.dumps(value))


def _json_spellings(values: list[str]) -> set[str]:
    """How each value may be written inside a JSON text (escaped or not), if long enough."""
    return {
        form
        for value in values
        for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1])
        if len(form) >= 4
    }


def _hide_echoes(text: str, secrets: list[str], cut: bool) -> str:
    """``text`` with every sent credential redacted; a cut reply loses a secret's first part too."""
    text = redact(text, secrets)
    if cut:
        for secret in secrets:
            for n in range(len(secret) - 1, 3, -1):
                if text.endswith(secret[:n]):
                    return text[:-n] + REDACTED
    return text


def _hide_in(value: Any, secrets: list[str]) -> Any:
    """``value`` (an error's details) with every sent credential redacted in its strings."""
    if isinstance(value, str):
        return _hide_echoes(value, secrets, False)
    if isinstance(value, dict):
        return {k: _hide_in(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide_in(v, secrets) for v in value]
    return value


def _hide_echoed_bytes(data: bytes, secrets: list[str], cut: bool) -> bytes:
    for secret in secrets:
        data = data.replace(secret.encode("utf-8"), REDACTED.encode())
    if cut:
        for secret in secrets:
            raw = secret.encode("utf-8")
            for n in range(len(raw) - 1, 3, -1):
                if data.endswith(raw[:n]):
                    return data[:-n] + REDACTED.encode()
    return data


def _result(
    target: Target,
    response: dict[str, Any],
    chain: list[str],
    max_bytes: int,
    method: str,
    secrets: list[str],
) -> dict[str, Any]:
    headers: dict[str, str] = {}
    for name, value in response["headers"]:
        # A server may echo a credential as a header's name too.
        hidden = _hide_echoes(name, secrets, False)
        key = name.lower() if hidden == name else hidden
        shown = (
            REDACTED
            if key in ("set-cookie", "set-cookie2")
            else sanitize(_hide_echoes(value, secrets, False))
        )
        headers[key] = headers[key] + ", " + shown if key in headers else shown
    data: bytes = response["body"]
    result: dict[str, Any] = {
        "status": response["status"],
        "url": _hide_echoes(_shown_url(target.url), secrets, False),
        "headers": headers,
        "bytes": len(data),
        "truncated": bool(response["more"]),
    }
    if chain:
        result["redirects"] = [_hide_echoes(_shown_url(u), secrets, False) for u in chain]
    if method != "HEAD":
        text = _as_text(data, headers.get("content-type", ""))
        cut = bool(response["more"])
        if text is not None:
            result["body"] = sanitize(_hide_echoes(text, secrets, cut))
        else:
            data = _hide_echoed_bytes(data, secrets, cut)
            result["body_b64"] = base64.b64encode(data).decode("ascii")
    if response["more"]:
        length = response["length"]
        total = (
            f"of {length} (Content-Length)"
            if length and length.isdigit()
            else f"of more than {max_bytes}"
        )
        result["note"] = (
            f"The body was cut at max_bytes = {max_bytes} bytes {total}; the rest was not read"
        )
    return result


def _as_text(data: bytes, content_type: str) -> str | None:
    textual = bool(_TEXT_TYPE.match(content_type.lower().strip()))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if not textual:
            return None
        # A cut can split a character: the tail decodes as replacement characters.
        text = data.decode("utf-8", "replace")
    if not textual and "\0" in text:
        return None
    return text


def _timeout(target: Target, limit: float) -> ToolFailure:
    return ToolFailure(
        ErrorType.TIMEOUT,
        f"curl: {target.host} did not answer within {limit:g} s; the request was given up",
        kind=ErrorKind.TIMEOUT,
        recovery=[
            "Try again later, or pass a larger timeout_ms within [tools.curl] timeout_seconds",
        ],
        code="E_TIMEOUT",
        host=target.host,
        timeout_s=limit,
    )


def _broken(target: Target, exc: BaseException) -> ToolFailure:
    return errors.process_error(
        f"curl: the request to {target.host}:{target.port} failed: {exc}",
        recovery=["Check that the server is up and the URL is right"],
        code="E_HTTP",
        host=target.host,
    )
