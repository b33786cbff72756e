"""A semi-sensitive model request, validated completely before anything is charged: the dataset and
its declared columns, the label release (phase 1) and its examples' rows, the schedule, the
group-privacy δ of a user-level run and σ calibrated for (ε₂, δ) — outside any database transaction
(reading the files and calibrating take seconds; no lock waits on them)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.mechanisms import ParameterError, PublishedMechanism, float_at_most
from labels_party.budget.epsilon import ATTO, MICRO, to_atto, to_micro
from labels_party.budget.idempotency import Fingerprint
from labels_party.datasets.membership import user_keys_of
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.releases.record import frozen_release
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, Recipient, Release

if TYPE_CHECKING:
    from labeldp.semi_sensitive import DpSgdSchedule


MAX_TRAINING_EXAMPLES = 2_000_000  # the DP-SGD phase runs in this process, in memory
MAX_STEPS = 10_000  # the accountant composes every step: 3,000 steps calibrate in 1–10 s here
LABEL_PHASE_BATCH = 256
LABEL_PHASE_LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class SemiSensitiveRequest:
    label_release_id: str | None  # None: no label phase (DP-SGD alone on every labelled example)
    epsilon_dpsgd: float
    delta: float
    epochs: float = 3.0
    batch_size: int = 1024
    clip_norm: float = 1.0
    learning_rate: float = 1e-2
    label_epochs: float = 3.0
    width: int = 32
    recipient: str | None = None  # without a label release: whom the model message is addressed to

    def fingerprint(self, dataset_id: str) -> Fingerprint:
        """The request as its Idempotency-Key is held to it (``budget/idempotency.py``): every field
        by its API name, the schema's defaults applied, numbers as numbers of one kind."""
        fields: dict[str, object] = {
            name: float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
            for name, value in asdict(self).items()
        }
        fields["batch_size"], fields["width"] = self.batch_size, self.width  # counts stay integers
        # (resolved as version 2 did: its keys match the same fields under that version)
        return Fingerprint({"dataset_id": dataset_id, **fields}, legacy=self.digest(dataset_id))

    def digest(self, dataset_id: str) -> str:
        """The request as sent, hashed: what models made before resolved requests were kept hold
        their keys to."""
        fields = asdict(self)
        if fields["recipient"] is None:  # the digest of requests with a label release predates it
            fields.pop("recipient")
        body = json.dumps({"dataset": dataset_id, **fields}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class ModelPlan:
    spec: DatasetSpec
    release: Release | None  # None: DP-SGD alone, no label phase
    mechanism: PublishedMechanism | None  # the label release's
    example_ids: pa.Array
    bins: np.ndarray | None  # the label release's output, in the order of example_ids
    labels: pa.Table  # label and semi-sensitive columns, in the release's order
    non_sensitive: pa.Table  # non-sensitive columns, in the release's order
    schedule: DpSgdSchedule  # the dpsgd extra is imported lazily
    noise_multiplier: float
    recipient: Recipient  # the label release's recipient (the model message goes to it too), or the asked one
    example_keys: np.ndarray  # the ledger key of each training example
    user_keys: np.ndarray  # the user of each training example (its own key without a user_id)
    contribution_bound: int | None  # τ of a user-level label release (its kept examples train), else None
    epsilon_micro: int  # ε₂ as charged
    epsilon_dpsgd: float  # the largest double not above the charge: what σ is calibrated to
    delta: float

    @property
    def delta_charged(self) -> float:
        """δ per example, or for a user-level run the group-privacy δ over τ examples of one user
        (what one user's examples together are exposed to)."""
        from labeldp.semi_sensitive import group_privacy  # the optional dpsgd extra

        if self.contribution_bound is None:
            return self.delta
        return group_privacy(self.epsilon_dpsgd, self.delta, self.contribution_bound)[1]

    @property
    def largest_user(self) -> int:
        """How many training examples the user with the most has."""
        return int(np.unique(self.user_keys, return_counts=True)[1].max())

    def user_delta_atto(self) -> int:
        """The δ of the user with the most training examples, by group privacy over all of them (for
        a user-level run: τ): what the tenant's δ counter takes when it limits per-user spend. At
        least ``ATTO`` (δ = 1, no guarantee) when it would not be below 1."""
        from labeldp.semi_sensitive import group_privacy

        group = self.contribution_bound or self.largest_user
        delta = group_privacy(self.epsilon_dpsgd, self.delta, group)[1]
        return ATTO if delta >= 1 else to_atto(delta)


def _aligned(ids: pa.Array, table: pa.Table, what: str) -> pa.Table:
    """``table``'s rows in the order of ``ids``; every id must have one."""
    position = pc.index_in(ids, value_set=table.column("example_id"))
    missing = int(position.null_count)
    if missing:
        raise DomainError(
            f"missing-{what}-rows", f"{missing} of the release's {len(ids)} examples have no {what} row"
        )
    return table.take(position)


def labelled_examples(
    sessions: sessionmaker[Session], data_dir: DataDir, tenant_id: str, dataset_id: str
) -> int:
    """How many labelled examples a semi-sensitive model of this dataset would train on (checked as a
    model request checks them)."""
    with sessions() as session:
        ds = get_dataset(session, tenant_id, dataset_id)
        spec = DatasetSpec.model_validate(ds.spec)
    if spec.label_type != "binary" or not spec.semi_sensitive or not spec.non_sensitive:
        raise DomainError(
            "not-semi-sensitive",
            "the dataset needs binary labels and declared semi_sensitive and non_sensitive columns",
        )
    files = DatasetFiles(data_dir, dataset_id)
    labels = files.read_labels(ds.labels_version, ["example_id"])
    return len(_labelled_ids(labels, files.read_universe(ds.universe_version)))


def _rows(
    sessions: sessionmaker[Session], tenant_id: str, dataset_id: str, request: SemiSensitiveRequest
) -> tuple[Dataset, DatasetSpec, Release | None, Recipient]:
    """The dataset, its spec, the label release (if any) and the recipient, checked (a short read)."""
    with sessions() as session:
        ds = get_dataset(session, tenant_id, dataset_id)
        spec = DatasetSpec.model_validate(ds.spec)
        if spec.label_type != "binary" or not spec.semi_sensitive or not spec.non_sensitive:
            raise DomainError(
                "not-semi-sensitive",
                "the dataset needs binary labels and declared semi_sensitive and non_sensitive columns",
            )
        if not ds.non_sensitive_version:
            raise DomainError("no-non-sensitive-rows", "upload the non-sensitive rows first", status=409)
        if request.label_release_id is None:
            named = session.execute(
                select(Recipient).where(Recipient.tenant_id == tenant_id, Recipient.name == request.recipient)
            ).scalar_one_or_none()
            if named is None:
                raise DomainError("unknown-recipient", f"no registered recipient named {request.recipient!r}")
            return ds, spec, None, named
        release = owned(session, Release, request.label_release_id, tenant_id, "release")
        if release.dataset_id != dataset_id or release.status != "complete" or release.mechanism is None:
            raise DomainError(
                "unusable-label-release", "the label release must be this dataset's and complete"
            )
        if release.examples_defaulted:
            raise DomainError("unusable-label-release", "the label release must list labelled examples only")
        recipient = session.get(Recipient, release.recipient_id)
        assert recipient is not None  # a foreign key
        return ds, spec, release, recipient


def _labelled_ids(labels: pa.Table, universe: pa.Table | None) -> pa.Array:
    """The examples DP-SGD alone trains on: the universe's, when there is one — whether an example has a
    label row is then itself a label (docs/math.md §10.1), so no label row outside the universe may
    change what trains, and every universe ID must have a label (as a label release for this model
    must list labelled examples only); without a universe, the labelled ones."""
    labelled = labels.column("example_id").combine_chunks()
    if universe is not None:
        ids = universe.column("example_id").combine_chunks()
        unlabelled = int(pc.sum(pc.invert(pc.is_in(ids, value_set=labelled))).as_py() or 0)
        if unlabelled:
            raise DomainError(
                "unusable-dataset", f"{unlabelled} examples of the universe have no label: they cannot train"
            )
        return ids
    if len(labelled) == 0:
        raise DomainError("empty-release", "the dataset has no labelled examples")
    return labelled


def _same_users(
    ids: pa.Array,
    keys: np.ndarray,
    users: np.ndarray,
    labels: pa.Table,
    universe: pa.Table | None,
    release_id: str,
) -> None:
    """Refuse (409) a model on a release whose training examples the dataset now gives other users: the
    release's τ and kept set hold for the users it froze, and a guarantee stated for those while the
    dataset declares another grouping would be wrong for the people it now names (privacy invariant 12).
    A function of the two user maps only (public data)."""
    now = user_keys_of(ids, keys, labels, universe)
    moved = int(np.count_nonzero(now != users))
    if moved:
        raise DomainError(
            "user-map-changed",
            f"{moved} of release {release_id}'s training examples belong to another user now than when it "
            "was made; make a new label release under the current user map",
            status=409,
        )


def plan_model(
    sessions: sessionmaker[Session],
    data_dir: DataDir,
    tenant_id: str,
    dataset_id: str,
    request: SemiSensitiveRequest,
) -> ModelPlan:
    """Everything the charge and the work need, validated — outside any transaction (reading the
    files and calibrating σ take seconds; no lock waits on them)."""
    try:
        from labeldp.semi_sensitive import DpSgdSchedule, Hyper, calibrate_noise, group_privacy
    except ImportError as exc:  # the optional extra
        raise DomainError(
            "dpsgd-unavailable", "training with semi-sensitive features needs labeldp[dpsgd]", status=501
        ) from exc
    ds, spec, release, recipient = _rows(sessions, tenant_id, dataset_id, request)
    files = DatasetFiles(data_dir, dataset_id)
    semi = [c.name for c in spec.semi_sensitive]
    stored = files.read_labels(ds.labels_version, ["example_id", "example_key", "label", "user_id", *semi])
    universe = files.read_universe(ds.universe_version)
    mechanism: PublishedMechanism | None = None
    bins: np.ndarray | None = None
    contribution_bound: int | None = None
    if release is not None:  # what the label release froze, never the dataset's current state
        frozen = frozen_release(data_dir, release)
        if frozen.groups is not None:  # its examples were released by many mechanisms, not one
            raise DomainError(
                "release-has-groups",
                f"release {release.id} used priors from a features party (one mechanism per group); "
                "a semi-sensitive model builds on a release with one mechanism: make one without priors",
                status=409,
            )
        if frozen.mechanism.kind == "unbiased":  # outputs, not bins: no keep/move to train through
            raise DomainError(
                "release-is-unbiased",
                f"release {release.id} used the unbiased randomizer; the label phase reads a release's "
                "keep and move probabilities: make the label release with mechanism rr_on_bins",
                status=409,
            )
        kept = frozen.kept  # user-level: only the kept examples (≤ τ per user) train
        mechanism, contribution_bound = frozen.mechanism, frozen.contribution_bound
        ids, bins = frozen.ids.filter(pa.array(kept)), frozen.bins[kept]
        keys, users = frozen.keys[kept], frozen.users[kept]
        _same_users(ids, keys, users, stored, universe, release.id)
    else:  # every labelled example of the universe (or every labelled one without a universe)
        ids = _labelled_ids(stored, universe)
        keys = users = None
    if len(ids) > MAX_TRAINING_EXAMPLES:
        raise DomainError("too-many-examples", f"at most {MAX_TRAINING_EXAMPLES} examples train here")
    labels = _aligned(ids, stored, "label")
    rows = pq.read_table(files.non_sensitive_path(ds.non_sensitive_version))
    non_sensitive = _aligned(ids, rows, "non-sensitive")
    # what σ is calibrated to is the charge rounded down to a double, never the other way (a float
    # such as 0.1 lies above its decimal, which the charge records)
    epsilon_micro = to_micro(request.epsilon_dpsgd)
    epsilon_dpsgd = float_at_most(Fraction(epsilon_micro, MICRO))
    try:
        Hyper(request.label_epochs, LABEL_PHASE_BATCH, LABEL_PHASE_LEARNING_RATE)
        schedule = DpSgdSchedule.of(len(ids), request.batch_size, request.epochs)
        if schedule.steps > MAX_STEPS:
            raise ParameterError(f"at most {MAX_STEPS} DP-SGD steps", "epochs")
        if contribution_bound is not None:
            delta_tau = group_privacy(epsilon_dpsgd, request.delta, contribution_bound)[1]
            if delta_tau >= 1:
                raise ParameterError(
                    f"the group-privacy δ over τ = {contribution_bound} examples of a user is not below "
                    "1: lower epsilon_dpsgd or delta",
                    "delta",
                )
        sigma = calibrate_noise(schedule, epsilon_dpsgd, request.delta)
    except ParameterError as exc:
        raise DomainError("invalid-parameter", str(exc)) from exc
    if keys is None or users is None:  # DP-SGD alone: the dataset's own rule (the universe's users)
        keys = np.asarray(labels.column("example_key").to_numpy(), dtype=np.int64)  # stored at upload
        users = user_keys_of(ids, keys, stored, universe)
    return ModelPlan(
        spec,
        release,
        mechanism,
        ids,
        bins,
        labels,
        non_sensitive,
        schedule,
        sigma,
        recipient,
        keys,
        users,
        contribution_bound,
        epsilon_micro,
        epsilon_dpsgd,
        request.delta,
    )
