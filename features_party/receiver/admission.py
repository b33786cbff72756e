"""Who may hold how many of the receiver's streams, and for how long, so that no sender — nor anyone
holding a client certificate — can stop another's deliveries.

A stream costs the receiver nothing while it waits (the server reads frames without a thread per
stream: ``server.py``), so what is bounded is how many a party may keep open:

- **before its header is verified**, a stream belongs to no one but its peer — the client certificate
  it presented and the address it comes from (``peer_of``). A peer holds at most
  ``streams_per_peer`` such streams, and each must deliver its signed header within the header
  deadline (``server.py``). 32 streams that sent nothing, a client certificate enough, used to hold
  every worker of the receiver for 60 s, renewable at once: every delivery to every tenant failed.
- **once its header is verified**, a stream belongs to the tenant it is for (a signature by a key that
  tenant pinned, ``recipient_tenant``): a tenant holds at most ``streams_per_tenant``, each cut when it
  sends nothing for the idle deadline — a tenant's own sender cannot take what other tenants' need.

A refused stream answers RESOURCE_EXHAUSTED at once, with ``grpc-retry-pushback-ms`` in its trailing
metadata: the limit is the caller's own, and frees itself as its other streams end. All counting
happens on the server's event loop (one thread), so it needs no lock.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from labeldp.common.wire.format import WireError

RETRY_AFTER_MS = 1000


class BusyError(WireError):
    """A stream refused by a limit of its peer or tenant (RESOURCE_EXHAUSTED, retry later)."""

    retry_after_ms = RETRY_AFTER_MS

    def __init__(self, message: str) -> None:
        super().__init__("resource_exhausted", message)


def peer_of(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who a stream comes from before anything it sent is verified: the client certificate it
    presented (its SHA-256; certificates are the identities the party's CA hands out) and its address
    (without the port: every connection has its own)."""
    certificate = context.auth_context().get("x509_pem_cert") or [b""]
    address = context.peer().rsplit(":", 1)[0]
    digest = hashlib.sha256(certificate[0]).hexdigest()[:16] if certificate[0] else "no-certificate"
    return f"{digest}@{address}"


class Admission:
    """Counts of open streams per peer (header not yet verified) and per tenant (verified)."""

    def __init__(self, streams_per_peer: int, streams_per_tenant: int) -> None:
        self.streams_per_peer, self.streams_per_tenant = streams_per_peer, streams_per_tenant
        self.unverified: Counter[str] = Counter()
        self.verified: Counter[str] = Counter()

    @contextmanager
    def before_header(self, peer: str) -> Iterator[None]:
        if self.unverified[peer] >= self.streams_per_peer:
            raise BusyError(
                f"this peer already has {self.streams_per_peer} streams whose header is not verified yet; "
                "retry when one has ended"
            )
        with _held(self.unverified, peer):
            yield

    @contextmanager
    def of_tenant(self, tenant: str | None) -> Iterator[None]:
        key = tenant or ""  # messages that name no tenant: filed for every tenant, one shared count
        if self.verified[key] >= self.streams_per_tenant:
            raise BusyError(
                f"the tenant this release is for already receives {self.streams_per_tenant} releases at "
                "once; retry when one has ended"
            )
        with _held(self.verified, key):
            yield


@contextmanager
def _held(counts: Counter[str], key: str) -> Iterator[None]:
    counts[key] += 1
    try:
        yield
    finally:
        counts[key] -= 1
        if counts[key] <= 0:
            del counts[key]
