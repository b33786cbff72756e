"""What both parties' REST APIs answer, as ``labeldp.client`` returns it.

Each ``TypedDict`` mirrors one response schema of a party's OpenAPI document, named after it without
``Out`` (``DatasetOut`` → ``Dataset``; the features party's ``IdentityOut`` → ``FeaturesIdentity``,
its ``ModelOut`` → ``Model``), with ``Page`` for a page of any list and ``Problem`` for an error. They
are plain dicts at run time (``answer["id"]`` keeps working, nothing to import but ``typing``), while
mypy checks every key a caller reads. tests/e2e/test_client_types.py compares each one with the
schema the servers publish, so the client cannot drift from the server unnoticed.

Timestamps are ISO 8601 strings; a ``mechanism`` is a ``PublishedMechanism`` as JSON (read it with
``PublishedMechanism.model_validate``). No ``from __future__ import annotations`` here: Python 3.11
reads ``NotRequired`` off real annotations only.
"""

from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar

Item = TypeVar("Item")


# --- both parties -------------------------------------------------------------------------------------


class Page(TypedDict, Generic[Item]):
    """A page of a list, oldest first; ``next`` is the next page's path and query (None: the last)."""

    items: list[Item]
    next_offset: int | None
    next: str | None


class FieldError(TypedDict):
    """One reason a request was not valid (a 422 ``invalid-request``'s ``errors``)."""

    loc: list[str]
    msg: str
    type: str


class Problem(TypedDict):
    """An error answer (RFC 9457 problem+json): ``type`` is the machine-readable code. Other members
    depend on it: ``errors`` for an invalid request, ``rows``, ``columns``, … for a refused upload."""

    type: str
    title: str
    status: int
    detail: str
    errors: NotRequired[list[FieldError]]


# --- the labels party (advertiser) --------------------------------------------------------------------


class Identity(TypedDict):
    party_id: str
    key_id: str
    public_key_pem: str


class Recipient(TypedDict):
    id: str
    name: str
    grpc_address: str | None
    fingerprint: str | None
    recipient_tenant: str | None
    tls: bool
    created_at: str


class Delivery(TypedDict):
    id: str
    release_id: str
    recipient_id: str
    outcome: str
    attempts: int
    status: str
    detail: str
    receipt_sha256: str | None
    wire_bytes: int
    started_at: str
    finished_at: str | None


class Dataset(TypedDict):
    id: str
    name: str
    spec: dict[str, Any]
    support_size: int
    label_count: int
    universe_count: int | None
    universe_users: int | None
    labels_version: int
    universe_version: int
    non_sensitive_version: int
    created_at: str


class Upload(TypedDict):
    rows: int
    clipped: int
    label_count: int | None
    universe_count: int | None
    universe_users: int | None
    version: int


class Release(TypedDict):
    id: str
    dataset_id: str
    status: str
    recipient_id: str
    privacy_unit: Literal["example", "user"]
    epsilon: float
    epsilon_charged_micro: int
    epsilon_user: float | None
    contribution_bound: str | None
    users: int | None
    examples_capped: int | None
    epsilon_prior: float
    loss: str
    examples: int
    examples_defaulted: int
    universe_declared: bool
    bins: list[float] | None
    expected_loss_under_noisy_prior: float | None
    mechanism: dict[str, Any] | None
    worst_case_additive_advantage: float | None
    max_multiplicative_advantage: float | None
    keep_probability: float | None
    move_probability: float | None
    priors_id: str | None
    error: str | None
    created_at: str
    completed_at: str | None


class ReleaseGroup(TypedDict):
    """One group's mechanism of a feature-aware release (GET /v1/releases/{id}/groups)."""

    group: int
    examples: int
    mechanism: dict[str, Any]


class GroupAudit(TypedDict):
    group: int
    examples: int
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    additive_advantage: float
    realized_additive_advantage: float


class EpsilonLowerBound(TypedDict):
    epsilon_low: float
    alpha: float
    examples: int
    rates: dict[str, float]


class Audit(TypedDict):
    release_id: str
    examples: int
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    true_distribution: dict[str, float]
    realized: dict[str, float]
    epsilon_lower_bound: EpsilonLowerBound | None
    groups: NotRequired[list[GroupAudit] | None]


class PriorsVerdict(TypedDict):
    with_priors: float
    without_priors: float
    mechanism_without: str
    pays: bool


class Preview(TypedDict):
    epsilon: float
    epsilon_prior: float
    examples: int
    prior_source: Literal["labels", "release", "public"]
    m: int
    bin_values: list[float]
    bin_edges: list[list[float]]  # [lo, hi] of each bin
    expected_loss: float  # the unbiased randomizer: its expected variance
    rr_on_bins_expected_loss: float | None  # squared and Poisson loss: beside the unbiased variance
    unbiased_expected_variance: float | None
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    keep_probability: float | None  # None: the unbiased randomizer (not randomized response over bins)
    move_probability: float | None
    mechanism: dict[str, Any]
    groups: NotRequired[int | None]
    examples_with_group: NotRequired[int | None]
    expected_loss_without_priors: NotRequired[float | None]
    priors_verdict: NotRequired[PriorsVerdict | None]


class SpendBucket(TypedDict):
    spent_from: float
    spent_to: float
    count: int


class UserBudget(TypedDict):
    per_user_budget: float | None
    users: int
    spent: dict[str, float]
    epsilon_user_asked: float
    can_take: int | None
    spend_distribution: list[SpendBucket]


class Budget(TypedDict):
    per_example_budget: float
    examples: int
    max_spent: float
    min_spent: float
    epsilon_asked: float
    can_take: int
    spend_distribution: list[SpendBucket]
    users: UserBudget
    delta_budget: float
    delta_spent: float


class LedgerEntry(TypedDict):
    id: int
    kind: str
    release_id: str | None
    epsilon: float
    epsilon_micro: int
    examples: int
    users: int
    user_epsilon: float | None
    delta: float | None
    api_key_id: str | None
    note: str
    created_at: str


class SemiSensitiveModel(TypedDict):
    id: str
    dataset_id: str
    label_release_id: str | None
    status: str
    examples: int
    epsilon_dpsgd: float
    delta: float
    noise_multiplier: float
    sampling_rate: float
    steps: int
    clip_norm: float
    message_sha256: str | None
    error: str | None
    created_at: str
    completed_at: str | None


class HybridPlan(TypedDict):
    examples: int
    label_phase: bool
    epsilon_labels: float
    epsilon_dpsgd: float
    delta: float
    split_step_noise: float
    max_step_noise: float


class ModelDelivery(TypedDict):
    model_id: str
    outcome: Literal["delivered"]
    attempts: int
    wire_bytes: int


class Priors(TypedDict):
    """Priors a features party signed for a dataset's examples (feature-aware releases)."""

    id: str
    dataset_id: str
    recipient_id: str
    features_priors_id: str
    model_id: str
    rule: str
    loss: str
    groups: int
    max_groups: int
    support_k: int
    examples_requested: int
    examples_priced: int
    message_sha256: str
    created_at: str


class GroupPrior(TypedDict):
    group: int
    examples: int
    masses: list[float]


class PriorsDetail(Priors):
    support: list[float]
    examples_without_group: int
    group_priors: list[GroupPrior]


# --- the features party (publisher) -------------------------------------------------------------------


class FeaturesIdentity(Identity):
    grpc_port: int
    tenant_id: str


class Sender(TypedDict):
    id: str
    key_id: str
    created_at: str


class ReceivedRelease(TypedDict):
    release_id: str
    sender_id: str
    sender_key_id: str
    example_count: int
    chunk_count: int
    payload_sha256: str
    received_at: str
    mechanism: dict[str, Any]
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    keep_probability: float | None  # None: the unbiased randomizer
    move_probability: float | None
    priors_id: str | None  # a feature-aware release: the priors its groups came from
    group_count: int
    header: dict[str, Any]


class FeatureTable(TypedDict):
    name: str
    version: int
    rows: int
    schema: dict[str, str]
    non_sensitive: list[str]
    updated_at: str


class Join(TypedDict):
    release_id: str
    feature_table: str
    release_examples: int
    feature_rows: int
    in_both: int
    only_in_release: int
    only_in_features: int
    release_match_rate: float
    feature_match_rate: float


class Job(TypedDict):
    id: str
    status: str  # queued, running, succeeded or failed
    progress: dict[str, Any]
    error: str | None
    created_at: str
    finished_at: str | None


class Model(TypedDict):
    id: str
    status: str
    model: str
    debias: str
    loss: str
    metrics: dict[str, Any]
    provenance: dict[str, Any]
    error: str | None
    created_at: str


class Predictions(TypedDict):
    """``POST /v1/models/{id}/predictions`` (no schema in the document: its members depend on the
    model). A classifier adds its classes and their probabilities."""

    predictions: list[float]
    example_ids: NotRequired[list[str]]
    classes: NotRequired[list[float]]
    probabilities: NotRequired[list[list[float]]]
    unreported_probability: NotRequired[float]


class ReceivedModel(TypedDict):
    model_id: str
    sender_id: str
    sender_key_id: str
    message_sha256: str
    label_release_id: str | None
    guarantee: dict[str, Any]
    columns: dict[str, Any]
    received_at: str


class PricingGrant(TypedDict):
    """Which of the tenant's models prices a pinned sender's examples (its priors requests)."""

    sender_id: str
    model_id: str
    max_groups: int | None
    created_at: str
    updated_at: str


class Pricing(TypedDict):
    """One answered pricing request: what left the features party."""

    id: str
    sender_id: str
    request_id: str
    model_id: str
    examples: int
    priced: int
    groups: int
    support_k: int
    answer_sha256: str
    created_at: str
