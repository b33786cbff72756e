"""Partitioned releases (``labeldp.scale``): this process versus a two-worker Dask LocalCluster, in
the same run, at 10M, 100M and 1B labels in partitions of 1M (the census weeks-worked labels, repeated).

Each (size, engine) runs in a fresh process: its peak RSS is its own; the workers report theirs.
Input and output Parquet live in a temporary folder that is removed afterwards.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, run_isolated, timed, workers_cell, write
from labeldp.mechanisms import integer_grid
from labeldp.samples import weeks_worked
from labeldp.scale import LOCAL, DaskEngine, Engine, InProcess, release_partitions

PART_ROWS = 1_000_000
SIZES = (10_000_000, 100_000_000, 1_000_000_000)


def make_parts(folder: Path, n: int) -> list[str]:
    weeks = weeks_worked().labels
    paths = []
    for i, start in enumerate(range(0, n, PART_ROWS)):
        rows = min(PART_ROWS, n - start)
        ids = pc.binary_join_element_wise(
            "e", pc.cast(pa.array(np.arange(start, start + rows)), pa.string()), ""
        )
        labels = pa.array(np.resize(weeks, rows).astype(np.float64))
        path = folder / f"labels-{i:05d}.parquet"
        pq.write_table(pa.table({"example_id": ids, "label": labels}), path)
        paths.append(str(path))
    return paths


def one(engine_name: str, folder: str) -> None:
    parts = sorted(str(p) for p in Path(folder).glob("labels-*.parquet"))
    engine: Engine = DaskEngine(LOCAL, workers=2) if engine_name == "dask" else InProcess()
    try:
        seconds, release = timed(
            lambda: release_partitions(
                engine, parts, Path(folder) / f"out-{engine_name}", integer_grid(0, 52), 2.0
            )
        )
        workers = sorted(engine.client.run(peak_rss_mib).values()) if isinstance(engine, DaskEngine) else []
    finally:
        engine.close()
    print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "workers_mib": workers,
                      "examples": release.examples, "m": release.mechanism.m}))  # fmt: skip


def main() -> None:
    lines = [
        "| labels | partitions | engine | seconds | labels/s | this process MiB | each worker MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for n in SIZES:
        folder = Path(tempfile.mkdtemp(prefix="labeldp-scale-"))
        try:
            gen_s, parts = timed(lambda: make_parts(folder, n))  # noqa: B023 - called at once
            for engine in ("in-process", "dask"):
                r = run_isolated("benchmarks.bench_scale", "one", engine, str(folder))
                assert r["examples"] == n
                workers = workers_cell(r)
                name = "this process" if engine == "in-process" else "Dask LocalCluster, 2 workers × 1 thread"
                lines.append(
                    f"| {n:,} | {len(parts)} | {name} | {r['seconds']:.1f} | {n / r['seconds']:,.0f} "
                    f"| {r['peak_mib']:.0f} | {workers} |"
                )
                rows.append({"examples": n, "engine": engine, "generate_s": gen_s, **r})
                shutil.rmtree(folder / f"out-{engine}", ignore_errors=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    write("scale", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3])
    else:
        main()
