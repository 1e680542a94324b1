"""Where ``curl`` may connect: the user's ``[network] allowed_domains`` and the address rules.

An entry is ``host`` (that name only), ``*.host`` (its subdomains, not the
name itself), either with ``:port`` or ``:*``; without a port only the
scheme's default port (80 for http, 443 for https) is allowed.  An IP
address is an entry for that address only (``127.0.0.1:8000``,
``[::1]:8080``).

DNS rebinding: the worker resolves the name itself, checks every address,
and connects to one of *those* addresses (the name is never resolved a
second time), so an answer that changes between check and connect cannot
redirect the request.  The address rules:

- a name the user listed exactly may resolve anywhere, loopback and
  private networks included (``localhost:8000`` is meant);
- a name matched only through a ``*.`` wildcard must resolve to public
  addresses only: a subdomain is often someone else's to point, at
  ``127.0.0.1`` or the cloud metadata address as easily as anywhere.  An
  IPv6 address that carries an IPv4 one (IPv4-mapped, 6to4, Teredo, the
  NAT64 prefixes) is judged by the IPv4 address it carries, since a
  gateway on the way may deliver it there;
- an IP literal in a URL matches only an entry naming that very address,
  never a wildcard.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from .. import errors
from ..errors import ToolFailure
from ..protocol import DenialReason, ErrorKind, ErrorType

DEFAULT_PORTS = {"http": 80, "https": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class DomainEntry:
    text: str
    host: str  # lowercased; an IP address in its compressed form
    wildcard: bool
    port: int | None  # None: the scheme's default port
    any_port: bool
    ip: IPAddress | None


@dataclass(frozen=True)
class Target:
    """One URL the policy accepted: where to connect, and why that is allowed."""

    url: str
    scheme: str
    host: str  # as sent in the Host header and for TLS (IDNA, lowercased)
    port: int
    path: str  # path and query, as sent in the request line
    entry: DomainEntry


def parse_entry(text: str) -> DomainEntry:
    host, port_text = text, None
    if text.startswith("[") or text.startswith("*.["):
        close = text.index("]")
        host, rest = text[: close + 1], text[close + 1 :]
        port_text = rest[1:] if rest.startswith(":") else None
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    host = host.strip("[]").lower().rstrip(".")
    ip = _ip(host)
    if ip is not None:
        host = str(ip)
    return DomainEntry(
        text=text,
        host=host,
        wildcard=wildcard and ip is None,
        port=int(port_text) if port_text not in (None, "*") else None,
        any_port=port_text == "*",
        ip=ip,
    )


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class DomainPolicy:
    """The parsed ``[network] allowed_domains``."""

    def __init__(
        self, entries: list[str], resolve: Callable[[str, int], list[str]] | None = None
    ) -> None:
        self.entries = [parse_entry(e) for e in entries]
        self._resolve = resolve or _resolve

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    def check_url(self, url: str, *, redirect_from: str | None = None) -> Target:
        """The target of ``url`` if the list allows it; a refusal that says why otherwise."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise errors.bad_args(
                f"{url!r} is not a valid URL ({exc})",
                recovery=["Give an absolute http:// or https:// URL"],
            ) from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise self._refusal(
                f"curl speaks http and https only, not {scheme or 'a URL without a scheme'!r}"
                + _after(redirect_from),
                url,
                ["Give an absolute http:// or https:// URL; files are read with read_file"],
            )
        if not parts.hostname:
            raise errors.bad_args(
                f"{url!r} names no host", recovery=["Give an absolute URL: https://host/path"]
            )
        if parts.username is not None or parts.password is not None:
            raise errors.bad_args(
                "credentials in the URL (user:password@) are not accepted; nothing was sent",
                recovery=["Pass credentials in headers (Authorization), which are redacted"],
            )
        host = _normal_host(parts.hostname)
        port = port if port is not None else DEFAULT_PORTS[scheme]
        entry = self.match(host, port, scheme)
        if entry is None:
            listed = ", ".join(e.text for e in self.entries) or "nothing"
            raise self._refusal(
                f"{host}:{port} is not in the user's [network] allowed_domains ({listed})"
                + _after(redirect_from)
                + "; nothing was sent there",
                url,
                [
                    "Use one of the allowed domains",
                    "Or ask the user to add the domain to [network] allowed_domains in their "
                    "own config file (a project's file cannot)",
                ],
                host=host,
                port=port,
            )
        return Target(url, scheme, host, port, _request_path(parts), entry)

    def match(self, host: str, port: int, scheme: str) -> DomainEntry | None:
        ip = _ip(host)
        for entry in self.entries:
            if not (entry.any_port or port == (entry.port or DEFAULT_PORTS[scheme])):
                continue
            if ip is not None or entry.ip is not None:
                if ip is not None and entry.ip is not None and ip == entry.ip:
                    return entry
                continue
            if entry.wildcard:
                if host.endswith("." + entry.host):
                    return entry
            elif host == entry.host:
                return entry
        return None

    def addresses(self, target: Target, timeout: float | None = None) -> list[str]:
        """The addresses to connect to, every one of them checked; resolved once, here.

        ``timeout`` bounds the lookup: past it the call gets ``TimeoutError``
        (the resolver's own thread ends when the system resolver gives up).
        """
        literal = _ip(target.host)
        if literal is not None:
            return [str(literal)]
        try:
            found = _within(timeout, self._resolve, target.host, target.port)
        except TimeoutError:
            raise
        except OSError as exc:
            raise errors.process_error(
                f"{target.host} could not be resolved ({exc.strerror or exc}); nothing was sent",
                recovery=["Check the host name; the machine may be offline"],
                code="E_HTTP",
                failure="dns",
                host=target.host,
            ) from None
        if target.entry.wildcard:
            inner = [a for a in found if not public(ipaddress.ip_address(a.split("%")[0]))]
            if inner:
                raise self._refusal(
                    f"{target.host} resolves to {', '.join(inner)}, a non-public address, and "
                    f"is allowed only through the wildcard {target.entry.text!r}; a wildcard "
                    "never reaches loopback or private networks; nothing was sent",
                    target.url,
                    [
                        "Ask the user to list this exact host name in [network] "
                        "allowed_domains if they mean it to reach that address"
                    ],
                    host=target.host,
                    addresses=inner,
                )
        return found

    @staticmethod
    def _refusal(message: str, url: str, recovery: list[str], **details: object) -> ToolFailure:
        return ToolFailure(
            ErrorType.PERMISSION,
            message,
            kind=ErrorKind.SANDBOX_VIOLATION,
            recovery=recovery,
            reason=DenialReason.NOT_ALLOWLISTED.value,
            rule="sec.network.allowlist",
            url=url,
            **details,
        )


# NAT64: the well-known prefix (RFC 6052) and the local-use one (RFC 8215).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # (server, client): the client is where it lands
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def public(address: IPAddress) -> bool:
    """Whether ``address`` is a public one, judged by any IPv4 address it carries too."""
    inner = embedded_ipv4(address)
    if inner is not None and not inner.is_global:
        return False
    return address.is_global


def _within(
    timeout: float | None, resolve: Callable[[str, int], list[str]], host: str, port: int
) -> list[str]:
    """``resolve(host, port)``, given up (``TimeoutError``) after ``timeout`` seconds.

    ``getaddrinfo`` takes no timeout, so it runs in a thread of its own that
    is left to finish by itself; the call does not wait for it.
    """
    if timeout is None:
        return resolve(host, port)
    if timeout <= 0:
        raise TimeoutError
    box: list[list[str] | BaseException] = []

    def run() -> None:
        try:
            box.append(resolve(host, port))
        except BaseException as exc:  # handed to the caller, not lost in the thread
            box.append(exc)

    thread = threading.Thread(target=run, name="forj-dns", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        raise TimeoutError
    found = box[0]
    if isinstance(found, BaseException):
        raise found
    return found


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _after(redirect_from: str | None) -> str:
    return f" (a redirect from {redirect_from})" if redirect_from else ""


def _normal_host(host: str) -> str:
    host = host.lower().rstrip(".")
    ip = _ip(host)
    if ip is not None:
        return str(ip)
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        raise errors.bad_args(
            f"the host {host!r} is not a valid domain name",
            recovery=["Give the host name in plain ASCII or valid IDNA"],
        ) from None


def _request_path(parts: SplitResult) -> str:
    path = parts.path or "/"
    return path + ("?" + parts.query if parts.query else "")


def host_of(url: str) -> str:
    """The URL's host for rules and summaries ("" when there is none)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    try:
        return _normal_host(host) if host else ""
    except ToolFailure:
        return host
