"""A dataset's budget, as a tenant may ask about it: spend over the examples and users a release of the
dataset would cover (its membership), and the tenant's ledger entries. It reads datasets, so it lives
above the ledger (``labels_party/budget``), which knows nothing of datasets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.pages import PageRequest
from labels_party.budget.epsilon import to_micro
from labels_party.budget.segments import SegmentStore
from labels_party.budget.summaries import SpendSummary, UserSpendSummary, spend_summary, user_spend_summary
from labels_party.datasets.membership import covered_examples
from labels_party.datasets.service import get_dataset
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import LedgerEntry, Tenant


@dataclass(frozen=True)
class DatasetBudget:
    budget_micro: int  # the tenant's per-example budget
    summary: SpendSummary
    user_budget_micro: int | None  # the tenant's per-user budget (None: not limited)
    users: UserSpendSummary
    delta_budget_atto: int  # the tenant's δ budget over all (ε, δ) releases
    delta_spent_atto: int


class BudgetService:
    def __init__(self, sessions: sessionmaker[Session], data_dir: DataDir) -> None:
        self.sessions, self.data_dir = sessions, data_dir
        self.segments = SegmentStore(data_dir.ledger)

    def for_dataset(
        self, tenant_id: str, dataset_id: str, epsilon: float, epsilon_user: float
    ) -> DatasetBudget:
        """Spend over the examples (and users) a release of the dataset would cover, and how many of
        them could still take ``epsilon`` (``epsilon_user``)."""
        with self.sessions() as session:
            ds = get_dataset(session, tenant_id, dataset_id)
            tenant = session.get(Tenant, tenant_id)
            assert tenant is not None  # the caller's key resolved to it
            files = DatasetFiles(self.data_dir, ds.id)
            keys, users = covered_examples(files, ds)
            return DatasetBudget(
                tenant.budget_micro,
                spend_summary(session, tenant_id, keys, to_micro(epsilon), self.segments),
                tenant.user_budget_micro,
                user_spend_summary(
                    session, tenant_id, np.unique(users), to_micro(epsilon_user), self.segments
                ),
                tenant.delta_budget_atto,
                tenant.delta_spent_atto,
            )

    def ledger(self, tenant_id: str, paging: PageRequest) -> list[LedgerEntry]:
        """The tenant's append-only ledger entries, oldest first (a page window)."""
        with self.sessions() as session:
            query = select(LedgerEntry).where(LedgerEntry.tenant_id == tenant_id).order_by(LedgerEntry.id)
            return list(session.execute(paging.window(query)).scalars())
