"""Where servers registered over the HTTP API may be: the address policy against SSRF.

Pure: looking a host name up is I/O, so whoever needs a lookup passes the resolver in
(`monitor.collect.client.http` has the blocking and the async one).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

Resolver = Callable[[str, int], Sequence[IPAddress]]
"""The addresses a host name resolves to, for a port (blocking); raises OSError when it does not resolve."""

REFUSED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(network)
    for network in (
        "169.254.0.0/16",  # IPv4 link-local, with the cloud metadata address 169.254.169.254
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::254/128",  # AWS instance metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud instance metadata
        "0.0.0.0/8",  # "this host": connecting to it reaches the monitor's own machine
        "::/128",
        "224.0.0.0/4",  # multicast
        "ff00::/8",
        "240.0.0.0/4",  # reserved, and the broadcast address
    )
)
"""Addresses a server registered over the API may never be at, unless `allowed_server_hosts` names
their network (a CIDR entry): no MCP server lives there, and cloud credentials do."""

REFUSED_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata", "instance-data"})
"""Cloud metadata host names, refused at registration before any DNS lookup."""

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_DOTTED_QUAD = re.compile(
    r"^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$"
)


def _embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address inside an IPv4-mapped, 6to4 or NAT64 IPv6 address; else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _within(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    """Whether the address, or the IPv4 address inside it, is in one of the networks."""
    candidates = {address, _embedded_ipv4(address)}
    return any(a.version == n.version and a in n for a in candidates for n in networks)


def host_literal(host: str) -> IPAddress | None:
    """The address a URL host names literally, in any form the resolver accepts (`2852039166`,
    `0xa9fea9fe`, `0251.0376.0251.0376` are all 169.254.169.254); None for a host name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_host_entry(entry: str) -> str:
    """One `allowed_server_hosts` entry, normalised: a CIDR or address, a host name, or `*.domain`."""
    value = entry.strip().lower().rstrip(".")
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        pass
    if not _HOST_NAME.match(value):
        raise ValueError(
            f"{entry!r} is not a host name, a *.domain wildcard, an IP address or a CIDR network"
        )
    return value


@dataclass(frozen=True)
class HostPolicy:
    """Where servers registered over the HTTP API may be (`[monitor] allowed_server_hosts`).

    With no entries (the default), any host except the `REFUSED_NETWORKS` (link-local, cloud
    metadata, "this host", multicast, reserved). With entries, the host must be one of the names,
    under a `*.domain` wildcard, or (it, or every address it resolves to) inside a listed network;
    a name entry never unlocks a refused network, only a network entry does. Config-file servers
    are trusted and not checked. Checked at registration and again, address by address, at every
    connect (see `monitor.collect.client.http`), so a name that later resolves elsewhere is still refused.
    """

    entries: tuple[str, ...] = ()

    @cached_property
    def networks(self) -> tuple[IPNetwork, ...]:
        found = []
        for entry in self.entries:
            try:
                found.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                continue
        return tuple(found)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(e for e in self.entries if _HOST_NAME.match(e))

    def name_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host.endswith(name[1:]) if name.startswith("*.") else host == name for name in self.names)

    def address_refusal(self, host: str, address: IPAddress) -> str | None:
        """Why `host` may not be reached at `address`, or None when it may."""
        if _within(address, self.networks):
            return None
        where = str(address) if host.strip("[]") == str(address) else f"{host} ({address})"
        if _within(address, REFUSED_NETWORKS):
            return (
                f"{where} is a link-local, cloud metadata or reserved address, which servers registered "
                "over the API may not use (allowed_server_hosts can allow its network)"
            )
        if not self.entries or self.name_allowed(host):
            return None
        return f"{where} is not in allowed_server_hosts"

    def url_refusal(self, url: str, resolve: Resolver | None = None) -> str | None:
        """Why a server at `url` may not be registered over the API, or None when it may.

        A host name is looked up, with `resolve`, only when the allow-list has networks but does
        not name it; without a resolver, such a name is refused (it cannot be checked).
        """
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
        literal = host_literal(host)
        if literal is not None:
            if literal.version == 4 and not _DOTTED_QUAD.match(host):
                return f"{host} means {literal}: write IPv4 addresses as four decimal numbers"
            return self.address_refusal(host, literal)
        if host in REFUSED_NAMES:
            return f"{host} is a cloud metadata host name, which servers registered over the API may not use"
        if not self.entries or self.name_allowed(host):
            return None
        if not self.networks or resolve is None:
            return f"{host} is not in allowed_server_hosts"
        try:
            addresses = resolve(host, urlsplit(url).port or 443)
        except OSError:
            return f"{host} does not resolve, so it cannot be checked against allowed_server_hosts"
        for address in addresses:
            problem = self.address_refusal(host, address)
            if problem is not None:
                return problem
        return None
