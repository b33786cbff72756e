"""The paper's "Generalization" block on real data: train on privatized training labels, score the
test split against the TRUE labels.

Each dataset is split 80/20 by a hash of the row number. The training labels go through the labels
party's release code (``release_labels``: private prior with the default ε split, optimal bins, one
CSPRNG randomization) or a baseline (Laplace, staircase, exponential; discrete variants for integer
labels), and the features party's training code fits the same HistGradientBoosting model on them
(``Encoder`` from ``features_party.training.fit``; RR-on-Bins predictions get the affine correction
of docs/math.md §6, which the baselines do not need). Metrics on the test split against the true labels:
MSE (prices), Poisson deviance and MSE (weeks worked), AUC (income), mean ± std over ``RUNS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.metrics import mean_poisson_deviance, roc_auc_score

from benchmarks.bench_utility import baselines
from benchmarks.common import RESULTS, write
from features_party.training.fit import Encoder, validation_mask
from labeldp.mechanisms import release_labels
from labeldp.mechanisms.debias import BinsNoise
from labeldp.samples import LabelDataset, adult_income, diamond_prices, weeks_worked

EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0)
RUNS = 5
MAX_ITER = 100


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
    names = ["RR-on-Bins", *baselines(ds)]
    metric = "poisson_deviance" if loss == "poisson" else "mse"
    rows: list[dict[str, object]] = []
    lines = [
        f"| ε | {' | '.join(names)} | non-private |",
        "|---" * (len(names) + 2) + "|",
    ]
    for eps in EPSILONS:
        results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for _ in range(RUNS):
            rel = release_labels(y_train, ds.support, eps, loss)
            noise = BinsNoise.of(rel.mechanism.bin_values, rel.mechanism.epsilon)
            results["RR-on-Bins"].append(score(noise.affine_correct(fit_predict(rel.noisy_labels))))
            for name, privatize in baselines(ds).items():
                results[name].append(score(fit_predict(privatize(y_train, eps))))
        cells = []
        for n in names:
            values = [r[metric] for r in results[n]]
            cells.append(f"{np.mean(values):,.4g} ± {np.std(values):,.2g}")
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

    def rr_on_bins(eps: float) -> np.ndarray:
        rel = release_labels(y_train.astype(float), ds.support, eps, "squared")
        return rel.bin_indices  # bins are sorted by value: index 1 is the "positive" bin when m = 2

    non_private = auc(y_train)
    lines = [
        "| ε | RR-on-Bins (private prior, squared loss) | randomized response, k = 2 | non-private |",
        "|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        binned = [auc(rr_on_bins(eps)) for _ in range(RUNS)]
        plain = [auc(randomized_response(y_train, 2, eps)) for _ in range(RUNS)]
        cells = [f"{np.mean(v):.4f} ± {np.std(v):.3f}" for v in (binned, plain)]
        lines.append(f"| {eps:g} | {' | '.join(cells)} | {non_private:.4f} |")
        rows.append(
            {
                "epsilon": eps,
                "rr_on_bins_auc": binned,
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
        ax.set_xlabel("ε")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    sections, data = [], {}
    md, rows = regression_table(diamond_prices(), "squared")
    sections.append(f"#### Diamond prices: test MSE against the true prices\n\n{md}")
    data["prices"] = rows
    md, rows = regression_table(weeks_worked(), "poisson")
    sections.append(f"#### Census weeks worked: test Poisson deviance against the true weeks\n\n{md}")
    data["weeks"] = rows
    md, rows = income_table()
    sections.append(f"#### UCI Adult income: test AUC against the true labels\n\n{md}")
    data["income"] = rows
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(data, RESULTS / "generalization.png")
    write("generalization", "\n\n".join(sections), data)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "income":
        print(income_table()[0])
    else:
        main()
