"""Training with semi-sensitive features at the labels party, in the order the invariants require.

1. **Plan** (nothing charged, nothing drawn, no transaction held): the dataset declares
   semi-sensitive and non-sensitive columns and has binary labels; the label release (phase 1) is
   this dataset's, complete, and lists only labelled examples; every one of its examples has a labels
   row and a non-sensitive row; the noise multiplier for (ε₂, δ) and the schedule is calibrated — a
   request that cannot be met is refused here.
2. **Charge**: the model row and the (ε₂ per example, δ) charge commit in one transaction — the path
   every charged job takes (``budget/charged_work.py``): tenant lock first, the segment store always.
3. **Work** (draws only from here on), under the process's lease: the truncated model learns from the
   release's noisy labels (post-processing), DP-SGD continues on every column, and the signed model
   message is written. A failure after the charge, or a crash (recovery), keeps it (status
   ``failed``): noise may have been drawn.

Only the weights leave: the message's guarantee covers every example's label and semi-sensitive
features (docs/semi-sensitive.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.common.files import write_bytes_atomic
from labeldp.common.instance import Instance
from labeldp.common.model_message import Column, Guarantee, ModelPayload, sign_model
from labeldp.mechanisms import ParameterError, PublishedMechanism
from labeldp.mechanisms.debias import BinsNoise
from labeldp.mechanisms.epsilon import float_at_least
from labels_party.budget.charged_work import ChargedWork
from labels_party.budget.epsilon import ATTO, as_float, to_atto, to_micro
from labels_party.budget.ledger import Charging, Ledger, UserCharge
from labels_party.datasets.membership import user_keys_of
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec, FeatureColumn
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.message import Signer
from labels_party.releases.work import release_path
from labels_party.storage.orm import Dataset, Recipient, Release, SemiSensitiveModel

if TYPE_CHECKING:
    from labeldp.semi_sensitive import DpSgdSchedule

log = logging.getLogger("labeldp.labels.semi_sensitive")
MAX_TRAINING_EXAMPLES = 2_000_000  # the DP-SGD phase runs in this process, in memory
MAX_STEPS = 10_000  # the accountant composes every step: 3,000 steps calibrate in 4–13 s here
LABEL_PHASE_BATCH = 256
LABEL_PHASE_LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class SemiSensitiveRequest:
    label_release_id: str
    epsilon_dpsgd: float
    delta: float
    epochs: float = 3.0
    batch_size: int = 1024
    clip_norm: float = 1.0
    learning_rate: float = 1e-2
    label_epochs: float = 3.0
    width: int = 32

    def digest(self, dataset_id: str) -> str:
        body = json.dumps({"dataset": dataset_id, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class _Plan:
    spec: DatasetSpec
    release: Release
    mechanism: PublishedMechanism
    example_ids: pa.Array
    bins: np.ndarray
    labels: pa.Table  # label and semi-sensitive columns, in the release's order
    non_sensitive: pa.Table  # non-sensitive columns, in the release's order
    schedule: DpSgdSchedule  # the dpsgd extra is imported lazily
    noise_multiplier: float
    recipient: str  # the label release's recipient: the model message is addressed to it too
    example_keys: np.ndarray  # the ledger key of each training example
    user_keys: np.ndarray  # the user of each training example (its own key without a user_id)
    contribution_bound: int | None  # τ of a user-level label release (its kept examples train), else None
    epsilon_dpsgd: float
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


def _encodings(columns: list[FeatureColumn]) -> list[object]:
    from labeldp.semi_sensitive.encoding import ColumnEncoding

    return [ColumnEncoding.of(c.model_dump()) for c in columns]


def _aligned(ids: pa.Array, table: pa.Table, what: str) -> pa.Table:
    """``table``'s rows in the order of ``ids``; every id must have one."""
    position = pc.index_in(ids, value_set=table.column("example_id"))
    missing = int(position.null_count)
    if missing:
        raise DomainError(
            f"missing-{what}-rows", f"{missing} of the release's {len(ids)} examples have no {what} row"
        )
    return table.take(position)


def model_message_path(data_dir: Path, model_id: str) -> Path:
    return data_dir / "models" / f"{model_id}.json"


class SemiSensitiveService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: Path,
        signer: Signer,
        ledger: Ledger,
        instance: Instance,
        lease_seconds: float,
    ) -> None:
        self.sessions, self.data_dir, self.signer = sessions, data_dir, signer
        self.jobs = ChargedWork(
            ledger,
            SemiSensitiveModel,
            instance,
            lease_seconds,
            name="model",
            remove_outputs=self.remove_outputs,
        )

    def get(self, tenant_id: str, model_id: str) -> SemiSensitiveModel:
        with self.sessions() as session:
            return owned(session, SemiSensitiveModel, model_id, tenant_id, "model")

    def message(self, tenant_id: str, model_id: str) -> bytes:
        model = self.get(tenant_id, model_id)
        if model.status != "complete":
            raise DomainError("model-not-complete", f"the model is {model.status}", status=409)
        return model_message_path(self.data_dir, model.id).read_bytes()

    def remove_outputs(self, model_id: str) -> None:
        model_message_path(self.data_dir, model_id).unlink(missing_ok=True)

    # -- creating ------------------------------------------------------------------------------------
    def create(
        self, tenant_id: str, api_key_id: str | None, dataset_id: str, request: SemiSensitiveRequest, key: str
    ) -> tuple[SemiSensitiveModel, bool]:
        """The model and whether it was trained now (False: an idempotent replay)."""
        digest = request.digest(dataset_id)
        existing = self.jobs.find(tenant_id, key, digest)
        if existing is not None:
            return existing, False
        plan = self._plan(tenant_id, dataset_id, request)
        row, created = self._charge(tenant_id, api_key_id, dataset_id, key, digest, request, plan)
        if not created:  # lost the race for this Idempotency-Key
            return row, False
        # Charged and committed: from here on the budget is spent whatever happens.
        return self.jobs.run(row.id, lambda: self._work(row, request, plan)), True

    def _rows(
        self, tenant_id: str, dataset_id: str, release_id: str
    ) -> tuple[Dataset, DatasetSpec, Release, str]:
        """The dataset, its spec, the label release and its recipient's name, checked (a short read)."""
        with self.sessions() as session:
            ds = get_dataset(session, tenant_id, dataset_id)
            spec = DatasetSpec.model_validate(ds.spec)
            if spec.label_type != "binary" or not spec.semi_sensitive or not spec.non_sensitive:
                raise DomainError(
                    "not-semi-sensitive",
                    "the dataset needs binary labels and declared semi_sensitive and non_sensitive columns",
                )
            if not ds.non_sensitive_version:
                raise DomainError("no-non-sensitive-rows", "upload the non-sensitive rows first", status=409)
            release = owned(session, Release, release_id, tenant_id, "release")
            if release.dataset_id != dataset_id or release.status != "complete" or release.mechanism is None:
                raise DomainError(
                    "unusable-label-release", "the label release must be this dataset's and complete"
                )
            if release.examples_defaulted:
                raise DomainError(
                    "unusable-label-release", "the label release must list labelled examples only"
                )
            recipient = session.get(Recipient, release.recipient_id)
            assert recipient is not None  # a foreign key
            return ds, spec, release, recipient.name

    def _plan(self, tenant_id: str, dataset_id: str, request: SemiSensitiveRequest) -> _Plan:
        """Everything the charge and the work need, validated — outside any transaction (reading the
        files and calibrating σ take seconds; no lock waits on them)."""
        try:
            from labeldp.semi_sensitive import DpSgdSchedule, Hyper, calibrate_noise, group_privacy
        except ImportError as exc:  # the optional extra
            raise DomainError(
                "dpsgd-unavailable", "training with semi-sensitive features needs labeldp[dpsgd]", status=501
            ) from exc
        ds, spec, release, recipient = self._rows(tenant_id, dataset_id, request.label_release_id)
        mechanism = PublishedMechanism.model_validate(release.mechanism)
        output = pq.read_table(release_path(self.data_dir, release.id))
        if mechanism.capped_bin is not None:  # user-level: only the kept examples (≤ τ per user) train
            output = output.filter(pc.less(output.column("bin"), mechanism.capped_bin))
        ids = output.column("example_id").combine_chunks()
        if len(ids) > MAX_TRAINING_EXAMPLES:
            raise DomainError("too-many-examples", f"at most {MAX_TRAINING_EXAMPLES} examples train here")
        files = DatasetFiles(self.data_dir, dataset_id)
        semi = [c.name for c in spec.semi_sensitive]
        stored = files.read_labels(
            ds.labels_version, ["example_id", "example_key", "label", "user_id", *semi]
        )
        labels = _aligned(ids, stored, "label")
        rows = pq.read_table(files.non_sensitive_path(ds.non_sensitive_version))
        non_sensitive = _aligned(ids, rows, "non-sensitive")
        contribution_bound = mechanism.contribution_bound if mechanism.privacy_unit == "user" else None
        try:
            Hyper(request.label_epochs, LABEL_PHASE_BATCH, LABEL_PHASE_LEARNING_RATE)
            schedule = DpSgdSchedule.of(len(ids), request.batch_size, request.epochs)
            if schedule.steps > MAX_STEPS:
                raise ParameterError(f"at most {MAX_STEPS} DP-SGD steps", "epochs")
            if contribution_bound is not None:
                delta_tau = group_privacy(request.epsilon_dpsgd, request.delta, contribution_bound)[1]
                if delta_tau >= 1:
                    raise ParameterError(
                        f"the group-privacy δ over τ = {contribution_bound} examples of a user is not below "
                        "1: lower epsilon_dpsgd or delta",
                        "delta",
                    )
            sigma = calibrate_noise(schedule, request.epsilon_dpsgd, request.delta)
        except ParameterError as exc:
            raise DomainError("invalid-parameter", str(exc)) from exc
        bins = np.asarray(output.column("bin").to_numpy(), dtype=np.int64)
        keys = np.asarray(labels.column("example_key").to_numpy(), dtype=np.int64)  # stored at upload
        # who each example's user is: the release's rule (the universe's users when it has one)
        users = user_keys_of(ids, keys, stored, files.read_universe(ds.universe_version))
        return _Plan(
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
            request.epsilon_dpsgd,
            request.delta,
        )

    def _charge(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        key: str,
        digest: str,
        request: SemiSensitiveRequest,
        plan: _Plan,
    ) -> tuple[SemiSensitiveModel, bool]:
        """Insert the model row and charge (ε₂, δ) to every training example in one transaction."""
        row = SemiSensitiveModel(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            label_release_id=plan.release.id,
            idempotency_key=key,
            request_hash=digest,
            status="charged",
            examples=len(plan.example_ids),
            epsilon_dpsgd_micro=to_micro(request.epsilon_dpsgd),
            delta_atto=to_atto(plan.delta_charged),
            noise_multiplier=plan.noise_multiplier,
            sampling_rate=plan.schedule.sampling_rate,
            steps=plan.schedule.steps,
            clip_norm=request.clip_norm,
            api_key_id=api_key_id,
        )
        keys = np.unique(plan.example_keys)
        # every user pays ε₂ for each of its training examples (group privacy), as label releases charge
        users = UserCharge.of_examples(plan.user_keys, row.epsilon_dpsgd_micro)
        user_delta = max(plan.user_delta_atto(), row.delta_atto)

        def charge(ledger: Charging, model: SemiSensitiveModel) -> None:
            entry = ledger.charge(
                keys,
                model.epsilon_dpsgd_micro,
                release_id=model.id,
                api_key_id=api_key_id,
                users=users,
                note="semi-sensitive model: DP-SGD phase",
                delta_atto=model.delta_atto,
                user_delta_atto=user_delta,
            )
            model.delta_atto = entry.delta_atto or model.delta_atto  # per user when per-user budgets apply

        return self.jobs.admit(row, charge)

    def _work(self, row: SemiSensitiveModel, request: SemiSensitiveRequest, plan: _Plan) -> dict[str, object]:
        """Train (every draw happens here, after the charge committed) and write the signed message;
        the model's columns on completion."""
        raw = self._train(row, request, plan)
        write_bytes_atomic(model_message_path(self.data_dir, row.id), raw)
        return {"message_sha256": hashlib.sha256(raw).hexdigest()}

    def _train(self, row: SemiSensitiveModel, request: SemiSensitiveRequest, plan: _Plan) -> bytes:
        from labeldp.semi_sensitive import (
            ACCOUNTANT,
            Hyper,
            TwoTower,
            group_privacy,
            train_dpsgd,
            train_truncated,
        )
        from labeldp.semi_sensitive.encoding import encode

        spec = plan.spec
        x_non = encode(_columns(plan.non_sensitive), _encodings(spec.non_sensitive))  # type: ignore[arg-type]
        x_semi = encode(_columns(plan.labels), _encodings(spec.semi_sensitive))  # type: ignore[arg-type]
        labels = np.asarray(plan.labels.column("label").to_numpy(), dtype=np.int64)
        model = TwoTower(x_non.shape[1], x_semi.shape[1], request.width)
        noise = BinsNoise.of_published(plan.mechanism)
        if noise.m == 2:  # phase 1: post-processing of the release (bin index = class, bins ascending)
            hyper = Hyper(request.label_epochs, LABEL_PHASE_BATCH, LABEL_PHASE_LEARNING_RATE)
            train_truncated(model, x_non, plan.bins, noise, hyper)
        run = train_dpsgd(
            model,
            x_non,
            x_semi,
            labels,
            schedule=plan.schedule,
            noise_multiplier=plan.noise_multiplier,
            clip_norm=request.clip_norm,
            learning_rate=request.learning_rate,
        )
        eps1 = plan.mechanism.epsilon_example or plan.mechanism.epsilon
        per_user: dict[str, Any] = {}
        if plan.contribution_bound is not None:  # group privacy over the ≤ τ examples a user trains with
            eps_tau, delta_tau = group_privacy(request.epsilon_dpsgd, request.delta, plan.contribution_bound)
            user_labels = as_float(plan.release.epsilon_user_micro or 0)
            per_user = {
                "unit": "user",
                "contribution_bound": plan.contribution_bound,
                "epsilon_user": float_at_least(Fraction(user_labels) + Fraction(eps_tau)),
                "delta_user": delta_tau,
            }
        guarantee = Guarantee(
            epsilon_labels=eps1,
            label_release_id=plan.release.id,
            epsilon_dpsgd=request.epsilon_dpsgd,
            delta=request.delta,
            epsilon_total=float_at_least(Fraction(eps1) + Fraction(request.epsilon_dpsgd)),
            accountant=ACCOUNTANT,
            noise_multiplier=run.noise_multiplier,
            sampling_rate=run.schedule.sampling_rate,
            steps=run.schedule.steps,
            clip_norm=run.clip_norm,
            examples=row.examples,
            **per_user,
        )
        now = int(time.time() * 1000)
        payload = ModelPayload(
            model_id=row.id,
            sender_id=self.signer.party_id,
            sender_key_id=self.signer.identity.key_id,
            recipient_id=plan.recipient,
            dataset_id=row.dataset_id,
            created_at_unix_ms=now,
            expires_at_unix_ms=now + 1000 * self.signer.ttl_seconds,
            guarantee=guarantee,
            non_sensitive=[Column(**c.model_dump()) for c in spec.non_sensitive],
            semi_sensitive=[Column(**c.model_dump()) for c in spec.semi_sensitive],
            architecture={"width": request.width},
            weights=model.arrays(),
        )
        return sign_model(payload, self.signer.identity)


def _columns(table: pa.Table) -> dict[str, np.ndarray]:
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
