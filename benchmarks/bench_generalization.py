"""The paper's "Generalization" block on real data: train on privatized training labels, score the
test split against the TRUE labels.

Each dataset is split 80/20 by a hash of the row number. The training labels go through the labels
party's release code (``release_labels``: private prior with the default ε split, optimal bins for the
label objective and for the model objective, one CSPRNG randomization) or a baseline (Laplace,
staircase, exponential; discrete variants for integer labels), and the features party's training code
fits the same HistGradientBoosting model on them (``Encoder`` from ``features_party.training.fit``;
RR-on-Bins predictions get the affine correction of docs/math.md §6, which the baselines do not need).
Metrics on the test split against the true labels: MSE (prices), Poisson deviance and MSE (weeks
worked), AUC (income), mean ± std over ``RUNS``.

``python -m benchmarks.bench_generalization capacity`` fits the model objective's default capacity
(``labeldp.mechanisms.objective.DEFAULT_MODEL_CAPACITY``) on public synthetic data (Friedman #1): how
many examples' worth of zero-mean label noise the same learner averages away, ``n·Δ/σ²``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.metrics import mean_poisson_deviance, roc_auc_score

from benchmarks.bench_utility import baselines
from benchmarks.common import RESULTS, write
from features_party.training.fit import Encoder, validation_mask
from labeldp.mechanisms import release_labels
from labeldp.mechanisms.debias import BinsNoise
from labeldp.mechanisms.objective import ObjectiveName
from labeldp.samples import LabelDataset, adult_income, diamond_prices, weeks_worked

EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0)
RUNS = int(os.environ.get("LABELDP_BENCH_RUNS", "5"))  # fewer for a slow machine: the stds are reported
MAX_ITER = 100
OBJECTIVES: tuple[ObjectiveName, ...] = ("label", "model")
RR_NAMES = {"label": "RR-on-Bins, label objective", "model": "RR-on-Bins, model objective"}


def schema_of(features: pa.Table) -> dict[str, str]:
    out = {}
    for f in features.schema:
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
        out[f.name] = "numeric" if numeric else "categorical"
    return out


def matrices(ds: LabelDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, Encoder]:
    features = ds.features
    schema = schema_of(features)
    test = validation_mask(pa.array([f"row-{i}" for i in range(features.num_rows)]), 0.2)
    encoder = Encoder(list(schema), [c for c in schema if schema[c] == "categorical"])
    encoder.fit(features.filter(pa.array(~test)))
    return encoder.transform(features), ds.labels, test, encoder


def regressor(loss: str, encoder: Encoder) -> HistGradientBoostingRegressor:
    return HistGradientBoostingRegressor(
        loss="poisson" if loss == "poisson" else "squared_error",
        categorical_features=encoder.categorical_mask,
        max_iter=MAX_ITER,
        early_stopping=False,
    )


def regression_table(ds: LabelDataset, loss: str) -> tuple[str, list[dict[str, object]]]:
    X, y, test, encoder = matrices(ds)
    train = ~test
    y_train = np.clip(y[train], ds.lo, ds.hi)

    def score(pred: np.ndarray) -> dict[str, float]:
        out = {"mse": float(np.mean((pred - y[test]) ** 2))}
        if loss == "poisson":
            out["poisson_deviance"] = float(mean_poisson_deviance(y[test], np.maximum(pred, 1e-6)))
        return out

    def fit_predict(targets: np.ndarray) -> np.ndarray:
        model = regressor(loss, encoder).fit(X[train], targets)
        return np.asarray(model.predict(X[test]), dtype=np.float64)

    non_private = score(fit_predict(y_train))
    names = [*RR_NAMES.values(), *baselines(ds)]
    metric = "poisson_deviance" if loss == "poisson" else "mse"
    rows: list[dict[str, object]] = []
    lines = [
        f"| ε | {' | '.join(names)} | non-private |",
        "|---" * (len(names) + 2) + "|",
    ]
    for eps in EPSILONS:
        results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for _ in range(RUNS):
            for objective in OBJECTIVES:
                rel = release_labels(y_train, ds.support, eps, loss, objective=objective)
                noise = BinsNoise.of(rel.mechanism.bin_values, rel.mechanism.epsilon)
                pred = noise.affine_correct(fit_predict(rel.noisy_labels))
                results[RR_NAMES[objective]].append({**score(pred), "bins": rel.mechanism.m})
            for name, privatize in baselines(ds).items():
                results[name].append(score(fit_predict(privatize(y_train, eps))))
        cells = []
        for n in names:
            values = [r[metric] for r in results[n]]
            bins = [r["bins"] for r in results[n] if "bins" in r]
            where = f" (m {min(bins)}–{max(bins)})" if bins else ""
            cells.append(f"{np.mean(values):,.4g} ± {np.std(values):,.2g}{where}")
        lines.append(f"| {eps:g} | {' | '.join(cells)} | {non_private[metric]:,.4g} |")
        rows.append({"epsilon": eps, "non_private": non_private, **{n: results[n] for n in names}})
        print(lines[-1], flush=True)
    return "\n".join(lines), rows


def income_table() -> tuple[str, list[dict[str, object]]]:
    """Binary labels: RR-on-Bins on {0, 1} (private prior, squared loss; the class is the bin index)
    beside plain randomized response over both classes."""
    from labeldp.mechanisms import randomized_response

    ds = adult_income()
    X, y, test, encoder = matrices(ds)
    train = ~test
    y_train = y[train].astype(int)

    def auc(targets: np.ndarray) -> float:
        if np.unique(targets).size < 2:
            return 0.5  # the release carries a single class: nothing to rank with
        model = HistGradientBoostingClassifier(
            categorical_features=encoder.categorical_mask, max_iter=MAX_ITER, early_stopping=False
        ).fit(X[train], targets)
        return float(roc_auc_score(y[test], model.predict_proba(X[test])[:, -1]))

    def rr_on_bins(eps: float, objective: ObjectiveName) -> np.ndarray:
        rel = release_labels(y_train.astype(float), ds.support, eps, "squared", objective=objective)
        return rel.bin_indices  # bins are sorted by value: index 1 is the "positive" bin when m = 2

    non_private = auc(y_train)
    lines = [
        "| ε | RR-on-Bins, label objective | RR-on-Bins, model objective | randomized response, k = 2 "
        "| non-private |",
        "|---|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        label = [auc(rr_on_bins(eps, "label")) for _ in range(RUNS)]
        model = [auc(rr_on_bins(eps, "model")) for _ in range(RUNS)]
        plain = [auc(randomized_response(y_train, 2, eps)) for _ in range(RUNS)]
        cells = [f"{np.mean(v):.4f} ± {np.std(v):.3f}" for v in (label, model, plain)]
        lines.append(f"| {eps:g} | {' | '.join(cells)} | {non_private:.4f} |")
        rows.append(
            {
                "epsilon": eps,
                "rr_on_bins_auc": label,
                "rr_on_bins_model_auc": model,
                "randomized_response_auc": plain,
                "non_private": non_private,
            }
        )
        print(lines[-1], flush=True)
    return "\n".join(lines), rows


def plot(data: dict[str, list[dict[str, object]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, (title, metric) in zip(
        axes, (("prices: test MSE", "mse"), ("weeks: test Poisson deviance", "poisson_deviance")), strict=True
    ):
        rows = data[title.split(":")[0]]
        for name in [k for k in rows[0] if k not in ("epsilon", "non_private")]:
            ax.plot(
                [r["epsilon"] for r in rows],
                [np.mean([run[metric] for run in r[name]]) for r in rows],  # type: ignore[attr-defined]
                "o-",
                label=name,
            )
        ax.axhline(rows[0]["non_private"][metric], color="k", ls="--", label="non-private")  # type: ignore[index]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def capacity(runs: int = 2) -> tuple[str, list[dict[str, float]]]:
    """How many examples' worth of label noise the learner keeps: on Friedman #1 (public, synthetic;
    none of the shipped datasets), add zero-mean Gaussian noise of standard deviation ``sd`` to the
    training labels and measure the test MSE it adds, Δ; then ``capacity = n·Δ/sd²`` (a model that
    averaged n_eff examples per prediction would have Δ = sd²/n_eff)."""
    from sklearn.datasets import make_friedman1

    rng = np.random.default_rng(0)
    rows: list[dict[str, float]] = []
    lines = ["| n | noise sd / label sd | capacity n·Δ/σ² (mean of runs) |", "|---|---|---|"]
    for n in (5_000, 20_000, 80_000):
        X, f = make_friedman1(n + 20_000, noise=0.0, random_state=1)
        own = rng.normal(0.0, 1.0, n)  # the data's own noise

        def error(
            extra: np.ndarray, X: np.ndarray = X, f: np.ndarray = f, n: int = n, own: np.ndarray = own
        ) -> float:
            model = HistGradientBoostingRegressor(max_iter=MAX_ITER, early_stopping=False, random_state=0)
            model.fit(X[:n], f[:n] + own + extra)
            return float(np.mean((model.predict(X[n:]) - f[n:]) ** 2))

        base = error(np.zeros(n))
        for ratio in (0.5, 1.0, 2.0):
            sd = ratio * float(np.std(f))
            added = [error(rng.normal(0.0, sd, n)) - base for _ in range(runs)]
            cap = n * float(np.mean(added)) / sd**2
            rows.append({"n": n, "noise_ratio": ratio, "capacity": cap})
            lines.append(f"| {n:,} | {ratio:g} | {cap:,.0f} |")
            print(lines[-1], flush=True)
    return "\n".join(lines), rows


CAPACITIES = (300.0, 1_000.0, 3_000.0, 10_000.0, 30_000.0)
FIT_EPSILONS = (0.3, 1.0, 4.0, 8.0)


def capacity_fit(runs: int = 2) -> tuple[str, list[dict[str, Any]]]:
    """The default capacity, fitted end to end on public synthetic data: Friedman #1 (40,000 training
    rows, label noise of standard deviation 1, a 201-point grid on the public range [−10, 40]), the
    model objective at each declared capacity against the label objective, the same learner. The
    default is the capacity whose models are best on average (geometric mean over ε of the test MSE
    relative to the label objective's); the shipped datasets play no part in it."""
    from sklearn.datasets import make_friedman1

    from labeldp.mechanisms import Objective, uniform_grid

    n, n_train = 50_000, 40_000
    X, f = make_friedman1(n, noise=0.0, random_state=7)
    y = np.clip(f + np.random.default_rng(1).normal(0.0, 1.0, n), -10.0, 40.0)
    support = uniform_grid(-10.0, 40.0, 201)

    def test_mse(targets: np.ndarray, noise: BinsNoise) -> float:
        model = HistGradientBoostingRegressor(max_iter=MAX_ITER, early_stopping=False)
        pred = noise.affine_correct(model.fit(X[:n_train], targets).predict(X[n_train:]))
        return float(np.mean((pred - y[n_train:]) ** 2))

    objectives: dict[str, Objective] = {"label": Objective("label")}
    objectives |= {f"{c:g}": Objective("model", c) for c in CAPACITIES}
    rows: list[dict[str, Any]] = []
    for eps in FIT_EPSILONS:
        row: dict[str, Any] = {"epsilon": eps}
        for name, objective in objectives.items():
            runs_mse = []
            for _ in range(runs):
                rel = release_labels(y[:n_train], support, eps, "squared", objective=objective)
                noise = BinsNoise.of(rel.mechanism.bin_values, rel.mechanism.epsilon)
                runs_mse.append(test_mse(rel.noisy_labels, noise))
            row[name] = runs_mse
        rows.append(row)
        print(eps, {k: round(float(np.mean(v)), 3) for k, v in row.items() if k != "epsilon"}, flush=True)
    score = {
        name: float(np.exp(np.mean([np.log(np.mean(r[name]) / np.mean(r["label"])) for r in rows])))
        for name in objectives
    }
    best = min((name for name in objectives if name != "label"), key=score.__getitem__)
    lines = [
        "| ε | label objective | " + " | ".join(f"model, capacity {c:,.0f}" for c in CAPACITIES) + " |",
        "|---" * (len(CAPACITIES) + 2) + "|",
    ]
    for r in rows:
        cells = [f"{np.mean(r[k]):.3f} ± {np.std(r[k]):.3f}" for k in objectives]
        lines.append(f"| {r['epsilon']:g} | " + " | ".join(cells) + " |")
    lines.append(
        "| geometric mean relative to label | " + " | ".join(f"{score[k]:.3f}" for k in objectives) + " |"
    )
    lines.append(f"\nBest capacity on average: {best}.")
    return "\n".join(lines), rows


SECTIONS: dict[str, tuple[str, Callable[[], tuple[str, Any]]]] = {
    "prices": (
        "Diamond prices: test MSE against the true prices",
        lambda: regression_table(diamond_prices(), "squared"),
    ),
    "weeks": (
        "Census weeks worked: test Poisson deviance against the true weeks",
        lambda: regression_table(weeks_worked(), "poisson"),
    ),
    "income": ("UCI Adult income: test AUC against the true labels", income_table),
    "capacity": ("Capacity of the learner (Friedman #1, synthetic)", capacity),
    "capacity_fit": ("The default capacity, fitted end to end (Friedman #1, synthetic)", capacity_fit),
}


def main(names: list[str]) -> None:
    """Run the named sections (all by default); each keeps its own JSON, and the report is rebuilt
    from every section that has one."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in names or list(SECTIONS):
        md, rows = SECTIONS[name][1]()
        (RESULTS / f"generalization_{name}.json").write_text(
            json.dumps({"markdown": md, "rows": rows}, indent=2)
        )
    data: dict[str, Any] = {}
    sections = []
    for name, (title, _) in SECTIONS.items():
        stored = RESULTS / f"generalization_{name}.json"
        if stored.exists():
            part = json.loads(stored.read_text())
            sections.append(f"#### {title}\n\n{part['markdown']}")
            data[name] = part["rows"]
    if "prices" in data and "weeks" in data:
        plot(data, RESULTS / "generalization.png")
    write("generalization", "\n\n".join(sections), data)


if __name__ == "__main__":
    main(sys.argv[1:])
