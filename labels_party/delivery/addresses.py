"""Where a tenant may have its releases delivered: a recipient's ``grpc_address``, checked before the
labels party dials it.

A tenant chooses the address, so without checks the labels party is a port scanner on its own network:
``169.254.169.254:80`` answered differently from a closed port. So an address must be ``host:port``
with a DNS name, an IPv4 address or a bracketed IPv6 address and a port in 1–65535 (no wrap-around);
link-local addresses (cloud metadata services live there) are never dialled; and an operator can
restrict recipients to a list of host names and networks (``LABELDP_RECIPIENT_HOSTS``). Checked when a
recipient registers and again before every delivery (the list may have changed since).

The rule applies to the address that is dialled, not to how it is written: a host that the system
reads as an IPv4 address in another spelling (``2852039166``, ``0xa9.0xfe.0xa9.0xfe``,
``169.254.43518``: ``inet_aton``'s forms, which the resolver accepts) is that address, and an IPv6
address that carries an IPv4 one (IPv4-mapped ``::ffff:169.254.169.254``, NAT64, 6to4, Teredo) is
checked as both. A DNS name is resolved when a delivery dials it (``dial_target``), every address it
resolves to is checked, and the delivery dials those addresses — not the name again, whose next answer
could differ (DNS rebinding) — with the name kept for TLS.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

from labeldp.common.errors import DomainError

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]{1,5})$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _refused(detail: str) -> DomainError:
    return DomainError("invalid-recipient-address", detail, status=422)


def _ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host written as one (in any of ``inet_aton``'s spellings) stands for."""
    if not re.fullmatch(r"[0-9A-Fa-fXx.]+", host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def parse(address: str) -> tuple[str, IP | None, int]:
    """(host as written, the IP address it stands for if it is a literal one, port) — or 422."""
    match = _ADDRESS.fullmatch(address)
    if match is None:
        raise _refused("grpc_address must be host:port (a DNS name, an IPv4 address or [an IPv6 address])")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise _refused("the port of grpc_address must be in 1–65535")
    if match["v6"] is not None:
        try:
            return match["v6"], ipaddress.IPv6Address(match["v6"]), port
        except ValueError as exc:
            raise _refused("grpc_address holds an invalid IPv6 address") from exc
    host = match["host"]
    ipv4 = _ipv4_spelling(host)
    if ipv4 is not None:
        return host, ipv4, port
    if not _NAME.fullmatch(host):
        raise _refused("the host of grpc_address is not a valid DNS name")
    return host, None, port


def _carried(ip: IP) -> list[IP]:
    """The address and every IPv4 address it carries (IPv4-mapped, NAT64, 6to4, Teredo)."""
    found: list[IP] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            found.append(ip.ipv4_mapped)
        if ip in _NAT64:
            found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            found.append(ip.sixtofour)
        if ip.teredo is not None:
            found.extend(ip.teredo)
    return found


def link_local(ip: IP) -> bool:
    return any(a.is_link_local for a in _carried(ip))


def allowed_hosts(setting: str | None) -> tuple[frozenset[str], tuple[Network, ...]] | None:
    """The operator's list (``None``: no list): lower-case host names, and networks (CIDR or single
    addresses)."""
    if not setting:
        return None
    names: set[str] = set()
    networks: list[Network] = []
    for item in (part.strip() for part in setting.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            names.add(item.lower())
    return frozenset(names), tuple(networks)


def check_address(address: str, setting: str | None) -> None:
    """Refuse (422 ``invalid-recipient-address`` / ``recipient-address-not-allowed``) an address the
    labels party must not dial, as far as its text tells (a name's addresses: ``dial_target``)."""
    host, ip, _ = parse(address)
    if ip is not None and link_local(ip):
        raise _refused("grpc_address may not be a link-local address")
    allowed = allowed_hosts(setting)
    if allowed is None:
        return
    names, networks = allowed
    if (ip is not None and any(a in net for a in _carried(ip) for net in networks)) or (
        ip is None and host.lower() in names
    ):
        return
    raise DomainError(
        "recipient-address-not-allowed",
        "this labels party delivers only to the hosts its operator lists (LABELDP_RECIPIENT_HOSTS)",
        status=422,
    )


@dataclass(frozen=True)
class Target:
    """What a delivery dials: a gRPC target of IP addresses, and the name TLS checks the recipient's
    certificate against (the host as registered)."""

    target: str
    host: str


class UnresolvedError(Exception):
    """The recipient's name did not resolve (told to the tenant as unreachable: no DNS detail)."""


def _target(ips: list[IP], port: int) -> str:
    if isinstance(ips[0], ipaddress.IPv4Address):
        return "ipv4:" + ",".join(f"{ip}:{port}" for ip in ips if isinstance(ip, ipaddress.IPv4Address))
    return "ipv6:" + ",".join(f"[{ip}]:{port}" for ip in ips if isinstance(ip, ipaddress.IPv6Address))


def dial_target(address: str, setting: str | None) -> Target:
    """``check_address``, then the addresses to dial: a literal one as it stands for, a name resolved
    now — every address it resolves to checked (422 when one is link-local), the addresses of the
    family it resolves to first dialled. ``UnresolvedError`` when the name does not resolve."""
    check_address(address, setting)
    host, ip, port = parse(address)
    if ip is not None:
        return Target(_target([ip], port), host)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise UnresolvedError(str(exc)) from exc
    ips: list[IP] = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in found))
    if not ips:
        raise UnresolvedError(f"{host} has no address")
    if any(link_local(a) for a in ips):
        raise _refused("grpc_address resolves to a link-local address, which is never dialled")
    return Target(_target(ips, port), host)
