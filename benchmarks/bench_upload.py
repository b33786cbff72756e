"""Uploading label CSVs over real HTTP to a labels-party server (uvicorn, SQLite) in a child process;
reports wall time and the peak resident memory of the server and of the file-work processes that
validate and merge its uploads."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_of, write
from labels_party.storage.db import sqlite_url
from tests.support.servers import LabelsProcess, descendants, tenant_key

TARGETS = {1_000_000: 15.0, 10_000_000: 180.0, 30_000_000: 540.0}
CONTENT_TYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}
REUPLOAD_UP_TO = 30_000_000  # above: one upload only (the re-upload would double time and disk)


def make_csv(path: Path, n: int) -> None:
    with open(path, "w") as fh:
        fh.write("example_id,label\n")
        step = 1_000_000
        for start in range(0, n, step):
            fh.write(
                "".join(f"click-{i:09d},{(i * 7919) % 20000}.5\n" for i in range(start, min(n, start + step)))
            )


def make_parquet(path: Path, n: int) -> None:
    """The same rows as ``make_csv``, in row groups of 1M written one at a time."""
    schema = pa.schema([("example_id", pa.string()), ("label", pa.float64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n, 1_000_000):
            i = np.arange(start, min(n, start + 1_000_000))
            digits = pc.utf8_lpad(pc.cast(pa.array(i), pa.string()), 9, "0")
            ids = pc.binary_join_element_wise("click-", digits, "")
            writer.write_table(pa.table({"example_id": ids, "label": (i * 7919) % 20000 + 0.5}, schema))


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def current_rss_of(pid: int) -> float:
    return status_mib(pid, "VmRSS")


class AnonPeak:
    """The largest anonymous resident memory (RssAnon: the process's own, not file pages the kernel
    can write back and evict, such as a memory-mapped spill file) seen while the block runs, sampled
    every 50 ms, of the server and of its file-work processes; the kernel keeps no high-water mark of
    it. The file-work processes' VmHWM is read on the way (they may be gone when the block ends)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self.work_peak = self.work_hwm = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, status_mib(self.pid, "RssAnon"))
            for child in descendants(self.pid):
                try:
                    self.work_peak = max(self.work_peak, status_mib(child, "RssAnon"))
                    self.work_hwm = max(self.work_hwm, status_mib(child, "VmHWM"))
                except OSError:
                    continue

    def __enter__(self) -> AnonPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main(sizes: tuple[int, ...] = (1_000_000,), fmt: str = "csv") -> None:
    """``fmt``: ``csv`` or ``parquet`` (the same rows; for sizes whose CSV the disk cannot hold twice,
    once as the body and once as the server's spool)."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            data.mkdir()
            url = sqlite_url(data)
            _, key = tenant_key(url, "bench", "1")
            body = Path(tmp) / f"labels.{fmt}"
            (make_csv if fmt == "csv" else make_parquet)(body, n)
            # the default bound (8 GiB) is below a billion rows' CSV
            server = LabelsProcess(
                data, url, env={"LABELDP_MAX_UPLOAD_BYTES": str(2 * os.path.getsize(body))}
            )
            server.start()
            try:
                client = httpx.Client(
                    # no read timeout: a billion rows are validated and stored for minutes before the answer
                    base_url=server.base_url,
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=None,
                )
                spec = {
                    "name": "prices",
                    "label_type": "real",
                    "lo": 0,
                    "hi": 20000,
                    "support": {"kind": "uniform", "k": 201},
                }
                ds = client.post("/v1/datasets", json=spec).json()["id"]
                assert server.pid is not None
                idle_mib = current_rss_of(server.pid)
                timings = []
                with AnonPeak(server.pid) as anon:
                    # a first upload, then the same IDs again: every row replaced (upsert)
                    for _ in range(2 if n <= REUPLOAD_UP_TO else 1):
                        start = time.perf_counter()
                        with open(body, "rb") as fh:
                            resp = client.put(
                                f"/v1/datasets/{ds}/labels",
                                content=fh,
                                headers={"Content-Type": CONTENT_TYPES[fmt]},
                            )
                        timings.append(time.perf_counter() - start)
                        resp.raise_for_status()
                        assert resp.json()["rows"] == n and resp.json()["label_count"] == n
                peak_mib = peak_rss_of(server.pid)
            finally:
                server.stop()
            rows.append(
                {
                    "rows": n,
                    "bytes": os.path.getsize(body),
                    "seconds": timings[0],
                    "reupload_seconds": timings[1] if len(timings) > 1 else None,
                    "server_idle_mib": idle_mib,
                    "server_peak_mib": peak_mib,
                    "server_anon_peak_mib": anon.peak,
                    "file_work_peak_mib": anon.work_hwm,
                    "file_work_anon_peak_mib": anon.work_peak,
                }
            )
            print(rows[-1], flush=True)
    lines = [
        f"| rows | {fmt} MB | upload s | target | re-upload (all replaced) s | server idle MiB "
        "| server peak MiB | of which its own (anonymous) MiB | file-work peak MiB | of which its own MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = f"≤ {TARGETS[int(r['rows'])]:g}" if r["rows"] in TARGETS else "–"
        again = "not run" if r["reupload_seconds"] is None else f"{r['reupload_seconds']:.1f}"
        lines.append(
            f"| {r['rows']:,} | {r['bytes'] / 1e6:.0f} | {r['seconds']:.1f} | {target} "
            f"| {again} | {r['server_idle_mib']:.0f} | {r['server_peak_mib']:.0f} "
            f"| {r['server_anon_peak_mib']:.0f} | {r['file_work_peak_mib']:.0f} "
            f"| {r['file_work_anon_peak_mib']:.0f} |"
        )
    write("upload" if fmt == "csv" else f"upload_{fmt}", "\n".join(lines), rows)


if __name__ == "__main__":
    fmt = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in CONTENT_TYPES else "csv"
    main(tuple(int(a) for a in sys.argv[1:]) or (1_000_000,), fmt)
