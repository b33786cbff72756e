"""Creating a release, in the order the privacy invariants require.

1. Validate everything that can be validated (dataset, recipient, ε, loss, example set, labels).
2. Insert the release row and charge the ledger **in one transaction**: there is never a release
   without its charge, nor a charge without its release. A concurrent request with the same
   Idempotency-Key loses on the unique constraint and gets the original release instead.
3. Draw the noise (Algorithm 3) and write the output (bin indices, columnar) atomically.
4. Mark the release ``complete``. A crash between 2 and 4 leaves it ``charged``; on restart it is
   marked ``failed`` and keeps its charge, because noise may already have been drawn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.mechanisms import (
    default_prior_epsilon,
    optimize_rr_on_bins,
    release_classes,
    release_labels,
)
from labeldp.mechanisms.validation import check_epsilon
from labels_party.budget.epsilon import to_micro
from labels_party.budget.ledger import charge, lock_tenant, record_kept_charge
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.message import Signer, write_message
from labels_party.storage.orm import Dataset, Recipient, Release, utcnow

Loss = Literal["squared", "absolute", "poisson", "zero_one"]
log = logging.getLogger("labeldp.labels.releases")


@dataclass
class ReleaseError(Exception):
    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ReleaseRequest:
    epsilon: float
    loss: Loss
    recipient: str
    epsilon_prior: float | None = None
    example_ids: list[str] | None = None

    def digest(self, dataset_id: str) -> str:
        body = {"dataset": dataset_id, **self.__dict__}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ExampleSet:
    ids: pa.Array
    keys: np.ndarray
    labels: np.ndarray
    defaulted: int  # universe IDs without a label, which took the default label
    universe_declared: bool


def release_path(data_dir: Path, release_id: str) -> Path:
    return data_dir / "releases" / f"{release_id}.parquet"


def load_dataset(session: Session, tenant_id: str, dataset_id: str) -> tuple[Dataset, DatasetSpec]:
    ds = session.get(Dataset, dataset_id)
    if ds is None or ds.tenant_id != tenant_id:
        raise ReleaseError(404, "not-found", f"no dataset {dataset_id}")
    return ds, DatasetSpec.model_validate(ds.spec)


def example_set(files: DatasetFiles, ds: Dataset, spec: DatasetSpec, subset: list[str] | None) -> ExampleSet:
    """The IDs a release covers (the declared universe, else the labelled IDs) with their labels.

    With a universe, the message lists every ID in it, labelled or not, so it does not reveal which
    examples have labels (privacy invariant 4); missing labels take the dataset's default label.
    """
    labels = files.read_labels(ds.labels_version)
    universe = files.read_universe(ds.universe_version)
    base = universe if universe is not None else labels.select(["example_id", "example_key"])
    if subset is not None:
        wanted = pa.array(subset, pa.string())
        if len(set(subset)) != len(subset):
            raise ReleaseError(422, "duplicate-example-id", "example_ids contains duplicates")
        unknown = int(pc.sum(pc.invert(pc.is_in(wanted, value_set=base.column("example_id")))).as_py() or 0)
        if unknown:
            raise ReleaseError(422, "unknown-example-ids", f"{unknown} example_ids are not in the dataset")
        base = base.filter(pc.is_in(base.column("example_id"), value_set=wanted))
    if base.num_rows == 0:
        raise ReleaseError(422, "empty-release", "the release would contain no examples")
    ids = base.column("example_id").combine_chunks()
    position = pc.index_in(ids, value_set=labels.column("example_id"))
    has_label = np.asarray(pc.is_valid(position).to_numpy(zero_copy_only=False), dtype=bool)
    values = np.empty(len(ids), dtype=np.float64)
    if has_label.any():
        idx = np.asarray(pc.drop_null(position).to_numpy(zero_copy_only=False), dtype=np.int64)
        values[has_label] = np.asarray(labels.column("label").to_numpy(), dtype=np.float64)[idx]
    missing = int((~has_label).sum())
    if missing:
        if spec.default_label is None:
            raise ReleaseError(
                422,
                "missing-labels",
                f"{missing} example IDs in the universe have no label and the dataset has no default_label",
            )
        values[~has_label] = spec.default_label
    keys = np.asarray(base.column("example_key").to_numpy(), dtype=np.int64)
    return ExampleSet(ids, keys, values, missing, universe is not None)


def _classes(spec: DatasetSpec, loss: str) -> bool:
    """Categorical labels, and binary labels under 0-1 loss, are released with RR-Top-k."""
    return spec.label_type == "categorical" or loss == "zero_one"


def check_loss(spec: DatasetSpec, loss: str) -> None:
    allowed = {"categorical": {"zero_one"}, "binary": {"squared", "zero_one"}}.get(
        spec.label_type, {"squared", "absolute", "poisson"}
    )
    if loss not in allowed:
        raise ReleaseError(
            422, "invalid-loss", f"{spec.label_type} labels take loss {sorted(allowed)}, got {loss!r}"
        )
    if loss == "poisson" and spec.lo < 0:
        raise ReleaseError(422, "invalid-loss", "Poisson loss needs non-negative labels (lo >= 0)")


def split(request: ReleaseRequest, n: int, k: int) -> float:
    try:
        eps = check_epsilon(request.epsilon)
        if request.epsilon_prior is None:
            return default_prior_epsilon(eps, n, k)
        prior = check_epsilon(request.epsilon_prior, "epsilon_prior")
    except ValueError as exc:
        raise ReleaseError(422, "invalid-epsilon", str(exc)) from exc
    if not prior < eps:
        raise ReleaseError(422, "invalid-epsilon", "epsilon_prior must be smaller than epsilon")
    return prior


def find_by_key(session: Session, tenant_id: str, key: str) -> Release | None:
    return session.execute(
        select(Release).where(Release.tenant_id == tenant_id, Release.idempotency_key == key)
    ).scalar_one_or_none()


def _replay(existing: Release, digest: str) -> Release:
    if existing.request_hash != digest:
        raise ReleaseError(
            422, "idempotency-key-reused", "this Idempotency-Key was used for a different request body"
        )
    return existing


def create_release(
    sessions: sessionmaker[Session],
    data_dir: Path,
    tenant_id: str,
    api_key_id: str | None,
    dataset_id: str,
    request: ReleaseRequest,
    idempotency_key: str,
    signer: Signer,
) -> tuple[Release, bool]:
    """Returns the release and whether it was created now (False: an idempotent replay)."""
    digest = request.digest(dataset_id)
    with sessions() as session:
        existing = find_by_key(session, tenant_id, idempotency_key)
        if existing is not None:
            return _replay(existing, digest), False
        ds, spec = load_dataset(session, tenant_id, dataset_id)
        recipient = session.execute(
            select(Recipient).where(Recipient.tenant_id == tenant_id, Recipient.name == request.recipient)
        ).scalar_one_or_none()
        if recipient is None:
            raise ReleaseError(
                422, "unknown-recipient", f"no registered recipient named {request.recipient!r}"
            )
        check_loss(spec, request.loss)
        examples = example_set(DatasetFiles(data_dir, ds.id), ds, spec, request.example_ids)
        k = spec.num_classes if _classes(spec, request.loss) else spec.build_support().k
        eps_prior = split(request, int(examples.keys.size), k)
    try:
        epsilon_micro = to_micro(request.epsilon)
    except ValueError as exc:
        raise ReleaseError(422, "invalid-epsilon", str(exc)) from exc

    release = Release(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        idempotency_key=idempotency_key,
        request_hash=digest,
        status="charged",
        recipient_id=recipient.id,
        epsilon_micro=epsilon_micro,
        epsilon_prior=eps_prior,
        loss=request.loss,
        examples=int(examples.keys.size),
        api_key_id=api_key_id,
    )
    try:
        with sessions.begin() as session:
            # Lock order: the tenant first. Inserting the release takes a key-share lock on the
            # tenant (foreign key); asking for the write lock only afterwards deadlocks.
            lock_tenant(session, tenant_id)
            session.add(release)
            session.flush()  # the idempotency key's unique constraint fires here
            charge(
                session,
                tenant_id,
                examples.keys,
                epsilon_micro,
                release_id=release.id,
                api_key_id=api_key_id,
                note=f"dataset {dataset_id}",
            )
    except IntegrityError:
        with sessions() as session:
            existing = find_by_key(session, tenant_id, idempotency_key)
        if existing is None:
            raise
        return _replay(existing, digest), False

    log.info(
        "release charged",
        extra={
            "release_id": release.id,
            "dataset_id": dataset_id,
            "examples": release.examples,
            "epsilon": request.epsilon,
        },
    )
    # Charged and committed: from here on the budget is spent whatever happens.
    try:
        mechanism, indices = _privatize(data_dir, release, spec, examples, request.epsilon, eps_prior)
        write_message(
            data_dir,
            signer,
            release_id=release.id,
            recipient=recipient.name,
            label_type=spec.label_type,
            epsilon_total=request.epsilon,
            mechanism=mechanism,
            loss=release.loss,
            example_ids=examples.ids,
            bins=indices,
        )
    except Exception as exc:
        log.exception("release failed after its charge", extra={"release_id": release.id})
        with sessions.begin() as session:
            session.execute(
                update(Release).where(Release.id == release.id).values(status="failed", error=str(exc)[:2000])
            )
            record_kept_charge(
                session,
                tenant_id,
                release.id,
                epsilon_micro,
                release.examples,
                f"release failed: {type(exc).__name__}",
            )
        raise
    with sessions.begin() as session:
        session.execute(
            update(Release)
            .where(Release.id == release.id)
            .values(status="complete", mechanism=mechanism, completed_at=utcnow())
        )
    with sessions() as session:
        done = session.get(Release, release.id)
        assert done is not None
        return done, True


def _privatize(
    data_dir: Path,
    release: Release,
    spec: DatasetSpec,
    examples: ExampleSet,
    epsilon: float,
    eps_prior: float,
) -> tuple[dict[str, Any], np.ndarray]:
    """Draw the noise, write the output (example_id, bin) and return the mechanism and the bins.
    A bin is always an index into ``bin_values`` (for RR-Top-k: into the reported classes)."""
    if _classes(spec, release.loss):
        cls = release_classes(examples.labels.astype(np.int64), spec.num_classes, epsilon, eps_prior)
        position = np.full(spec.num_classes, -1, dtype=np.int64)
        position[cls.mechanism.top] = np.arange(cls.mechanism.k)
        indices = position[cls.labels]
        mechanism: dict[str, Any] = {
            "kind": "rr_top_k",
            "epsilon_randomize": cls.epsilon_randomize,
            "implemented_epsilon": cls.mechanism.threshold.implemented_epsilon,
            "classes": cls.mechanism.top.tolist(),
            "num_classes": spec.num_classes,
            "prior": cls.prior.tolist(),
            "bin_values": [float(c) for c in cls.mechanism.top.tolist()],
        }
        m = cls.mechanism.k
    else:
        support = spec.build_support()
        rel = release_labels(examples.labels, support, epsilon, release.loss, eps_prior)
        indices = rel.bin_indices
        mech = rel.mechanism
        mechanism = {
            "kind": "rr_on_bins",
            "epsilon_randomize": rel.epsilon_randomize,
            "implemented_epsilon": mech.implemented_epsilon,
            "bin_values": mech.bin_values.tolist(),
            "bin_edges": mech.bin_edges,
            "support": support.values.tolist(),
            "prior": rel.prior.tolist(),
            "expected_loss_under_noisy_prior": mech.expected_loss(support.values, rel.prior),
        }
        m = mech.m
    dtype = pa.uint8() if m <= 256 else pa.uint16()
    table = pa.table({"example_id": examples.ids, "bin": pa.array(indices, dtype)})
    files = DatasetFiles(data_dir, release.dataset_id)
    files.write(release_path(data_dir, release.id), table)
    mechanism.update(
        {
            "epsilon_prior": eps_prior,
            "examples_defaulted": examples.defaulted,
            "universe_declared": examples.universe_declared,
        }
    )
    return mechanism, indices


def preview(
    sessions: sessionmaker[Session], data_dir: Path, tenant_id: str, dataset_id: str, request: ReleaseRequest
) -> dict[str, Any]:
    """What a release would look like, for the dataset owner only: bins and expected loss under the
    exact label histogram. Spends nothing and draws no noise; the result goes back to the tenant
    (who holds the labels anyway), never to a recipient."""
    with sessions() as session:
        ds, spec = load_dataset(session, tenant_id, dataset_id)
        check_loss(spec, request.loss)
        examples = example_set(DatasetFiles(data_dir, ds.id), ds, spec, request.example_ids)
    if spec.label_type == "categorical":
        raise ReleaseError(
            422, "preview-unsupported", "previews are available for regression and binary labels"
        )
    support = spec.build_support()
    eps_prior = split(request, int(examples.keys.size), support.k)
    counts = support.counts(examples.labels)
    mech = optimize_rr_on_bins(support, counts, request.epsilon - eps_prior, request.loss)
    return {
        "epsilon": request.epsilon,
        "epsilon_prior": eps_prior,
        "examples": int(examples.keys.size),
        "m": mech.m,
        "bin_values": mech.bin_values.tolist(),
        "bin_edges": mech.bin_edges,
        "expected_loss": mech.expected_loss(support.values, counts),
    }


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
