"""A release end to end through the labels party's HTTP API at 10M and 100M examples: the upload
(Parquet, streamed validation), then the release — plan, charge, prior, optimization, randomization,
the stored output and the signed message — by the server alone versus with ``LABELDP_DASK_SCHEDULER``
pointing at a two-worker LocalCluster the benchmark runs, same run, same data.

The server (``labeldp labels serve``, SQLite) is restarted after the upload so that its peak resident
memory (VmHWM) is the release's own; the workers report theirs. The server alone runs at 10M only.
Labels are the census weeks-worked labels repeated (k = 53, squared loss, ε = 2).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, peak_rss_of, workers_cell, write
from labeldp.samples import weeks_worked
from labels_party.storage.db import sqlite_url
from tests.support.servers import LabelsProcess, tenant_key

SIZES = (10_000_000, 100_000_000)
ROW_GROUP = 1_000_000
IN_PROCESS_UP_TO = 10_000_000


def make_upload(path: Path, n: int) -> None:
    weeks = weeks_worked().labels
    schema = pa.schema([("example_id", pa.string()), ("label", pa.float64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n, ROW_GROUP):
            rows = min(ROW_GROUP, n - start)
            ids = pc.binary_join_element_wise(
                "c", pc.cast(pa.array(np.arange(start, start + rows)), pa.string()), ""
            )
            writer.write_table(
                pa.table({"example_id": ids, "label": np.resize(weeks, rows).astype(np.float64)})
            )


def serve(data: Path, url: str, scheduler: str | None) -> LabelsProcess:
    env = {"LABELDP_DASK_SCHEDULER": scheduler} if scheduler else {}
    server = LabelsProcess(data, url, env=env)
    server.start(timeout=120)
    return server


def client(server: LabelsProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=7200)


def one_size(n: int) -> list[dict[str, Any]]:
    from distributed import Client, LocalCluster

    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="labeldp-e2e-"))
    try:
        body = tmp / "labels.parquet"
        make_upload(body, n)
        data = tmp / "data"
        data.mkdir()
        url = sqlite_url(data)
        _, key = tenant_key(url, "bench", "100")
        server = serve(data, url, None)
        try:
            c = client(server, key)
            assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
            spec = {"name": "weeks", "label_type": "count", "lo": 0, "hi": 52}
            ds = c.post("/v1/datasets", json=spec).json()["id"]
            start = time.perf_counter()
            with open(body, "rb") as fh:
                up = c.put(
                    f"/v1/datasets/{ds}/labels",
                    content=fh,
                    headers={"Content-Type": "application/vnd.apache.parquet"},
                )
            upload_s = time.perf_counter() - start
            up.raise_for_status()
            assert server.pid is not None
            upload_mib = peak_rss_of(server.pid)
        finally:
            server.stop()
        rows.append({"examples": n, "step": "upload", "engine": "this process", "seconds": upload_s,
                     "server_mib": upload_mib, "bytes": body.stat().st_size})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        # Above 10M the server alone is not run: its in-process charge alone needs ~1.9 GiB per 10M
        # examples (BENCHMARKS.md "Ledger at scale"), on top of the plan's examples in memory.
        for engine in ("this process", "dask") if n <= IN_PROCESS_UP_TO else ("dask",):
            local = None
            if engine == "dask":
                local = LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                )
            cluster = Client(local) if local is not None else None
            server = serve(data, url, local.scheduler_address if local is not None else None)
            row: dict[str, Any] = {"examples": n, "step": "release", "engine": engine}
            try:
                c = client(server, key)
                start = time.perf_counter()
                r = c.post(
                    f"/v1/datasets/{ds}/releases",
                    json={"epsilon": 2.0, "recipient": "publisher", "mechanism": "rr_on_bins"},
                    headers={"Idempotency-Key": f"bench-{engine.replace(' ', '-')}"},
                )
                row["seconds"] = time.perf_counter() - start
                assert server.pid is not None
                row["server_mib"] = peak_rss_of(server.pid)
                if r.status_code != 201:
                    row["failed"] = f"{r.status_code}: {r.text[:200]}"
                else:
                    row["message_bytes"] = (data / "messages" / f"{r.json()['id']}.frames").stat().st_size
                if cluster is not None:
                    row["workers_mib"] = sorted(cluster.run(peak_rss_mib).values())
            except (httpx.HTTPError, OSError) as exc:
                row["failed"] = f"{type(exc).__name__}: {exc}"[:200]
            finally:
                server.stop()
                if cluster is not None and local is not None:
                    cluster.close()
                    local.close()
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main(sizes: tuple[int, ...] = SIZES) -> None:
    rows = [row for n in sizes for row in one_size(n)]
    lines = [
        "| examples | step | engine | seconds | labels-party MiB | each worker MiB | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        workers = workers_cell(r)
        note = r.get("failed", "")
        if "bytes" in r:
            note = f"Parquet upload {r['bytes'] / 2**20:,.0f} MiB"
        if "message_bytes" in r:
            note = f"signed message {r['message_bytes'] / 2**20:,.0f} MiB"
        lines.append(
            f"| {r['examples']:,} | {r['step']} | {r['engine']} | {r.get('seconds', float('nan')):.1f} "
            f"| {r.get('server_mib', float('nan')):,.0f} | {workers} | {note} |"
        )
    write("scale_e2e", "\n".join(lines), rows)


if __name__ == "__main__":
    main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
