"""The mechanism on its own (``labeldp demo --mechanism-only``, and the demo's loss-versus-ε plot).

For each ε it releases a dataset's labels exactly as the labels party does (Algorithm 3: private
prior, optimal bins, one randomization per label) and measures the error against the true labels
beside the Laplace baseline and the known-prior optimum; ``plots`` draws the mechanism like the
paper's Figure 2 (``main.run_mechanism_demo`` puts the two together, so that this module imports no
plotting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from labeldp.mechanisms import (
    LabelRelease,
    discrete_laplace,
    laplace,
    optimize_rr_on_bins,
    release_labels,
)
from labeldp.samples import LabelDataset
from labeldp.terminal import number, numbers, table_lines


def laplace_labels(ds: LabelDataset, eps: float, y: np.ndarray | None = None) -> np.ndarray:
    """The Laplace baseline (discrete for integer labels), clipped to the public bounds."""
    y = ds.labels if y is None else y
    if ds.integer:
        return discrete_laplace(y, int(ds.lo), int(ds.hi), eps)
    return laplace(y, ds.lo, ds.hi, eps)


def _fmt_bins(values: np.ndarray, limit: int = 8) -> str:
    return numbers(values[:limit]) + ("; …" if values.size > limit else "")


def mechanism_rows(
    ds: LabelDataset, epsilons: Sequence[float]
) -> tuple[list[dict[str, float]], dict[float, LabelRelease]]:
    """Per ε: MSE against the true labels of RR-on-Bins (private prior), its known-prior optimum and
    Laplace, plus the releases themselves. The bins minimize the per-label loss (the ``label``
    objective, the paper's), since that is what this table compares; a service release of squared
    loss defaults to the ``model`` objective, which trades per-label error for a better model."""
    y, sup = ds.labels, ds.support
    true_prior = sup.counts(y) / y.size
    rows: list[dict[str, float]] = []
    releases: dict[float, LabelRelease] = {}
    for eps in epsilons:
        rel = release_labels(y, sup, eps, "squared", objective="label")
        releases[eps] = rel
        mse = float(np.mean((rel.noisy_labels - y) ** 2))
        known = optimize_rr_on_bins(sup, true_prior, eps, "squared").expected_loss(y, np.ones(y.size))
        lap = float(np.mean((laplace_labels(ds, eps) - y) ** 2))
        rows.append({"epsilon": eps, "rr_on_bins": mse, "known_prior": known, "laplace": lap})
    return rows, releases


def print_mechanism_table(
    ds: LabelDataset, epsilons: Sequence[float], echo: Callable[[str], None] = print
) -> tuple[list[dict[str, float]], dict[float, LabelRelease]]:
    """The dataset, its public support and one line per ε (ε₁, the bins, the three errors); returns
    ``mechanism_rows``' rows and releases (``labeldp.demo.main`` draws them)."""
    sup = ds.support
    echo(f"Dataset: {ds.description}")
    echo(f"Public support: {sup.k} points on [{number(ds.lo)}, {number(ds.hi)}]; loss: squared\n")
    rows, releases = mechanism_rows(ds, epsilons)
    shown = [
        {
            **row,
            "epsilon_prior": releases[row["epsilon"]].epsilon_prior,
            "m": releases[row["epsilon"]].mechanism.m,
            "bins": _fmt_bins(releases[row["epsilon"]].mechanism.bin_values),
        }
        for row in rows
    ]
    columns = {
        "epsilon": "ε",
        "epsilon_prior": "ε prior",
        "m": "m",
        "rr_on_bins": "RR-on-Bins MSE",
        "known_prior": "known-prior MSE",
        "laplace": "Laplace MSE",
        "bins": "bins",
    }
    for line in table_lines(shown, list(columns), headers=list(columns.values())):
        echo(line)
    return rows, releases
