"""Exactness: the optimizer against the LP over all ε-DP mechanisms (HiGHS) on random priors with
k <= 8, and against the naive O(k³) dynamic program up to k = 200."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.common import write
from labeldp.mechanisms import optimize_rr_on_bins
from tests.mechanisms.test_optimize_exact import random_prior, relative_gap, shift
from tests.support import oracles

PRIORS_PER_LOSS = 80


def main() -> None:
    rng = np.random.default_rng(2026)
    lines = ["| check | loss | cases | max relative gap |", "|---|---|---|---|"]
    rows = []
    for loss in ("squared", "absolute", "poisson"):
        worst = 0.0
        for _ in range(PRIORS_PER_LOSS):
            k = int(rng.integers(1, 9))
            eps = float(math.exp(rng.uniform(math.log(0.05), math.log(8))))
            y, p = random_prior(rng, k, loss)
            order = np.argsort(y)
            ys, ps = y[order], p[order]
            ours = optimize_rr_on_bins(y, p, eps, loss).expected_loss(y, p) - shift(ys, ps, loss)
            lp = oracles.lp_optimum(
                ys, ps, eps, oracles.lp_output_set(ys, ps, eps, loss), oracles.LOSSES[loss]
            )
            lp -= shift(ys, ps, loss)
            scale = max(
                abs(shift(ys, ps, loss)), float(np.sum(ps * oracles.LOSSES[loss](np.full(k, ps @ ys), ys)))
            )
            worst = max(worst, relative_gap(ours, lp, scale))
        rows.append({"check": "lp", "loss": loss, "cases": PRIORS_PER_LOSS, "max_gap": worst})
        check = "LP over all ε-DP mechanisms, k ≤ 8, ε ∈ [0.05, 8]"
        lines.append(f"| {check} | {loss} | {PRIORS_PER_LOSS} | {worst:.1e} |")
    for loss in ("squared", "absolute", "poisson"):
        worst, cases = 0.0, 0
        for k in (50, 100, 200):
            for eps in (0.05, 0.5, 2.0, 8.0):
                if loss == "poisson":
                    ys, ps = np.arange(k, dtype=float), rng.dirichlet(np.ones(k))
                else:
                    y, p = random_prior(rng, k, loss)
                    order = np.argsort(y)
                    ys, ps = y[order], p[order]
                naive = oracles.naive_dp(oracles.direct_costs(ys, ps, eps, loss), eps) - shift(ys, ps, loss)
                ours = optimize_rr_on_bins(ys, ps, eps, loss).expected_loss(ys, ps) - shift(ys, ps, loss)
                worst = max(worst, relative_gap(ours, naive, naive))
                cases += 1
        rows.append({"check": "naive", "loss": loss, "cases": cases, "max_gap": worst})
        lines.append(f"| naive O(k³) DP, k ∈ {{50, 100, 200}} | {loss} | {cases} | {worst:.1e} |")
    write("exactness", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
