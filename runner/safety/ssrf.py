"""Where ``web_fetch`` may connect: the job's ``web:`` policy, checked on resolved addresses.

``check_url`` is called for the URL the model asked for and again for every redirect hop. It
applies the domain lists (suffix match: ``example.com`` also covers ``api.example.com``), then
resolves the host once and refuses it when any address it resolves to is loopback, private
(RFC 1918, ``fc00::/7``), link-local (``169.254/16`` with the cloud metadata address,
``fe80::/10``), unspecified, multicast or otherwise not globally routable, or when the name is a
known metadata host, unless the job sets ``web: {allow_private: true}``. The caller connects to
the address returned in the ``Target`` (pinned), so a second DNS answer cannot move the request
to an address that was never checked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]  # (host, port) -> IP address strings

METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.platformequinix.com",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.169.253", "fd00:ec2::254", "100.100.100.200")
)


class Blocked(Exception):
    """The policy refuses this URL; the message says why (it is shown to the model)."""


@dataclass(frozen=True)
class WebPolicy:
    """A job's ``web:`` key, frozen for the run."""

    allow_private: bool = False
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """One checked hop: the URL, its host and port, and the address to connect to."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6), in the resolver's order, once each."""
    import socket  # with the first fetch: a run that fetches nothing does not load it

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Blocked(f"cannot resolve {host}: {exc}") from None
    out: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        if address not in out:
            out.append(address)
    return out


def domain_match(host: str, domains: Sequence[str]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one (``.example.com`` and ``example.com`` alike)."""
    for domain in domains:
        d = domain.strip().lower().strip(".")
        if d and (host == d or host.endswith("." + d)):
            return True
    return False


def address_problem(address: IPAddress) -> str | None:
    """Why ``address`` is not a public internet address, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d
            return address_problem(address.ipv4_mapped)
        for embedded in _embedded_v4(address):  # 6to4, Teredo, NAT64 reach the v4 address inside
            problem = address_problem(embedded)
            if problem:
                return f"{problem} (embedded in {address})"
    checks = (
        (address in METADATA_ADDRESSES, "a cloud metadata address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_private, "a private address"),
        (not address.is_global, "a reserved (not globally routable) address"),
    )
    for hit, what in checks:
        if hit:
            return what
    return None


NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_v4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    out = [a for a in (address.sixtofour, address.teredo[1] if address.teredo else None) if a is not None]
    if address in NAT64:
        out.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return out


def _host_and_port(url: str) -> tuple[str, str, int]:
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise Blocked(f"URL {url!r} holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Blocked(f"invalid URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Blocked(f"only http:// and https:// URLs are fetched (got {scheme or 'no scheme'}://)")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Blocked(f"URL {url!r} has no host")
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise Blocked(f"URL {url!r}: invalid host name") from None
    return scheme, host, port or (443 if scheme == "https" else 80)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_url(url: str, policy: WebPolicy, resolver: Resolver = system_resolver) -> Target:
    """The checked target for ``url``; Blocked when the policy refuses it."""
    scheme, host, port = _host_and_port(url)
    if domain_match(host, policy.deny_domains):
        raise Blocked(f"{host} is on the job's web.deny_domains list")
    if policy.allow_domains and not domain_match(host, policy.allow_domains):
        raise Blocked(f"{host} is not on the job's web.allow_domains list")
    if not policy.allow_private and host in METADATA_HOSTS:
        raise Blocked(f"{host} is a cloud metadata host")
    literal = _literal(host)
    addresses = [host] if literal is not None else list(resolver(host, port))
    if not addresses:
        raise Blocked(f"cannot resolve {host}")
    parsed = []
    for text in addresses:
        address = _literal(text)
        if address is None:
            raise Blocked(f"{host} resolved to {text!r}, which is not an IP address")
        parsed.append(address)
    if not policy.allow_private:
        for address in parsed:
            problem = address_problem(address)
            if problem:
                raise Blocked(f"{host} resolves to {address}, {problem} (set web: {{allow_private: true}} to allow)")
    return Target(url=url, scheme=scheme, host=host, port=port, address=str(parsed[0]))
