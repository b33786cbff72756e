"""Exporting a release's training set (``GET /v1/releases/{id}/training-set``) at scale, beside a plain
pyarrow join-and-write of the same files in the same run.

n released examples (IDs ``click-%010d``, a 5-bin release delivered over gRPC) and a feature table of n
rows × 20 feature columns (18 numeric, 2 categorical) of which 80 % are in the release, uploaded as
Parquet over REST. The export streams the joined rows as Parquet to a client that counts the bytes;
"features party" is the peak resident memory of that process (the service in threads, the client
beside it) above its size just before the export, the kernel's high-water mark reset first. The
baseline reads both files whole, joins them with ``pyarrow.Table.join`` and writes one Parquet file, in
a fresh process of its own. Each runs in a fresh process.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import run_isolated, write

SIZES = (10_000_000,)
COLUMNS = 20
GROUP = 1_000_000
TARGET_S, TARGET_MIB = 60.0, 512.0


def ids(start: int, n: int) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(np.arange(start, start + n)), pa.string()), 10, "0")
    return pc.binary_join_element_wise("click-", digits, "")


def write_features(path: Path, n: int) -> None:
    """A row group at a time: the feature rows start at n/5, so 80 % of them are released."""
    with pq.ParquetWriter(path, _feature_schema()) as writer:
        for start in range(0, n, GROUP):
            size = min(GROUP, n - start)
            i = np.arange(start, start + size)
            columns: dict[str, Any] = {"example_id": ids(start + n // 5, size)}
            for c in range(COLUMNS - 2):
                columns[f"x{c}"] = np.sin(i * (c + 1) * 0.001)
            columns["color"] = pa.array(np.array(["red", "green", "blue"])[i % 3])
            columns["shape"] = pa.array(np.array(["a", "b", "c", "d"])[i % 4])
            writer.write_table(pa.table(columns, schema=_feature_schema()))


def _feature_schema() -> pa.Schema:
    return pa.schema(
        [("example_id", pa.string())]
        + [(f"x{c}", pa.float64()) for c in range(COLUMNS - 2)]
        + [("color", pa.string()), ("shape", pa.string())]
    )


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def service(folder: str, n: int) -> None:
    """Deliver, upload, then time the export; prints one JSON line."""
    import httpx

    from features_party.config import FeaturesSettings
    from labeldp.common.identity import Identity
    from tests.support.features_party import deliver, pin_sender
    from tests.support.messages import identity_bins, release
    from tests.support.servers import features_server_thread, features_tenant_key

    root = Path(folder)
    settings = FeaturesSettings(data_dir=root / "data", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "bench")
    sender = Identity.generate()
    mechanism = identity_bins(5)
    rel = replace(
        release(["x"], mechanism=mechanism),
        example_ids=ids(0, n),
        bins=(np.arange(n) % 5).astype(np.uint8),
    )
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=None)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        del rel
        with open(root / "features.parquet", "rb") as fh:
            up = c.put(
                "/v1/feature-tables/clicks",
                content=fh,
                headers={"Content-Type": "application/vnd.apache.parquet"},
            )
        up.raise_for_status()
        pa.default_memory_pool().release_unused()
        Path("/proc/self/clear_refs").write_text("5")
        before = _status("VmRSS")
        start, size = time.perf_counter(), 0
        release_id = c.get("/v1/releases").json()["items"][0]["release_id"]
        with c.stream(
            "GET", f"/v1/releases/{release_id}/training-set", params={"feature_table": "clicks"}
        ) as r:
            r.raise_for_status()
            groups = int(r.headers["X-Row-Groups"])
            for block in r.iter_bytes(1 << 20):
                size += len(block)
        seconds = time.perf_counter() - start
        peak = _status("VmHWM")
    print(
        json.dumps(
            {
                "seconds": seconds,
                "bytes": size,
                "row_groups": groups,
                "before_mib": before,
                "peak_mib": peak,
                "growth_mib": peak - before,
            }
        )
    )


def baseline(folder: str, n: int) -> None:
    root = Path(folder)
    start = time.perf_counter()
    features = pq.read_table(root / "features.parquet")
    release = pq.read_table(root / "release.parquet")
    joined = features.join(release, keys="example_id", join_type="inner")
    pq.write_table(joined, root / "joined.parquet")
    seconds = time.perf_counter() - start
    rows = joined.num_rows
    print(json.dumps({"seconds": seconds, "rows": rows, "peak_mib": _status("VmHWM")}))


def main(sizes: tuple[int, ...] = SIZES) -> None:
    rows: list[dict[str, Any]] = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            write_features(Path(tmp) / "features.parquet", n)
            served = run_isolated("benchmarks.bench_export", "service", tmp, str(n))
            # the same two files for the baseline: the release as the service stored it
            stored = next((Path(tmp) / "data" / "releases").glob("*.parquet"))
            stored.rename(Path(tmp) / "release.parquet")
            plain = run_isolated("benchmarks.bench_export", "baseline", tmp, str(n))
        rows.append({"rows": n, "export": served, "baseline": plain})
        print(rows[-1], flush=True)
    lines = [
        "| feature rows × columns | exported rows | export s | target | features party MiB above idle (idle) "
        "| target "
        "| plain pyarrow join-and-write s | its peak MiB | time ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, b = r["export"], r["baseline"]
        lines.append(
            f"| {r['rows']:,} × {COLUMNS} | {b['rows']:,} | {e['seconds']:.1f} | ≤ {TARGET_S:g} "
            f"| {e['growth_mib']:.0f} ({e['before_mib']:.0f}) | ≤ {TARGET_MIB:g} | {b['seconds']:.1f} "
            f"| {b['peak_mib']:.0f} | {e['seconds'] / b['seconds']:.2f}× |"
        )
    write("export", "\n".join(lines), rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("service", "baseline"):
        {"service": service, "baseline": baseline}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
    else:
        main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
