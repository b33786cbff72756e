"""A dataset's budget, as a tenant may ask about it: spend over the examples and users a release of the
dataset would cover (its membership), and the tenant's ledger entries. It reads datasets, so it lives
above the ledger (``labels_party/budget``), which knows nothing of datasets.

Reading the spend of every covered example is O(examples) (2.2 s at a million); the answer is not. So
each dataset's spend is kept as two histograms (``SpendHistogram``: examples, users) keyed by what
they depend on — the tenant's ledger version (bumped by every charge and budget change) and the
dataset's label and universe versions — and every question (any ε, any ε_user, the budgets of the
moment) is answered from them in O(distinct amounts). A histogram is computed once per change, by the
first reader or ahead of it: after each charge, the histograms readers asked for are brought up to date
in the background (``refresh``). Concurrent readers of one missing histogram compute it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.pages import PageRequest
from labels_party.budget.epsilon import to_micro
from labels_party.budget.ledger_keys import distinct
from labels_party.budget.segments import SegmentStore
from labels_party.budget.summaries import SpendHistogram, SpendSummary, UserSpendSummary, spend_histogram
from labels_party.datasets.membership import covered_examples
from labels_party.datasets.service import get_dataset
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, LedgerEntry, Tenant, UserSpendShard

Version = tuple[str, str, int, int, int]  # tenant, dataset, ledger version, labels and universe versions
MAX_KEPT = 64  # datasets whose histograms a process keeps (a few KiB each)


@dataclass(frozen=True)
class DatasetBudget:
    budget_micro: int  # the tenant's per-example budget
    summary: SpendSummary
    user_budget_micro: int | None  # the tenant's per-user budget (None: not limited)
    users: UserSpendSummary
    delta_budget_atto: int  # the tenant's δ budget over all (ε, δ) releases
    delta_spent_atto: int
    example_spend: list[tuple[int, int, int]]  # the examples' spend distribution (SpendHistogram.buckets)
    user_spend: list[tuple[int, int, int]]  # the users'


@dataclass(frozen=True)
class Spend:
    examples: SpendHistogram
    users: SpendHistogram


class BudgetService:
    def __init__(self, sessions: sessionmaker[Session], data_dir: DataDir) -> None:
        self.sessions, self.data_dir = sessions, data_dir
        self.segments = SegmentStore(data_dir.ledger)
        self._kept: OrderedDict[Version, Spend] = OrderedDict()
        self._computing: dict[Version, threading.Lock] = {}
        self._lock = threading.Lock()
        self._refresher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget")

    def for_dataset(
        self, tenant_id: str, dataset_id: str, epsilon: float, epsilon_user: float
    ) -> DatasetBudget:
        """Spend over the examples (and users) a release of the dataset would cover, and how many of
        them could still take ``epsilon`` (``epsilon_user``)."""
        answer = self._answer(tenant_id, dataset_id, epsilon, epsilon_user, compute=True)
        assert answer is not None
        return answer

    def kept_for_dataset(
        self, tenant_id: str, dataset_id: str, epsilon: float, epsilon_user: float
    ) -> DatasetBudget | None:
        """``for_dataset`` when the histograms are kept (two short reads), else None: the answer
        must then be computed, which takes long enough to belong in the thread pool."""
        return self._answer(tenant_id, dataset_id, epsilon, epsilon_user, compute=False)

    def _answer(
        self, tenant_id: str, dataset_id: str, epsilon: float, epsilon_user: float, *, compute: bool
    ) -> DatasetBudget | None:
        with self.sessions() as session:
            ds = get_dataset(session, tenant_id, dataset_id)
            tenant = session.get(Tenant, tenant_id)
            assert tenant is not None  # the caller's key resolved to it
        spend = self._spend(tenant, ds) if compute else self._kept_spend(tenant, ds)
        if spend is None:
            return None
        return DatasetBudget(
            tenant.budget_micro,
            spend.examples.examples(tenant.budget_micro, to_micro(epsilon)),
            tenant.user_budget_micro,
            spend.users.users(tenant.user_budget_micro, to_micro(epsilon_user)),
            tenant.delta_budget_atto,
            tenant.delta_spent_atto,
            spend.examples.buckets(),
            spend.users.buckets(),
        )

    @staticmethod
    def _version(tenant: Tenant, ds: Dataset) -> Version:
        return (tenant.id, ds.id, tenant.ledger_version, ds.labels_version, ds.universe_version)

    def _kept_spend(self, tenant: Tenant, ds: Dataset) -> Spend | None:
        key = self._version(tenant, ds)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        return None

    def _spend(self, tenant: Tenant, ds: Dataset) -> Spend:
        kept = self._kept_spend(tenant, ds)
        if kept is not None:
            return kept
        key = self._version(tenant, ds)
        with self._lock:
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:  # one reader computes; the others wait for it and read the result
            with self._lock:
                if key in self._kept:
                    return self._kept[key]
            spend = self._compute(tenant.id, ds)
            with self._lock:
                self._kept[key] = spend
                for old in [k for k in self._kept if k[:2] == key[:2] and k != key]:
                    del self._kept[old]  # an older version of the same dataset: never asked again
                while len(self._kept) > MAX_KEPT:
                    self._kept.popitem(last=False)
                self._computing.pop(key, None)
            return spend

    def _compute(self, tenant_id: str, ds: Dataset) -> Spend:
        keys, users = covered_examples(DatasetFiles(self.data_dir, ds.id), ds)
        with self.sessions() as session:  # one snapshot for both kinds of shard
            return Spend(
                spend_histogram(session, tenant_id, keys, self.segments),
                spend_histogram(session, tenant_id, distinct(users), self.segments, UserSpendShard),
            )

    def refresh(self, tenant_id: str) -> None:
        """After a charge: bring the histograms of the tenant's datasets that readers asked for up to
        date in the background, so that the next reader does not wait for them."""
        with self._lock:
            asked = {dataset_id for (tenant, dataset_id, *_), _ in self._kept.items() if tenant == tenant_id}
        if asked:
            self._refresher.submit(self._refresh, tenant_id, asked)

    def _refresh(self, tenant_id: str, dataset_ids: set[str]) -> None:
        for dataset_id in dataset_ids:
            try:
                with self.sessions() as session:
                    ds = get_dataset(session, tenant_id, dataset_id)
                    tenant = session.get(Tenant, tenant_id)
                if tenant is not None:
                    self._spend(tenant, ds)
            except Exception:  # a dataset deleted meanwhile, a transient error: the next reader computes
                continue

    def shutdown(self) -> None:
        self._refresher.shutdown(wait=False, cancel_futures=True)

    def ledger(self, tenant_id: str, paging: PageRequest) -> list[LedgerEntry]:
        """The tenant's append-only ledger entries, oldest first (a page window)."""
        with self.sessions() as session:
            query = select(LedgerEntry).where(LedgerEntry.tenant_id == tenant_id).order_by(LedgerEntry.id)
            return list(session.execute(paging.window(query)).scalars())
