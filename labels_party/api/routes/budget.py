"""``/v1/datasets/{id}/budget`` and ``/v1/ledger``: what has been spent, and on what."""

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from labeldp.common.pages import Page, Paging
from labels_party.api.deps import Budget, Caller, Services
from labels_party.api.schemas.budget import BudgetOut, LedgerEntryOut

router = APIRouter(prefix="/v1", tags=["budget"])


@router.get("/datasets/{dataset_id}/budget", response_model=BudgetOut)
async def get_budget(
    dataset_id: str,
    caller: Caller,
    budget: Budget,
    svc: Services,
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
    ask = (caller.tenant_id, dataset_id, epsilon, epsilon_user)
    # kept histograms answer in two short reads; computing them (after a charge) takes the thread pool
    answer = await svc.sessions.read(lambda: budget.kept_for_dataset(*ask)) if svc.sessions.local else None
    if answer is None:
        answer = await run_in_threadpool(budget.for_dataset, *ask)
    return BudgetOut.of(answer, epsilon, epsilon_user)


@router.get("/ledger", response_model=Page[LedgerEntryOut])
async def get_ledger(
    caller: Caller, budget: Budget, paging: Paging, request: Request, svc: Services
) -> Page[LedgerEntryOut]:
    """Append-only ledger entries of this tenant, oldest first."""
    rows = await svc.sessions.read(lambda: budget.ledger(caller.tenant_id, paging))
    return Page[LedgerEntryOut].of(rows, paging, request, LedgerEntryOut.of)
