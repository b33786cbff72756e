"""A release request, validated completely before anything is charged.

Everything the request determines is checked here: the dataset and its spec, the loss (and so the
mechanism), the examples and their labels, and the exact ε split — so that nothing after the charge
can fail for a reason the request could have shown (privacy invariant 7).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from sqlalchemy.orm import Session

from labeldp.common.errors import DomainError
from labeldp.mechanisms import (
    LossName,
    ParameterError,
    Support,
    default_prior_epsilon,
    float_at_most,
    split_epsilon,
)
from labels_party.budget.epsilon import MICRO, to_micro
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.releases.examples import ExampleSet, example_set
from labels_party.releases.limits import MAX_EPSILON, MIN_EPSILON, MIN_EPSILON_PRIOR


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

    dataset_id: str
    spec: DatasetSpec
    loss: LossName
    support: Support
    examples: ExampleSet
    epsilon_micro: int  # charged to every example
    epsilon: float  # the largest double not above the charge: what the mechanisms may spend
    epsilon_prior: float
    epsilon_randomize: float


def split(request: ReleaseRequest, n: int, k: int) -> tuple[int, float, float, float]:
    """(micro-ε charged, ε as spendable, ε₁, ε₂) with ε₁ + ε₂ <= ε <= the charge, exactly."""
    if not MIN_EPSILON <= request.epsilon <= MAX_EPSILON:
        raise DomainError("invalid-epsilon", f"epsilon must lie in [{MIN_EPSILON}, {MAX_EPSILON}]")
    if request.epsilon_prior is not None and not request.epsilon_prior >= MIN_EPSILON_PRIOR:
        raise DomainError("invalid-epsilon", f"epsilon_prior must be at least {MIN_EPSILON_PRIOR}")
    try:
        micro = to_micro(request.epsilon)
        epsilon = float_at_most(Fraction(micro, MICRO))
        prior = (
            default_prior_epsilon(epsilon, n, k) if request.epsilon_prior is None else request.epsilon_prior
        )
        eps_prior, eps_randomize = split_epsilon(epsilon, prior)
    except (ParameterError, ValueError) as exc:
        raise DomainError("invalid-epsilon", str(exc)) from exc
    return micro, epsilon, eps_prior, eps_randomize


def plan_release(
    session: Session, data_dir: Path, tenant_id: str, dataset_id: str, request: ReleaseRequest
) -> Plan:
    ds = get_dataset(session, tenant_id, dataset_id)
    spec = DatasetSpec.model_validate(ds.spec)
    loss = spec.loss(request.loss)
    support = spec.support_for(loss)
    examples = example_set(DatasetFiles(data_dir, ds.id), ds, spec, request.example_ids)
    micro, epsilon, eps_prior, eps_randomize = split(request, examples.n, support.k)
    return Plan(dataset_id, spec, loss, support, examples, micro, epsilon, eps_prior, eps_randomize)
