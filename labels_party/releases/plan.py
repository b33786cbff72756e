"""A release request, validated completely before anything is charged.

Everything the request determines is checked here: the dataset and its spec, the loss (and so the
mechanism), the examples and their labels, and the exact ε split — so that nothing after the charge
can fail for a reason the request could have shown (privacy invariant 7). A user-level release also
fixes here, before any noise, what every example and every user is charged.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np

from labeldp.common.errors import DomainError
from labeldp.mechanisms import (
    DEFAULT_MODEL_CAPACITY,
    BoundRule,
    LossName,
    MechanismKind,
    Objective,
    ParameterError,
    PrivacyUnit,
    Support,
    UserSplit,
    contribution_ranks,
    examples_per_user,
    float_at_most,
    plan_user_split,
    prior_split,
)
from labeldp.mechanisms.factory import (
    check_mechanism,
    check_mechanism_epsilon,
    default_mechanism,
    mechanism_kind,
)
from labeldp.mechanisms.objective import check_objective, default_objective
from labeldp.mechanisms.unbiased import UNBIASED_LOSSES
from labeldp.mechanisms.unbiased_weights import MAX_UNBIASED_SUPPORT
from labels_party.budget.epsilon import MICRO, to_micro
from labels_party.budget.idempotency import Fingerprint, ids_digest
from labels_party.budget.ledger import UserCharge
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.priors import StoredPriors
from labels_party.releases.examples import ExampleSet, StoredExamples, example_set, stored_examples
from labels_party.releases.groups import GroupPlan, group_plan
from labels_party.releases.limits import MAX_BOUND, MAX_EPSILON, MIN_EPSILON, MIN_EPSILON_PRIOR
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset


@dataclass(frozen=True)
class ReleaseRequest:
    epsilon: float  # per example, or per user for a user-level release
    loss: str | None  # None: the label type's default loss
    recipient: str
    epsilon_prior: float | None = None
    example_ids: list[str] | None = None
    privacy_unit: PrivacyUnit = "example"
    contribution_bound: int | BoundRule | None = None  # user-level: τ, "auto" or "private"
    epsilon_bound: float | None = None  # user-level, private bound: ε spent choosing τ
    objective: str | None = None  # None: the default objective
    model_capacity: float | None = None  # objective model: the declared capacity (None: the default)
    mechanism: str | None = None  # None: the default mechanism (factory.default_mechanism)
    priors_id: str | None = None  # feature-aware: the stored priors whose groups the examples take

    def digest(self, dataset_id: str) -> str:
        """The request as sent, hashed: what releases made before resolved requests were kept hold
        their keys to."""
        body = {"dataset": dataset_id, **asdict(self)}
        if self.privacy_unit == "example":  # the digest of example-level requests predates these
            for name in ("privacy_unit", "contribution_bound", "epsilon_bound"):
                body.pop(name)
        for name in (
            "objective",
            "model_capacity",
            "mechanism",
            "priors_id",
        ):  # and these, when not asked for
            if body[name] is None:
                body.pop(name)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def fingerprint(self, dataset_id: str, spec: DatasetSpec) -> Fingerprint:
        """The request as its Idempotency-Key is held to it (``budget/idempotency.py``): resolved
        against the dataset's declaration — the loss, a named objective's capacity as it defaults,
        numbers as floats — by the API's field names. ε₁, ε_τ, the mechanism and an objective left
        out stay as sent: their defaults follow from ε₂, hence from the data, which a retry must not
        have to read (an omitted objective and a named one are different requests: the first may be
        the unbiased randomizer, or the label objective below ε₂ = 0.2)."""
        loss = spec.loss(self.loss)
        user = self.privacy_unit == "user"
        # what an omitted objective gives follows from ε₂ (the unbiased randomizer, or the label
        # objective below 0.2) only for an example-level squared or Poisson release without priors;
        # elsewhere it resolves here: user level the loss's own, on priors at the whole ε
        on_priors = self.priors_id is not None
        objective = self.resolved_objective(loss, float(self.epsilon) if on_priors and not user else None)
        named = (
            self.objective is not None
            or self.model_capacity is not None
            or loss not in UNBIASED_LOSSES
            or user
            or on_priors
        )

        def number(value: float | None) -> float | None:
            return None if value is None else float(value)

        fields: dict[str, object] = {
            "dataset_id": dataset_id,
            "privacy_unit": self.privacy_unit,
            "epsilon_user" if user else "epsilon": float(self.epsilon),
            "loss": loss,
            "recipient": self.recipient,
            "epsilon_prior": number(self.epsilon_prior),
            "example_ids": ids_digest(self.example_ids),
            "objective": objective.name if named else None,
            "model_capacity": objective.model_capacity if named and objective.name == "model" else None,
        }
        if self.mechanism is not None:  # as sent (its default follows from n); absent: keys from before
            fields["mechanism"] = self.mechanism
        if user:
            fields["contribution_bound"] = self.contribution_bound
            fields["epsilon_bound"] = number(self.epsilon_bound)
        if self.priors_id is not None:  # (absent otherwise: keys stored before priors still match)
            fields["prior"] = {"from": "features-party", "priors_id": self.priors_id}
        # version 2 resolved an omitted objective to the loss's ε-free default
        was = self.resolved_objective(loss)
        before = {
            **fields,
            "objective": was.name,
            "model_capacity": was.model_capacity if was.name == "model" else None,
        }
        return Fingerprint(fields, legacy=self.digest(dataset_id), previous=before)

    def resolved_objective(self, loss: str, epsilon_randomize: float | None = None) -> Objective:
        """The objective asked for (or the default for the loss and ε₂, ``default_objective``; an
        Idempotency-Key's fingerprint, which must not read the data ε₂ follows from, resolves it
        without), validated (a ``DomainError`` before anything is charged)."""
        try:
            if self.objective is not None:
                name = check_objective(self.objective)
            else:  # a capacity asks for the loss's own default (model for squared), whatever ε₂
                at = None if self.model_capacity is not None else epsilon_randomize
                name = default_objective(loss, at)
            if self.model_capacity is not None and name != "model":
                raise DomainError("invalid-request", "model_capacity belongs to the objective model")
            return Objective(
                name, DEFAULT_MODEL_CAPACITY if self.model_capacity is None else self.model_capacity
            )
        except ParameterError as exc:
            raise DomainError("invalid-request", str(exc)) from exc


@dataclass(frozen=True)
class UserPlan:
    """What a user-level release fixes before its charge: the split, the salt that orders each user's
    examples, and which examples are charged how much."""

    split: UserSplit
    bound: int | BoundRule  # as asked
    salt: int
    epsilon_user_micro: int
    charged: np.ndarray  # bool per example: charged (given τ: the kept ones; chosen τ: all)
    users: int


@dataclass(frozen=True)
class Plan:
    """A validated release: what will be charged and how the ε is split, before anything happens."""

    dataset_id: str
    spec: DatasetSpec
    loss: LossName
    support: Support
    examples: ExampleSet | StoredExamples  # in memory, or left in storage for a cluster's workers
    epsilon_micro: int  # charged to every example
    epsilon: float  # the largest double not above the charge: what the mechanisms may spend
    epsilon_prior: float
    epsilon_randomize: float  # user-level: for a given τ, else an upper bound (τ = 1)
    user: UserPlan | None = None
    objective: Objective = field(default_factory=lambda: Objective("label"))
    mechanism: MechanismKind = "rr_on_bins"
    groups: GroupPlan | None = None  # feature-aware: each example's group of the stored priors

    @property
    def objective_examples(self) -> int:
        """How many labels a model learns from (the model objective's n; public): every listed example,
        or for a user-level release the kept ones (for a chosen τ, as if τ = 1: one per user)."""
        if self.user is None:
            return self.examples.n
        return int(self.user.charged.sum()) if self.user.split.bound is not None else self.user.users

    @property
    def in_memory(self) -> ExampleSet:
        """The examples, for the steps that run in this process (a plan left in storage never gets
        there: it is charged and privatized on the cluster)."""
        if not isinstance(self.examples, ExampleSet):
            raise RuntimeError("this plan's examples are in storage: only a cluster can release them")
        return self.examples

    @property
    def charged_keys(self) -> np.ndarray:
        """The ledger keys of the examples this release charges."""
        keys = self.in_memory.keys
        return keys if self.user is None else keys[self.user.charged]

    def user_charge(self) -> UserCharge:
        """Every user in the release: ε_user each (user-level), or ε per example (group privacy)."""
        if self.user is not None:
            return UserCharge.each(self.in_memory.user_keys, self.user.epsilon_user_micro)
        return UserCharge.of_examples(self.in_memory.user_keys, self.epsilon_micro)


def invalid_epsilon(detail: str, parameter: str) -> DomainError:
    """422 ``invalid-epsilon`` naming the request field it is about in ``parameter`` (as
    ``invalid-parameter`` does), so that a form can show it at that field."""
    if not parameter:
        return DomainError("invalid-epsilon", detail)
    return DomainError("invalid-epsilon", detail, parameter=parameter)


def check_limits(request: ReleaseRequest, name: str) -> None:
    """The ε range (``name``: what the request called it) and the smallest explicit ε₁."""
    if not MIN_EPSILON <= request.epsilon <= MAX_EPSILON:
        raise invalid_epsilon(f"{name} must lie in [{MIN_EPSILON}, {MAX_EPSILON}]", name)
    if request.epsilon_prior is not None and not request.epsilon_prior >= MIN_EPSILON_PRIOR:
        raise invalid_epsilon(f"epsilon_prior must be at least {MIN_EPSILON_PRIOR}", "epsilon_prior")


def split(request: ReleaseRequest, n: int, k: int) -> tuple[int, float, float, float]:
    """(micro-ε charged, ε as spendable, ε₁, ε₂) with ε₁ + ε₂ <= ε <= the charge, exactly."""
    check_limits(request, "epsilon")
    try:
        micro = to_micro(request.epsilon)
        epsilon = float_at_most(Fraction(micro, MICRO))
        eps_prior, eps_randomize = prior_split(epsilon, n, k, request.epsilon_prior)
    except (ParameterError, ValueError) as exc:
        raise invalid_epsilon(str(exc), getattr(exc, "parameter", "")) from exc
    return micro, epsilon, eps_prior, eps_randomize


def split_for_users(request: ReleaseRequest, examples: ExampleSet, k: int) -> tuple[UserPlan, int, float]:
    """(the user plan, micro-ε charged per charged example, ε_user as spendable)."""
    check_limits(request, "epsilon_user")
    if request.contribution_bound is None:
        raise DomainError(
            "invalid-request", "a user-level release needs a contribution_bound (τ, auto or private)"
        )
    if isinstance(request.contribution_bound, int) and not 1 <= request.contribution_bound <= MAX_BOUND:
        raise DomainError("invalid-request", f"contribution_bound must lie in [1, {MAX_BOUND}]")
    user_micro = to_micro(request.epsilon)
    epsilon_user = float_at_most(Fraction(user_micro, MICRO))
    counts = examples_per_user(examples.user_keys)
    try:
        plan = plan_user_split(
            epsilon_user,
            request.contribution_bound,
            counts,
            k,
            epsilon_prior=request.epsilon_prior,
            epsilon_bound=request.epsilon_bound,
        )
    except ParameterError as exc:
        raise invalid_epsilon(str(exc), exc.parameter) from exc
    salt = secrets.randbits(64)
    if plan.bound is not None:
        ranks = contribution_ranks(examples.user_keys, examples.keys, salt)
        charged = ranks < plan.bound
    else:
        charged = np.ones(examples.n, dtype=bool)
    example_micro = math.ceil(plan.max_example_exposure * MICRO)
    users = UserPlan(plan, request.contribution_bound, salt, user_micro, charged, int(counts.size))
    return users, example_micro, epsilon_user


def resolved_mechanism(
    request: ReleaseRequest,
    loss: str,
    support: Support,
    n: int,
    eps_randomize: float,
    *,
    rr_only: bool = False,
) -> MechanismKind:
    """The kind asked for, or the default (a public rule of the loss, ε₂, n and k), checked against
    everything it needs — all before the charge: the unbiased randomizer serves example-level
    releases of the squared and Poisson losses, on supports of 2 to ``MAX_UNBIASED_SUPPORT`` points,
    with ε₂ in its program's numerically safe range. Each refusal names the request field it is
    about in ``parameter`` (a form shows it there, the CLI names its option). ``rr_only``: the release
    runs where only the RR kinds do (on priors, on a cluster), so the default is the loss's RR kind."""

    def refused(detail: str, parameter: str = "mechanism") -> DomainError:
        return DomainError("invalid-request", detail, parameter=parameter)

    try:
        if request.mechanism is None:
            if (
                request.privacy_unit == "user"
                or rr_only
                or request.objective is not None
                or request.model_capacity is not None
            ):  # what only the RR kinds take: the default never refuses a request
                return mechanism_kind(loss)
            kind = default_mechanism(loss, eps_randomize, n, support.k)
        else:
            kind = check_mechanism(loss, request.mechanism)
    except ParameterError as exc:
        raise refused(
            str(exc), exc.parameter if exc.parameter in ("loss", "mechanism") else "mechanism"
        ) from exc
    if kind != "unbiased":
        return kind
    if request.privacy_unit == "user":
        raise refused("the unbiased randomizer serves example-level releases (privacy_unit example)")
    if request.objective == "model":
        raise refused("the objective model belongs to rr_on_bins and rr_top_k", "objective")
    if request.model_capacity is not None:
        raise refused("model_capacity belongs to rr_on_bins and rr_top_k", "model_capacity")
    if not 2 <= support.k <= MAX_UNBIASED_SUPPORT:
        raise refused(
            f"the unbiased randomizer needs a support of 2 to {MAX_UNBIASED_SUPPORT} points; "
            f"this one has {support.k}"
        )
    try:
        check_mechanism_epsilon(kind, eps_randomize)
    except ParameterError as exc:
        raise invalid_epsilon(
            f"{exc} (ε₂ = {eps_randomize:g} is what this request randomizes with)",
            "epsilon",  # (example-level: checked above)
        ) from exc
    return kind


def plan_release(
    ds: Dataset,
    data_dir: DataDir,
    request: ReleaseRequest,
    *,
    partition_rows: int | None = None,
    priors: StoredPriors | None = None,
    on_cluster: bool = False,
) -> Plan:
    """The plan of a release of ``ds`` (a row the caller read; the files are read here, outside any
    transaction). ``partition_rows``: a cluster will release it, so an example-level regression
    release of every labelled example leaves them in storage (``StoredExamples``) in partitions of
    about that many. ``priors``: the stored priors ``request.priors_id`` names (a feature-aware
    release, always in this process): the split's ε₁ is then over the examples without a group.
    ``on_cluster``: plan what a cluster would release without partitioning (a preview), so the
    preview resolves the same default as the release (the cluster runs the RR kinds only)."""
    spec = DatasetSpec.model_validate(ds.spec)
    loss = spec.loss(request.loss)
    request.resolved_objective(loss)  # a named objective is checked before anything is read
    support = spec.support_for(loss)
    files = DatasetFiles(data_dir, ds.id)
    examples: ExampleSet | StoredExamples | None = None
    if (request.priors_id is None) != (priors is None):
        raise RuntimeError("a feature-aware plan needs the priors its request names")  # a bug
    partitioned = (
        bool(partition_rows or on_cluster)
        and priors is None
        and request.privacy_unit == "example"
        and loss != "zero_one"
        and request.example_ids is None
        and request.mechanism != "unbiased"  # (named: released in this process)
    )
    if partitioned and partition_rows:
        examples = stored_examples(files, ds, partition_rows)
    if examples is None:
        examples = example_set(files, ds, spec, request.example_ids)
    groups = None
    if priors is not None:
        assert isinstance(examples, ExampleSet)
        groups = group_plan(priors, ds.id, support, examples.keys)
    if request.privacy_unit == "user":
        assert isinstance(examples, ExampleSet)
        users, example_micro, epsilon_user = split_for_users(request, examples, support.k)
        eps_prior = users.split.epsilon_prior
        eps_randomize = users.split.for_bound(users.split.bound or 1).epsilon_randomize
        kind = resolved_mechanism(request, loss, support, examples.n, eps_randomize)
        objective = request.resolved_objective(loss)  # the loss's own: ε₂ follows from τ (maybe auto)
        return Plan(
            ds.id,
            spec,
            loss,
            support,
            examples,
            example_micro,
            epsilon_user,
            eps_prior,
            eps_randomize,
            users,
            objective,
            kind,
            groups,
        )
    if request.contribution_bound is not None or request.epsilon_bound is not None:
        raise DomainError(
            "invalid-request", "contribution bounds belong to user-level releases (privacy_unit user)"
        )
    if groups is not None and groups.fallback == 0:  # every example takes its group's prior: no ε₁
        micro, epsilon, _, _ = split(request, 1, support.k)
        eps_prior, eps_randomize = 0.0, epsilon
    else:
        n = examples.n if groups is None else groups.fallback
        micro, epsilon, eps_prior, eps_randomize = split(request, n, support.k)
    rr_only = groups is not None or partitioned  # the default on priors and on a cluster: RR
    kind = resolved_mechanism(request, loss, support, examples.n, eps_randomize, rr_only=rr_only)
    # a feature-aware release: one objective, at the ε its groups randomize with (the whole ε)
    objective = request.resolved_objective(loss, epsilon if groups is not None else eps_randomize)
    if kind == "unbiased" and groups is not None:
        raise DomainError(
            "invalid-request",
            "a release on priors randomizes each group with the RR-on-Bins optimal for its prior: "
            "the unbiased randomizer does not take priors",
            parameter="mechanism",
        )
    if kind == "unbiased" and not isinstance(examples, ExampleSet):  # a cluster releases RR only
        examples = example_set(files, ds, spec, request.example_ids)
    return Plan(
        ds.id,
        spec,
        loss,
        support,
        examples,
        micro,
        epsilon,
        eps_prior,
        eps_randomize,
        objective=objective,
        mechanism=kind,
        groups=groups,
    )
