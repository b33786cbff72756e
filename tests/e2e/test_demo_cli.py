"""`labeldp demo` (what `make demo` runs) through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labeldp.cli import app

pytestmark = pytest.mark.processes


def test_demo_prints_bins_and_losses_and_writes_figures(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["demo", "--mechanism-only", "--dataset", "weeks", "--out", str(tmp_path), "--epsilons", "0.5,1,4"],
    )
    assert result.exit_code == 0, result.output
    assert "RR-on-Bins MSE" in result.output and "Laplace MSE" in result.output
    assert "RR-on-Bins beats Laplace at every ε: True" in result.output
    for name in ("mechanism_weeks_eps1.png", "loss_vs_epsilon_weeks.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_rejects_an_unknown_dataset(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--dataset", "nope"])
    assert result.exit_code == 2
    assert "unknown dataset 'nope'" in result.output


def test_demo_rejects_a_bad_epsilon(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--mechanism-only", "--out", str(tmp_path), "--epsilons", "1,-2"]
    )
    assert result.exit_code == 2
    assert "epsilon must be a finite number > 0" in result.output


def test_labels_tenant_create_prints_a_key_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABELDP_DATA_DIR", str(tmp_path / "labels"))
    monkeypatch.delenv("LABELDP_DATABASE_URL", raising=False)
    first = CliRunner().invoke(app, ["labels", "tenant", "create", "acme", "--epsilon-per-example", "4"])
    assert first.exit_code == 0, first.output
    key = first.output.strip().splitlines()[-1]
    assert key.startswith("ldp_") and len(key) > 40
    again = CliRunner().invoke(app, ["labels", "tenant", "create", "acme", "--epsilon-per-example", "4"])
    assert again.exit_code == 2 and "already exists" in again.output
    bad = CliRunner().invoke(app, ["labels", "tenant", "create", "other", "--epsilon-per-example", "-1"])
    assert bad.exit_code == 2 and "epsilon_per_example" in bad.output


def test_labels_tenant_set_budget_is_a_ledger_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import select

    from labels_party.storage.db import make_engine, session_factory, sqlite_url
    from labels_party.storage.orm import LedgerEntry, Tenant

    monkeypatch.setenv("LABELDP_DATA_DIR", str(tmp_path / "labels"))
    monkeypatch.delenv("LABELDP_DATABASE_URL", raising=False)
    runner = CliRunner()
    assert (
        runner.invoke(app, ["labels", "tenant", "create", "acme", "--epsilon-per-example", "4"]).exit_code
        == 0
    )
    out = runner.invoke(
        app, ["labels", "tenant", "set-budget", "acme", "--epsilon-per-example", "2.5", "--note", "q4"]
    )
    assert out.exit_code == 0, out.output
    missing = runner.invoke(app, ["labels", "tenant", "set-budget", "nobody", "--epsilon-per-example", "1"])
    assert missing.exit_code == 2 and "no tenant named" in missing.output
    engine = make_engine(sqlite_url(tmp_path / "labels"))
    with session_factory(engine)() as s:
        tenant = s.execute(select(Tenant)).scalar_one()
        entries = s.execute(select(LedgerEntry).order_by(LedgerEntry.id)).scalars().all()
    engine.dispose()
    assert tenant.budget_micro == 2_500_000
    assert [(e.kind, e.epsilon_micro, e.note) for e in entries][-1] == ("budget_set", 2_500_000, "q4")
    # the per-user budget: set, lifted, and a clear error for a contradictory request
    per_user = runner.invoke(app, ["labels", "tenant", "set-budget", "acme", "--epsilon-per-user", "3"])
    assert per_user.exit_code == 0 and "per-user budget is now 3" in per_user.output
    lifted = runner.invoke(app, ["labels", "tenant", "set-budget", "acme", "--no-per-user-limit"])
    assert lifted.exit_code == 0 and "not limited" in lifted.output
    both = runner.invoke(
        app, ["labels", "tenant", "set-budget", "acme", "--epsilon-per-user", "1", "--no-per-user-limit"]
    )
    assert both.exit_code == 2
    with session_factory(engine)() as s:
        tenant = s.execute(select(Tenant)).scalar_one()
        kinds = [
            (e.kind, e.epsilon_micro)
            for e in s.execute(select(LedgerEntry).order_by(LedgerEntry.id)).scalars()
        ]
    engine.dispose()
    assert tenant.user_budget_micro is None
    assert kinds[-2:] == [("user_budget_set", 3_000_000), ("user_budget_set", 0)]


def test_tenant_create_can_write_the_key_to_a_file_and_tolerate_an_existing_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the compose services run at every start: create once, keep the key file, then no-op."""
    import stat

    monkeypatch.setenv("LABELDP_DATA_DIR", str(tmp_path / "labels"))
    monkeypatch.setenv("LABELDP_FEATURES_DATA_DIR", str(tmp_path / "features"))
    monkeypatch.delenv("LABELDP_DATABASE_URL", raising=False)
    monkeypatch.delenv("LABELDP_FEATURES_DATABASE_URL", raising=False)
    runner = CliRunner()
    for party, extra in (("labels", ["--epsilon-per-example", "3"]), ("features", [])):
        key_file = tmp_path / "keys" / f"{party}-api-key"
        args = [party, "tenant", "create", "demo", *extra, "--key-file", str(key_file), "--exist-ok"]
        first = runner.invoke(app, args)
        assert first.exit_code == 0, first.output
        key = key_file.read_text().strip()
        assert key.startswith("ldp_") and key not in first.output
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        again = runner.invoke(app, args)
        assert again.exit_code == 0 and "exists" in again.output
        assert key_file.read_text().strip() == key  # the key file is left alone
        clash = runner.invoke(app, [party, "tenant", "create", "demo", *extra])
        assert clash.exit_code == 2 and "already exists" in clash.output


def test_dev_ca_keep_existing_does_not_replace_certificates(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["keys", "dev-ca", "--out", str(tmp_path)]).exit_code == 0
    ca = (tmp_path / "ca.pem").read_bytes()
    kept = runner.invoke(app, ["keys", "dev-ca", "--out", str(tmp_path), "--keep-existing"])
    assert kept.exit_code == 0 and "keeping" in kept.output
    assert (tmp_path / "ca.pem").read_bytes() == ca
    assert runner.invoke(app, ["keys", "dev-ca", "--out", str(tmp_path)]).exit_code == 0
    assert (tmp_path / "ca.pem").read_bytes() != ca


def test_the_semi_sensitive_demo_runs_both_services_and_beats_label_dp_alone(tmp_path: Path) -> None:
    """`labeldp demo --semi-sensitive`: real services with mutual TLS, one label release, one model
    charged (ε₂, δ) and delivered; the hybrid model is scored on held-out rows."""
    import json

    pytest.importorskip("torch")
    result = CliRunner().invoke(app, ["demo", "--semi-sensitive", "--epsilon", "5", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "semi-sensitive-report.json").read_text())
    assert (report["epsilon_labels"], report["epsilon_dpsgd"]) == (3.0, 2.0)
    g = report["guarantee"]
    assert g["epsilon_total"] == 5.0 and g["delta"] == report["delta"] and g["adjacency"] == "replace-one"
    auc = report["test_auc"]
    # the semi-sensitive half carries most of Adult's signal: the hybrid must use it (measured: 0.89 vs 0.80)
    assert auc["hybrid (label DP, then DP-SGD)"] > auc["label DP only (non-sensitive columns)"] + 0.04
    assert auc["hybrid (label DP, then DP-SGD)"] > 0.85
    bad = CliRunner().invoke(
        app, ["demo", "--semi-sensitive", "--privacy-unit", "user", "--out", str(tmp_path)]
    )
    assert bad.exit_code == 2
