"""Priors from the features party for feature-aware releases (docs/reference/grpc.md, "Priors").

The labels party asks a pinned features party, over the same mutual TLS as deliveries, to price a
dataset's examples with one of its models (``service.py``: the signed request, ``exchange.py``: the
call); checks the signed answer against what it asked (``verify.py``); and keeps it as a versioned
object of the tenant (``store.py``). A release reads stored priors with ``load_priors``, whole and in
memory, before it charges anything.
"""

from labels_party.priors.exchange import PriorsRefusedError
from labels_party.priors.service import DEFAULT_MAX_GROUPS, PriorsDetail, PriorsRequest, PriorsService
from labels_party.priors.store import PriorsStore, StoredPriors, load_priors

__all__ = [
    "DEFAULT_MAX_GROUPS",
    "PriorsDetail",
    "PriorsRefusedError",
    "PriorsRequest",
    "PriorsService",
    "PriorsStore",
    "StoredPriors",
    "load_priors",
]
