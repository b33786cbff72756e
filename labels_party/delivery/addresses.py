"""Where a tenant may have its releases delivered: a recipient's ``grpc_address``, checked before the
labels party dials it.

A tenant chooses the address, so without checks the labels party is a port scanner on its own network:
``169.254.169.254:80`` answered differently from a closed port. So an address must be ``host:port``
with a DNS name, an IPv4 address or a bracketed IPv6 address and a port in 1–65535 (no wrap-around);
link-local addresses (cloud metadata services live there) are never dialled; and an operator can
restrict recipients to a list of host names and networks (``LABELDP_RECIPIENT_HOSTS``). Checked when a
recipient registers and again before every delivery (the list may have changed since).
"""

from __future__ import annotations

import ipaddress
import re

from labeldp.common.errors import DomainError

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]{1,5})$")
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _refused(detail: str) -> DomainError:
    return DomainError("invalid-recipient-address", detail, status=422)


def parse(address: str) -> tuple[str, IP | None, int]:
    """(host as written, its IP address if it is a literal one, port) — or 422."""
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
    try:
        return host, ipaddress.IPv4Address(host), port
    except ValueError:
        pass
    if not _NAME.fullmatch(host):
        raise _refused("the host of grpc_address is not a valid DNS name")
    return host, None, port


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
    labels party must not dial."""
    host, ip, _ = parse(address)
    if ip is not None and ip.is_link_local:
        raise _refused("grpc_address may not be a link-local address")
    allowed = allowed_hosts(setting)
    if allowed is None:
        return
    names, networks = allowed
    if (ip is not None and any(ip in net for net in networks)) or (ip is None and host.lower() in names):
        return
    raise DomainError(
        "recipient-address-not-allowed",
        "this labels party delivers only to the hosts its operator lists (LABELDP_RECIPIENT_HOSTS)",
        status=422,
    )
