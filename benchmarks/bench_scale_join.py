"""The features party's join report at scale: in one process (both ID columns and a hash set) versus
a Dask merge on a two-worker LocalCluster (``features_party.tables.joins``), same run, same files.

n release IDs against n feature-table IDs, 80 % of them in both, as Parquet files with row groups of
1M (the partitions the workers read). Each (size, engine) runs in a fresh process; "this process" is
the driver (with a LocalCluster the scheduler lives there too); the workers report their own peak.
The single process is not run above ``SINGLE_UP_TO``: it holds ~0.11 GB per million IDs a side.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, run_isolated, timed, workers_cell, write

SIZES = (10_000_000, 30_000_000, 100_000_000, 1_000_000_000)
SINGLE_UP_TO = 100_000_000
GROUP = 1_000_000
ENGINES = {"in-process": "this process", "dask": "Dask LocalCluster, 2 workers × 1 thread"}


def ids(start: int, n: int) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(np.arange(start, start + n)), pa.string()), 10, "0")
    return pc.binary_join_element_wise("click-", digits, "")


def write_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    """Written a row group at a time: this process never holds more than 1M IDs."""
    release, features = folder / "release.parquet", folder / "features.parquet"
    release_schema = pa.schema([("example_id", pa.string()), ("bin", pa.uint16())])
    feature_schema = pa.schema([("example_id", pa.string()), ("f", pa.float64())])
    with pq.ParquetWriter(release, release_schema) as r, pq.ParquetWriter(features, feature_schema) as f:
        for start in range(0, n, GROUP):
            size = min(GROUP, n - start)
            r.write_table(pa.table({"example_id": ids(start, size), "bin": np.zeros(size, np.uint16)}))
            f.write_table(pa.table({"example_id": ids(start + n // 5, size), "f": np.ones(size)}))
    return release, features


def one(engine: str, folder: str, n: int) -> None:
    from features_party.tables.joins import join_report, join_report_on_cluster

    release, features = Path(folder) / "release.parquet", Path(folder) / "features.parquet"
    workers: list[float] = []
    if engine == "dask":
        from distributed import Client, LocalCluster

        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as c,
        ):
            seconds, report = timed(lambda: join_report_on_cluster(c, str(release), str(features)))
            workers = sorted(c.run(peak_rss_mib).values())
    else:
        seconds, report = timed(lambda: join_report(release, features))
    assert report.in_both == n - n // 5 and report.release_examples == report.feature_rows == n
    print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "workers_mib": workers}))


def main(sizes: tuple[int, ...] = SIZES) -> None:
    lines = [
        "| IDs a side | in both | engine | seconds | IDs/s (both sides) | this process MiB "
        "| each worker MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        folder = Path(tempfile.mkdtemp(prefix="labeldp-join-"))
        try:
            write_inputs(folder, n)
            for engine, label in ENGINES.items():
                if engine == "in-process" and n > SINGLE_UP_TO:
                    need = f"not run (~{0.11 * n / 1e6:,.0f} GB)"
                    lines.append(f"| {n:,} | {n - n // 5:,} | {label} | {need} | | | |")
                    continue
                r = run_isolated("benchmarks.bench_scale_join", "one", engine, str(folder), str(n))
                workers = workers_cell(r)
                lines.append(
                    f"| {n:,} | {n - n // 5:,} | {label} | {r['seconds']:.1f} | {2 * n / r['seconds']:,.0f} "
                    f"| {r['peak_mib']:.0f} | {workers} |"
                )
                rows.append({"ids": n, "engine": engine, **r})
                print(lines[-1], flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    write("scale_join", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
