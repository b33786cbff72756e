"""The demo's figures: the release's mechanism, mechanism error versus ε, the privacy budget over the
ledger, and the privacy audit.

Each figure is built by a function that returns a matplotlib ``Figure`` (no pyplot state), so
tests/e2e/test_demo_plots.py can check what is drawn: cells drawn as cells (``pcolormesh``, never an
interpolated image: a transition matrix has no gradient between bins), a colour bar for every heat map,
the "predict the mean" reference, and tick labels that do not overlap. Constrained layout keeps panels
apart; large numbers are written with thousands separators and at most a handful of ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldp.demo.mechanism import laplace_labels, mechanism_rows
from labeldp.demo.report import Report
from labeldp.demo.world import World
from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.advantage import Advantages
from labeldp.mechanisms.support import explicit_support
from labeldp.samples import LabelDataset

EPSILONS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DPI = 110
MAX_WIDTH = 12.0  # inches: a figure a page or a screen shows whole, its type still readable
SMALLEST_TYPE = 9.0  # points: no text smaller (legends, bar labels included)


def _figure(columns: int, size: tuple[float, float], rows: int = 1) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.subplots(rows, columns, squeeze=False).ravel()


def _readable(axis: Any, ticks: int = 5) -> None:
    """At most ``ticks`` ticks, written 12,000 rather than 12000 or 1.2e4."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"))


def save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


def mechanism_figure(
    ds: LabelDataset,
    y: np.ndarray,
    true_prior: np.ndarray,
    mech: PublishedMechanism,
    noisy: np.ndarray,
    lap: np.ndarray,
) -> Any:
    """Prior and bins, the transition matrix, and the joint of (true, private) labels for RR-on-Bins and
    Laplace, as in the paper's Figure 2 — two by two, so that the figure fits a page at a readable size
    (the matrix over k support points is drawn as cells, never one number per cell)."""
    from matplotlib.colors import LogNorm

    fig, axes = _figure(2, (11.5, 8.6), rows=2)
    sup = explicit_support(mech.support)
    values = np.asarray(sup.values, dtype=np.float64)
    bin_values = np.asarray(mech.bin_values)
    width = (sup.hi - sup.lo) / max(sup.k - 1, 1)
    ax = axes[0]
    ax.bar(values, true_prior, width=width, color="0.75", label="true prior")
    ax.step(
        values,
        mech.prior,
        where="mid",
        color="tab:blue",
        lw=1,
        label=f"noisy prior (ε₁={mech.epsilon_prior:.3g})",
    )
    for lo, _hi in mech.bin_edges[1:]:
        ax.axvline(lo - width / 2, color="tab:red", ls="--", lw=1)
    ax.plot(bin_values, np.zeros(mech.m), "v", color="tab:red", ms=10, label="bin values")
    ax.set_title(f"{ds.name}: prior and the {mech.m} optimal bins")
    ax.set_xlabel("label")
    ax.set_ylabel("share of examples")
    ax.legend(fontsize=SMALLEST_TYPE)
    _readable(ax.xaxis)

    ax = axes[1]  # one cell per (support point, output bin): no interpolation between bins
    middles = (values[1:] + values[:-1]) / 2
    x_edges = np.concatenate([[values[0] - width / 2], middles, [values[-1] + width / 2]])
    y_edges = np.arange(mech.m + 1) - 0.5
    mesh = ax.pcolormesh(x_edges, y_edges, mech.transition_matrix().T, cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label="P(output bin | true label)")
    if mech.m <= 12:
        ax.set_yticks(range(mech.m), [f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}" for v in bin_values])
    ax.set_title(f"transition matrix, ε₂={mech.epsilon_randomize:.3g}")
    ax.set_xlabel("true label")
    ax.set_ylabel("output bin value")
    _readable(ax.xaxis)

    edges = (
        np.arange(ds.lo - 0.5, ds.hi + 1.5) if ds.integer and sup.k <= 200 else np.linspace(ds.lo, ds.hi, 51)
    )
    counts = [np.histogram2d(y, private, bins=(edges, edges))[0] for private in (noisy, lap)]
    norm = LogNorm(vmin=1, vmax=max(1.0, *(float(c.max()) for c in counts)))
    for ax, hist, title in zip(axes[2:], counts, ("RR-on-Bins", "Laplace (clipped)"), strict=True):
        cells = np.ma.masked_equal(hist.T, 0)  # no examples: blank, not the darkest colour
        mesh = ax.pcolormesh(edges, edges, cells, cmap="magma", norm=norm)
        fig.colorbar(mesh, ax=ax, label="examples (log scale)")
        ax.set_title(f"{title}: (true, private) labels, ε={mech.epsilon:.3g}")
        ax.set_xlabel("true label")
        ax.set_ylabel("private label")
        _readable(ax.xaxis)
        _readable(ax.yaxis)
    return fig


def loss_curve_figure(ds: LabelDataset, rows: Sequence[dict[str, float]]) -> Any:
    """Mechanism error against the true labels versus ε, with what needs no labels at all: predicting
    the mean (its MSE is the labels' variance)."""
    fig, (ax,) = _figure(1, (6.5, 4.2))
    eps = [r["epsilon"] for r in rows]
    ax.plot(eps, [r["rr_on_bins"] for r in rows], "o-", label="RR-on-Bins (private prior)")
    ax.plot(eps, [r["known_prior"] for r in rows], "s--", label="RR-on-Bins (known prior)")
    ax.plot(eps, [r["laplace"] for r in rows], "^-", label="Laplace (clipped)")
    ax.axhline(float(np.var(ds.labels)), color="0.5", ls=":", label="predict the mean")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("MSE against the true labels")
    ax.set_title(f"{ds.name}: mechanism error versus ε")
    ax.legend(fontsize=SMALLEST_TYPE)
    return fig


def budget_figure(values: dict[str, Any]) -> Any:
    """The tenant's ledger over time (budget and the ε each release charged, cumulated) and what the
    release bought (test RMSE of the models against the true labels)."""
    fig, (left, right) = _figure(2, (11.5, 4.2))
    ledger = values["ledger"]
    steps = np.arange(1, len(ledger) + 1)
    budget, charged, total = [], [], 0.0
    current = 0.0
    for entry in ledger:
        if entry["kind"] == "budget_set":
            current = float(entry["epsilon"])
        elif entry["kind"].startswith("charge"):
            total += float(entry["epsilon"])
        budget.append(current)
        charged.append(total)
    edges = np.arange(len(ledger) + 1) + 0.5  # each entry holds until the next one
    # baseline=None: no drop to 0 at either end (the budget does not vanish after the last entry)
    left.stairs(budget, edges, baseline=None, color="tab:green", lw=2, label="budget per example")
    left.stairs(
        charged, edges, baseline=None, color="tab:red", lw=2, label="ε charged by releases (cumulative)"
    )
    left.set_xticks(steps, [e["kind"].replace("_", " ") for e in ledger], rotation=30, ha="right")
    left.set_ylim(0, max([*budget, *charged, 1e-9]) * 1.15)
    left.set_ylabel("ε")
    left.set_title("the tenant's ledger, entry by entry")
    left.legend(loc="best", fontsize=SMALLEST_TYPE)  # where it covers the fewest line segments
    errors = values["test_rmse"]
    names = ["RR-on-Bins", "Laplace", "non-private", "predict the mean"]
    keys = ["rr_on_bins_private", "laplace_baseline", "non_private", "predict_mean"]
    bars = right.bar(names, [errors[k] for k in keys], color=["tab:blue", "tab:orange", "0.5", "0.8"])
    right.bar_label(bars, labels=[f"{errors[k]:,.0f}" for k in keys], fontsize=SMALLEST_TYPE)
    right.set_ylabel("test RMSE against the true labels")
    right.set_title(f"what ε = {values['privacy']['epsilon']:g} bought")
    _readable(right.yaxis)
    return fig


def audit_figure(rr: Advantages, lap: Advantages, lap_epsilon: float, mech: PublishedMechanism) -> Any:
    """What the publisher's features attacker gains per example: RR-on-Bins against Laplace at the same
    ε. Left, the additive advantage's distribution over the examples; right, the multiplicative one —
    the same for nearly every example (the worst output's log-odds shift), so drawn as one bar per
    mechanism on the ε axis, with what it may never pass: the implemented ε and the ε charged."""
    fig, (left, right) = _figure(2, (11.5, 4.8))
    names = ("RR-on-Bins", f"Laplace (ε = {lap_epsilon:g})")
    for adv, name, color in zip((rr, lap), names, ("tab:blue", "tab:orange"), strict=True):
        x = np.sort(adv.additive)
        left.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=color, label=name)
    left.axvline(mech.worst_case_additive_advantage, color="0.4", ls="--", label="worst case, any prior")
    left.set_xlabel("additive advantage (exact, per example)")
    left.set_ylabel("share of examples at or below")
    left.set_title("how much more often the features attacker\nguesses the label's bin")
    left.legend(loc="lower right", fontsize=SMALLEST_TYPE)

    rows = np.arange(len(names))
    worst = [float(adv.multiplicative.max()) for adv in (rr, lap)]
    typical = [float(adv.multiplicative_expected.mean()) for adv in (rr, lap)]
    height = 0.38
    bars = right.barh(
        rows - height / 2,
        worst,
        height,
        color=["tab:blue", "tab:orange"],
        label="worst output (largest over the examples)",
    )
    right.bar_label(bars, labels=[f"{v:.3g}" for v in worst], padding=6, fontsize=SMALLEST_TYPE)
    bars = right.barh(
        rows + height / 2,
        typical,
        height,
        color=["#9ecae9", "#ffbf86"],
        label="averaged over outputs (mean over the examples)",
    )
    right.bar_label(bars, labels=[f"{v:.3g}" for v in typical], padding=6, fontsize=SMALLEST_TYPE)
    right.axvline(
        mech.implemented_epsilon,
        color="0.4",
        ls="--",
        label=f"implemented ε ({mech.implemented_epsilon:.3g})",
    )
    right.axvline(mech.epsilon, color="black", ls=":", label=f"ε charged ({mech.epsilon:g})")
    right.set_yticks(rows, names)
    right.invert_yaxis()  # RR-on-Bins on top, as in the legend on the left
    right.set_xlim(0, max(mech.epsilon, *worst) * 1.3)
    right.set_xlabel("multiplicative advantage (log-odds shift)")
    right.set_title("how far one release moves the attacker's odds\n(never past ε)")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize=SMALLEST_TYPE)
    return fig


def _audited(report: Report) -> tuple[Advantages, Advantages, float]:
    assert report.attack is not None and report.laplace_advantages is not None
    lap_epsilon = float(report.values["privacy_audit"]["laplace_epsilon"])
    return report.attack.exact, report.laplace_advantages, lap_epsilon


def draw(world: World, report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    ds = world.dataset
    values, epsilon = report.values, report.epsilon
    assert report.noisy is not None, "the flow keeps the released table for the plots"
    mech = PublishedMechanism.model_validate(values["mechanism"])
    released = report.noisy
    position = {eid: i for i, eid in enumerate(world.ids)}
    rows = np.fromiter((position[e] for e in released.column("example_id").to_pylist()), dtype=np.int64)
    codes = np.asarray(released.column("bin").to_numpy(), dtype=np.int64)
    informative = codes < mech.m  # user-level: clicks over the bound carry no label (code m)
    y = world.y[rows][informative]
    noisy = np.asarray(mech.bin_values)[codes[informative]]
    true_prior = ds.support.counts(y) / y.size
    curve, _ = mechanism_rows(ds, sorted({*EPSILONS, epsilon}))
    return [
        save(
            mechanism_figure(ds, y, true_prior, mech, noisy, laplace_labels(ds, epsilon, y)),
            out / "mechanism.png",
        ),
        save(loss_curve_figure(ds, curve), out / "loss_vs_epsilon.png"),
        save(budget_figure(values), out / "budget.png"),
        save(audit_figure(*_audited(report), mech), out / "privacy_audit.png"),
    ]
