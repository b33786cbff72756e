"""Run every benchmark (``make bench``); each writes benchmarks/results/NAME.{md,json}."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    "bench_exactness",
    "bench_optimizer",
    "bench_scale",
    "bench_scale_training",
    "bench_scale_join",
    "bench_ledger_scale",
    "bench_scale_e2e",
    "bench_randomize",
    "bench_prior_split",
    "bench_utility",
    "bench_limits",
    "bench_user_level",
    "bench_semi_sensitive",
    "bench_audit",
    "bench_canaries",
    "bench_upload",
    "bench_ledger",
    "bench_delivery",
    "bench_data_path",
    "bench_hostile",
    "bench_features",
    "bench_export",
    "bench_pricing",
    "bench_feature_aware",
    "bench_grouped_release",
    "bench_generalization",
    "bench_unbiased",
    "bench_own_trainer",
    "bench_load",
    "bench_demo",
)


def main(names: list[str]) -> None:
    for name in names or BENCHMARKS:
        print(f"\n## {name}\n", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
