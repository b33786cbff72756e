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


def laplace_labels(ds: LabelDataset, eps: float, y: np.ndarray | None = None) -> np.ndarray:
    """The Laplace baseline (discrete for integer labels), clipped to the public bounds."""
    y = ds.labels if y is None else y
    if ds.integer:
        return discrete_laplace(y, int(ds.lo), int(ds.hi), eps)
    return laplace(y, ds.lo, ds.hi, eps)


def _fmt_bins(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(f"{v:,.1f}" for v in values[:limit])
    return f"[{shown}{', …' if values.size > limit else ''}]"


def mechanism_rows(
    ds: LabelDataset, epsilons: Sequence[float]
) -> tuple[list[dict[str, float]], dict[float, LabelRelease]]:
    """Per ε: MSE against the true labels of RR-on-Bins (private prior), its known-prior optimum and
    Laplace, plus the releases themselves."""
    y, sup = ds.labels, ds.support
    true_prior = sup.counts(y) / y.size
    rows: list[dict[str, float]] = []
    releases: dict[float, LabelRelease] = {}
    for eps in epsilons:
        rel = release_labels(y, sup, eps, "squared")
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
    echo(f"Public support: {sup.k} points on [{ds.lo:g}, {ds.hi:g}]; loss: squared\n")
    columns = (
        ("ε", 5),
        ("ε prior", 7),
        ("m", 3),
        ("RR-on-Bins MSE", 15),
        ("known-prior MSE", 15),
        ("Laplace MSE", 13),
    )
    echo("  ".join(f"{name:>{width}}" for name, width in columns) + "  bins")
    rows, releases = mechanism_rows(ds, epsilons)
    for row in rows:
        rel = releases[row["epsilon"]]
        head = f"{row['epsilon']:>5g}  {rel.epsilon_prior:>7.3f}  {rel.mechanism.m:>3}"
        losses = f"{row['rr_on_bins']:>15,.1f}  {row['known_prior']:>15,.1f}  {row['laplace']:>13,.1f}"
        echo(f"{head}  {losses}  {_fmt_bins(rel.mechanism.bin_values)}")
    return rows, releases
