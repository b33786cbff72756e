"""The budget ledger on SQLite and on a real PostgreSQL: exactness, atomicity, concurrency."""

from __future__ import annotations

import threading
from decimal import Decimal

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from labeldp.common.api_keys import hash_key
from labels_party.budget.epsilon import to_micro, to_micro_floor
from labels_party.budget.errors import BudgetExhaustedError, Spent
from labels_party.budget.ledger import charge, set_budget
from labels_party.budget.ledger_keys import distinct, example_keys
from labels_party.budget.summaries import spend_of_tenant, spend_summary, total_spent
from labels_party.storage.db import session_factory
from labels_party.storage.orm import ApiKey, Base, LedgerEntry
from labels_party.tenants import authenticate, create_tenant
from tests.support.ledger import SEGMENTS, new_tenant


def keys(*ids: str) -> np.ndarray:
    return example_keys(ids)


def spend_rows(engine: Engine, tenant_id: str) -> dict[int, int]:
    with session_factory(engine)() as s:
        keys, spent = spend_of_tenant(s, tenant_id, SEGMENTS)
        return dict(zip(keys.tolist(), spent.tolist(), strict=True))


def test_epsilon_conversion_is_exact_and_rounds_requests_up() -> None:
    assert to_micro(0.1) == 100_000
    assert to_micro("0.1000001") == 100_001
    assert to_micro(Decimal("1")) == 1_000_000
    assert to_micro(1e-9) == 1  # never free
    assert to_micro_floor("0.3333333") == 333_333
    for bad in (0, -1.0, float("nan"), float("inf"), "abc"):
        with pytest.raises(ValueError, match="epsilon"):
            to_micro(bad)


def test_charge_spends_exactly_and_is_recorded(engine: Engine) -> None:
    t = new_tenant(engine, "1.0")
    with session_factory(engine).begin() as s:
        entry = charge(
            s, t, keys("a", "b", "c"), to_micro(0.3), release_id="r1", api_key_id=None, store=SEGMENTS
        )
        assert entry.examples == 3
    with session_factory(engine).begin() as s:
        charge(s, t, keys("b", "c", "d"), to_micro(0.7), release_id="r2", api_key_id=None, store=SEGMENTS)
    spent = spend_rows(engine, t)
    assert sorted(spent.values()) == [300_000, 700_000, 1_000_000, 1_000_000]
    with session_factory(engine)() as s:
        assert total_spent(s, t, SEGMENTS) == 3_000_000
        kinds = s.execute(select(LedgerEntry.kind).order_by(LedgerEntry.id)).scalars().all()
    assert kinds == ["budget_set", "charge", "charge"]


def test_exhaustion_changes_nothing_and_counts_the_examples_lacking_budget(engine: Engine) -> None:
    t = new_tenant(engine, "1.0")
    with session_factory(engine).begin() as s:
        charge(s, t, keys("a", "b"), to_micro(0.8), release_id="r1", api_key_id=None, store=SEGMENTS)
    before = spend_rows(engine, t)
    with pytest.raises(BudgetExhaustedError) as info, session_factory(engine).begin() as s:
        charge(
            s,
            t,
            keys("a", "b", "c", "d", "e"),
            to_micro(0.3),
            release_id="r2",
            api_key_id=None,
            store=SEGMENTS,
        )
    assert info.value.lacking == 2 and info.value.requested == 5
    # spend in aggregate only: the typical (median) and the worst example of the five
    assert info.value.spent == Spent(typical=0, worst=800_000)
    assert info.value.extra["spent"] == {"typical": 0.0, "worst": 0.8}
    assert info.value.extra["left"] == {"typical": 1.0, "worst": 0.2}
    assert spend_rows(engine, t) == before
    with session_factory(engine)() as s:
        assert (
            s.execute(
                select(func.count()).select_from(LedgerEntry).where(LedgerEntry.kind == "charge")
            ).scalar()
            == 1
        )
    # exactly the remaining 0.2 still fits: exact integer comparison, no float slack
    with session_factory(engine).begin() as s:
        charge(s, t, keys("a", "b", "c"), to_micro("0.2"), release_id="r3", api_key_id=None, store=SEGMENTS)
    assert max(spend_rows(engine, t).values()) == 1_000_000


def test_disjoint_examples_compose_in_parallel_and_tenants_are_separate(engine: Engine) -> None:
    t1 = new_tenant(engine, "1.0", "one")
    t2 = new_tenant(engine, "1.0", "two")
    with session_factory(engine).begin() as s:
        charge(s, t1, keys("a", "b"), to_micro(1.0), release_id="r1", api_key_id=None, store=SEGMENTS)
        charge(s, t1, keys("c", "d"), to_micro(1.0), release_id="r2", api_key_id=None, store=SEGMENTS)
        charge(s, t2, keys("a", "b"), to_micro(1.0), release_id="r3", api_key_id=None, store=SEGMENTS)
    with pytest.raises(BudgetExhaustedError), session_factory(engine).begin() as s:
        charge(s, t1, keys("a"), 1, release_id="r4", api_key_id=None, store=SEGMENTS)


def test_budget_changes_are_ledger_entries_and_apply_immediately(engine: Engine) -> None:
    t = new_tenant(engine, "1.0")
    with session_factory(engine).begin() as s:
        set_budget(s, t, to_micro_floor("0.5"), api_key_id=None, note="tighten")
    with pytest.raises(BudgetExhaustedError), session_factory(engine).begin() as s:
        charge(s, t, keys("a"), to_micro(0.6), release_id="r1", api_key_id=None, store=SEGMENTS)
    with session_factory(engine)() as s:
        entries = s.execute(select(LedgerEntry).where(LedgerEntry.kind == "budget_set")).scalars().all()
        assert [e.epsilon_micro for e in entries] == [1_000_000, 500_000]
        summary = spend_summary(s, t, keys("a", "b"), to_micro(0.5), SEGMENTS)
    assert summary.examples == 2 and summary.max_spent_micro == 0 and summary.can_take == 2


def test_spend_summary_counts_examples_that_can_still_take_epsilon(engine: Engine) -> None:
    t = new_tenant(engine, "1.0")
    with session_factory(engine).begin() as s:
        charge(s, t, keys("a", "b"), to_micro(0.75), release_id="r1", api_key_id=None, store=SEGMENTS)
        charge(s, t, keys("b"), to_micro(0.25), release_id="r2", api_key_id=None, store=SEGMENTS)
    with session_factory(engine)() as s:
        summary = spend_summary(s, t, keys("a", "b", "c"), to_micro(0.25), SEGMENTS)
    assert summary.examples == 3
    assert summary.max_spent_micro == 1_000_000 and summary.min_spent_micro == 0
    assert summary.can_take == 2  # a (0.75 + 0.25 fits) and c (never charged)


def test_keys_are_hashed_and_authentication_checks_the_hash(engine: Engine) -> None:
    with session_factory(engine).begin() as s:
        new = create_tenant(s, "acme", 1_000_000)
    with session_factory(engine)() as s:
        assert authenticate(s, new.api_key) is not None
        assert authenticate(s, new.api_key + "x") is None
        found = authenticate(s, new.api_key)
        assert found is not None
        stored = s.get(ApiKey, found.api_key_id)
        assert stored is not None and found.tenant_id == new.tenant_id
        assert new.api_key not in stored.key_hash and stored.key_hash == hash_key(new.api_key)


@pytest.mark.parametrize("trial", range(20))
def test_64_concurrent_charges_when_budget_admits_exactly_10(engine: Engine, trial: int) -> None:
    t = new_tenant(engine, "1.0", f"tenant-{trial}")
    k = example_keys(f"ex-{i}" for i in range(200))
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(64)

    def attempt(n: int) -> None:
        start.wait()
        try:
            with session_factory(engine).begin() as s:
                charge(s, t, k, to_micro("0.1"), release_id=f"r{n}", api_key_id=None, store=SEGMENTS)
            result = "ok"
        except BudgetExhaustedError:
            result = "exhausted"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(64)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert outcomes.count("ok") == 10 and outcomes.count("exhausted") == 54
    assert set(spend_rows(engine, t).values()) == {1_000_000}


def test_migrations_match_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_a_spend_histogram_answers_what_the_raw_spend_would() -> None:
    """The budget answer comes from (amount, count) pairs: max, min, how many can take ε, and the
    user quantiles equal numpy's over the raw amounts, for any amounts and any ε."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from labels_party.budget.summaries import SpendHistogram

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.integers(0, 5_000_000), min_size=1, max_size=400),
        st.integers(0, 6_000_000),
        st.integers(1, 3_000_000),
    )
    def check(spent: list[int], budget: int, epsilon: int) -> None:
        raw = np.asarray(spent, dtype=np.int64)
        histogram = SpendHistogram.of(raw)
        examples = histogram.examples(budget, epsilon)
        assert (examples.examples, examples.max_spent_micro, examples.min_spent_micro) == (
            raw.size,
            raw.max(),
            raw.min(),
        )
        limit = budget - epsilon
        assert examples.can_take == (int((raw <= limit).sum()) if limit >= 0 else 0)
        users = histogram.users(budget, epsilon)
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
            assert users.spent_quantiles_micro[name] == int(np.quantile(raw, q, method="higher"))
        assert users.can_take == int((raw + epsilon <= budget).sum())

    check()


def test_a_spend_distribution_keeps_every_count_in_at_most_fifty_ordered_buckets() -> None:
    """The budget answer's spend distribution: each distinct amount its own bucket when there are few;
    otherwise at most 50 buckets, in order, not overlapping, each stating the lowest and highest amount
    it holds and how many spent them — never losing or inventing anyone."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from labels_party.budget.summaries import MAX_BUCKETS, SpendHistogram

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.integers(0, 5_000_000), min_size=1, max_size=400))
    def check(spent: list[int]) -> None:
        raw = np.asarray(spent, dtype=np.int64)
        buckets = SpendHistogram.of(raw).buckets()
        distinct = np.unique(raw)
        if distinct.size <= MAX_BUCKETS:
            assert buckets == [(int(v), int(v), int((raw == v).sum())) for v in distinct]
        assert 1 <= len(buckets) <= MAX_BUCKETS
        assert sum(n for _, _, n in buckets) == raw.size
        for (lo, hi, n), after in zip(buckets, [*buckets[1:], None], strict=True):
            assert lo <= hi and n == int(((raw >= lo) & (raw <= hi)).sum()) and lo in raw and hi in raw
            if after is not None:
                assert hi < after[0]

    check()


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=200))
def test_distinct_keys_are_numpys_unique(values: list[int]) -> None:
    """``distinct`` (a sort and a neighbour comparison, used where numpy's hash-based unique is slow)
    is ``np.unique``: sorted, each key once, for any keys (duplicates, extremes, none)."""
    keys = np.asarray(values, dtype=np.int64)
    assert np.array_equal(distinct(keys), np.unique(keys))
    assert distinct(keys).dtype == np.int64
