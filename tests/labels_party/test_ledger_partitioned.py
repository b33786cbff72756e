"""The partitioned ledger charge (``budget/partitioned.py``) on SQLite and a real PostgreSQL: it spends
exactly what the in-process charge spends, refuses exactly when it refuses, leaves nothing behind when
it refuses or loses a race, and no interleaving with other charges or budget changes overspends."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import Engine, select

from labeldp.common.files import write_parquet_atomic
from labeldp.scale import InProcess
from labels_party.budget.epsilon import to_micro
from labels_party.budget.errors import BudgetExhaustedError, Spent, UserBudgetExhaustedError
from labels_party.budget.ledger import Ledger, UserCharge, charge, set_budget, set_user_budget
from labels_party.budget.ledger_keys import example_keys, user_keys
from labels_party.budget.partitioned import (
    KEY_COLUMN,
    USER_COLUMN,
    StagedKeys,
    charge_partitioned,
    merge_shard,
    referenced_segments,
    stage_keys,
)
from labels_party.budget.segments import SegmentError, SegmentStore
from labels_party.budget.summaries import spend_of_tenant, spend_summary
from labels_party.storage.db import session_factory
from labels_party.storage.orm import ExampleSpendShard, LedgerEntry, Tenant, UserSpendShard
from tests.support.ledger import new_tenant
from tests.support.threads import under_gc_callback


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def stage(
    tmp_path: Path, example_ids: list[str], users: list[str] | None = None, rows: int = 700
) -> StagedKeys:
    """Write the examples as partitions of ``rows`` and sort their keys (step 1)."""
    # a fresh folder each call, whatever else tmp_path holds (the database and its -wal and -shm files)
    folder = Path(tempfile.mkdtemp(prefix="stage-", dir=tmp_path))
    ek = np.array([example_keys([e])[0] for e in example_ids], dtype=np.int64)
    uk = user_keys(pa.array(users if users is not None else [None] * len(example_ids), pa.string()), ek)
    parts = []
    for i, start in enumerate(range(0, len(example_ids), rows)):
        path = folder / f"part-{i:05d}.parquet"
        write_parquet_atomic(
            path, pa.table({KEY_COLUMN: ek[start : start + rows], USER_COLUMN: uk[start : start + rows]})
        )
        parts.append(str(path))
    return stage_keys(InProcess(), parts, folder / "keys")


def in_process_users(example_ids: list[str], users: list[str] | None, micro: int) -> UserCharge:
    ek = np.array([example_keys([e])[0] for e in example_ids], dtype=np.int64)
    uk = user_keys(pa.array(users if users is not None else [None] * len(example_ids), pa.string()), ek)
    return UserCharge.of_examples(uk, micro)


def spend(engine: Engine, tenant: str, store: SegmentStore, model: Any = ExampleSpendShard) -> dict[int, int]:
    with session_factory(engine)() as s:
        k, v = spend_of_tenant(s, tenant, store, model)
    return dict(zip(k.tolist(), v.tolist(), strict=True))


def partitioned(
    engine: Engine, store: SegmentStore, tenant: str, staged: StagedKeys, eps: float, **kw: Any
) -> LedgerEntry:
    return charge_partitioned(
        Ledger(session_factory(engine), store),
        kw.pop("on", InProcess()),
        tenant,
        staged,
        to_micro(eps),
        inside=kw.pop("inside", lambda s: None),
        release_id=kw.pop("release_id", None),
        api_key_id=None,
        **kw,
    )


def files(store: SegmentStore) -> set[str]:
    return {p.name for p in store.root.iterdir()} if store.root.is_dir() else set()


def referenced(engine: Engine) -> set[str]:
    with session_factory(engine)() as s:
        return referenced_segments(s)


def test_it_spends_exactly_what_the_in_process_charge_spends(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    a, b = new_tenant(engine, "2.0", "a"), new_tenant(engine, "2.0", "b")
    rounds = [
        (ids("x", 3000), [f"u{i % 400}" for i in range(3000)], 0.5),
        (ids("x", 1500) + ids("y", 900), None, 0.7),
        (ids("y", 2000), [f"u{i % 7}" for i in range(2000)], 0.3),
    ]
    for example_ids, users, eps in rounds:
        partitioned(engine, store, a, stage(tmp_path, example_ids, users), eps)
        with session_factory(engine).begin() as s:
            charge(
                s,
                b,
                example_keys(example_ids),
                to_micro(eps),
                users=in_process_users(example_ids, users, to_micro(eps)),
                release_id=None,
                api_key_id=None,
                store=store,
            )
    assert spend(engine, a, store) == spend(engine, b, store)
    assert spend(engine, a, store, UserSpendShard) == spend(engine, b, store, UserSpendShard)
    assert sorted(set(spend(engine, a, store).values())) == [300_000, 500_000, 1_000_000, 1_200_000]
    with session_factory(engine)() as s:
        entries = s.execute(
            select(
                LedgerEntry.tenant_id, LedgerEntry.examples, LedgerEntry.users, LedgerEntry.user_epsilon_micro
            )
            .where(LedgerEntry.kind == "charge")
            .order_by(LedgerEntry.id)
        ).all()
        rows = (
            s.execute(select(ExampleSpendShard.segment).where(ExampleSpendShard.tenant_id == a))
            .scalars()
            .all()
        )
    assert [e[1:] for e in entries if e[0] == a] == [e[1:] for e in entries if e[0] == b]
    assert rows and all(r is not None for r in rows)  # tenant a's spend lives in segment files
    assert referenced(engine) <= files(store)


def test_refusal_counts_like_the_in_process_charge_and_leaves_nothing(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "1.0")
    partitioned(engine, store, t, stage(tmp_path, ids("x", 2000)), 0.8)
    before, kept = spend(engine, t, store), files(store)
    with pytest.raises(BudgetExhaustedError) as info:
        partitioned(engine, store, t, stage(tmp_path, ids("x", 500) + ids("z", 100)), 0.3)
    assert (info.value.lacking, info.value.requested) == (500, 600)
    assert spend(engine, t, store) == before and files(store) == kept
    # what the refusal tells (the typical and the worst example's spend) is what the in-process one tells
    mixed = ids("x", 100) + ids("z", 300)
    with pytest.raises(BudgetExhaustedError) as cluster:
        partitioned(engine, store, t, stage(tmp_path, mixed), 0.3)
    with pytest.raises(BudgetExhaustedError) as here, session_factory(engine).begin() as s:
        charge(s, t, example_keys(mixed), to_micro(0.3), release_id=None, api_key_id=None, store=store)
    assert cluster.value.spent == here.value.spent == Spent(typical=0, worst=800_000)
    assert spend(engine, t, store) == before and files(store) == kept
    with session_factory(engine).begin() as s:
        set_user_budget(s, t, to_micro(1.0), api_key_id=None)
    with pytest.raises(UserBudgetExhaustedError) as user_info:  # 6 examples of one user at 0.2 each
        partitioned(engine, store, t, stage(tmp_path, ids("w", 6), ["same"] * 6), 0.2)
    assert (user_info.value.lacking, user_info.value.requested) == (1, 1)
    assert user_info.value.spent == Spent(typical=0, worst=0)  # the user had spent nothing
    assert spend(engine, t, store) == before and files(store) == kept
    with session_factory(engine)() as s:
        assert s.execute(select(LedgerEntry.kind).where(LedgerEntry.kind == "charge")).scalars().all() == [
            "charge"
        ]


def test_in_process_charges_and_summaries_read_segment_shards(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "1.0")
    partitioned(engine, store, t, stage(tmp_path, ids("x", 1000)), 0.6)
    with pytest.raises(BudgetExhaustedError), session_factory(engine).begin() as s:
        charge(s, t, example_keys(ids("x", 10)), to_micro(0.5), release_id=None, api_key_id=None, store=store)
    with session_factory(engine).begin() as s:
        charge(s, t, example_keys(ids("x", 10)), to_micro(0.4), release_id=None, api_key_id=None, store=store)
    with session_factory(engine)() as s:
        summary = spend_summary(s, t, example_keys(ids("x", 1000)), to_micro(0.4), store)
    assert (summary.max_spent_micro, summary.min_spent_micro, summary.can_take) == (1_000_000, 600_000, 990)


def test_a_charge_committed_in_between_forces_a_recheck(engine: Engine, tmp_path: Path) -> None:
    """Another charge commits after this one read the ledger and before it commits: the version moved,
    so this one is recomputed against the new state — and refused, since only one of the two fits."""
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "1.0")
    staged = stage(tmp_path, ids("x", 1500))
    interfered: list[bool] = []

    class Interfering(InProcess):
        def map(self, fn: Callable[..., Any], *iterables: list[Any], **shared: Any) -> list[Any]:
            if fn is merge_shard and not interfered:
                with session_factory(engine).begin() as s:  # a real, committed charge, in between
                    charge(
                        s,
                        t,
                        example_keys(ids("x", 3)),
                        to_micro(0.6),
                        release_id=None,
                        api_key_id=None,
                        store=store,
                    )
                interfered.append(True)
            return super().map(fn, *iterables, **shared)

    with pytest.raises(BudgetExhaustedError) as info:
        partitioned(engine, store, t, staged, 0.6, on=Interfering())
    assert (info.value.lacking, info.value.requested) == (3, 1500)
    assert spend(engine, t, store) == {int(k): 600_000 for k in example_keys(ids("x", 3))}
    assert files(store) == referenced(engine)  # the lost attempt's segments were removed


def test_a_budget_lowered_in_between_is_respected(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "1.0")
    lowered: list[bool] = []

    class Lowering(InProcess):
        def map(self, fn: Callable[..., Any], *iterables: list[Any], **shared: Any) -> list[Any]:
            if fn is merge_shard and not lowered:
                with session_factory(engine).begin() as s:
                    set_budget(s, t, to_micro(0.5), api_key_id=None)
                lowered.append(True)
            return super().map(fn, *iterables, **shared)

    with pytest.raises(BudgetExhaustedError):
        partitioned(engine, store, t, stage(tmp_path, ids("x", 100)), 0.6, on=Lowering())
    assert spend(engine, t, store) == {}


@pytest.mark.parametrize("hostile_threads", [False, True], ids=["plain", "gc-callback"])
def test_concurrent_charges_never_overspend(engine: Engine, tmp_path: Path, hostile_threads: bool) -> None:
    """Eight partitioned charges and four in-process ones race on overlapping examples whose budget
    takes three charges of 0.3: every example ends at exactly 0.3 × the committed charges covering it,
    never above the budget, and every refusal left nothing behind. ``gc-callback``: with a Python
    callback on every garbage collection (hypothesis installs one; Dask's workers too) and threads
    switched every 10 µs — where parsing the staged keys' .npy headers failed on CPython 3.11.7
    (gh-106905: "AST constructor recursion depth mismatch"), on CI once in a while, here every run."""
    with under_gc_callback() if hostile_threads else contextlib.nullcontext():
        _concurrent_charges(engine, tmp_path)


def _concurrent_charges(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "1.0")
    sets = [ids("x", 400) + ids(f"own{i}", 50) for i in range(12)]
    staged = [stage(tmp_path, s, rows=150) for s in sets[:8]]
    outcome: dict[int, str] = {}
    start = threading.Barrier(12)

    def run(i: int) -> None:
        start.wait()
        try:
            if i < 8:
                partitioned(engine, store, t, staged[i], 0.3, attempts=100, release_id=f"r{i}")
            else:
                with session_factory(engine).begin() as s:
                    charge(
                        s,
                        t,
                        example_keys(sets[i]),
                        to_micro(0.3),
                        release_id=f"r{i}",
                        api_key_id=None,
                        store=store,
                    )
            outcome[i] = "charged"
        except BudgetExhaustedError:
            outcome[i] = "refused"
        except Exception:  # anything else fails the test below, with its traceback
            outcome[i] = traceback.format_exc()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    charged = [i for i, o in outcome.items() if o == "charged"]
    assert sorted(outcome) == list(range(12)) and set(outcome.values()) <= {"charged", "refused"}, outcome
    assert len(charged) == 3, outcome
    expected: dict[int, int] = {}
    for i in charged:
        for k in example_keys(sets[i]):
            expected[int(k)] = expected.get(int(k), 0) + 300_000
    assert spend(engine, t, store) == expected
    with session_factory(engine)() as s:
        releases = set(
            s.execute(select(LedgerEntry.release_id).where(LedgerEntry.kind == "charge")).scalars()
        )
        version = s.get(Tenant, t).ledger_version  # type: ignore[union-attr]
    assert releases == {f"r{i}" for i in charged}
    assert version == 1 + 3  # the tenant's budget_set and the three charges
    assert referenced(engine) <= files(store)


def test_garbage_collection_keeps_what_rows_name(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "2.0")
    partitioned(engine, store, t, stage(tmp_path, ids("x", 800)), 0.5)
    partitioned(engine, store, t, stage(tmp_path, ids("x", 800)), 0.5)  # supersedes the first segments
    named = referenced(engine)
    assert named < files(store)
    assert store.collect_garbage(named) == 0  # younger than the grace period
    superseded = len(files(store) - named)
    assert store.collect_garbage(named, older_than=-1) == superseded > 0
    assert files(store) == named
    assert set(spend(engine, t, store).values()) == {1_000_000}


def test_a_short_staged_file_charges_nothing(engine: Engine, tmp_path: Path) -> None:
    """A staged keys file that ends early (a disk or a worker that failed mid-write) would charge fewer
    examples than the release lists: the charge fails and the ledger is as it was."""
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "2.0")
    staged = stage(tmp_path, ids("x", 900))
    victim = Path(staged.examples[-1].path)
    victim.write_bytes(victim.read_bytes()[:-8])
    with pytest.raises(RuntimeError, match="end early"):
        partitioned(engine, store, t, staged, 0.5)
    assert spend(engine, t, store) == {}


def test_a_changed_segment_is_refused(engine: Engine, tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "ledger")
    t = new_tenant(engine, "2.0")
    partitioned(engine, store, t, stage(tmp_path, ids("x", 50)), 0.5)
    victim = store.root / sorted(referenced(engine))[0]
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    with pytest.raises(SegmentError, match="digest"):
        spend(engine, t, store)
    with pytest.raises(SegmentError, match="not a segment name"):
        store.path("../../etc/passwd")
