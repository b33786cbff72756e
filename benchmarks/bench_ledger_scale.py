"""The ledger at scale: the in-process charge (``ledger.charge``) versus the partitioned charge
(``budget/partitioned.py``) on this process and on a two-worker Dask LocalCluster, same run, at 10M
and 100M examples, and the partitioned charge alone at 1B (the in-process charge would hold ~50 GB).

Every example is its own user (the worst case for the user ledger: as many users as examples), so
each charge merges two ledgers of n keys. Each size is charged twice on one tenant: ``fresh`` (no
spend yet) and ``again`` (the same examples: every shard is merged with what it holds). Keys are
synthetic 64-bit integers in partitions of 1M; each (size, engine) runs in a fresh process, and its
peak RSS is its own (the workers report theirs). SQLite holds the tenant, the shard rows and the
ledger entries; the spend itself is in segment files (partitioned) or blobs (in-process).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, run_isolated, timed, workers_cell, write
from labeldp.scale import LOCAL, DaskEngine, Engine, InProcess
from labels_party.budget.ledger import Ledger, UserCharge, charge
from labels_party.budget.partitioned import KEY_COLUMN, USER_COLUMN, charge_partitioned, stage_keys
from labels_party.budget.segments import SegmentStore
from labels_party.storage.db import make_engine, migrate, session_factory, sqlite_url
from labels_party.tenants import create_tenant

PART_ROWS = 1_000_000
SIZES = (10_000_000, 100_000_000, 1_000_000_000)
IN_PROCESS_UP_TO = 100_000_000
EPSILON_MICRO = 100_000
USER_MIX = np.int64(0x5A5A)


def make_parts(folder: Path, n: int) -> list[str]:
    rng = np.random.default_rng(11)  # benchmark-only: synthetic ledger keys
    paths = []
    for i, start in enumerate(range(0, n, PART_ROWS)):
        keys = rng.integers(-(2**63), 2**63 - 1, size=min(PART_ROWS, n - start), dtype=np.int64)
        path = folder / f"keys-{i:05d}.parquet"
        pq.write_table(pa.table({KEY_COLUMN: keys, USER_COLUMN: keys ^ USER_MIX}), path)
        paths.append(str(path))
    return paths


def one(mode: str, folder: str, phases: tuple[str, ...]) -> None:
    root = Path(folder) / f"run-{mode}"
    root.mkdir()
    db = make_engine(sqlite_url(root))
    migrate(db)
    sessions = session_factory(db)
    with sessions.begin() as s:
        tenant = create_tenant(s, "bench", 10_000_000).tenant_id
    parts = sorted(str(p) for p in Path(folder).glob("keys-*.parquet"))
    result: dict[str, object] = {}
    engine: Engine | None = None
    try:
        if mode == "in-process charge":
            read_s, keys = timed(
                lambda: np.concatenate([pq.read_table(p).column(KEY_COLUMN).to_numpy() for p in parts])
            )
            result["read_s"] = read_s
            for phase in phases:

                def run() -> None:
                    with sessions.begin() as s:
                        users = UserCharge.of_examples(keys ^ USER_MIX, EPSILON_MICRO)
                        charge(
                            s,
                            tenant,
                            keys,
                            EPSILON_MICRO,
                            users=users,
                            release_id=None,
                            api_key_id=None,
                            store=SegmentStore(root / "ledger"),
                        )

                result[phase] = {"seconds": timed(run)[0]}
        else:
            engine = DaskEngine(LOCAL, workers=2) if mode == "partitioned, dask" else InProcess()
            store = SegmentStore(root / "ledger")
            for phase in phases:
                stage_s, staged = timed(lambda: stage_keys(engine, parts, root / "staged"))
                if phases == ("fresh",):  # the largest size: free the input's disk once it is staged
                    for part in parts:
                        Path(part).unlink()
                charge_s, entry = timed(
                    lambda: charge_partitioned(
                        Ledger(sessions, store), engine, tenant, staged, EPSILON_MICRO,  # noqa: B023
                        inside=lambda s: None, release_id=None, api_key_id=None,
                    )
                )  # fmt: skip
                result[phase] = {"stage_s": stage_s, "charge_s": charge_s, "seconds": stage_s + charge_s}
                shutil.rmtree(root / "staged")
                assert entry.examples == entry.users  # every example its own user
            if isinstance(engine, DaskEngine):
                result["workers_mib"] = sorted(engine.client.run(peak_rss_mib).values())
            result["segments_gib"] = sum(p.stat().st_size for p in store.root.iterdir()) / 2**30
    finally:
        if engine is not None:
            engine.close()
        db.dispose()
        shutil.rmtree(root, ignore_errors=True)
    result["peak_mib"] = peak_rss_mib()
    print(json.dumps(result))


def main(sizes: tuple[int, ...] = SIZES) -> None:
    lines = [
        "| examples (= users) | engine | fresh s | again s | of which staging (sort) s | this process MiB "
        "| each worker MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for n in sizes:
        folder = Path(tempfile.mkdtemp(prefix="labeldp-ledger-scale-"))
        try:
            make_parts(folder, n)
            small = n <= IN_PROCESS_UP_TO
            modes = (
                ["partitioned, dask", "partitioned, this process", "in-process charge"]
                if small
                else ["partitioned, dask"]
            )
            phases = "fresh,again" if small else "fresh"
            for mode in modes:
                try:
                    r = run_isolated("benchmarks.bench_ledger_scale", "one", mode, str(folder), phases)
                except subprocess.CalledProcessError as exc:  # e.g. killed for memory: say so
                    lines.append(f"| {n:,} | {mode} | did not finish (exit {exc.returncode}) | | | | |")
                    rows.append({"examples": n, "mode": mode, "failed": exc.returncode})
                    continue
                fresh, again = r["fresh"], r.get("again")
                staging = f"{fresh['stage_s']:.1f}" if "stage_s" in fresh else "–"
                if again is not None and "stage_s" in again:
                    staging += f" / {again['stage_s']:.1f}"
                again_s = f"{again['seconds']:.1f}" if again is not None else "not run (disk)"
                workers = workers_cell(r)
                lines.append(
                    f"| {n:,} | {mode} | {fresh['seconds']:.1f} | {again_s} | {staging} "
                    f"| {r['peak_mib']:.0f} | {workers} |"
                )
                rows.append({"examples": n, "mode": mode, **r})
                print(rows[-1], flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    write("ledger_scale", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3], tuple(sys.argv[4].split(",")))
    else:
        main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
