"""Features party: the join report for 10M release IDs against 10M feature-table IDs, and training on
1M joined rows × 20 features. Each runs in its own process so its peak memory is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, run_isolated, write
from labeldp.common.serving import THREAD_POOL_ENV
from labeldp.mechanisms.debias import BinsNoise


def ids(start: int, n: int) -> pa.Array:
    return pa.array(np.char.add("click-", np.arange(start, start + n).astype(str)).tolist(), pa.string())


def join_case(n: int) -> None:
    from features_party.storage.data_dir import DataDir
    from features_party.tables.joins import join_report

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        release_path = data / "release.parquet"
        pq.write_table(
            pa.table({"example_id": ids(0, n), "bin": pa.array(np.zeros(n, np.uint16))}), release_path
        )
        path = DataDir(data).table("t", 1)
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"example_id": ids(n // 5, n), "f": np.ones(n)}), path)
        start = time.perf_counter()
        report = join_report(release_path, path)
        seconds = time.perf_counter() - start
        assert report.in_both == n - n // 5
        print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "in_both": report.in_both}))


def synthetic(n: int, n_features: int) -> tuple[pa.Table, pa.Table, dict[str, str], BinsNoise]:
    """(release, features, schema, noise): a noisy 5-bin release of a label driven by four numbers."""
    rng = np.random.default_rng(0)  # benchmark-only synthetic data
    X = rng.normal(size=(n, n_features))
    truth = np.clip(5 + 3 * X[:, 0] - 2 * X[:, 1] + X[:, 2] * X[:, 3], 0, 30)
    noise = BinsNoise.of([1.0, 4.0, 8.0, 13.0, 22.0], 1.0)
    true_bin = np.searchsorted([2.5, 6, 10.5, 17.5], truth)
    keep = rng.random(n) < noise.a + noise.b
    bins = np.where(keep, true_bin, rng.integers(0, 5, n))
    example_ids = ids(0, n)
    columns = {f"x{j}": X[:, j] for j in range(n_features - 2)}
    columns["region"] = rng.integers(0, 50, n).astype(str)
    columns["device"] = rng.integers(0, 5, n).astype(str)
    features = pa.table({"example_id": example_ids, **columns})
    release = pa.table({"example_id": example_ids, "bin": pa.array(bins.astype(np.uint16))})
    schema = {c: ("categorical" if c in ("region", "device") else "numeric") for c in columns}
    return release, features, schema, noise


def train_case(n: int, n_features: int) -> None:
    from features_party.training.fit import fit

    release, features, schema, noise = synthetic(n, n_features)
    start = time.perf_counter()
    trained = fit(release, features, schema, noise, "squared", model="hgb", debias="affine")
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "metrics": trained.metrics}))


def side_by_side(n: int, n_features: int, threads: int) -> list[dict[str, object]]:
    """Two training jobs at once, each in its own process with ``threads`` OpenMP/BLAS threads: what
    ``serve --workers 2`` does when both workers train (labeldp/common/serving.py gives each
    cores // workers unless the operator chose)."""
    env = {**os.environ, **{name: str(threads) for name in THREAD_POOL_ENV}}
    command = [
        os.environ.get("PYTHON", "python"),
        "-m",
        "benchmarks.bench_features",
        "train",
        str(n),
        str(n_features),
    ]
    jobs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return [dict(json.loads((job.communicate()[0] or "").strip().splitlines()[-1])) for job in jobs]


def main() -> None:
    join = run_isolated("benchmarks.bench_features", "join", "10000000")
    train = run_isolated("benchmarks.bench_features", "train", "1000000", "20")
    cores = len(os.sched_getaffinity(0))
    every_core = side_by_side(200_000, 20, cores)
    shared = side_by_side(200_000, 20, max(1, cores // 2))
    rows = [
        ("join report, 10M release IDs × 10M feature IDs (8M in both)", join, "≤ 20", "≤ 4096"),
        ("training HGB (squared, affine), 1M joined rows × 20 features (2 categorical)", train, "≤ 60", ""),
    ]
    lines = ["| case | seconds | target | peak RSS MiB | target |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['seconds']:.1f} | {t} | {r['peak_mib']:.0f} | {m} |" for name, r, t, m in rows]
    lines += [
        "",
        "| two training jobs at once (200k rows × 20 features each) | threads per job | seconds (each) |",
        "|---|---|---|",
        f"| a pool per core in each (no share) | {cores} | "
        + ", ".join(f"{float(str(r['seconds'])):.1f}" for r in every_core)
        + " |",
        f"| cores ÷ 2 each (`serve --workers 2`'s share) | {max(1, cores // 2)} | "
        + ", ".join(f"{float(str(r['seconds'])):.1f}" for r in shared)
        + " |",
    ]
    md = "\n".join(lines)
    write(
        "features",
        md,
        {"join": join, "train": train, "two_jobs_every_core": every_core, "two_jobs_shared": shared},
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "join":
        join_case(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "train":
        train_case(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
