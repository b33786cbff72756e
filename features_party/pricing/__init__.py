"""Priors for a labels party's feature-aware releases (docs/reference/grpc.md, "Priors").

A tenant grants one of its trained models to price the examples a pinned sender asks about
(``grants.py``); the sender's signed request arrives over gRPC (``PriceExamples``), is verified like a
release header, and is answered — each requested example's group and each group's prior on the
dataset's support, computed from the model's predictions by the public rule of ``labeldp.priors``
(``prices.py``) — signed with this party's key, and recorded (``service.py``). What leaves: one group per
example and G priors, a coarse view of the model; no label of the priced examples is ever read.
"""

from features_party.pricing.grants import PricingGrants
from features_party.pricing.service import Pricer, Pricings

__all__ = ["Pricer", "PricingGrants", "Pricings"]
