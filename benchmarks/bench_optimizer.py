"""Optimizer speed and peak memory at k = 10,000, and the k = 400 comparison with a plain-Python
O(k³) implementation of Algorithm 2 (squared loss), timed in the same run.

Each configuration runs in a fresh process so its peak resident memory is its own.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import peak_rss_mib, run_isolated, timed, write
from labeldp.mechanisms import (
    absolute_segmentation,
    optimize,
    optimize_rr_on_bins,
    private_prior,
    pruned_segmentation,
    uniform_grid,
)
from labeldp.mechanisms.interval_costs import PoissonCosts, SquaredCosts, interval_costs
from labeldp.mechanisms.losses import resolve_loss
from labeldp.samples import diamond_prices

TARGET_SECONDS = {"squared": 10.0, "poisson": 10.0, "absolute": 30.0}
COMPILE_FROM = {
    "squared": pruned_segmentation.COMPILE_FROM,
    "poisson": pruned_segmentation.COMPILE_FROM,
    "absolute": absolute_segmentation.COMPILE_FROM,
}


def prior_for(k: int, epsilon_prior: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """A realistic prior on a fine grid: the diamond prices' private histogram."""
    sup = uniform_grid(0.0, 20_000.0, k)
    return sup.values, private_prior(diamond_prices().labels, sup, epsilon_prior)


def plain_python_dp(y: list[float], p: list[float], eps: float) -> float:
    """Algorithm 2 for squared loss in plain Python: O(k³) with O(1) prefix-sum interval costs."""
    k, g = len(y), math.expm1(eps)
    P, S, Q = [0.0], [0.0], [0.0]
    for yi, pi in zip(y, p, strict=True):
        P.append(P[-1] + pi)
        S.append(S[-1] + pi * yi)
        Q.append(Q[-1] + pi * yi * yi)

    def cost(r: int, i: int) -> float:
        w = P[k] + g * (P[i] - P[r])
        s1 = S[k] + g * (S[i] - S[r])
        return Q[k] + g * (Q[i] - Q[r]) - s1 * s1 / w

    inf = float("inf")
    prev = [0.0] + [inf] * k
    best = inf
    for j in range(1, k + 1):
        cur = [inf] * (k + 1)
        for i in range(j, k + 1):
            cur[i] = min(prev[r] + cost(r, i) for r in range(j - 1, i))
        best = min(best, cur[k] / (math.exp(eps) + j - 1))
        prev = cur
    return best


def one(loss: str, eps: float, k: int, kernel: str = "default", prior_file: str = "") -> None:
    """One optimum in this process. ``kernel``: "default" (the pass ``optimize`` picks), "plain"
    (absolute loss's pass without numba), or "scan" (the O(k²) scan over all intervals, the old
    algorithm, for any loss). ``prior_file``: an ``.npy`` prior shared with other runs (each private
    prior is a fresh draw)."""
    y, p = prior_for(k)
    if prior_file:
        p = np.load(prior_file)
    if kernel == "plain":
        absolute_segmentation.COMPILE_FROM = k + 1
    if kernel == "scan":
        pruned_segmentation.COMPILE_FROM = k + 1
        # no cost table is an instance of this, so absolute loss takes the generic scan too
        setattr(optimize, "AbsoluteCosts", type("NoCosts", (), {}))  # noqa: B010
    compile_s = 0.0
    if kernel == "default" and k >= COMPILE_FROM[loss]:
        # numba compiles once per process, at the first call: time that apart on a small support
        warm = COMPILE_FROM[loss]
        compile_s, _ = timed(lambda: optimize_rr_on_bins(np.arange(warm), np.ones(warm), eps, loss))
    seconds, mech = timed(lambda: optimize_rr_on_bins(y, p, eps, loss))
    loss_value = mech.expected_loss(y, p)
    print(json.dumps({"seconds": seconds, "compile_s": compile_s, "peak_mib": peak_rss_mib(), "m": mech.m,
                      "loss": loss_value}))  # fmt: skip


def large_supports() -> tuple[list[str], list[dict[str, object]]]:
    """Every loss at k = 100,000 with its fast pass; the O(k²) scan beside the fast pass on the same
    prior at k = 10,000 (all losses) and at k = 100,000 (ε = 1; absolute: the plain-Python kernel)."""
    lines = [
        "| loss | ε | k | pass | m | seconds | + numba compile s | peak RSS MiB | optimum vs. reference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    folder = Path(tempfile.mkdtemp())
    for k in (10_000, 100_000):
        np.save(folder / f"{k}.npy", prior_for(k)[1])

    def run(loss: str, eps: float, k: int, kernel: str, reference: float | None = None) -> dict[str, object]:
        prior = str(folder / f"{k}.npy")
        r = run_isolated("benchmarks.bench_optimizer", "one", loss, str(eps), str(k), kernel, prior)
        gap = "–" if reference is None else f"{abs(r['loss'] - reference) / abs(reference):.1e} relative"
        fast = "O(k log k), numba" if loss == "absolute" else "branch and bound, numba"
        name = {"default": fast, "plain": "O(k log k), plain Python", "scan": "O(k²) scan"}[kernel]
        lines.append(
            f"| {loss} | {eps:g} | {k:,} | {name} | {r['m']} | {r['seconds']:.2f} "
            f"| {r['compile_s']:.2f} | {r['peak_mib']:.0f} | {gap} |"
        )
        rows.append({"loss": loss, "epsilon": eps, "k": k, "kernel": kernel, **r})
        return r

    for loss in ("squared", "poisson", "absolute"):
        for eps in (0.1, 1.0, 4.0, 10.0):
            scan = run(loss, eps, 10_000, "scan")
            run(loss, eps, 10_000, "default", float(scan["loss"]))  # type: ignore[arg-type]
    for loss in ("squared", "poisson", "absolute"):
        for eps in (0.1, 1.0, 4.0, 10.0):
            fast = run(loss, eps, 100_000, "default")
        if loss == "absolute":
            run(loss, 10.0, 100_000, "plain", float(fast["loss"]))  # type: ignore[arg-type]
    for loss in ("squared", "poisson"):
        fast = run(loss, 1.0, 100_000, "default")
        run(loss, 1.0, 100_000, "scan", float(fast["loss"]))  # type: ignore[arg-type]
    shutil.rmtree(folder)
    return lines, rows


def counted_passes(costs: SquaredCosts | PoissonCosts, eps: float) -> tuple[float, list[float]]:
    """The optimum's seconds, and the intervals each pass evaluated per support point."""
    segment = pruned_segmentation.PrunedSegmenter(costs)
    counts: list[float] = []

    def counted(reward: float) -> np.ndarray:
        starts = segment(reward)
        counts.append(segment.evaluated / costs.k)
        return starts

    seconds, _ = timed(lambda: optimize.dinkelbach(costs, math.exp(eps), counted))
    return seconds, counts


def pruning() -> tuple[list[str], list[dict[str, object]]]:
    """How much the branch and bound prunes: intervals evaluated per support point in each
    Dinkelbach pass, k = 100,000, on priors of several shapes (empty cells set aside, as
    ``optimize`` does). The scan evaluates k/2 = 50,000 per point."""
    rng = np.random.default_rng(2026)
    k = 100_000
    grid = uniform_grid(0.0, 100_000.0, k)
    shapes = {
        "diamond prices (ε₁ = 0.5)": prior_for(k),
        "diamond prices (ε₁ = 2)": prior_for(k, 2.0),
        "log-normal spend, 1M users (ε₁ = 0.5)": (
            grid.values,
            private_prior(rng.lognormal(5.0, 1.5, 1_000_000), grid, 0.5),
        ),
        "Dirichlet(0.05)": (np.arange(k, dtype=float), rng.dirichlet(np.full(k, 0.05))),
        "uniform": (np.arange(k, dtype=float), np.ones(k)),
    }
    lines = [
        "| prior (k = 100,000) | loss | ε | kept cells | passes | intervals per point, each pass | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    warm = pruned_segmentation.COMPILE_FROM
    optimize_rr_on_bins(np.arange(warm), np.ones(warm), 1.0, "squared")  # numba compiles here, untimed
    for name, (y, p) in shapes.items():
        kept = p > 0
        for loss in ("squared", "poisson"):
            for eps in (0.01, 0.1, 1.0, 4.0, 10.0, 30.0):
                costs = interval_costs(resolve_loss(loss), y[kept], p[kept] / p.sum(), eps)
                assert isinstance(costs, SquaredCosts | PoissonCosts)
                seconds, counts = counted_passes(costs, eps)
                per_pass = ", ".join(f"{c:,.0f}" for c in counts)
                lines.append(
                    f"| {name} | {loss} | {eps:g} | {costs.k:,} | {len(counts)} | {per_pass} "
                    f"| {seconds:.2f} |"
                )
                rows.append({"prior": name, "loss": loss, "epsilon": eps, "kept": costs.k,
                             "per_point": counts, "seconds": seconds})  # fmt: skip
    return lines, rows


def main() -> None:
    rows, lines = (
        [],
        ["| loss | ε | k | m | seconds | target | peak RSS MiB |", "|---|---|---|---|---|---|---|"],
    )
    for loss in ("squared", "poisson", "absolute"):
        for eps in (0.1, 1.0, 4.0):
            r = run_isolated("benchmarks.bench_optimizer", "one", loss, str(eps), "10000")
            rows.append({"loss": loss, "epsilon": eps, "k": 10_000, **r})
            lines.append(
                f"| {loss} | {eps:g} | 10,000 | {r['m']} | {r['seconds']:.2f} | ≤ {TARGET_SECONDS[loss]:g} "
                f"| {r['peak_mib']:.0f} |"
            )
    y, p = prior_for(400)
    ours_t, mech = timed(lambda: optimize_rr_on_bins(y, p, 1.0, "squared"))
    ref_t, ref_loss = timed(lambda: plain_python_dp(y.tolist(), (p / p.sum()).tolist(), 1.0))
    ours_loss = mech.expected_loss(y, p)
    gap = abs(ours_loss - ref_loss) / ref_loss
    rows.append({"k400": {"ours_s": ours_t, "plain_python_s": ref_t, "relative_gap": gap}})
    lines += [
        "",
        "| k = 400, squared, ε = 1 | seconds |",
        "|---|---|",
        f"| plain-Python O(k³) Algorithm 2 | {ref_t:.2f} |",
        f"| labeldp `optimize_rr_on_bins` | {ours_t:.3f} |",
        f"| ratio | {ref_t / ours_t:,.0f}× faster; same optimum to {gap:.1e} relative |",
    ]
    large_lines, large_rows = large_supports()
    lines += ["", *large_lines]
    rows += large_rows
    pruning_lines, pruning_rows = pruning()
    lines += ["", *pruning_lines]
    rows += pruning_rows
    write("optimizer", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "pruning":  # that table alone
        table, data = pruning()
        write("optimizer_pruning", "\n".join(table), data)
    elif len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
    else:
        main()
