"""What an Idempotency-Key is held to: the request it was first used with, **resolved**.

A charged request is compared with its key's first request as the service understood it — every
default the request and the dataset's declaration fix applied (a loss left out is the label type's
default loss) — so a retry that leaves out a defaulted field is a replay, not a reused key. When the
two really differ, the answer names the fields that differ (names only, never values). A long list
of IDs is kept as its digest, so a stored request stays small.

Jobs made before requests were resolved keep only the digest of the request as sent (``legacy``):
their retries still replay when they send the same body, and a differing one is refused without
names, which those rows cannot give. Jobs made under the previous resolution (version 2: a release's
objective left out was stored as the loss's default, before that default came to depend on ε₂) are
matched by that resolution's digest (``previous``); a new job's digest carries the new version, so it
never equals an old resolution's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from labeldp.common.errors import DomainError

VERSION = 3  # of the digest: a resolved request never hashes like a request as sent, nor like version 2
PREVIOUS_VERSION = 2


def digest_of(values: object) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """A charged request as resolved (JSON values, by the API's field names) and, for rows made
    before, the digest of the request as sent."""

    fields: dict[str, Any]
    legacy: str | None = None
    previous: dict[str, Any] | None = None  # the request as version 2 resolved it (None: as ``fields``)

    @property
    def digest(self) -> str:
        return digest_of({"v": VERSION, **self.fields})

    def matches(self, request_hash: str) -> bool:
        previous = previous_digest(self.fields if self.previous is None else self.previous)
        return request_hash in (self.digest, self.legacy, previous)

    def differing(self, stored: dict[str, Any] | None) -> list[str]:
        """The fields whose resolved values differ from ``stored`` (none known: []), under the
        resolution the stored row was made with — the one that differs in fewer fields (a row of
        version 2 holds an omitted objective as its loss's default)."""
        if stored is None:
            return []
        candidates = [self.fields] if self.previous is None else [self.fields, self.previous]
        return min(
            (sorted(k for k in f.keys() | stored.keys() if f.get(k) != stored.get(k)) for f in candidates),
            key=len,
        )

    def refuse(self, stored: dict[str, Any] | None) -> DomainError:
        """422 ``idempotency-key-reused``, naming the fields that differ when they are known."""
        fields = self.differing(stored)
        named = f" (it differed in {', '.join(fields)})" if fields else ""
        return DomainError(
            "idempotency-key-reused",
            f"this Idempotency-Key was used for a different request{named}; nothing was charged for this one",
            fields=fields,
        )


def previous_digest(fields: dict[str, Any]) -> str:
    """A request's digest as version 2 resolved it (``fields``: that resolution)."""
    return digest_of({"v": PREVIOUS_VERSION, **fields})


def ids_digest(example_ids: list[str] | None) -> str | None:
    """A list of IDs as it is kept in a stored request: its digest (order kept: the list as sent)."""
    return None if example_ids is None else digest_of(example_ids)
