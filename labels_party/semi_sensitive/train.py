"""The work a semi-sensitive model's charge pays for — every draw happens here, after the charge
committed: the truncated model on the release's noisy labels (phase 1, post-processing), DP-SGD on
every column, and the signed model message with its guarantee."""

from __future__ import annotations

import time
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from labeldp.common.model_message import Column, Guarantee, ModelPayload, sign_model
from labeldp.mechanisms.debias import BinsNoise
from labeldp.mechanisms.epsilon import float_at_least
from labels_party.budget.epsilon import as_float
from labels_party.datasets.spec import FeatureColumn
from labels_party.delivery.message import Signer
from labels_party.semi_sensitive.plan import (
    LABEL_PHASE_BATCH,
    LABEL_PHASE_LEARNING_RATE,
    ModelPlan,
    SemiSensitiveRequest,
)
from labels_party.storage.orm import SemiSensitiveModel

if TYPE_CHECKING:  # the optional dpsgd extra: imported when a model trains
    from labeldp.semi_sensitive.encoding import ColumnEncoding


def _encodings(columns: list[FeatureColumn]) -> list[ColumnEncoding]:
    from labeldp.semi_sensitive.encoding import ColumnEncoding

    return [ColumnEncoding.of(c.model_dump()) for c in columns]


def train_and_sign(
    row: SemiSensitiveModel, request: SemiSensitiveRequest, plan: ModelPlan, signer: Signer
) -> bytes:
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
    x_non = encode(_columns(plan.non_sensitive), _encodings(spec.non_sensitive))
    x_semi = encode(_columns(plan.labels), _encodings(spec.semi_sensitive))
    labels = np.asarray(plan.labels.column("label").to_numpy(), dtype=np.int64)
    model = TwoTower(x_non.shape[1], x_semi.shape[1], request.width)
    noise = BinsNoise.of_published(plan.mechanism) if plan.mechanism is not None else None
    if noise is not None and noise.m == 2 and plan.bins is not None:
        # phase 1: post-processing of the release (bin index = class, bins ascending)
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
    eps1 = 0.0  # no label phase: DP-SGD alone
    if plan.mechanism is not None:
        eps1 = plan.mechanism.epsilon_example or plan.mechanism.epsilon
    per_user: dict[str, Any] = {}
    if plan.contribution_bound is not None:  # group privacy over the ≤ τ examples a user trains with
        eps_tau, delta_tau = group_privacy(plan.epsilon_dpsgd, request.delta, plan.contribution_bound)
        assert plan.release is not None  # a contribution bound comes from a user-level label release
        user_labels = as_float(plan.release.epsilon_user_micro or 0)
        per_user = {
            "unit": "user",
            "contribution_bound": plan.contribution_bound,
            "epsilon_user": float_at_least(Fraction(user_labels) + Fraction(eps_tau)),
            "delta_user": delta_tau,
        }
    guarantee = Guarantee(
        epsilon_labels=eps1,
        label_release_id=plan.release.id if plan.release is not None else None,
        epsilon_dpsgd=plan.epsilon_dpsgd,
        delta=request.delta,
        epsilon_total=float_at_least(Fraction(eps1) + Fraction(plan.epsilon_dpsgd)),
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
        sender_id=signer.party_id,
        sender_key_id=signer.identity.key_id,
        recipient_id=plan.recipient.name,
        recipient_tenant=plan.recipient.recipient_tenant,
        dataset_id=row.dataset_id,
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 1000 * signer.ttl_seconds,
        guarantee=guarantee,
        non_sensitive=[Column(**c.model_dump()) for c in spec.non_sensitive],
        semi_sensitive=[Column(**c.model_dump()) for c in spec.semi_sensitive],
        architecture={"width": request.width},
        weights=model.arrays(),
    )
    return sign_model(payload, signer.identity)


def _columns(table: pa.Table) -> dict[str, np.ndarray]:
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
