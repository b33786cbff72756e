"""How much of ε should the prior get? Measures the excess loss of Algorithm 3 over the known-prior
optimum for ε₁ = min(ε/2, c·sqrt(k/n)) at several multipliers c, datasets, sample sizes and ε, and
the default rule (``default_prior_epsilon``).

The loss of a mechanism is computed exactly on the true label distribution (``expected_loss``), so
the only randomness is the prior's noise, averaged over ``REPEATS`` draws.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import write
from labeldp.mechanisms import Support, default_prior_epsilon, optimize_rr_on_bins, private_prior
from labeldp.samples import diamond_prices, weeks_worked

MULTIPLIERS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
EPSILONS = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0)
REPEATS = 8


def excess(y: np.ndarray, sup: Support, true_p: np.ndarray, eps: float, eps1: float, known: float) -> float:
    """Mean excess loss (%) over the known-prior optimum when ε₁ goes to the prior."""
    losses = []
    for _ in range(REPEATS):
        prior = private_prior(y, sup, eps1)
        mech = optimize_rr_on_bins(sup, prior, eps - eps1)
        losses.append(mech.expected_loss(sup.values, true_p))
    return 100 * (float(np.mean(losses)) / known - 1)


def main() -> None:
    rows = []
    lines = [
        "| dataset | n | k | ε | known-prior loss | excess loss % for c = "
        + " / ".join(f"{c:g}" for c in MULTIPLIERS)
        + " | best c | default ε₁ | default excess % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sub = np.random.default_rng(0)  # benchmark-only: which rows to subsample
    for ds in (weeks_worked(), diamond_prices()):
        full = ds.labels
        for n in (2_000, 20_000, full.size):
            y = full if n == full.size else sub.choice(full, size=n, replace=False)
            sup = ds.support
            true_p = sup.counts(y) / y.size
            for eps in EPSILONS:
                known = optimize_rr_on_bins(sup, true_p, eps).expected_loss(sup.values, true_p)

                root = float(np.sqrt(sup.k / y.size))
                by_c = [excess(y, sup, true_p, eps, min(eps / 2, c * root), known) for c in MULTIPLIERS]
                default = default_prior_epsilon(eps, y.size, sup.k)
                default_excess = excess(y, sup, true_p, eps, default, known)
                best = MULTIPLIERS[int(np.argmin(by_c))]
                rows.append(
                    {
                        "dataset": ds.name,
                        "n": int(y.size),
                        "k": sup.k,
                        "epsilon": eps,
                        "known": known,
                        "excess_by_multiplier": dict(zip(map(str, MULTIPLIERS), by_c, strict=True)),
                        "default_epsilon_prior": default,
                        "default_excess": default_excess,
                    }
                )
                lines.append(
                    f"| {ds.name} | {y.size:,} | {sup.k} | {eps:g} | {known:,.1f} | "
                    + " / ".join(f"{v:.1f}" for v in by_c)
                    + f" | {best:g} | {default:.4f} | {default_excess:.1f} |"
                )
    write("prior_split", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
