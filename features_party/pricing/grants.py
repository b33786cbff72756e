"""Pricing grants: which of a tenant's complete models prices which pinned sender's examples.

A grant is the publisher's decision to let a labels party learn a coarse view of one model (a group
per example and G priors): nothing is priced without one, and only the tenant that pinned the sender
can make it. Another tenant's sender or model answers 404 like a missing one.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party.receiver.store import visible
from features_party.storage.orm import PricingGrant, ReceivedModel, Sender, TrainingJob
from labeldp.common.db import utcnow
from labeldp.common.errors import DomainError, not_found
from labeldp.common.inputs import is_uuid
from labeldp.priors import MAX_GROUPS

# the held-out metric a regression model's spread is read from, per loss: its square root (squared
# loss), or √(π/2) times it (absolute loss: the mean absolute deviation of a normal error is σ·√(2/π))
SPREAD_METRIC = "validation_loss_vs_binned_true_labels_unbiased"
PRICEABLE_LOSSES = ("squared", "absolute", "zero_one")


class PricingGrants:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def set(self, tenant_id: str, sender_id: str, model_id: str, max_groups: int | None) -> PricingGrant:
        """Grant ``model_id`` to price ``sender_id``'s requests to this tenant (replacing an earlier
        grant): 404 for a sender this tenant did not pin or a model it does not own; 409 for a model
        that is not complete, was received (a semi-sensitive model: it was trained by the labels party)
        or cannot state a spread (Poisson loss)."""
        if max_groups is not None and not 1 <= max_groups <= MAX_GROUPS:
            raise DomainError("invalid-request", f"max_groups must lie in [1, {MAX_GROUPS}]")
        with self.sessions.begin() as session:
            self._pinned(session, tenant_id, sender_id)
            self._priceable(session, tenant_id, model_id)
            grant = session.execute(
                select(PricingGrant).where(
                    PricingGrant.tenant_id == tenant_id, PricingGrant.sender_id == sender_id
                )
            ).scalar_one_or_none()
            if grant is None:
                grant = PricingGrant(id=str(uuid.uuid4()), tenant_id=tenant_id, sender_id=sender_id)
                session.add(grant)
            grant.model_id, grant.max_groups, grant.updated_at = model_id, max_groups, utcnow()
            session.flush()
            return grant

    def get(self, tenant_id: str, sender_id: str) -> PricingGrant:
        grant = self.of_sender(tenant_id, sender_id)
        if grant is None:
            raise not_found("pricing grant for sender", repr(sender_id))
        return grant

    def of_sender(self, tenant_id: str, sender_id: str) -> PricingGrant | None:
        with self.sessions() as session:
            return session.execute(
                select(PricingGrant).where(
                    PricingGrant.tenant_id == tenant_id, PricingGrant.sender_id == sender_id
                )
            ).scalar_one_or_none()

    def withdraw(self, tenant_id: str, sender_id: str) -> None:
        """From now on the sender's requests to this tenant are refused (a request being answered
        finishes with the model it started with)."""
        with self.sessions.begin() as session:
            grant = session.execute(
                select(PricingGrant).where(
                    PricingGrant.tenant_id == tenant_id, PricingGrant.sender_id == sender_id
                )
            ).scalar_one_or_none()
            if grant is None:
                raise not_found("pricing grant for sender", repr(sender_id))
            session.delete(grant)

    @staticmethod
    def _pinned(session: Session, tenant_id: str, sender_id: str) -> None:
        pinned = session.execute(
            select(Sender.pin_id).where(Sender.tenant_id == tenant_id, Sender.id == sender_id)
        ).first()
        if pinned is None:
            raise not_found("sender", repr(sender_id))

    @staticmethod
    def _priceable(session: Session, tenant_id: str, model_id: str) -> TrainingJob:
        if not is_uuid(model_id):
            raise not_found("model", model_id)
        job = session.get(TrainingJob, model_id)
        if job is None or job.tenant_id != tenant_id:
            received = session.get(ReceivedModel, model_id)
            if received is not None and visible(received, tenant_id):
                raise DomainError(
                    "model-not-priceable",
                    f"model {model_id} is a semi-sensitive model the labels party trained; price with "
                    "one of this party's own models",
                    status=409,
                )
            raise not_found("model", model_id)
        if job.status != "succeeded":
            raise DomainError("model-not-complete", f"model {model_id} is {job.status}", status=409)
        if job.loss not in PRICEABLE_LOSSES:
            raise DomainError(
                "model-not-priceable",
                f"a model trained with {job.loss} loss states no spread to price with (squared, absolute "
                "or class models can)",
                status=409,
            )
        return job
