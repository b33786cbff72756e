"""Creating a release, in the order the privacy invariants require.

1. **Plan**: validate everything the request determines (``plan.py``) — nothing below may fail for a
   reason the request could have shown.
2. **Charge**: insert the release row and charge the ledger — every example and every user it
   covers — **in one transaction** (``budget/charged_work.py``, the path every charged job takes):
   there is never a release without its charge, nor a charge without its release. A concurrent
   request with the same Idempotency-Key loses on the unique constraint and gets the original
   release instead.
3. **Work** (``work.py``): draw the noise, write the output and the signed message, mark the release
   ``complete`` with its ``PublishedMechanism`` — under a lease, so that a crash leaves the release
   ``charged`` until a live process fails it (keeping its charge: noise may have been drawn).

By default the request waits for step 3; with ``Prefer: respond-async`` it returns after step 2 and a
worker finishes the release (poll ``GET /v1/releases/{id}``).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.common.instance import Instance
from labeldp.common.pages import PageRequest
from labeldp.mechanisms import (
    Mechanism,
    PriorsVerdict,
    PublishedMechanism,
    mechanism_kind,
    optimal_mechanism,
    priors_verdict,
)
from labeldp.mechanisms.grouped import Without
from labeldp.scale.release import PARTITION_ROWS
from labels_party.budget.charged_work import ChargedWork
from labels_party.budget.epsilon import MICRO
from labels_party.budget.errors import BudgetExhaustedError
from labels_party.budget.idempotency import Fingerprint
from labels_party.budget.ledger import Charging, Ledger
from labels_party.budget.partitioned import charge_partitioned
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec
from labels_party.delivery.message import Addressee
from labels_party.metrics import LabelsMetrics
from labels_party.priors import StoredPriors, load_priors
from labels_party.releases.audit import ReleaseAudit, audit_release
from labels_party.releases.plan import Plan, ReleaseRequest, plan_release
from labels_party.releases.record import read_groups
from labels_party.releases.work import ReleaseWork
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, Recipient, Release

log = logging.getLogger("labeldp.labels.releases")

__all__ = ["Preview", "ReleaseAudit", "ReleaseRequest", "ReleaseService"]


PriorSource = Literal["labels", "release", "public"]


@dataclass(frozen=True)
class Preview:
    epsilon: float
    epsilon_prior: float
    examples: int
    prior_source: PriorSource
    mechanism: PublishedMechanism  # optimized for the chosen prior; for the tenant's eyes only
    expected_loss: float  # under that prior (the unbiased randomizer: its variance; feature-aware: per
    # example, each under its group's labels)
    side_by_side: dict[str, float] = field(default_factory=dict)  # RR-on-Bins beside unbiased
    groups: int | None = None  # feature-aware: how many groups the priors have
    examples_with_group: int | None = None
    expected_loss_without_priors: float | None = None  # the one-stage release at the same ε
    priors_verdict: PriorsVerdict | None = None  # example level: whether the priors pay (public rule)


MIN_PRIOR_MASS, MAX_PRIOR_MASS = 1e-300, 1e300


def checked_prior(masses: list[float], k: int) -> np.ndarray:
    """A prior given as masses (any scale), scaled to a largest mass of 1 — or 422 ``invalid-prior``.
    Every mass is zero or within [1e-300, 1e300], so scaling by the largest and summing can neither
    overflow nor drown a mass in subnormal numbers (``[1e308] * 5`` would sum to infinity;
    ``[1e308, 1, …]`` would silently treat the ones as zeros)."""
    prior = np.asarray(masses, dtype=np.float64)
    positive = prior[prior > 0]
    if (
        prior.size != k
        or not np.isfinite(prior).all()
        or np.any(prior < 0)
        or positive.size == 0
        or positive.min() < MIN_PRIOR_MASS
        or positive.max() > MAX_PRIOR_MASS
        or positive.min() < positive.max() * 1e-300
    ):
        raise DomainError(
            "invalid-prior",
            f"public_prior needs {k} masses, each zero or between {MIN_PRIOR_MASS:g} and {MAX_PRIOR_MASS:g}, "
            "not all zero",
        )
    return prior / positive.max()  # the largest mass 1: summing cannot overflow (the mechanism normalizes)


class ReleaseService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: DataDir,
        work: ReleaseWork,
        ledger: Ledger,
        instance: Instance,
        lease_seconds: float,
        metrics: LabelsMetrics,
        on_charged: Callable[[str], None] = lambda _tenant: None,
    ) -> None:
        self.sessions, self.data_dir, self.work, self.metrics = sessions, data_dir, work, metrics
        self.cluster = work.cluster
        self.jobs = ChargedWork(
            ledger,
            Release,
            instance,
            lease_seconds,
            name="release",
            remove_outputs=work.remove_outputs,
            on_charged=on_charged,
        )
        self.background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="release")

    # -- reading -------------------------------------------------------------------------------------
    def get(self, tenant_id: str, release_id: str) -> Release:
        with self.sessions() as session:
            return owned(session, Release, release_id, tenant_id, "release")

    def of_dataset(self, tenant_id: str, dataset_id: str, paging: PageRequest) -> list[Release]:
        with self.sessions() as session:
            get_dataset(session, tenant_id, dataset_id)
            query = (
                select(Release)
                .where(Release.dataset_id == dataset_id)
                .order_by(Release.created_at, Release.id)
            )
            return list(session.execute(paging.window(query)).scalars())

    def of_tenant(self, tenant_id: str, paging: PageRequest) -> list[Release]:
        """Every release of the tenant, whatever its dataset, oldest first (a page window)."""
        with self.sessions() as session:
            query = (
                select(Release).where(Release.tenant_id == tenant_id).order_by(Release.created_at, Release.id)
            )
            return list(session.execute(paging.window(query)).scalars())

    def output_path(self, tenant_id: str, release_id: str) -> Path:
        """The stored output of a complete release (reading it is free)."""
        release = self.get(tenant_id, release_id)
        if release.status != "complete":
            raise DomainError("release-not-complete", f"release {release_id} is {release.status}", status=409)
        return self.data_dir.release(release_id)

    def groups(self, tenant_id: str, release_id: str) -> list[tuple[int, int, PublishedMechanism]]:
        """(group, examples it released, its mechanism) of a complete feature-aware release."""
        path = self.output_path(tenant_id, release_id)
        mechanisms = read_groups(self.data_dir, release_id)
        if not mechanisms:
            return []
        groups = np.asarray(pq.read_table(path, columns=["group"]).column("group").to_numpy(), dtype=np.int64)
        sizes = np.bincount(groups[groups >= 0], minlength=len(mechanisms))
        return [(g, int(sizes[g]), m) for g, m in enumerate(mechanisms)]

    def audit(self, tenant_id: str, release_id: str, alpha: float = 1e-6) -> ReleaseAudit:
        """Free, tenant-only: what the best attacker learns from this release (``audit.py``)."""
        with self.sessions() as session:
            release = owned(session, Release, release_id, tenant_id, "release")
            ds = get_dataset(session, tenant_id, release.dataset_id)
        return audit_release(self.data_dir, ds, release, alpha)

    # -- previews (free, tenant-only) ----------------------------------------------------------------
    def preview(
        self,
        tenant_id: str,
        dataset_id: str,
        request: ReleaseRequest,
        *,
        prior_release_id: str | None = None,
        public_prior: list[float] | None = None,
    ) -> Preview:
        """What a release would look like, for the dataset owner only: the mechanism and its expected
        loss. Spends nothing and draws no noise, and the result never goes to a recipient.

        By default the prior is the **exact** histogram of the labels — the tenant holds them anyway,
        but choosing ε, the loss or the examples by looking at it makes those choices depend on the
        raw labels. ``prior_release_id`` uses the noisy prior an earlier release of this dataset
        published instead (post-processing: nothing new is learned from the labels), and
        ``public_prior`` a prior the tenant knows from elsewhere (masses on the support)."""
        if prior_release_id is not None and public_prior is not None:
            raise DomainError("invalid-request", "give prior_release_id or public_prior, not both")
        with self.sessions() as session:
            ds = get_dataset(session, tenant_id, dataset_id)
        if request.priors_id is not None:
            if prior_release_id is not None or public_prior is not None:
                raise DomainError("invalid-request", "a preview with priors takes its prior from them")
            return self._grouped_preview(ds, request, self._priors(tenant_id, request.priors_id))
        plan = plan_release(ds, self.data_dir, request, on_cluster=self.cluster.scheduler is not None)
        source: PriorSource = "labels"
        if prior_release_id is not None:
            prior, source = self._released_prior(tenant_id, dataset_id, prior_release_id, plan), "release"
        elif public_prior is not None:
            prior, source = checked_prior(public_prior, plan.support.k), "public"
        else:
            prior = plan.support.counts(plan.in_memory.labels).astype(np.float64)
        at = plan.objective.epsilon_for(plan.epsilon_randomize, plan.objective_examples)
        rr_at = None if plan.mechanism == "unbiased" else at
        mechanism = optimal_mechanism(
            plan.support, prior, plan.epsilon_randomize, plan.loss, optimize_at=rr_at, kind=plan.mechanism
        )
        user = plan.user.split.for_bound(plan.user.split.bound or 1) if plan.user else None
        published = mechanism.describe(
            prior=prior, epsilon_prior=plan.epsilon_prior, epsilon_total=plan.epsilon, user=user
        )
        expected = mechanism.expected_loss(plan.support.values, prior)
        return Preview(
            plan.epsilon,
            plan.epsilon_prior,
            plan.examples.n,
            source,
            published,
            expected,
            self._side_by_side(plan, prior, mechanism.kind, expected),
        )

    @staticmethod
    def _side_by_side(plan: Plan, prior: np.ndarray, kind: str, expected: float) -> dict[str, float]:
        """A preview of the unbiased randomizer also states RR-on-Bins's expected loss under the same
        prior (its objective as the request resolves it), beside the unbiased randomizer's expected
        variance. Only then: RR-on-Bins is cheap to optimize beside it, while the unbiased program
        takes seconds to minutes at the supports RR-on-Bins previews in milliseconds
        (docs/reference/limits.md), so an RR preview does not pay for it."""
        if kind != "unbiased":
            return {}
        at = plan.objective.epsilon_for(plan.epsilon_randomize, plan.objective_examples)
        rr = optimal_mechanism(plan.support, prior, plan.epsilon_randomize, plan.loss, optimize_at=at)
        return {
            "rr_on_bins_expected_loss": rr.expected_loss(plan.support.values, prior),
            "unbiased_expected_variance": expected,
        }

    def _priors(self, tenant_id: str, priors_id: str) -> StoredPriors:
        """The stored priors a request names — 422 ``unknown-priors`` for none of this tenant's."""
        try:
            return load_priors(self.sessions, self.data_dir, tenant_id, priors_id)
        except DomainError as exc:
            if exc.code != "not-found":
                raise
            raise DomainError(
                "unknown-priors",
                f"no stored priors {priors_id} (GET /v1/priors lists them)",
                parameter="prior",
            ) from exc

    def _grouped_preview(self, ds: Dataset, request: ReleaseRequest, priors: StoredPriors) -> Preview:
        """A feature-aware preview: each group's mechanism (optimal for the group's prior under the
        release's objective, as the release will compute it — for a user-level release with ``auto``
        or ``private`` τ, as if τ = 1, like its own mechanism's) and the release's own for the examples
        without a group, their expected loss per example under the labels each actually holds —
        beside the one-stage release of the same examples at the same ε (the exact histogram as its
        prior)."""
        plan = plan_release(ds, self.data_dir, request, priors=priors)
        assert plan.groups is not None
        labels, support, loss = plan.in_memory.labels, plan.support, plan.loss
        eps = plan.epsilon_randomize if plan.user is not None else plan.epsilon
        total, groups = 0.0, plan.groups.groups
        group_at = plan.objective.epsilon_for(eps, plan.objective_examples)
        optimized: list[Mechanism | None] = [None] * plan.groups.count  # the verdict reuses them
        for g in np.unique(groups[groups >= 0]):
            counts = support.counts(labels[groups == g]).astype(np.float64)
            mechanism = optimal_mechanism(support, plan.groups.priors[g], eps, loss, optimize_at=group_at)
            optimized[int(g)] = mechanism
            total += counts.sum() * mechanism.expected_loss(support.values, counts)
        exact = support.counts(labels).astype(np.float64)
        fallback = groups < 0
        if plan.user is not None:
            split = plan.user.split.for_bound(plan.user.split.bound or 1)
            eps_prior, eps_own = plan.epsilon_prior, split.epsilon_randomize
        else:
            eps_prior, eps_own = plan.epsilon_prior, plan.epsilon_randomize
        own_prior = support.counts(labels[fallback]).astype(np.float64) if fallback.any() else exact
        at = plan.objective.epsilon_for(eps_own, plan.objective_examples)
        own = optimal_mechanism(support, own_prior, eps_own, loss, optimize_at=at)
        if fallback.any():
            total += own_prior.sum() * own.expected_loss(support.values, own_prior)
        user = plan.user.split.for_bound(plan.user.split.bound or 1) if plan.user else None
        published = own.describe(
            prior=own_prior, epsilon_prior=eps_prior, epsilon_total=plan.epsilon, user=user
        )
        # beside one RR release of the same examples (the default without priors could be the unbiased
        # randomizer, whose variance is not the loss the groups' RR-on-Bins are measured by)
        rr = request.mechanism or mechanism_kind(loss)
        one_stage = self.preview(ds.tenant_id, ds.id, replace(request, priors_id=None, mechanism=rr))
        verdict = None
        if plan.user is None and (groups >= 0).any():  # the public rule reads the priors, no label
            sizes = np.bincount(groups[groups >= 0], minlength=plan.groups.count)
            # the same request without priors, as its release would plan it (kind, objective, split)
            plain = plan_release(
                ds,
                self.data_dir,
                replace(request, priors_id=None),
                on_cluster=self.cluster.scheduler is not None,
            )
            without = Without(
                plain.mechanism,
                plain.objective,
                plain.epsilon_prior,
                plain.epsilon_randomize,
                plain.objective_examples,
            )
            verdict = priors_verdict(
                plan.groups.priors,
                sizes,
                support,
                plan.epsilon,
                loss,
                objective=plan.objective,
                examples=plan.objective_examples,
                without=without,
                mechanisms=optimized,
            )
        return Preview(
            plan.epsilon,
            eps_prior,
            plan.examples.n,
            "labels",
            published,
            total / plan.examples.n,
            groups=plan.groups.count,
            examples_with_group=plan.examples.n - plan.groups.fallback,
            expected_loss_without_priors=one_stage.expected_loss,
            priors_verdict=verdict,
        )

    def _released_prior(self, tenant_id: str, dataset_id: str, release_id: str, plan: Plan) -> np.ndarray:
        release = self.get(tenant_id, release_id)
        if release.dataset_id != dataset_id or release.mechanism is None:
            raise DomainError(
                "invalid-prior", f"release {release_id} is not a complete release of this dataset"
            )
        published = PublishedMechanism.model_validate(release.mechanism)
        if not np.array_equal(np.asarray(published.support), plan.support.values):
            raise DomainError("invalid-prior", f"release {release_id} used another support than this preview")
        return np.asarray(published.prior, dtype=np.float64)

    # -- creating ------------------------------------------------------------------------------------
    def create(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        request: ReleaseRequest,
        idempotency_key: str,
        *,
        wait: bool = True,
    ) -> tuple[Release, bool]:
        """The release and whether it was created now (False: an idempotent replay)."""
        try:
            release, created = self._create(tenant_id, api_key_id, dataset_id, request, idempotency_key, wait)
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

    def _create(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        request: ReleaseRequest,
        key: str,
        wait: bool,
    ) -> tuple[Release, bool]:
        with self.sessions() as session:  # a short read; the files are read after it
            ds = get_dataset(session, tenant_id, dataset_id)
            recipient = session.execute(
                select(Recipient).where(Recipient.tenant_id == tenant_id, Recipient.name == request.recipient)
            ).scalar_one_or_none()
        fingerprint = request.fingerprint(dataset_id, DatasetSpec.model_validate(ds.spec))
        existing = self.jobs.find(tenant_id, key, fingerprint)
        if existing is not None:
            return existing, False
        rows = PARTITION_ROWS if self.cluster.scheduler is not None else None
        priors = None if request.priors_id is None else self._priors(tenant_id, request.priors_id)
        plan = plan_release(ds, self.data_dir, request, partition_rows=rows, priors=priors)
        if recipient is None:
            raise DomainError("unknown-recipient", f"no registered recipient named {request.recipient!r}")
        self.cluster.ready(plan)  # a configured cluster must answer before anything is charged
        release, created = self._charge(tenant_id, api_key_id, dataset_id, key, fingerprint, plan, recipient)
        if not created:  # lost the race for this Idempotency-Key
            return release, False
        # Charged and committed: from here on the budget is spent whatever happens.
        if not wait:
            self.background.submit(self._finish_quietly, release.id, plan, Addressee.of(recipient))
            return release, True
        return self._finish(release.id, plan, Addressee.of(recipient)), True

    def _charge(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        key: str,
        fingerprint: Fingerprint,
        plan: Plan,
        recipient: Recipient,
    ) -> tuple[Release, bool]:
        """Insert the release and charge every example and user in one transaction; ``(release,
        False)`` when a concurrent request with this key won."""
        release = Release(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            idempotency_key=key,
            status="charged",
            recipient_id=recipient.id,
            epsilon_micro=plan.epsilon_micro,
            epsilon_prior=plan.epsilon_prior,
            loss=plan.loss,
            examples=plan.examples.n,
            examples_defaulted=plan.examples.defaulted,
            universe_declared=plan.examples.universe_declared,
            api_key_id=api_key_id,
            privacy_unit="user" if plan.user else "example",
            epsilon_user_micro=plan.user.epsilon_user_micro if plan.user else None,
            contribution_bound=str(plan.user.bound) if plan.user else None,
            users=plan.user.users if plan.user else None,
            priors_id=plan.groups.priors_id if plan.groups else None,
        )
        self.jobs.stamp(release, fingerprint)
        if self.cluster.runs(plan):
            return self._charge_on_cluster(release, plan, api_key_id)

        def charge(ledger: Charging, row: Release) -> None:
            ledger.charge(
                plan.charged_keys,
                plan.epsilon_micro,
                users=plan.user_charge(),
                release_id=row.id,
                api_key_id=api_key_id,
                note=f"dataset {dataset_id}",
            )

        admitted, created = self.jobs.admit(release, charge)
        if created:
            self._charged(admitted, plan)
        return admitted, created

    def _charge_on_cluster(
        self, release: Release, plan: Plan, api_key_id: str | None
    ) -> tuple[Release, bool]:
        """The same, for a release on the cluster: its examples are staged as partitions, the workers
        merge and check the spend (``budget/partitioned.py``), and one commit — which takes the
        tenant's row first by bumping its ledger version — inserts the release and makes the charge
        visible, or nothing happens and the staged files are removed."""
        try:
            staged = self.cluster.stage(release.id, plan)
            charge_partitioned(
                self.jobs.ledger,
                self.cluster.engine(),
                release.tenant_id,
                staged,
                plan.epsilon_micro,
                inside=lambda session: self.jobs.insert(session, release),
                release_id=release.id,
                api_key_id=api_key_id,
                note=f"dataset {release.dataset_id}",
            )
        except IntegrityError:
            self.work.remove_outputs(release.id)
            existing = self.jobs.winner(release)
            if existing is None:
                raise
            return existing, False
        except BaseException:
            self.work.remove_outputs(release.id)
            raise
        self.jobs.on_charged(release.tenant_id)
        self._charged(release, plan)
        return release, True

    def _charged(self, release: Release, plan: Plan) -> None:
        log.info(
            "release charged",
            extra={
                "release_id": release.id,
                "dataset_id": release.dataset_id,
                "examples": release.examples,
                "epsilon": plan.epsilon,
            },
        )

    def _finish(self, release_id: str, plan: Plan, recipient: Addressee) -> Release:
        return self.jobs.run(release_id, lambda: self.work.privatize(release_id, plan, recipient))

    def _finish_quietly(self, release_id: str, plan: Plan, recipient: Addressee) -> None:
        # a failure is recorded on the release by ChargedWork.run; nobody waits for it here
        with contextlib.suppress(Exception):
            self._finish(release_id, plan, recipient)

    def shutdown(self) -> None:
        self.background.shutdown(wait=True)
        self.cluster.close()
