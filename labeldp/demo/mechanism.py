"""The mechanism on its own (``labeldp demo --mechanism-only``, and the demo's loss-versus-ε plot).

For each ε it releases a dataset's labels exactly as the labels party does (Algorithm 3: private
prior, optimal bins, one randomization per label), measures the error against the true labels beside
the Laplace baseline and the known-prior optimum, and draws the mechanism like the paper's Figure 2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from labeldp.datasets import LabelDataset, load
from labeldp.mechanisms import (
    LabelRelease,
    PublishedMechanism,
    discrete_laplace,
    laplace,
    optimize_rr_on_bins,
    release_labels,
)


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


def run_mechanism_demo(
    dataset: str, epsilons: Sequence[float], out: Path, echo: Callable[[str], None] = print
) -> list[dict[str, float]]:
    ds = load(dataset)
    y = ds.labels
    sup = ds.support
    true_prior = sup.counts(y) / y.size
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
    out.mkdir(parents=True, exist_ok=True)
    focus = min(epsilons, key=lambda e: abs(e - 1.0))
    figure = out / f"mechanism_{ds.name}_eps{focus:g}.png"
    _plot_mechanism(ds, releases[focus], laplace_labels(ds, focus), true_prior, figure)
    curve = out / f"loss_vs_epsilon_{ds.name}.png"
    plot_loss_curve(ds, rows, curve)
    echo(f"\nRR-on-Bins beats Laplace at every ε: {all(r['rr_on_bins'] < r['laplace'] for r in rows)}")
    echo(f"Wrote {figure} and {curve}")
    return rows


def _plot_mechanism(
    ds: LabelDataset, rel: LabelRelease, lap: np.ndarray, true_prior: np.ndarray, path: Path
) -> None:
    plot_mechanism(
        path,
        ds,
        ds.labels,
        true_prior,
        rel.published(),
        rel.noisy_labels,
        lap,
    )


def plot_mechanism(
    path: Path,
    ds: LabelDataset,
    y: np.ndarray,
    true_prior: np.ndarray,
    mech: PublishedMechanism,
    noisy: np.ndarray,
    lap: np.ndarray,
) -> None:
    """Prior and bins, the transition matrix, and the joint of (true, private) labels for RR-on-Bins
    and Laplace, as in the paper's Figure 2."""
    noisy_prior = np.asarray(mech.prior)
    epsilon_prior, epsilon = mech.epsilon_prior, mech.epsilon
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sup = mech.mechanism().support
    bin_values = np.asarray(mech.bin_values)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    width = (sup.hi - sup.lo) / max(sup.k - 1, 1)
    ax = axes[0]
    ax.bar(sup.values, true_prior, width=width, color="0.75", label="true prior")
    ax.step(
        sup.values,
        noisy_prior,
        where="mid",
        color="tab:blue",
        lw=1,
        label=f"noisy prior (ε₁={epsilon_prior:.3g})",
    )
    for lo, _hi in mech.bin_edges[1:]:
        ax.axvline(lo - width / 2, color="tab:red", ls="--", lw=1)
    ax.plot(bin_values, np.zeros(mech.m), "v", color="tab:red", ms=10, label="bin values")
    ax.set_title(f"{ds.name}: prior and the {mech.m} optimal bins")
    ax.set_xlabel("label")
    ax.legend(fontsize=8)

    ax = axes[1]
    im = ax.imshow(
        mech.transition_matrix().T,
        aspect="auto",
        origin="lower",
        extent=(sup.lo, sup.hi, -0.5, mech.m - 0.5),
        cmap="viridis",
        vmin=0,
        vmax=1,
    )
    ax.set_yticks(range(mech.m), [f"{v:,.0f}" for v in bin_values] if mech.m <= 12 else None)
    ax.set_title(f"transition matrix P(output | label), ε₂={mech.epsilon_randomize:.3g}")
    ax.set_xlabel("true label")
    ax.set_ylabel("output bin value")
    fig.colorbar(im, ax=ax)

    edges = (
        np.arange(ds.lo - 0.5, ds.hi + 1.5) if ds.integer and sup.k <= 200 else np.linspace(ds.lo, ds.hi, 51)
    )
    for ax, private, title in (
        (axes[2], noisy, "RR-on-Bins"),
        (axes[3], lap, "Laplace (clipped)"),
    ):
        hist, _, _ = np.histogram2d(y, private, bins=(edges, edges))
        ax.imshow(
            np.log1p(hist.T), origin="lower", extent=(ds.lo, ds.hi, ds.lo, ds.hi), cmap="magma", aspect="auto"
        )
        ax.set_title(f"{title}: joint of (true, private) labels, ε={epsilon:.3g}")
        ax.set_xlabel("true label")
        ax.set_ylabel("private label")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_loss_curve(ds: LabelDataset, rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [r["epsilon"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(eps, [r["rr_on_bins"] for r in rows], "o-", label="RR-on-Bins (private prior)")
    ax.plot(eps, [r["known_prior"] for r in rows], "s--", label="RR-on-Bins (known prior)")
    ax.plot(eps, [r["laplace"] for r in rows], "^-", label="Laplace (clipped)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("MSE against the true labels")
    ax.set_title(f"{ds.name}: mechanism error versus ε")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
