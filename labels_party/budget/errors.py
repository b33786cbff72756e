"""Why a charge was refused: every refusal changes nothing and charges nothing (409 for budgets, 422
for a request no budget could ever admit)."""

from __future__ import annotations

from labeldp.common.errors import DomainError


class UnknownTenantError(LookupError):
    """A tenant id that does not exist: a bug or a race with tenant removal, never user input."""


class BudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` examples over the per-example budget
    (409: nothing was charged)."""

    def __init__(self, lacking: int, requested: int, epsilon_micro: int, budget_micro: int) -> None:
        super().__init__(
            "budget-exhausted",
            f"{lacking} of {requested} examples lack budget for ε = {epsilon_micro / 1e6:g} "
            f"(per-example budget {budget_micro / 1e6:g})",
            status=409,
            examples_lacking_budget=lacking,
            examples_requested=requested,
        )
        self.lacking, self.requested = lacking, requested


class UserBudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` users over the per-user budget (409)."""

    def __init__(self, lacking: int, requested: int, most_micro: int, budget_micro: int) -> None:
        super().__init__(
            "user-budget-exhausted",
            f"{lacking} of {requested} users lack budget for this release (up to ε = {most_micro / 1e6:g} "
            f"per user; per-user budget {budget_micro / 1e6:g})",
            status=409,
            users_lacking_budget=lacking,
            users_requested=requested,
        )
        self.lacking, self.requested = lacking, requested


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
