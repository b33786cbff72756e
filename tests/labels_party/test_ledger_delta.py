"""(ε, δ) charges in the ledger, on SQLite and a real PostgreSQL: exact integer δ, refused without
changing anything, never overspent under concurrency, visible through the REST API and set by the CLI."""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from labeldp.cli import app
from labels_party.budget.epsilon import ATTO, as_delta, to_atto, to_atto_floor, to_micro, to_micro_floor
from labels_party.budget.errors import BudgetExhaustedError, DeltaBudgetExhaustedError
from labels_party.budget.ledger import charge, set_delta_budget
from labels_party.budget.ledger_keys import example_keys
from labels_party.budget.summaries import spend_of_tenant
from labels_party.config import LabelsSettings
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry, Tenant
from labels_party.tenants import create_tenant
from tests.support.ledger import SEGMENTS
from tests.support.servers import labels_server_thread, tenant_key


def tenant(engine: Engine, budget: str = "10", delta: str = "0", name: str = "acme") -> str:
    with session_factory(engine).begin() as s:
        return create_tenant(s, name, to_micro_floor(budget), None, to_atto_floor(delta)).tenant_id


def state(engine: Engine, tenant_id: str) -> tuple[int, int, dict[int, int]]:
    with session_factory(engine)() as s:
        t = s.get(Tenant, tenant_id)
        assert t is not None
        entries = len(s.execute(select(LedgerEntry).where(LedgerEntry.tenant_id == tenant_id)).all())
        keys, spent = spend_of_tenant(s, tenant_id, SEGMENTS)
        return t.delta_spent_atto, entries, dict(zip(keys.tolist(), spent.tolist(), strict=True))


def test_delta_conversion_is_exact_and_rounds_charges_up() -> None:
    delta = 1 / 39_074**2
    assert Decimal(to_atto(delta)) / ATTO >= Decimal(repr(delta))
    assert Decimal(to_atto(delta) - 1) / ATTO < Decimal(repr(delta))
    assert to_atto(1e-18) == 1 and to_atto(1e-25) == 1  # never free
    assert to_atto_floor("1e-6") == 10**12 and to_atto_floor("0") == 0
    assert as_delta(10**12) == 1e-6
    for bad in (0, 1.0, -1e-9, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError, match="delta"):
            to_atto(bad)


def test_delta_charges_add_exactly_and_are_recorded(engine: Engine) -> None:
    t = tenant(engine, delta="1e-6")
    ks = example_keys([f"e{i}" for i in range(5)])
    d = to_atto(1 / 5**2)  # far more than the budget: refused
    with pytest.raises(DeltaBudgetExhaustedError), session_factory(engine).begin() as s:
        charge(s, t, ks, to_micro(2.0), release_id="r0", api_key_id=None, delta_atto=d, store=SEGMENTS)
    for i in range(3):
        with session_factory(engine).begin() as s:
            entry = charge(
                s,
                t,
                ks,
                to_micro(2.0),
                release_id=f"r{i + 1}",
                api_key_id=None,
                delta_atto=to_atto("3e-7"),
                store=SEGMENTS,
            )
            assert entry.delta_atto == 3 * 10**11
    spent, _, spend = state(engine, t)
    assert spent == 9 * 10**11  # exactly 3 × 3e-7
    assert set(spend.values()) == {6_000_000}


def test_a_refused_delta_charge_changes_nothing(engine: Engine) -> None:
    t = tenant(engine, delta="5e-7")
    ks = example_keys(["a", "b"])
    with session_factory(engine).begin() as s:
        charge(
            s,
            t,
            ks,
            to_micro(1.0),
            release_id="r1",
            api_key_id=None,
            delta_atto=to_atto("3e-7"),
            store=SEGMENTS,
        )
    before = state(engine, t)
    with pytest.raises(DeltaBudgetExhaustedError) as info, session_factory(engine).begin() as s:
        charge(
            s,
            t,
            example_keys(["c"]),
            to_micro(1.0),
            release_id="r2",
            api_key_id=None,
            delta_atto=to_atto("3e-7"),
            store=SEGMENTS,
        )
    assert info.value.code == "delta-budget-exhausted" and info.value.status == 409
    assert state(engine, t) == before  # no ε, no δ, no ledger entry
    # an ε refusal with δ available changes no δ either
    with pytest.raises(BudgetExhaustedError), session_factory(engine).begin() as s:
        charge(
            s,
            t,
            ks,
            to_micro(9.5),
            release_id="r3",
            api_key_id=None,
            delta_atto=to_atto("1e-7"),
            store=SEGMENTS,
        )
    assert state(engine, t) == before


def test_pure_epsilon_tenants_refuse_any_delta(engine: Engine) -> None:
    t = tenant(engine)  # δ budget 0 by default
    with pytest.raises(DeltaBudgetExhaustedError), session_factory(engine).begin() as s:
        charge(
            s,
            t,
            example_keys(["a"]),
            to_micro(1.0),
            release_id="r",
            api_key_id=None,
            delta_atto=1,
            store=SEGMENTS,
        )
    with session_factory(engine).begin() as s:  # pure ε still works
        charge(s, t, example_keys(["a"]), to_micro(1.0), release_id="r", api_key_id=None, store=SEGMENTS)
    with session_factory(engine).begin() as s:
        set_delta_budget(s, t, 10, api_key_id=None, note="raised")
        kinds = [e.kind for e in s.execute(select(LedgerEntry).order_by(LedgerEntry.id)).scalars()]
    assert kinds[-1] == "delta_budget_set"


def test_concurrent_delta_charges_never_overspend(engine: Engine) -> None:
    """Eight charges on disjoint examples race for a δ budget that admits exactly three."""
    t = tenant(engine, delta="3e-9")
    results: list[str] = []

    def run(i: int) -> None:
        try:
            with session_factory(engine).begin() as s:
                charge(
                    s,
                    t,
                    example_keys([f"x{i}"]),
                    to_micro(0.5),
                    release_id=f"r{i}",
                    api_key_id=None,
                    delta_atto=to_atto("1e-9"),
                    store=SEGMENTS,
                )
            results.append("ok")
        except DeltaBudgetExhaustedError:
            results.append("refused")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    spent, _, spend = state(engine, t)
    assert results.count("ok") == 3 and results.count("refused") == 5
    assert spent == 3 * 10**9 and len(spend) == 3


def test_budget_and_ledger_routes_show_delta(database_url: str, tmp_path: Path) -> None:
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=database_url)
    with labels_server_thread(settings) as base:
        tenant_id, key = tenant_key(database_url, "acme", "4")
        engine = make_engine(database_url)
        with session_factory(engine).begin() as s:
            set_delta_budget(s, tenant_id, to_atto_floor("1e-6"), api_key_id=None, note="phase 2")
            charge(
                s,
                tenant_id,
                example_keys(["a"]),
                to_micro(1.0),
                release_id=None,
                api_key_id=None,
                delta_atto=to_atto("2.5e-7"),
                store=SEGMENTS,
            )
        engine.dispose()
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = c.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
        budget = c.get(f"/v1/datasets/{ds}/budget").json()
        assert (budget["delta_budget"], budget["delta_spent"]) == (1e-6, 2.5e-7)
        entries = c.get("/v1/ledger", params={"limit": 100}).json()["items"]
        assert [(e["kind"], e["delta"]) for e in entries][-2:] == [
            ("delta_budget_set", 1e-6),
            ("charge", 2.5e-7),
        ]
        assert all(e["delta"] is None for e in entries[:-2])


def test_cli_sets_the_delta_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from labels_party.storage.db import sqlite_url

    monkeypatch.setenv("LABELDP_DATA_DIR", str(tmp_path / "labels"))
    monkeypatch.delenv("LABELDP_DATABASE_URL", raising=False)
    runner = CliRunner()
    made = runner.invoke(
        app, ["labels", "tenant", "create", "acme", "--epsilon-per-example", "4", "--delta", "1e-8"]
    )
    assert made.exit_code == 0, made.output
    out = runner.invoke(app, ["labels", "tenant", "set-budget", "acme", "--delta", "2e-6"])
    assert out.exit_code == 0 and "δ budget is now 2e-06" in out.output
    bad = runner.invoke(app, ["labels", "tenant", "set-budget", "acme", "--delta", "1.5"])
    assert bad.exit_code == 2 and "delta" in bad.output
    engine = make_engine(sqlite_url(tmp_path / "labels"))
    with session_factory(engine)() as s:
        t = s.execute(select(Tenant)).scalar_one()
        deltas = [e.delta_atto for e in s.execute(select(LedgerEntry).order_by(LedgerEntry.id)).scalars()]
    engine.dispose()
    assert t.delta_budget_atto == 2 * 10**12
    assert deltas[-2:] == [10**10, 2 * 10**12]
    assert np.all([d is None for d in deltas[:-2]])
