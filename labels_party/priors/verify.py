"""What a features party's signed priors must state before anything is stored. The signature and the key
were checked first (``labeldp.common.wire.pricing.open_priors``); a pinned features party may still be
wrong or hostile, so every field is held to what this party asked:

* the answer echoes this request's id (an answer to an earlier request — a replay — is refused), is
  addressed to this party and the tenant asked, comes from the recipient asked, and has not expired;
* its support is exactly the dataset's, and it states the request's example and chunk counts;
* it has 1 ≤ G ≤ max_groups group priors, G × k ≤ ``MAX_GROUP_CELLS``, each k masses, finite, ≥ 0,
  ≤ 1e300 and not all zero (``labeldp.priors.check_group_priors``, which also normalizes them).

A hostile prior can cost a release accuracy, never privacy: RR-on-Bins is ε-DP for every prior.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.common.wire.format import WireError
from labeldp.common.wire.pricing import PRICING_FORMAT_VERSION
from labeldp.mechanisms import ParameterError
from labeldp.priors import MAX_GROUP_CELLS, check_group_priors
from labeldp.v1 import priors_pb2 as ppb

MAX_RULE_CHARS = 1000


@dataclass(frozen=True)
class Expected:
    """What this party asked for, to hold the answer to."""

    request_id: str
    party_id: str  # this labels party (the answer's recipient_id)
    features_party: str  # the recipient asked (the answer's sender_id)
    recipient_tenant: str
    support: tuple[float, ...]
    max_groups: int
    examples: int
    chunks: int


def _refuse(reason: str) -> WireError:
    return WireError("invalid_argument", reason)


def check_header(header: ppb.PriorsHeader, expected: Expected, now_unix_ms: int) -> npt.NDArray[np.float64]:
    """The header's group priors, normalized (G × k), once every field is what was asked for."""
    if header.format_version != PRICING_FORMAT_VERSION:
        raise _refuse(f"unsupported format version {header.format_version}")
    if header.request_id != expected.request_id:
        raise _refuse("the answer is for another request (a replayed or misdirected answer)")
    if header.recipient_id != expected.party_id or header.recipient_tenant != expected.recipient_tenant:
        raise _refuse("the answer is addressed to another party or tenant")
    if header.sender_id != expected.features_party:
        raise _refuse(f"the answer comes from {header.sender_id!r}, not the recipient asked")
    if header.expires_at_unix_ms <= now_unix_ms:
        raise _refuse("the answer has expired")
    if not is_uuid(header.priors_id) or not is_clean_text(header.model_id, 200):
        raise _refuse("the answer's priors_id must be a UUID and its model_id plain text")
    if not is_clean_text(header.rule, MAX_RULE_CHARS):
        raise _refuse(f"the answer's rule must be 1 to {MAX_RULE_CHARS} characters of plain text")
    if tuple(header.support) != expected.support:
        raise _refuse("the answer's support is not the dataset's")
    if (header.example_count, header.chunk_count) != (expected.examples, expected.chunks):
        raise _refuse("the answer's counts are not the request's")
    k, count = len(expected.support), len(header.groups)
    if not 1 <= count <= expected.max_groups or count * k > MAX_GROUP_CELLS:
        raise _refuse(f"the answer has {count} groups; between 1 and {expected.max_groups} were asked for")
    if any(len(group.masses) != k for group in header.groups):
        raise _refuse(f"every group prior needs {k} masses (the dataset's support)")
    try:
        return check_group_priors([list(group.masses) for group in header.groups], k, expected.max_groups)
    except ParameterError as exc:
        raise _refuse(str(exc)) from exc
