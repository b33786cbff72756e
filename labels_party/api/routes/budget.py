"""``/v1/datasets/{id}/budget`` and ``/v1/ledger``: what has been spent, and on what."""

from typing import Annotated

from fastapi import APIRouter, Query

from labels_party.api.deps import Budget, Caller
from labels_party.api.schemas import BudgetOut, LedgerEntryOut, LedgerPageOut

router = APIRouter(prefix="/v1", tags=["budget"])
MAX_PAGE = 1000
MAX_OFFSET = 2**31 - 1  # far beyond any ledger; keeps the value a database integer


@router.get("/datasets/{dataset_id}/budget", response_model=BudgetOut)
def get_budget(
    dataset_id: str,
    caller: Caller,
    budget: Budget,
    epsilon: Annotated[
        float,
        Query(gt=0, le=1e6, allow_inf_nan=False, description="how many examples could still take this ε"),
    ] = 1.0,
    epsilon_user: Annotated[
        float,
        Query(gt=0, le=1e6, allow_inf_nan=False, description="how many users could still take this ε"),
    ] = 1.0,
) -> BudgetOut:
    """Spend over the dataset's examples and users (quantiles; never one user's spend or label)."""
    answer = budget.for_dataset(caller.tenant_id, dataset_id, epsilon, epsilon_user)
    return BudgetOut.of(answer, epsilon, epsilon_user)


@router.get("/ledger", response_model=LedgerPageOut)
def get_ledger(
    caller: Caller,
    budget: Budget,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> LedgerPageOut:
    """Append-only ledger entries of this tenant, oldest first."""
    page = budget.ledger(caller.tenant_id, limit, offset)
    return LedgerPageOut(
        items=[LedgerEntryOut.of(e) for e in page.entries],
        next_offset=offset + limit if offset + limit < page.total else None,
    )
