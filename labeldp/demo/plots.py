"""The demo's figures: the release's mechanism, mechanism error versus ε, and the privacy budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from labeldp.demo.flow import Report
from labeldp.demo.mechanism import laplace_labels, mechanism_rows, plot_loss_curve, plot_mechanism
from labeldp.demo.world import World
from labeldp.mechanisms import PublishedMechanism

EPSILONS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def draw(world: World, report: Report, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    paths = [
        out / "mechanism.png",
        out / "loss_vs_epsilon.png",
        out / "budget.png",
        out / "privacy_audit.png",
    ]
    plot_mechanism(
        paths[0],
        ds,
        y,
        true_prior,
        mech,
        noisy,
        laplace_labels(ds, epsilon, y),
    )
    curve, _ = mechanism_rows(ds, sorted({*EPSILONS, epsilon}))
    plot_loss_curve(ds, curve, paths[1])

    b = values["budget"]
    errors = values["test_rmse"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.barh(["per-example ε"], [b["spent_max"]], color="tab:red", label=f"spent ({b['spent_max']:g})")
    left.barh(
        ["per-example ε"],
        [b["left"]],
        left=[b["spent_max"]],
        color="tab:green",
        label=f"left ({b['left']:g})",
    )
    left.set_xlim(0, b["per_example"])
    left.set_xlabel("ε")
    left.set_title(f"privacy budget of each of {values['examples_released']:,} released examples")
    left.legend(loc="lower right")
    names = ["RR-on-Bins", "Laplace", "non-private", "constant"]
    keys = ["rr_on_bins_private", "laplace_baseline", "non_private", "predict_mean"]
    right.bar(names, [errors[k] for k in keys], color=["tab:blue", "tab:orange", "0.5", "0.8"])
    right.set_ylabel("test RMSE against the true labels")
    right.set_title(f"what the budget bought (ε = {epsilon:g})")
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    plot_audit(report, mech, paths[3])
    return paths


def plot_audit(report: Report, mech: PublishedMechanism, path: Path) -> None:
    """Per-example advantages of the publisher's attacker: RR-on-Bins against Laplace at the same ε."""
    import matplotlib.pyplot as plt

    assert report.attack is not None and report.laplace_advantages is not None
    rr, lap = report.attack.exact, report.laplace_advantages
    lap_eps = report.values["privacy_audit"]["laplace_epsilon"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for adv, name, color in (
        (rr, "RR-on-Bins", "tab:blue"),
        (lap, f"Laplace (ε = {lap_eps:g})", "tab:orange"),
    ):
        x = np.sort(adv.additive)
        left.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=color, label=name)
        y = np.sort(adv.multiplicative)
        right.step(y, np.arange(1, y.size + 1) / y.size, where="post", color=color, label=name)
    left.axvline(mech.worst_case_additive_advantage, color="0.4", ls="--", label="worst case, any prior")
    left.set_xlabel("additive advantage (exact, per example)")
    left.set_ylabel("share of examples at or below")
    left.set_title("how much more often the attacker guesses the label's bin")
    left.legend(loc="lower right")
    right.axvline(mech.implemented_epsilon, color="0.4", ls="--", label="implemented ε")
    right.set_xlabel("multiplicative advantage (log-odds shift, worst output)")
    right.set_title("how far one release moves the attacker's odds")
    right.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
