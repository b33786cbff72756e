"""Why a charge was refused: every refusal changes nothing and charges nothing (409 for budgets, 422
for a request no budget could ever admit).

A budget refusal says what the refused release's examples (users) have spent and have left, in the
aggregate forms the budget route answers with — the typical one (the median) and the worst (the most
spent) — and never one example's or one user's spend by key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labeldp.common.errors import DomainError
from labels_party.budget.epsilon import as_float


class UnknownTenantError(LookupError):
    """A tenant id that does not exist: a bug or a race with tenant removal, never user input."""


@dataclass(frozen=True)
class Spent:
    """What the keys a charge asked for have spent (micro-ε): the median and the most."""

    typical: int
    worst: int

    def fields(self, budget_micro: int) -> dict[str, Any]:
        """The problem's ``spent`` and ``left`` (ε; left is never below 0, even under a lowered
        budget)."""
        return {
            "spent": {"typical": as_float(self.typical), "worst": as_float(self.worst)},
            "left": {
                "typical": as_float(max(budget_micro - self.typical, 0)),
                "worst": as_float(max(budget_micro - self.worst, 0)),
            },
        }

    def sentence(self, what: str, budget_micro: int) -> str:
        """``of the per-example budget 6, the typical example has spent 1 (5 left), the worst 4 (2
        left)``."""

        def spent_left(micro: int) -> str:
            return f"{as_float(micro):g} ({as_float(max(budget_micro - micro, 0)):g} left)"

        budget = f"of the per-{what} budget {as_float(budget_micro):g}"
        if self.typical == self.worst:
            return f"{budget}, the typical and the worst {what} have spent {spent_left(self.worst)}"
        return (
            f"{budget}, the typical {what} has spent {spent_left(self.typical)}, "
            f"the worst {spent_left(self.worst)}"
        )


class BudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` examples over the per-example budget
    (409: nothing was charged)."""

    def __init__(
        self, lacking: int, requested: int, epsilon_micro: int, budget_micro: int, spent: Spent
    ) -> None:
        super().__init__(
            "budget-exhausted",
            f"{lacking:,} of {requested:,} examples lack budget for ε = {as_float(epsilon_micro):g}: "
            f"{spent.sentence('example', budget_micro)}",
            status=409,
            examples_lacking_budget=lacking,
            examples_requested=requested,
            epsilon_requested=as_float(epsilon_micro),
            per_example_budget=as_float(budget_micro),
            **spent.fields(budget_micro),
        )
        self.lacking, self.requested, self.spent = lacking, requested, spent


class UserBudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` users over the per-user budget (409)."""

    def __init__(
        self, lacking: int, requested: int, most_micro: int, budget_micro: int, spent: Spent
    ) -> None:
        super().__init__(
            "user-budget-exhausted",
            f"{lacking:,} of {requested:,} users lack budget for this release (up to "
            f"ε = {as_float(most_micro):g} per user): {spent.sentence('user', budget_micro)}",
            status=409,
            users_lacking_budget=lacking,
            users_requested=requested,
            epsilon_user_requested=as_float(most_micro),
            per_user_budget=as_float(budget_micro),
            **spent.fields(budget_micro),
        )
        self.lacking, self.requested, self.spent = lacking, requested, spent


class UserDeltaTooLargeError(DomainError):
    """An (ε, δ) charge whose group-privacy δ for its largest user is not below 1 (422): with a
    per-user budget the per-user guarantee must hold for δ too, and a δ of 1 guarantees nothing."""

    def __init__(self) -> None:
        super().__init__(
            "user-delta-too-large",
            "with a per-user budget, a user's δ is the group-privacy δ over all of their examples, and "
            "for this request's largest user it is not below 1: lower epsilon or delta, or train on a "
            "user-level label release (at most τ examples per user)",
            status=422,
        )


class DeltaBudgetExhaustedError(DomainError):
    """The charge's δ would take the tenant over its δ budget (409: nothing was charged)."""

    def __init__(self, delta_atto: int, spent_atto: int, budget_atto: int) -> None:
        super().__init__(
            "delta-budget-exhausted",
            f"this release needs δ = {delta_atto / 1e18:.3g}, and the tenant has {spent_atto / 1e18:.3g} "
            f"of its δ budget {budget_atto / 1e18:.3g} spent",
            status=409,
            delta_requested=delta_atto / 1e18,
            delta_spent=spent_atto / 1e18,
            delta_budget=budget_atto / 1e18,
        )


class LedgerContentionError(DomainError):
    """A partitioned charge lost the race for the tenant's ledger version too often (503: retry)."""

    def __init__(self, attempts: int) -> None:
        super().__init__(
            "ledger-contention",
            f"the tenant's ledger changed under this charge {attempts} times; nothing was charged, retry",
            status=503,
        )
