"""The paper's Table 1 "Mechanism" block on real data: error between true and privatized labels for
RR-on-Bins (private prior, and known prior) against the Laplace, staircase and exponential
baselines, mean ± std over ``RUNS`` runs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.common import write
from labeldp.mechanisms import (
    discrete_laplace,
    discrete_staircase,
    exponential_mechanism,
    laplace,
    mechanism_kind,
    optimize_rr_on_bins,
    release_labels,
    staircase,
)
from labeldp.samples import LabelDataset, diamond_prices, weeks_worked

EPSILONS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
RUNS = 10

Privatizer = Callable[[np.ndarray, float], np.ndarray]


def baselines(ds: LabelDataset) -> dict[str, Privatizer]:
    lo, hi = ds.lo, ds.hi
    if ds.integer:
        return {
            "Laplace (discrete)": lambda y, e: discrete_laplace(y, int(lo), int(hi), e),
            "staircase (discrete)": lambda y, e: discrete_staircase(y, int(lo), int(hi), e),
            "exponential": lambda y, e: exponential_mechanism(y, lo, hi, e, integer=True),
        }
    return {
        "Laplace": lambda y, e: laplace(y, lo, hi, e),
        "staircase": lambda y, e: staircase(y, lo, hi, e),
        "exponential": lambda y, e: exponential_mechanism(y, lo, hi, e),
    }


def mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a - b) ** 2))


def poisson_loss(y_hat: np.ndarray, y: np.ndarray) -> float:
    """Mean Poisson log loss ŷ − y·log ŷ (the quantity RR-on-Bins minimizes for loss="poisson")."""
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(y == 0, y_hat, y_hat - y * np.log(y_hat))
    return float(np.mean(values))


def table(
    ds: LabelDataset, loss: str, metric: Callable[[np.ndarray, np.ndarray], float], with_baselines: bool
) -> tuple[str, list[dict[str, object]]]:
    y, sup = ds.labels, ds.support
    true_prior = sup.counts(y) / y.size
    names = ["RR-on-Bins (private prior)", "RR-on-Bins (known prior)"]
    privatizers = baselines(ds) if with_baselines else {}
    if loss != "squared":  # does optimizing for the training loss matter? compare with the squared-loss bins
        privatizers["RR-on-Bins for squared loss (private prior)"] = lambda y, e: (
            release_labels(y, sup, e, "squared", mechanism="rr_on_bins").noisy_labels
        )
    names += list(privatizers)
    lines = ["| ε | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        known = optimize_rr_on_bins(sup, true_prior, eps, loss)
        results: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(RUNS):
            rel = release_labels(y, sup, eps, loss, mechanism=mechanism_kind(loss))
            results[names[0]].append(metric(rel.noisy_labels, y))
            results[names[1]].append(metric(known.values_of(known.randomize(y)), y))
            for name, fn in privatizers.items():
                results[name].append(metric(fn(y, eps), y))
        cells = [f"{np.mean(v):,.4g} ± {np.std(v):,.2g}" for v in results.values()]
        lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
        rows.append(
            {"epsilon": eps, **{k: [float(np.mean(v)), float(np.std(v))] for k, v in results.items()}}
        )
    return "\n".join(lines), rows


def main() -> None:
    prices, weeks = diamond_prices(), weeks_worked()
    sections, data = [], {}
    for title, ds, loss, metric, with_baselines in (
        (
            "Diamond prices (USD, clipped to [0, 20000], 201-point grid), squared loss: MSE",
            prices,
            "squared",
            mse,
            True,
        ),
        ("Census weeks worked (integer grid 0..52), squared loss: MSE", weeks, "squared", mse, True),
        (
            "Census weeks worked, Poisson loss: mean Poisson log loss ŷ − y·log ŷ",
            weeks,
            "poisson",
            poisson_loss,
            False,
        ),
    ):
        md, rows = table(ds, loss, metric, with_baselines)
        sections.append(f"#### {title}\n\n{md}")
        data[title] = rows
    write("utility", "\n\n".join(sections), data)


if __name__ == "__main__":
    main()
