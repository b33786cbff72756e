"""Creating a release, in the order the privacy invariants require.

1. Validate everything that can be validated (dataset, recipient, ε and its split, loss, example set,
   labels) — nothing below may fail for a reason the request could have shown.
2. Insert the release row and charge the ledger **in one transaction**: there is never a release
   without its charge, nor a charge without its release. A concurrent request with the same
   Idempotency-Key loses on the unique constraint and gets the original release instead.
3. Draw the noise (Algorithm 3) and write the output (bin indices, columnar) and the signed message.
4. Mark the release ``complete`` with its ``PublishedMechanism``. A crash between 2 and 4 leaves it
   ``charged``; on restart it is marked ``failed`` and keeps its charge, because noise may already
   have been drawn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.mechanisms import (
    LabelRelease,
    LossName,
    ParameterError,
    PublishedMechanism,
    Support,
    default_prior_epsilon,
    float_at_most,
    optimal_mechanism,
    release_labels,
    split_epsilon,
)
from labels_party.budget.epsilon import MICRO, to_micro
from labels_party.budget.ledger import BudgetExhaustedError, charge, lock_tenant, record_kept_charge
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.message import Signer, write_message
from labels_party.metrics import LabelsMetrics
from labels_party.releases.examples import ExampleSet, example_set
from labels_party.storage.orm import Recipient, Release, utcnow

log = logging.getLogger("labeldp.labels.releases")


@dataclass(frozen=True)
class ReleaseRequest:
    epsilon: float
    loss: str | None  # None: the label type's default loss
    recipient: str
    epsilon_prior: float | None = None
    example_ids: list[str] | None = None

    def digest(self, dataset_id: str) -> str:
        body = {"dataset": dataset_id, **asdict(self)}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Plan:
    """A validated release: what will be charged and how the ε is split, before anything happens."""

    spec: DatasetSpec
    loss: LossName
    support: Support
    examples: ExampleSet
    epsilon_micro: int  # charged to every example
    epsilon: float  # the largest double not above the charge: what the mechanisms may spend
    epsilon_prior: float
    epsilon_randomize: float


@dataclass(frozen=True)
class Preview:
    epsilon: float
    epsilon_prior: float
    examples: int
    mechanism: PublishedMechanism  # optimized for the exact histogram: for the tenant's eyes only
    expected_loss: float


def release_path(data_dir: Path, release_id: str) -> Path:
    return data_dir / "releases" / f"{release_id}.parquet"


def _epsilon(request: ReleaseRequest, n: int, k: int) -> tuple[int, float, float, float]:
    """(micro-ε charged, ε as spendable, ε₁, ε₂) with ε₁ + ε₂ <= ε <= the charge, exactly."""
    try:
        micro = to_micro(request.epsilon)
        epsilon = float_at_most(Fraction(micro, MICRO))
        prior = (
            default_prior_epsilon(epsilon, n, k) if request.epsilon_prior is None else request.epsilon_prior
        )
        eps_prior, eps_randomize = split_epsilon(epsilon, prior)
    except ParameterError as exc:
        raise DomainError("invalid-epsilon", str(exc)) from exc
    except ValueError as exc:
        raise DomainError("invalid-epsilon", str(exc)) from exc
    return micro, epsilon, eps_prior, eps_randomize


class ReleaseService:
    def __init__(
        self, sessions: sessionmaker[Session], data_dir: Path, signer: Signer, metrics: LabelsMetrics
    ) -> None:
        self.sessions, self.data_dir, self.signer, self.metrics = sessions, data_dir, signer, metrics

    # -- reading -------------------------------------------------------------------------------------
    def get(self, tenant_id: str, release_id: str) -> Release:
        with self.sessions() as session:
            return owned(session, Release, release_id, tenant_id, "release")

    def of_dataset(self, tenant_id: str, dataset_id: str) -> list[Release]:
        with self.sessions() as session:
            get_dataset(session, tenant_id, dataset_id)
            rows = session.execute(
                select(Release).where(Release.dataset_id == dataset_id).order_by(Release.created_at)
            ).scalars()
            return list(rows)

    def output_path(self, tenant_id: str, release_id: str) -> Path:
        """The stored output of a complete release (reading it is free)."""
        release = self.get(tenant_id, release_id)
        if release.status != "complete":
            raise DomainError("release-not-complete", f"release {release_id} is {release.status}", status=409)
        return release_path(self.data_dir, release_id)

    # -- planning (validation, nothing spent) ---------------------------------------------------------
    def _plan(self, session: Session, tenant_id: str, dataset_id: str, request: ReleaseRequest) -> Plan:
        ds = get_dataset(session, tenant_id, dataset_id)
        spec = DatasetSpec.model_validate(ds.spec)
        loss = spec.loss(request.loss)
        support = spec.support_for(loss)
        examples = example_set(DatasetFiles(self.data_dir, ds.id), ds, spec, request.example_ids)
        micro, epsilon, eps_prior, eps_randomize = _epsilon(request, examples.n, support.k)
        return Plan(spec, loss, support, examples, micro, epsilon, eps_prior, eps_randomize)

    def preview(self, tenant_id: str, dataset_id: str, request: ReleaseRequest) -> Preview:
        """What a release would look like, for the dataset owner only: the mechanism and its expected
        loss under the exact label histogram. Spends nothing and draws no noise; the result goes back
        to the tenant (who holds the labels anyway), never to a recipient."""
        with self.sessions() as session:
            plan = self._plan(session, tenant_id, dataset_id, request)
        counts = plan.support.counts(plan.examples.labels)
        mechanism = optimal_mechanism(plan.support, counts, plan.epsilon_randomize, plan.loss)
        published = mechanism.describe(
            prior=counts, epsilon_prior=plan.epsilon_prior, epsilon_total=plan.epsilon
        )
        return Preview(
            plan.epsilon,
            plan.epsilon_prior,
            plan.examples.n,
            published,
            mechanism.expected_loss(plan.support.values, counts),
        )

    # -- creating ------------------------------------------------------------------------------------
    def create(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        request: ReleaseRequest,
        idempotency_key: str,
    ) -> tuple[Release, bool]:
        """The release and whether it was created now (False: an idempotent replay)."""
        try:
            release, created = self._create(tenant_id, api_key_id, dataset_id, request, idempotency_key)
        except BudgetExhaustedError:
            self.metrics.releases.labels("budget_exhausted").inc()
            raise
        except DomainError:
            self.metrics.releases.labels("rejected").inc()
            raise
        except Exception:
            self.metrics.releases.labels("error").inc()
            raise
        if created:
            self.metrics.record_release(release.epsilon_micro / MICRO, release.examples)
        else:
            self.metrics.releases.labels("replayed").inc()
        return release, created

    def _find(self, session: Session, tenant_id: str, key: str) -> Release | None:
        return session.execute(
            select(Release).where(Release.tenant_id == tenant_id, Release.idempotency_key == key)
        ).scalar_one_or_none()

    @staticmethod
    def _replay(existing: Release, digest: str) -> Release:
        if existing.request_hash != digest:
            raise DomainError(
                "idempotency-key-reused", "this Idempotency-Key was used for a different request body"
            )
        return existing

    def _create(
        self, tenant_id: str, api_key_id: str | None, dataset_id: str, request: ReleaseRequest, key: str
    ) -> tuple[Release, bool]:
        digest = request.digest(dataset_id)
        with self.sessions() as session:
            existing = self._find(session, tenant_id, key)
            if existing is not None:
                return self._replay(existing, digest), False
            plan = self._plan(session, tenant_id, dataset_id, request)
            recipient = session.execute(
                select(Recipient).where(Recipient.tenant_id == tenant_id, Recipient.name == request.recipient)
            ).scalar_one_or_none()
            if recipient is None:
                raise DomainError("unknown-recipient", f"no registered recipient named {request.recipient!r}")
        release = Release(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            idempotency_key=key,
            request_hash=digest,
            status="charged",
            recipient_id=recipient.id,
            epsilon_micro=plan.epsilon_micro,
            epsilon_prior=plan.epsilon_prior,
            loss=plan.loss,
            examples=plan.examples.n,
            examples_defaulted=plan.examples.defaulted,
            universe_declared=plan.examples.universe_declared,
            api_key_id=api_key_id,
        )
        try:
            with self.sessions.begin() as session:
                # Lock order: the tenant first. Inserting the release takes a key-share lock on the
                # tenant (foreign key); asking for the write lock only afterwards deadlocks.
                lock_tenant(session, tenant_id)
                session.add(release)
                session.flush()  # the idempotency key's unique constraint fires here
                charge(
                    session,
                    tenant_id,
                    plan.examples.keys,
                    plan.epsilon_micro,
                    release_id=release.id,
                    api_key_id=api_key_id,
                    note=f"dataset {dataset_id}",
                )
        except IntegrityError:
            with self.sessions() as session:
                existing = self._find(session, tenant_id, key)
            if existing is None:
                raise
            return self._replay(existing, digest), False
        log.info(
            "release charged",
            extra={
                "release_id": release.id,
                "dataset_id": dataset_id,
                "examples": release.examples,
                "epsilon": plan.epsilon,
            },
        )
        # Charged and committed: from here on the budget is spent whatever happens.
        try:
            published = self._privatize(release, plan, recipient.name)
        except Exception as exc:
            log.exception("release failed after its charge", extra={"release_id": release.id})
            with self.sessions.begin() as session:
                session.execute(
                    update(Release)
                    .where(Release.id == release.id)
                    .values(status="failed", error=str(exc)[:2000])
                )
                record_kept_charge(
                    session,
                    tenant_id,
                    release.id,
                    plan.epsilon_micro,
                    release.examples,
                    f"release failed: {type(exc).__name__}",
                )
            raise
        with self.sessions.begin() as session:
            session.execute(
                update(Release)
                .where(Release.id == release.id)
                .values(status="complete", mechanism=published.model_dump(mode="json"), completed_at=utcnow())
            )
        with self.sessions() as session:
            done = session.get(Release, release.id)
            assert done is not None
            return done, True

    def _privatize(self, release: Release, plan: Plan, recipient: str) -> PublishedMechanism:
        """Draw the noise, write the output (example_id, bin) and the signed message."""
        result: LabelRelease = release_labels(
            plan.examples.labels, plan.support, plan.epsilon, plan.loss, plan.epsilon_prior
        )
        published = result.published()
        dtype = pa.uint8() if published.m <= 256 else pa.uint16()
        table = pa.table({"example_id": plan.examples.ids, "bin": pa.array(result.bin_indices, dtype)})
        DatasetFiles(self.data_dir, release.dataset_id).write(release_path(self.data_dir, release.id), table)
        write_message(
            self.data_dir,
            self.signer,
            release_id=release.id,
            recipient=recipient,
            label_type=plan.spec.label_type,
            mechanism=published,
            example_ids=plan.examples.ids,
            bins=np.asarray(result.bin_indices),
        )
        return published


def recover_interrupted(sessions: sessionmaker[Session]) -> int:
    """Mark releases a crash left ``charged`` as ``failed``; their charge stays, and the ledger says so."""
    reason = "interrupted before completion; the charge is kept (noise may have been drawn)"
    with sessions.begin() as session:
        stuck = (
            session.execute(select(Release).where(Release.status == "charged").with_for_update())
            .scalars()
            .all()
        )
        for release in stuck:
            release.status, release.error = "failed", reason
            record_kept_charge(
                session,
                release.tenant_id,
                release.id,
                release.epsilon_micro,
                release.examples,
                "server restart: " + reason,
            )
        return len(stuck)
