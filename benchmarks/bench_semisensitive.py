"""Semi-sensitive features on UCI Adult: RR-only, DP-SGD-only and the hybrid, as in the paper.

Half of Adult's 14 feature columns are declared **semi-sensitive** — what an advertiser would learn
from cross-site behaviour and its own records rather than from the page: employment (``workclass``,
``occupation``, ``hours-per-week``), household (``marital-status``, ``relationship``) and money
(``capital-gain``, ``capital-loss``). The other seven are **non-sensitive**, the profile-level
demographics a publisher already holds (``age``, ``gender``, ``race``, ``native-country``,
``education``, ``educational-num``, ``fnlwgt``). The label is income > 50K.

Per total ε (δ = 1/n², n the training examples), five runs each (fresh 80/20 split per run):

* **non-private** — the full two-tower model on true labels (the reference AUC);
* **RR-only** — randomized response at ε, the truncated model (non-sensitive columns) with the
  debiased loss;
* **DP-SGD-only** — DP-SGD at (ε, δ) on every column, from a random start;
* **hybrid** — RR at ε₁ = min(0.6ε, 3) for the truncated model, then DP-SGD at (ε − ε₁, δ) on every
  column starting from it.

Relative AUC loss = (AUC_non-private − AUC)/AUC_non-private, in %, on the test split's true labels.
Columns are encoded by their declarations (``labeldp.datasets.adult_semi_sensitive``: census ranges,
log scale for money, UCI's category lists) exactly as the labels party's service encodes them.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from sklearn.metrics import roc_auc_score

from benchmarks.common import RESULTS, write
from labeldp.datasets import adult_semi_sensitive
from labeldp.mechanisms import randomized_response
from labeldp.mechanisms.debias import BinsNoise
from labeldp.semisensitive import (
    DpSgdSchedule,
    HybridBudget,
    Hyper,
    TwoTower,
    calibrate_noise,
    predict,
    train_dpsgd,
    train_full,
    train_truncated,
)
from labeldp.semisensitive.encoding import ColumnEncoding, encode

EPSILONS = (1.0, 3.0, 5.0, 50.0)
RUNS = 5
PHASE1 = Hyper(epochs=3, batch_size=256, learning_rate=1e-3)
REFERENCE = Hyper(epochs=5, batch_size=256, learning_rate=1e-3)
DPSGD_BATCH, DPSGD_EPOCHS, CLIP, DPSGD_LR = 1024, 3.0, 1.0, 1e-2


def adult() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adult's two column sets, encoded by their declarations exactly as the labels party encodes them."""
    data = adult_semi_sensitive()

    def matrix(table: pa.Table, declared: list[dict[str, object]]) -> np.ndarray:
        values = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
        return encode(values, [ColumnEncoding.of(d) for d in declared])

    x_non = matrix(data.features, data.non_sensitive)
    x_semi = matrix(data.labels, data.semi_sensitive)
    return x_non, x_semi, data.labels.column("label").to_numpy().astype(np.int64)


def auc(y: np.ndarray, p: np.ndarray) -> float:
    return float(roc_auc_score(y, p))


def main() -> None:
    warnings.filterwarnings("ignore", message="Full backward hook")
    torch.set_num_threads(2)
    x_non, x_semi, y = adult()
    n_train = round(0.8 * y.size)
    delta = 1.0 / n_train**2
    schedule = DpSgdSchedule.of(n_train, DPSGD_BATCH, DPSGD_EPOCHS)
    sigmas: dict[float, float] = {}

    def sigma(eps: float) -> float:
        if eps not in sigmas:
            sigmas[eps] = calibrate_noise(schedule, eps, delta)
        return sigmas[eps]

    rows: list[dict[str, object]] = []
    started = time.perf_counter()
    results: dict[float, dict[str, list[float]]] = {e: {} for e in EPSILONS}
    for run in range(RUNS):
        order = np.random.default_rng(run).permutation(y.size)  # the split only; every DP draw is secure
        tr, te = order[:n_train], order[n_train:]
        torch.manual_seed(run)
        d_non, d_semi = x_non.shape[1], x_semi.shape[1]
        reference = train_full(TwoTower(d_non, d_semi), x_non[tr], x_semi[tr], y[tr], REFERENCE)
        base = auc(y[te], predict(reference, x_non[te], x_semi[te]))
        for eps in EPSILONS:
            budget = HybridBudget.split(eps, delta)
            out = results[eps]
            out.setdefault("non-private AUC", []).append(base)
            # RR-only: all of ε on the labels, truncated model
            noisy = randomized_response(y[tr], 2, eps)
            rr = train_truncated(TwoTower(d_non, d_semi), x_non[tr], noisy, BinsNoise.of([0, 1], eps), PHASE1)
            out.setdefault("RR-only", []).append(auc(y[te], predict(rr, x_non[te])))
            # DP-SGD-only: all of (ε, δ) on DP-SGD from scratch
            model = TwoTower(d_non, d_semi)
            train_dpsgd(
                model,
                x_non[tr],
                x_semi[tr],
                y[tr],
                schedule=schedule,
                noise_multiplier=sigma(eps),
                clip_norm=CLIP,
                learning_rate=DPSGD_LR,
            )
            out.setdefault("DP-SGD-only", []).append(auc(y[te], predict(model, x_non[te], x_semi[te])))
            # hybrid: ε₁ on RR for the truncated model, then (ε₂, δ) DP-SGD from it
            first = randomized_response(y[tr], 2, budget.epsilon_labels)
            model = train_truncated(
                TwoTower(d_non, d_semi), x_non[tr], first, BinsNoise.of([0, 1], budget.epsilon_labels), PHASE1
            )
            train_dpsgd(
                model,
                x_non[tr],
                x_semi[tr],
                y[tr],
                schedule=schedule,
                noise_multiplier=sigma(budget.epsilon_dpsgd),
                clip_norm=CLIP,
                learning_rate=DPSGD_LR,
            )
            out.setdefault("hybrid", []).append(auc(y[te], predict(model, x_non[te], x_semi[te])))
        print(f"run {run + 1}/{RUNS} done after {time.perf_counter() - started:.0f} s", flush=True)

    for eps in EPSILONS:
        budget = HybridBudget.split(eps, delta)
        base_auc = np.asarray(results[eps]["non-private AUC"])
        row: dict[str, object] = {
            "epsilon": eps,
            "epsilon_labels": budget.epsilon_labels,
            "epsilon_dpsgd": budget.epsilon_dpsgd,
            "sigma_dpsgd_only": sigmas[eps],
            "sigma_hybrid": sigmas[budget.epsilon_dpsgd],
            "non_private_auc": float(base_auc.mean()),
        }
        for name in ("RR-only", "DP-SGD-only", "hybrid"):
            loss = 100 * (base_auc - np.asarray(results[eps][name])) / base_auc
            row[name] = {"mean": float(loss.mean()), "std": float(loss.std(ddof=1))}
        rows.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, RESULTS / "semi_sensitive.png")
    write("semi_sensitive", markdown(rows, n_train, delta, schedule, time.perf_counter() - started), rows)


def markdown(
    rows: list[dict[str, object]], n: int, delta: float, schedule: DpSgdSchedule, seconds: float
) -> str:
    lines = [
        f"UCI Adult, {n:,} training examples, δ = 1/n² = {delta:.3g}; DP-SGD: {schedule.steps} steps at "
        f"q = {schedule.sampling_rate:.4f} (batch {DPSGD_BATCH}, {DPSGD_EPOCHS:g} epochs), clip {CLIP:g}; "
        f"{RUNS} runs, {seconds:.0f} s in all.",
        "",
        "| ε | ε₁ / ε₂ | σ (DP-SGD-only / hybrid) | non-private AUC | RR-only | DP-SGD-only | hybrid |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [f"{r[m]['mean']:.2f} ± {r[m]['std']:.2f}" for m in ("RR-only", "DP-SGD-only", "hybrid")]  # type: ignore[index]
        lines.append(
            f"| {r['epsilon']:g} | {r['epsilon_labels']:g} / {r['epsilon_dpsgd']:g} | "
            f"{r['sigma_dpsgd_only']:.3f} / {r['sigma_hybrid']:.3f} | {r['non_private_auc']:.4f} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("\nCells: relative AUC loss (%) against the non-private model, mean ± std over the runs.")
    return "\n".join(lines)


def plot(rows: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    eps = [float(r["epsilon"]) for r in rows]  # type: ignore[arg-type]
    for name in ("RR-only", "DP-SGD-only", "hybrid"):
        mean = np.array([r[name]["mean"] for r in rows])  # type: ignore[index]
        std = np.array([r[name]["std"] for r in rows])  # type: ignore[index]
        ax.errorbar(eps, mean, yerr=std, marker="o", capsize=3, label=name)
    ax.set_xscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.set_xlabel("total ε (δ = 1/n²)")
    ax.set_ylabel("relative AUC loss (%)")
    ax.set_title("UCI Adult, 7 of 14 columns semi-sensitive")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
