"""The egress guard: the one way out to a destination a tenant chose (a model's base URL, a
webhook).

A tenant who can pick a URL could otherwise make the platform call its own neighbours: the
loopback interface, private networks, a cloud's metadata service (169.254.169.254). The guard
refuses, unless the operator allow-listed it, every address that is not public
(:func:`address_problem` lists the rules, IPv6 forms that embed an IPv4 address included), and
when it connects:

* it resolves the name **once**, judges **every** address the resolver gave (one refused
  address refuses the call), and connects to an address it judged. The name is never resolved
  again for that connection, so a resolver that answers differently the second time (DNS
  rebinding) changes nothing; TLS still verifies the certificate for the name, and the
  ``Host`` header still carries it;
* it ignores ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` and netrc (a proxy would connect by
  name), and never follows a redirect, whose target would be a destination nobody chose.

Two settings (``config.env.egress_settings``) are the operator's exceptions:
``EGRESS_ALLOWED_NETWORKS`` (CIDRs whose addresses are allowed) and ``EGRESS_ALLOWED_HOSTS``
(names, exact or ``*.suffix``, whose addresses are all allowed). Both are read at call time.

:func:`egress_client` is the HTTP client every such call goes through; a refusal raises
:class:`EgressRefused` when the connection is attempted, and :func:`egress_refusal` finds it
in whatever an HTTP library wrapped it in. :func:`destination_problem` judges a URL when it is
saved, without resolving it.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpcore2
import httpx2
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

NETWORKS_SETTING: Final = "EGRESS_ALLOWED_NETWORKS"
HOSTS_SETTING: Final = "EGRESS_ALLOWED_HOSTS"
SCHEMES: Final = ("http", "https")
# The SDKs' own pool limits; idle connections are closed after 5 s.
LIMITS: Final = httpx2.Limits(
    max_connections=1000, max_keepalive_connections=100, keepalive_expiry=5.0
)


@dataclass(frozen=True)
class Rule:
    """One kind of refused address: what it is, and what calls may not reach."""

    label: str
    reach: str


UNSPECIFIED: Final = Rule("an unspecified address", "unspecified addresses")
LOOPBACK: Final = Rule("a loopback address", "loopback addresses")
PRIVATE: Final = Rule("a private address", "private networks")
METADATA: Final = Rule("the cloud metadata address", "cloud metadata services")
LINK_LOCAL: Final = Rule("a link-local address", "link-local networks")
SHARED: Final = Rule("a shared (carrier-grade NAT) address", "shared address space")
UNIQUE_LOCAL: Final = Rule("a unique-local address", "private networks")
MULTICAST: Final = Rule("a multicast address", "multicast groups")
RESERVED: Final = Rule("a reserved address", "reserved address ranges")
NON_PUBLIC: Final = Rule("a non-public address", "non-public addresses")


def _networks(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)


# Checked in order; the first match names the rule. Whatever passes them all must still be
# public to Python's ipaddress (which knows a few more special-purpose ranges).
_RULES: Final[tuple[tuple[Rule, tuple[IPNetwork, ...]], ...]] = (
    (UNSPECIFIED, _networks("0.0.0.0/8", "::/128")),
    (LOOPBACK, _networks("127.0.0.0/8", "::1/128")),
    (PRIVATE, _networks("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    (METADATA, _networks("169.254.169.254/32", "fd00:ec2::254/128")),
    (LINK_LOCAL, _networks("169.254.0.0/16", "fe80::/10")),
    (SHARED, _networks("100.64.0.0/10")),
    (UNIQUE_LOCAL, _networks("fc00::/7")),
    (MULTICAST, _networks("224.0.0.0/4", "ff00::/8")),
    (
        RESERVED,
        _networks(
            "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24",
            "203.0.113.0/24", "240.0.0.0/4", "::/8", "100::/64", "2001:db8::/32",
            "fec0::/10",
        ),
    ),
)  # fmt: skip
# IPv6 forms that carry an IPv4 address in their low 32 bits: IPv4-compatible (::a.b.c.d)
# and the NAT64 prefixes (well-known and local-use). Mapped and 6to4 addresses are recognised
# through ipaddress; Teredo is not public to ipaddress, so it is refused as non-public.
_V4_IN_LOW_BITS: Final = _networks("::/96", "64:ff9b::/96", "64:ff9b:1::/48")


class EgressRefused(httpcore2.ConnectError):
    """A call to a tenant-chosen destination was refused before any connection was made.

    It subclasses the connection error of the HTTP stack, so libraries built on it (the model
    SDKs) report it as a connection failure; :func:`egress_refusal` finds it again.
    """

    code: Final = "egress_refused"

    def __init__(self, message: str, *, host: str, address: str) -> None:
        super().__init__(message)
        self.message = message
        self.host = host
        self.address = address


# Judging addresses ---------------------------------------------------------------------------


def address_problem(host: str, address: IPAddress) -> str | None:
    """Why ``host`` may not be reached at ``address``, or None when it may: the address (or
    the IPv4 address it embeds) is in ``EGRESS_ALLOWED_NETWORKS``, or refused by no rule.
    An IPv6 address that embeds an IPv4 address is judged by the address it embeds."""
    allowed = allowed_networks()
    embedded = _embedded_ipv4(address)
    if _in_any(address, allowed) or (embedded is not None and _in_any(embedded, allowed)):
        return None
    rule = _rule_of(address if embedded is None else embedded)
    return None if rule is None else _refusal(host, address, rule, via=embedded)


def _rule_of(address: IPAddress) -> Rule | None:
    for rule, networks in _RULES:
        if _in_any(address, networks):
            return rule
    return None if address.is_global else NON_PUBLIC


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, IPv4-compatible, 6to4 or NAT64 address carries."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if _in_any(address, _V4_IN_LOW_BITS) and int(address) & 0xFFFFFFFF > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None  # :: and ::1 are judged as themselves


def _in_any(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def _refusal(
    host: str, address: IPAddress, rule: Rule, *, via: ipaddress.IPv4Address | None
) -> str:
    carries = "" if via is None else f" which embeds {via},"
    if _literal(host) == address:
        subject = f"{host} is" if via is None else f"{host} embeds {via},"
    else:
        subject = f"{host} resolves to {address},{carries}"
    return (
        f"{subject} {rule.label}: outbound calls to tenant-chosen URLs may not reach "
        f"{rule.reach} (allow it with {NETWORKS_SETTING})"
    )


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def allowed_networks() -> tuple[IPNetwork, ...]:
    return _parsed_networks(tuple(settings.EGRESS_ALLOWED_NETWORKS))


@functools.lru_cache(maxsize=8)
def _parsed_networks(cidrs: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def host_allowed(host: str) -> bool:
    """Whether ``host`` is in ``EGRESS_ALLOWED_HOSTS`` (``*.suffix`` matches names below it)."""
    name = host.lower().rstrip(".")
    for pattern in settings.EGRESS_ALLOWED_HOSTS:
        pattern = pattern.lower().rstrip(".")
        if name == pattern or (pattern.startswith("*.") and name.endswith(pattern[1:])):
            return True
    return False


# Definition time -----------------------------------------------------------------------------


def destination_problem(url: str) -> str | None:
    """Why ``url`` can never be a tenant's destination, judged without resolving it: the
    scheme is not http or https, there is no host, the host is an IP address a rule refuses
    and no setting allows, or it is ``localhost`` or a name below it. None when it may be
    saved (the guard still judges the addresses it resolves to at call time)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        return f"the URL is malformed: {error}"
    if parts.scheme not in SCHEMES:
        return f"the URL must use http or https, not {parts.scheme or 'no scheme'}"
    if not hostname:
        return "the URL has no host"
    if host_allowed(hostname):
        return None
    address = _literal(hostname)
    if address is None:
        return _localhost_problem(hostname)
    return address_problem(hostname, address)


def _localhost_problem(hostname: str) -> str | None:
    name = hostname.lower().rstrip(".")
    if name != "localhost" and not name.endswith(".localhost"):
        return None
    if address_problem(name, ipaddress.IPv4Address("127.0.0.1")) is None:
        return None  # the operator allows loopback addresses
    return (
        f"{hostname} is a loopback name: outbound calls to tenant-chosen URLs may not reach "
        f"{LOOPBACK.reach} (allow it with {HOSTS_SETTING} or {NETWORKS_SETTING})"
    )


# Connecting ----------------------------------------------------------------------------------


def resolve_checked(host: str, port: int) -> list[str]:
    """The addresses to connect to for ``host``: resolved once, each judged.

    Raises :class:`EgressRefused` when any address is refused and ``host`` is not
    allow-listed, and ``httpcore2.ConnectError`` when the name does not resolve.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise httpcore2.ConnectError(f"{host} does not resolve: {error}") from error
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise httpcore2.ConnectError(f"{host} does not resolve to any address")
    if host_allowed(host):
        return addresses
    for text in addresses:
        problem = address_problem(host, ipaddress.ip_address(text))
        if problem is not None:
            raise EgressRefused(problem, host=host, address=text)
    return addresses


class GuardedBackend(httpcore2.SyncBackend):
    """Connects to the addresses :func:`resolve_checked` judged, never to the name itself
    (TLS is started by the connection with the name as ``server_hostname``)."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        failure: Exception | None = None
        for address in resolve_checked(host, port):
            try:
                return super().connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options,
                )  # fmt: skip
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as error:
                failure = error
        assert failure is not None  # resolve_checked returns at least one address
        raise failure


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # The certificate store may still come from SSL_CERT_FILE / SSL_CERT_DIR.
    return httpx2.create_ssl_context()


def egress_client(*, timeout: float | httpx2.Timeout, trusted: bool = False) -> httpx2.Client:
    """An HTTP client for a tenant-chosen destination: every connection is judged and pinned
    (see the module doc), no proxy from the environment, no redirect followed.

    ``trusted`` is for a destination the operator chose (a platform credential's endpoint):
    the same client without the address rules.
    """
    pool = httpcore2.ConnectionPool(
        ssl_context=_ssl_context(),
        max_connections=LIMITS.max_connections,
        max_keepalive_connections=LIMITS.max_keepalive_connections,
        keepalive_expiry=LIMITS.keepalive_expiry,
        network_backend=httpcore2.SyncBackend() if trusted else GuardedBackend(),
    )
    return httpx2.Client(
        transport=_PooledTransport(pool), timeout=timeout, trust_env=False,
        follow_redirects=False, limits=LIMITS,
    )  # fmt: skip


class _PooledTransport(httpx2.HTTPTransport):
    """httpx2's transport over a connection pool built here (it cannot be given one)."""

    def __init__(self, pool: httpcore2.ConnectionPool) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False)
        self._pool.close()
        self._pool = pool


def egress_refusal(error: BaseException) -> EgressRefused | None:
    """The :class:`EgressRefused` behind ``error`` (itself, or a cause or context of it)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, EgressRefused):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
