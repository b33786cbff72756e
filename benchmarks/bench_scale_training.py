"""Training at the features party: LightGBM on a two-worker Dask LocalCluster (the Dask merge, the
reductions, ``DaskLGBMRegressor``) versus scikit-learn's gradient boosting in one process, in the same
run, on the same Parquet files (1M and 4M joined rows × 20 features). Each case runs in a fresh
process; the workers report their own peak memory.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.bench_features import synthetic
from benchmarks.common import peak_rss_mib, run_isolated, timed, workers_cell, write

SIZES = (1_000_000, 4_000_000)
FEATURES = 20


def one(engine: str, folder: str, n: int) -> None:
    from features_party.training.fit import fit

    _, _, schema, noise = synthetic(100, FEATURES)  # the schema and noise only
    release, features = Path(folder) / "release.parquet", Path(folder) / "features.parquet"
    workers: list[float] = []
    if engine == "dask":
        from distributed import Client, LocalCluster

        from features_party.training.distributed import fit_on_cluster

        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as c,
        ):
            seconds, trained = timed(
                lambda: fit_on_cluster(c, str(release), str(features), schema, noise, "squared")
            )
            workers = sorted(c.run(peak_rss_mib).values())
    else:
        seconds, trained = timed(
            lambda: fit(pq.read_table(release), pq.read_table(features), schema, noise, "squared")
        )
    loss = trained.metrics["validation_loss_vs_noisy_labels"]
    print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "workers_mib": workers, "loss": loss}))


def main(sizes: tuple[int, ...] = SIZES) -> None:
    lines = [
        "| rows | learner | seconds | process MiB | each worker MiB | validation loss (noisy labels) |",
        "|---|---|---|---|---|---|",
    ]
    rows = []
    for n in sizes:
        folder = Path(tempfile.mkdtemp(prefix="labeldp-train-"))
        try:
            release, features, _, _ = synthetic(n, FEATURES)
            pq.write_table(release, folder / "release.parquet", row_group_size=250_000)
            pq.write_table(features, folder / "features.parquet", row_group_size=250_000)
            del release, features
            for engine in ("in-process", "dask"):
                r = run_isolated("benchmarks.bench_scale_training", "one", engine, str(folder), str(n))
                learner = (
                    "HistGradientBoosting, this process"
                    if engine == "in-process"
                    else "LightGBM, Dask LocalCluster 2 workers × 1 thread"
                )
                workers = workers_cell(r)
                lines.append(
                    f"| {n:,} | {learner} | {r['seconds']:.1f} | {r['peak_mib']:.0f} | {workers} "
                    f"| {r['loss']:.3f} |"
                )
                rows.append({"rows": n, "engine": engine, **r})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    write("scale_training", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
