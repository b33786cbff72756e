"""Why a release's ε is capped at 30: the optimizer on random priors across ε, counting failures
(bins that floating point can no longer order) — the evidence behind labels_party.releases.limits."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import write
from labeldp.mechanisms import integer_grid, optimize_rr_on_bins

EPSILONS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0)
PRIORS = 60


def main() -> None:
    rng = np.random.default_rng(0)  # benchmark-only random priors
    cases = []
    for _ in range(PRIORS):
        k = int(rng.integers(2, 300))
        p = rng.dirichlet(np.full(k, rng.uniform(0.05, 2)))
        p[rng.random(k) < 0.3] = 0.0
        if p.sum() == 0:
            p[0] = 1.0
        cases.append(p)
    rows = []
    for eps in EPSILONS:
        failures = 0
        start = time.perf_counter()
        for i, p in enumerate(cases):
            try:
                optimize_rr_on_bins(
                    integer_grid(0, p.size - 1), p, eps, ("squared", "absolute", "poisson")[i % 3]
                )
            except ArithmeticError:
                failures += 1
        rows.append(
            {"epsilon": eps, "priors": PRIORS, "failures": failures, "seconds": time.perf_counter() - start}
        )
        print(rows[-1], flush=True)
    lines = ["| ε | random priors (k ≤ 300, 30% empty cells) | optimizer failures |", "|---|---|---|"]
    lines += [f"| {r['epsilon']:g} | {r['priors']} | {r['failures']} |" for r in rows]
    write("limits", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
