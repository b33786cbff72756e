"""Bring your own trainer (issue 43): a publisher's PyTorch network and LightGBM model trained on a
release's training set with ``labeldp_model``'s correction and without it, beside the service's own
model, scored on held-out diamonds against their **true** prices.

The data and the learners are those of ``docs/examples/bring_your_own_trainer.py``: the same 8,000
training and 2,000 test diamonds, the prices' public support (201 points on [0, 20,000] USD), squared
loss; the network (one hidden layer of 64, Adam, 40 epochs) and LightGBM (200 trees) on one-hot,
standardized features. Here the services are not started: the release is the labels party's release
code (``release_labels``: private prior with the default ε split, default objective, one CSPRNG
draw), described as the features party's export describes it (``features_party.exports.description``,
read back by ``labeldp_model.Release``), and the service's own model is the features party's training
code (``features_party.training.fit.fit``: gradient boosting with the affine correction, 20 % of the
rows held out for its validation split, as the service trains). The export path itself is tested in
tests/features_party/test_exports.py; nothing about utility depends on it.

Each run draws new noise (and a new network initialisation); ``RUNS`` runs per ε (env
``LABELDP_BENCH_RUNS``, default 5). Reported: test RMSE (mean ± std) and the mean prediction's bias,
then paired differences of RMSE within a run (mean ± standard error): each corrected learner against
the service's model ("as accurate" when not above it by more than two standard errors) and each
uncorrected learner against the same learner corrected. ``python -m benchmarks.bench_own_trainer
report`` redraws the table and the figure from the stored results.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from benchmarks.bench_generalization import schema_of
from benchmarks.common import RESULTS, write
from features_party.exports.description import correction
from features_party.training.fit import fit
from labeldp.mechanisms import BinsNoise, release_labels
from labeldp.samples import diamond_prices
from labeldp_model import Objective, Release, initial_score
from labeldp_model.pytorch import ReleaseLoss
from labeldp_model.release import FORMAT, FORMAT_VERSION

EPSILONS = (1.0, 2.0, 4.0, 8.0)  # the example's ε = 1 and 4, and two more to show where the bias fades
RUNS = int(os.environ.get("LABELDP_BENCH_RUNS", "5"))
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "own_trainer.png"
LEARNERS = (
    "PyTorch, corrected",
    "PyTorch, uncorrected",
    "LightGBM, corrected",
    "LightGBM, uncorrected",
    "the service's model",
)
SERVICE = LEARNERS[-1]


class Data:
    """The example's split, features encoded for the network and LightGBM, and the raw tables the
    service's training code takes."""

    def __init__(self) -> None:
        prices = diamond_prices()
        n = prices.features.num_rows
        order = np.argsort(
            np.frombuffer(uuid.uuid5(uuid.NAMESPACE_OID, "byo").bytes * 6_000, np.uint8)[:n], kind="stable"
        )
        rows = np.sort(order[:10_000])
        train, test = rows[:8_000], rows[8_000:]
        self.support = prices.support
        self.y_train, self.y_test = prices.labels[train], prices.labels[test]
        ids = pa.array([f"d{i}" for i in range(n)])
        features = prices.features.append_column("example_id", ids)
        self.train_ids = ids.take(pa.array(train))
        self.train_table = features.take(pa.array(train))
        self.test_table = features.take(pa.array(test))
        self.schema = schema_of(prices.features)
        X = self._encode(self.train_table)
        mean, scale = X.mean(), X.std().replace(0, 1)
        self.X = ((X - mean) / scale).to_numpy(np.float32)
        self.X_test = (
            (self._encode(self.test_table).reindex(columns=X.columns, fill_value=0.0) - mean) / scale
        ).to_numpy(np.float32)

    def _encode(self, table: pa.Table) -> pd.DataFrame:
        frame = table.select(list(self.schema)).to_pandas()
        categorical = [c for c, kind in self.schema.items() if kind == "categorical"]
        return pd.get_dummies(frame, columns=categorical, dtype=float)


def describe(y: np.ndarray, data: Data, epsilon: float) -> tuple[Release, BinsNoise, np.ndarray]:
    """One release of the training prices: its description as an export carries it, its noise model
    (what the service's training reads) and its bin per row."""
    rel = release_labels(y, data.support, epsilon, "squared", mechanism="rr_on_bins")
    published = rel.mechanism.describe(
        prior=rel.prior, epsilon_prior=rel.epsilon_prior, epsilon_total=epsilon
    )
    release = Release.from_description(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "release_id": f"bench-{epsilon:g}",
            "columns": {"released_value": "released_value"},
            "mechanism": published.model_dump(mode="json"),
            "correction": correction(published),
        }
    )
    return release, BinsNoise.of_published(published), np.asarray(rel.bin_indices, dtype=np.int64)


def network(
    X: np.ndarray, y: np.ndarray, criterion: torch.nn.Module, start: float, seed: int
) -> torch.nn.Module:
    """The example's network (outputs in thousands of USD, its last layer starting at ``start``)."""
    torch.manual_seed(seed)
    head = torch.nn.Linear(64, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.constant_(head.bias, start / 1000)
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 64), torch.nn.ReLU(), head)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    Xt, yt = torch.tensor(X), torch.tensor(y, dtype=torch.float32)
    for _ in range(40):
        for batch in torch.split(torch.randperm(len(Xt)), 256):
            optimizer.zero_grad()
            criterion(1000 * net(Xt[batch]).squeeze(-1), yt[batch]).backward()
            optimizer.step()
    return net


def predictions(data: Data, epsilon: float, run: int) -> tuple[dict[str, np.ndarray], int]:
    """Every learner's test predictions on one fresh release at ``epsilon``, and its number of bins."""
    release, noise, bins = describe(data.y_train, data, epsilon)
    released = noise.bin_values[bins]
    out: dict[str, np.ndarray] = {}
    torch.set_num_threads(1)
    for name, criterion, start in (
        ("PyTorch, corrected", ReleaseLoss(release, "squared"), initial_score(release, "squared", released)),
        ("PyTorch, uncorrected", torch.nn.MSELoss(), float(released.mean())),
    ):
        net = network(data.X, released, criterion, start, seed=run)
        with torch.no_grad():
            out[name] = 1000 * net(torch.tensor(data.X_test)).squeeze(-1).numpy().astype(np.float64)
    start = initial_score(release, "squared", released)
    corrected = lightgbm.LGBMRegressor(
        objective=Objective(release, "squared"), n_estimators=200, verbose=-1, n_jobs=1, random_state=run
    )
    corrected.fit(data.X, released, init_score=np.full(len(released), start))
    out["LightGBM, corrected"] = np.asarray(corrected.predict(data.X_test), dtype=np.float64) + start
    plain = lightgbm.LGBMRegressor(n_estimators=200, verbose=-1, n_jobs=1, random_state=run)
    out["LightGBM, uncorrected"] = np.asarray(
        plain.fit(data.X, released).predict(data.X_test), dtype=np.float64
    )
    table = pa.table({"example_id": data.train_ids, "bin": pa.array(bins)})
    trained = fit(table, data.train_table, data.schema, noise, "squared", model="hgb", debias="affine")
    out[SERVICE] = trained.predict(data.test_table)
    return out, noise.m


def summary(data: Data, runs: list[dict[str, np.ndarray]], bins: list[int]) -> dict[str, Any]:
    """Per learner: the test RMSE and the mean prediction's bias of each run."""
    truth = data.y_test
    return {
        "bins": sorted(set(bins)),
        "learners": {
            n: {
                "rmse": [float(np.sqrt(np.mean((r[n] - truth) ** 2))) for r in runs],
                "bias": [float(np.mean(r[n] - truth)) for r in runs],
            }
            for n in LEARNERS
        },
    }


# the paired comparisons reported: (learner, baseline), each run's release shared by both
COMPARISONS = (
    ("PyTorch, corrected", SERVICE),
    ("LightGBM, corrected", SERVICE),
    ("PyTorch, uncorrected", "PyTorch, corrected"),
    ("LightGBM, uncorrected", "LightGBM, corrected"),
)


def paired(result: dict[str, Any], learner: str, baseline: str) -> tuple[float, float]:
    """Mean and standard error over the runs of the learner's RMSE minus the baseline's."""
    d = np.asarray(result["learners"][learner]["rmse"]) - np.asarray(result["learners"][baseline]["rmse"])
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")


def markdown(results: dict[float, dict[str, Any]]) -> str:
    columns = " | ".join(f"ε = {e:g} (m = {', '.join(map(str, r['bins']))})" for e, r in results.items())
    rule = "|---" * (len(results) + 1) + "|"
    lines = [f"| test RMSE (USD), mean ± std (bias) | {columns} |", rule]
    for n in LEARNERS:
        cells = [
            f"{np.mean(r['learners'][n]['rmse']):,.0f} ± {np.std(r['learners'][n]['rmse']):,.0f} "
            f"({np.mean(r['learners'][n]['bias']):+,.0f})"
            for r in results.values()
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", f"| paired difference in RMSE (USD), mean ± standard error | {columns} |", rule]
    for learner, baseline in COMPARISONS:
        cells = []
        for r in results.values():
            mean, se = paired(r, learner, baseline)
            cells.append(f"{mean:+,.0f} ± {se:,.0f}" + (" **worse**" if mean > 2 * se else ""))
        lines.append(f"| {learner} − {baseline} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: dict[float, dict[str, Any]]) -> None:
    plot(results, FIGURE)
    write(
        "own_trainer",
        f"{RUNS} runs per ε, each a fresh release shared by every learner. Test RMSE against the true "
        "prices (the mean prediction's bias in brackets); then each publisher's learner against the "
        "service's model, and each uncorrected learner against the same learner corrected, paired by "
        "run (**worse**: more than two standard errors above).\n\n" + markdown(results),
        {f"{e:g}": r for e, r in results.items()},
    )


def plot(results: dict[float, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    epsilons = list(results)
    for n in LEARNERS:
        means = [np.mean(results[e]["learners"][n]["rmse"]) for e in epsilons]
        stds = [np.std(results[e]["learners"][n]["rmse"]) for e in epsilons]
        dashed = "uncorrected" in n
        color = "k" if n == SERVICE else ("C0" if n.startswith("PyTorch") else "C1")
        ax.errorbar(
            epsilons, means, yerr=stds, fmt="o--" if dashed else "o-", color=color, capsize=3, label=n
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.set_xlabel("ε")
    ax.set_ylabel("test RMSE against the true prices (USD)")
    ax.set_title("Diamond prices: your own trainer, with and without the correction")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(epsilons: tuple[float, ...] = EPSILONS) -> None:
    data = Data()
    results: dict[float, dict[str, Any]] = {}
    for epsilon in epsilons:
        runs, bins = zip(*(predictions(data, epsilon, run) for run in range(RUNS)), strict=True)
        results[epsilon] = summary(data, list(runs), list(bins))
        print(epsilon, {n: np.mean(s["rmse"]) for n, s in results[epsilon]["learners"].items()}, flush=True)
    report(results)


def rerender() -> None:
    """The table and the figure again from the stored results (``… bench_own_trainer report``)."""
    stored = json.loads((RESULTS / "own_trainer.json").read_text())
    report({float(e): r for e, r in stored.items()})


if __name__ == "__main__":
    if sys.argv[1:] == ["report"]:
        rerender()
    else:
        main(tuple(float(a) for a in sys.argv[1:]) or EPSILONS)
