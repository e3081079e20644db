"""Where ``web_fetch`` may connect: the job's ``web:`` policy, checked on resolved addresses.

``check_url`` is called for the URL the model asked for and again for every redirect hop. It
applies the domain lists (suffix match: ``example.com`` also covers ``api.example.com``), then
resolves the host once and refuses it when any address it resolves to is loopback, private
(RFC 1918, ``fc00::/7``), link-local (``169.254/16``, ``fe80::/10``), unspecified, multicast or
otherwise not globally routable, unless the job sets ``web: {allow_private: true}``. Cloud
metadata is refused whatever the job says: a known metadata host name, a metadata address, or
any of ``169.254/16`` (where every cloud's metadata and credential endpoints live), also inside an
IPv6 address (``::ffff:169.254.169.254``, NAT64, 6to4). ``allow_private`` opens the operator's own
networks, not the machine's credentials. The caller connects to the address returned in the
``Target`` (pinned), so a second DNS answer cannot move the request to an address that was never
checked.
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
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.170.23",  # AWS EKS pod identity
        "169.254.169.253",
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
    )
)
METADATA_NETWORK = ipaddress.ip_network("169.254.0.0/16")  # IPv4 link-local: every cloud's metadata lives here


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


def metadata_problem(address: IPAddress) -> str | None:
    """Why ``address`` is cloud metadata (refused even with ``allow_private``), or None."""
    return _judged(address, _metadata_only)


def _metadata_only(address: IPAddress) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv4Address) and address in METADATA_NETWORK:
        return "a link-local address, where cloud metadata lives"
    return None


def address_problem(address: IPAddress) -> str | None:
    """Why ``address`` is not a public internet address, or None when it is."""
    return _judged(address, _public_only)


def _judged(address: IPAddress, judge: Callable[[IPAddress], str | None]) -> str | None:
    """``judge`` of ``address`` and of any IPv4 address inside it (IPv4-mapped, 6to4, Teredo, NAT64)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d
            return judge(address.ipv4_mapped)
        for embedded in _embedded_v4(address):  # 6to4, Teredo, NAT64 reach the v4 address inside
            problem = judge(embedded)
            if problem:
                return f"{problem} (embedded in {address})"
    return judge(address)


def _public_only(address: IPAddress) -> str | None:
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
    if host in METADATA_HOSTS:
        raise Blocked(f"{host} is a cloud metadata host (refused even with web.allow_private)")
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
    for address in parsed:
        _check_address(host, address, policy)
    return Target(url=url, scheme=scheme, host=host, port=port, address=str(parsed[0]))


def _check_address(host: str, address: IPAddress, policy: WebPolicy) -> None:
    metadata = metadata_problem(address)
    if metadata:
        raise Blocked(f"{host} resolves to {address}, {metadata} (refused even with web.allow_private)")
    problem = None if policy.allow_private else address_problem(address)
    if problem:
        raise Blocked(f"{host} resolves to {address}, {problem} (set web: {{allow_private: true}} to allow)")
