"""`labeldp demo` (what `make demo` runs) through the real CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from labeldp.cli import app


def test_demo_prints_bins_and_losses_and_writes_figures(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--epsilons", "0.5,1,4"])
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
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--epsilons", "1,-2"])
    assert result.exit_code == 2
    assert "epsilon must be a finite number > 0" in result.output
