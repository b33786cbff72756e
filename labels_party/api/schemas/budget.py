"""Bodies of ``/v1/datasets/{id}/budget`` and ``/v1/ledger``: spend (quantiles for users) and the
append-only ledger; and the problem a charge refused for budget answers with."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, Field

from labeldp.common.openapi import Problem
from labels_party.budget.epsilon import as_delta, as_float
from labels_party.datasets.budget import DatasetBudget
from labels_party.storage.orm import LedgerEntry


class SpendBucketOut(BaseModel):
    """How many spent between two amounts (each distinct amount its own bucket when there are few)."""

    spent_from: float
    spent_to: float
    count: int

    @classmethod
    def all(cls, buckets: list[tuple[int, int, int]]) -> list[SpendBucketOut]:
        return [cls(spent_from=as_float(a), spent_to=as_float(b), count=n) for a, b, n in buckets]


class UserBudgetOut(BaseModel):
    per_user_budget: float | None = Field(description="None: per-user spend is recorded, not limited")
    users: int = Field(
        description="users the dataset's examples belong to (an example without user_id is one)"
    )
    spent: dict[str, float] = Field(description="per-user spend over these users: p50, p90, p99, max")
    epsilon_user_asked: float
    can_take: int | None = Field(description="users that could still take epsilon_user (None: no limit)")
    spend_distribution: list[SpendBucketOut] = Field(
        description="how many of these users have spent how much (at most 50 buckets; never one user's "
        "spend by key)"
    )


class BudgetOut(BaseModel):
    per_example_budget: float
    examples: int
    max_spent: float
    min_spent: float
    epsilon_asked: float
    can_take: int
    spend_distribution: list[SpendBucketOut] = Field(
        description="how many of the examples have spent how much (at most 50 buckets, lowest first)"
    )
    users: UserBudgetOut
    delta_budget: float = Field(description="the tenant's δ budget over all (ε, δ) releases (0: pure ε only)")
    delta_spent: float = Field(description="δ taken by (ε, δ) releases so far, tenant-wide")

    @classmethod
    def of(cls, b: DatasetBudget, epsilon: float, epsilon_user: float) -> BudgetOut:
        u = b.users
        return cls(
            per_example_budget=as_float(b.budget_micro),
            examples=b.summary.examples,
            max_spent=as_float(b.summary.max_spent_micro),
            min_spent=as_float(b.summary.min_spent_micro),
            epsilon_asked=epsilon,
            can_take=b.summary.can_take,
            spend_distribution=SpendBucketOut.all(b.example_spend),
            users=UserBudgetOut(
                per_user_budget=as_float(b.user_budget_micro) if b.user_budget_micro is not None else None,
                users=u.users,
                spent={name: as_float(v) for name, v in u.spent_quantiles_micro.items()},
                epsilon_user_asked=epsilon_user,
                can_take=u.can_take,
                spend_distribution=SpendBucketOut.all(b.user_spend),
            ),
            delta_budget=as_delta(b.delta_budget_atto),
            delta_spent=as_delta(b.delta_spent_atto),
        )


class LedgerEntryOut(BaseModel):
    id: int
    kind: str
    release_id: str | None
    epsilon: float
    epsilon_micro: int
    examples: int
    users: int = Field(description="charges: how many users were charged")
    user_epsilon: float | None = Field(description="charges: the most any one user was charged")
    delta: float | None = Field(
        None, description="(ε, δ) charges: the δ taken; delta_budget_set: the new budget"
    )
    api_key_id: str | None
    note: str
    created_at: AwareDatetime

    @classmethod
    def of(cls, e: LedgerEntry) -> LedgerEntryOut:
        return cls(
            id=e.id,
            kind=e.kind,
            release_id=e.release_id,
            epsilon=as_float(e.epsilon_micro),
            epsilon_micro=e.epsilon_micro,
            examples=e.examples,
            users=e.users or 0,
            user_epsilon=as_float(e.user_epsilon_micro) if e.user_epsilon_micro is not None else None,
            delta=as_delta(e.delta_atto) if e.delta_atto is not None else None,
            api_key_id=e.api_key_id,
            note=e.note,
            created_at=e.created_at,
        )


class RefusedSpend(BaseModel):
    typical: float = Field(description="the median example (user) of the refused release")
    worst: float = Field(description="the example (user) of the refused release that spent the most")


class BudgetRefusal(Problem):
    """A charge refused for budget (409 ``budget-exhausted``: examples; ``user-budget-exhausted``:
    users): nothing was charged and no noise drawn. Spend is told in aggregate over the release's
    examples (users) only — the typical and the worst — never one's by key. Other 409 codes carry none
    of these members."""

    examples_lacking_budget: int | None = Field(None, description="budget-exhausted: examples over")
    examples_requested: int | None = Field(None, description="budget-exhausted: examples in the release")
    epsilon_requested: float | None = Field(None, description="budget-exhausted: ε per example asked")
    per_example_budget: float | None = Field(None, description="budget-exhausted: the tenant's budget")
    users_lacking_budget: int | None = Field(None, description="user-budget-exhausted: users over")
    users_requested: int | None = Field(None, description="user-budget-exhausted: users in the release")
    epsilon_user_requested: float | None = Field(
        None, description="user-budget-exhausted: the most ε the release would charge one user"
    )
    per_user_budget: float | None = Field(None, description="user-budget-exhausted: the tenant's budget")
    delta_requested: float | None = Field(None, description="delta-budget-exhausted: the δ asked")
    delta_spent: float | None = Field(None, description="delta-budget-exhausted: δ spent, tenant-wide")
    delta_budget: float | None = Field(None, description="delta-budget-exhausted: the tenant's δ budget")
    spent: RefusedSpend | None = Field(None, description="ε the release's examples (users) have spent")
    left: RefusedSpend | None = Field(
        None, description="ε they have left: the budget minus what they spent (never below 0)"
    )
