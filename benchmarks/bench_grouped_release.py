"""A feature-aware release at scale (issue 41): 10M labels in G = 1,024 groups on the prices support
(k = 201) — every group's mechanism optimized for its prior, every label randomized by its group's —
against a one-stage release of the same labels (its private prior, one optimization, the same
randomization) in the same run, on one core. Target: ≤ 30 s.

The labels and the group priors are synthetic (a seeded generator: benchmark data, never a service's
noise; the releases draw from the CSPRNG).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from benchmarks.common import peak_rss_mib, run_isolated, write
from labeldp.mechanisms import release_grouped_labels, release_labels
from labeldp.samples import diamond_prices

GROUPS = 1024
EPSILON = 1.0


def case(n: int, groups: int) -> dict[str, float]:
    support = diamond_prices().support
    rng = np.random.default_rng(0)
    centre = rng.uniform(0.0, 1.0, n)
    g = np.minimum((centre * groups).astype(np.int64), groups - 1)  # quantile-like groups of the prediction
    hi = float(support.values[-1])
    labels = np.clip(centre * hi + rng.normal(0.0, hi / 20, n), 0.0, hi)
    x = support.values / hi
    mids = (np.arange(groups) + 0.5) / groups
    priors = np.exp(-0.5 * ((x[None, :] - mids[:, None]) / 0.05) ** 2) + 1e-9
    start = time.perf_counter()
    release_labels(labels, support, EPSILON, "squared", mechanism="rr_on_bins")  # the RR baseline
    one_stage = time.perf_counter() - start
    start = time.perf_counter()
    out = release_grouped_labels(labels, g, priors, support, EPSILON, "squared")
    grouped = time.perf_counter() - start
    assert out.bin_indices.size == n
    return {
        "examples": n,
        "groups": groups,
        "one_stage_s": round(one_stage, 2),
        "grouped_s": round(grouped, 2),
        "ratio": round(grouped / one_stage, 2),
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    rows = [
        run_isolated("benchmarks.bench_grouped_release", "case", str(n), str(GROUPS))
        for n in (1_000_000, 10_000_000)
    ]
    lines = [
        "| examples | G | one-stage release (s) | feature-aware release (s) | ratio | peak RSS (MiB) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['examples']:,} | {r['groups']:,} | {r['one_stage_s']} | {r['grouped_s']} | {r['ratio']} "
            f"| {r['peak_rss_mib']:,.0f} |"
            for r in rows
        ),
    ]
    write("grouped_release", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "case":
        print(json.dumps(case(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        main()
