"""The unbiased randomizer against RR-on-Bins (label and model objective): models trained on each,
scored on held-out TRUE labels; how fine its output grid must be; how fast its optimizer is.

Sections (``python -m benchmarks.bench_unbiased [models_prices models_weeks models_weeks_poisson grid
speed]``, all by default; each keeps its own JSON, the report is rebuilt from every section that has one):

* ``models_*``: prices (squared loss), weeks worked (squared loss) and weeks worked (Poisson loss). Each
  dataset is split 80/20 by a hash of the row number (as ``bench_generalization``); the training labels
  go through ``release_labels`` (private prior with the default split) with RR-on-Bins under the label
  objective, RR-on-Bins under the model objective, and the unbiased randomizer; the features party's
  own trainer (``features_party.training.fit.fit``: gradient boosting or the linear model, the release's
  debiasing, its validation split) fits each release, and its pipeline predicts the test split. Test
  loss against the true labels (MSE; Poisson deviance for the Poisson task), mean ± std over ``RUNS``;
  and each mechanism's label-level loss (its released training values against the true labels).
* ``grid``: the optimum's variance as the output grid gets finer and reaches further (true histograms).
* ``speed``: the optimizer's wall time at k = 201 (the prices grid) beside RR-on-Bins' in the same run,
  and the largest support it finishes within 60 s (a private histogram of the prices on finer grids).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from sklearn.metrics import mean_poisson_deviance

from benchmarks.bench_generalization import schema_of
from benchmarks.common import RESULTS, write
from features_party.training.fit import ModelKind, fit, validation_mask
from labeldp.mechanisms import optimize_rr_on_bins, private_prior, release_labels, uniform_grid
from labeldp.mechanisms.debias import release_noise
from labeldp.mechanisms.unbiased_program import (
    GRID_POINTS,
    PRIOR_FLOOR,
    optimize_unbiased,
    output_grid,
    solve_unbiased,
)
from labeldp.samples import LabelDataset, diamond_prices, weeks_worked

EPSILONS = tuple(
    float(e) for e in os.environ.get("LABELDP_BENCH_EPSILONS", "0.05,0.1,0.3,0.5,1,2,4,8").split(",")
)
RUNS = int(os.environ.get("LABELDP_BENCH_RUNS", "5"))
MODELS: tuple[ModelKind, ...] = ("hgb", "linear")
MECHANISMS = {
    "RR-on-Bins, label objective": {"mechanism": "rr_on_bins", "objective": "label"},
    "RR-on-Bins, model objective": {"mechanism": "rr_on_bins", "objective": "model"},
    "unbiased": {"mechanism": "unbiased"},
}
TASKS: dict[str, tuple[Callable[[], LabelDataset], str]] = {
    "prices": (diamond_prices, "squared"),
    "weeks": (weeks_worked, "squared"),
    "weeks_poisson": (weeks_worked, "poisson"),
}
GRID_SIZES = (128, 256, 512, 1024, 2048)
SPEED_LIMIT_S = 60.0


def _poisson_log_loss(y_hat: np.ndarray, y: np.ndarray) -> float | None:
    if np.any(y_hat <= 0):
        return None  # an output at or below zero: the Poisson loss is undefined
    return float(np.mean(y_hat - y * np.log(y_hat)))


def models_table(task: str) -> tuple[str, list[dict[str, Any]]]:
    load, loss = TASKS[task]
    ds = load()
    features = ds.features
    test = validation_mask(pa.array([f"row-{i}" for i in range(features.num_rows)]), 0.2)
    train = ~test
    ids = pa.array([f"example-{i}" for i in range(features.num_rows)])  # the trainer splits on these
    y = ds.labels
    y_train = np.clip(y[train], ds.lo, ds.hi)
    schema = schema_of(features)
    table = features.append_column("example_id", ids)
    train_features, test_features = table.filter(pa.array(train)), table.filter(pa.array(test))
    train_ids = ids.filter(pa.array(train))

    def score(pred: np.ndarray) -> float:
        if loss == "poisson":
            return float(mean_poisson_deviance(y[test], np.maximum(pred, 1e-6)))
        return float(np.mean((pred - y[test]) ** 2))

    rows: list[dict[str, Any]] = []
    for eps in EPSILONS:
        row: dict[str, Any] = {"epsilon": eps}
        for name, options in MECHANISMS.items():
            runs: list[dict[str, Any]] = []
            for _ in range(RUNS):
                started = time.perf_counter()
                rel = release_labels(y_train, ds.support, eps, loss, **options)  # type: ignore[arg-type]
                release_s = time.perf_counter() - started
                published = rel.published()
                values = rel.noisy_labels
                run: dict[str, Any] = {
                    "label_mse": float(np.mean((values - y_train) ** 2)),
                    "label_poisson": _poisson_log_loss(values, y_train) if loss == "poisson" else None,
                    "outputs": published.m,
                    "release_s": release_s,
                }
                released = pa.table({"example_id": train_ids, "bin": pa.array(rel.bin_indices, pa.uint16())})
                noise = release_noise(published)
                for model in MODELS:
                    trained = fit(released, train_features, schema, noise, loss, model=model)
                    run[model] = score(trained.predict(test_features))
                runs.append(run)
            row[name] = runs
            print(
                task,
                eps,
                name,
                {m: round(float(np.mean([r[m] for r in runs])), 4) for m in MODELS},
                flush=True,
            )
        rows.append(row)
        _store(f"unbiased_models_{task}", {"markdown": _markdown(task, rows), "rows": rows})
    return _markdown(task, rows), rows


def _cell(values: list[float]) -> str:
    return f"{np.mean(values):,.4g} ± {np.std(values):,.2g}"


def _best(row: dict[str, Any], metric: str) -> tuple[str, set[str]]:
    """The column with the lowest mean, and the columns tied with it (means within either's std)."""
    stats = {
        n: (float(np.mean([r[metric] for r in row[n]])), float(np.std([r[metric] for r in row[n]])))
        for n in MECHANISMS
    }
    best = min(stats, key=lambda n: stats[n][0])
    mean_b, std_b = stats[best]
    tied = {n for n, (mean, std) in stats.items() if mean - mean_b <= max(std, std_b)}
    return best, tied


def _markdown(task: str, rows: list[dict[str, Any]]) -> str:
    loss = TASKS[task][1]
    metric_name = "test Poisson deviance" if loss == "poisson" else "test MSE"
    names = list(MECHANISMS)
    parts = []
    for model in MODELS:
        lines = [
            f"{metric_name}, {'gradient boosting' if model == 'hgb' else 'linear model'} "
            "(**bold**: best mean; *: tied with it within one std)\n",
            "| ε | " + " | ".join(names) + " |",
            "|---" * (len(names) + 1) + "|",
        ]
        for row in rows:
            best, tied = _best(row, model)
            cells = []
            for n in names:
                cell = _cell([r[model] for r in row[n]])
                cells.append(f"**{cell}**" if n == best else (f"{cell} *" if n in tied else cell))
            lines.append(f"| {row['epsilon']:g} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    label_metric = "label_poisson" if loss == "poisson" else "label_mse"
    lines = [
        "label-level loss of the released training values against the true labels "
        + (
            "(Poisson log loss; unbiased: undefined, its outputs go below 0 — its MSE in brackets)"
            if loss == "poisson"
            else "(MSE)"
        )
        + "\n",
        "| ε | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for row in rows:
        cells = []
        for n in names:
            values = [r[label_metric] for r in row[n]]
            if any(v is None for v in values):
                cells.append(f"— [{_cell([r['label_mse'] for r in row[n]])}]")
            else:
                cells.append(_cell(values))
        lines.append(f"| {row['epsilon']:g} | " + " | ".join(cells) + " |")
    parts.append("\n".join(lines))
    return "\n\n".join(parts)


def grid_table() -> tuple[str, list[dict[str, Any]]]:
    """The variance of the optimum (true histogram, floored as releases floor it) on grids of
    ``GRID_SIZES`` points, and at the default size with twice the reach; relative to the finest."""
    rows: list[dict[str, Any]] = []
    lines = [
        "| dataset | ε | "
        + " | ".join(f"{n:,} points" for n in GRID_SIZES)
        + f" | {GRID_POINTS}, reach ×2 |",
        "|---" * (len(GRID_SIZES) + 3) + "|",
    ]
    for ds in (diamond_prices(), weeks_worked()):
        y = ds.support.values
        p = ds.support.counts(ds.labels) / ds.labels.size
        p = (1 - PRIOR_FLOOR) * p + PRIOR_FLOOR / p.size
        for eps in EPSILONS:
            variances = [solve_unbiased(y, p, eps, output_grid(y, eps, n)).variance for n in GRID_SIZES]
            wide = solve_unbiased(y, p, eps, output_grid(y, eps, GRID_POINTS, reach=2.0)).variance
            finest = variances[-1]
            rows.append(
                {
                    "dataset": ds.name,
                    "epsilon": eps,
                    "sizes": list(GRID_SIZES),
                    "variance": variances,
                    "wide": wide,
                }
            )
            cells = [f"{v:,.6g} ({(v - finest) / finest:+.1e})" for v in variances[:-1]] + [f"{finest:,.6g}"]
            cells.append(f"{wide:,.6g} ({(wide - finest) / finest:+.1e})")
            lines.append(f"| {ds.name} | {eps:g} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    return "\n".join(lines), rows


def speed_table() -> tuple[str, list[dict[str, Any]]]:
    """Wall time of ``optimize_unbiased`` at k = 201 (prices) per ε beside RR-on-Bins' optimizer on the
    same prior (measured in the same run), then the largest k (finer price grids) within 60 s at ε = 1."""
    ds = diamond_prices()
    p = ds.support.counts(ds.labels) / ds.labels.size
    lines = ["| k | ε | unbiased (s) | outputs | RR-on-Bins (s) | ratio |", "|---|---|---|---|---|---|"]
    rows: list[dict[str, Any]] = []

    def one(k: int, sup: Any, prior: np.ndarray, eps: float) -> float:
        started = time.perf_counter()
        mech = optimize_unbiased(sup, prior, eps)
        unbiased_s = time.perf_counter() - started
        started = time.perf_counter()
        optimize_rr_on_bins(sup, prior, eps, "squared")
        rr_s = time.perf_counter() - started
        rows.append(
            {"k": k, "epsilon": eps, "unbiased_s": unbiased_s, "outputs": mech.m, "rr_on_bins_s": rr_s}
        )
        lines.append(
            f"| {k} | {eps:g} | {unbiased_s:.2f} | {mech.m} | {rr_s:.3f} | {unbiased_s / rr_s:,.0f}× |"
        )
        print(lines[-1], flush=True)
        return unbiased_s

    for eps in EPSILONS:
        one(ds.support.k, ds.support, p, eps)
    largest = ds.support.k
    for k in (401, 801, 1201, 1601, 2000):
        sup = uniform_grid(0.0, 20_000.0, k)
        seconds = one(k, sup, private_prior(ds.labels, sup, 0.5), 1.0)
        if seconds > SPEED_LIMIT_S:
            break
        largest = k
    lines.append(f"\nLargest k within {SPEED_LIMIT_S:.0f} s at ε = 1: {largest}.")
    return "\n".join(lines), rows


SECTIONS: dict[str, tuple[str, Callable[[], tuple[str, Any]]]] = {
    "models_prices": ("Diamond prices, squared loss", lambda: models_table("prices")),
    "models_weeks": ("Census weeks worked, squared loss", lambda: models_table("weeks")),
    "models_weeks_poisson": ("Census weeks worked, Poisson loss", lambda: models_table("weeks_poisson")),
    "grid": (
        "How fine the output grid must be: the optimum's variance (relative to the finest grid)",
        grid_table,
    ),
    "speed": ("Optimizer speed", speed_table),
}


def _store(name: str, part: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(part, indent=2))


def main(names: list[str] | None = None) -> None:
    for name in names or list(SECTIONS):
        md, rows = SECTIONS[name][1]()
        _store(f"unbiased_{name}", {"markdown": md, "rows": rows})
    sections, data = [], {}
    for name, (title, _) in SECTIONS.items():
        stored = RESULTS / f"unbiased_{name}.json"
        if stored.exists():
            part = json.loads(stored.read_text())
            sections.append(f"#### {title}\n\n{part['markdown']}")
            data[name] = part["rows"]
    write("unbiased", "\n\n".join(sections), data)


if __name__ == "__main__":
    main(sys.argv[1:])
