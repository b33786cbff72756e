"""Setting up a features party over its real interfaces: pin the test sender and deliver a release over
gRPC; upload a feature table as Parquet over REST; and how much memory a request made this process
take at its peak."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.wire.sender import build_frames
from labeldp.mechanisms import optimize_rr_on_bins
from labeldp.samples import weeks_worked
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER, release
from tests.support.seeded import SeededRandom


def pin_sender(c: httpx.Client, sender: Identity) -> None:
    c.post(
        "/v1/senders", json={"id": SENDER, "public_key_pem": public_key_pem(sender.public_key)}
    ).raise_for_status()


def deliver(c: httpx.Client, rel: Any, sender: Identity) -> None:
    """Stream a signed release to the party's gRPC receiver (plaintext, on loopback)."""
    with grpc.insecure_channel(f"127.0.0.1:{c.get('/v1/identity').json()['grpc_port']}") as ch:
        pb_grpc.FeaturesPartyStub(ch).DeliverRelease(iter(build_frames(rel, sender)))  # type: ignore[no-untyped-call]


def put_table(c: httpx.Client, name: str, table: pa.Table) -> httpx.Response:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return c.put(
        f"/v1/feature-tables/{name}",
        content=buf.getvalue(),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )


def census_release(loss: str, n: int = 20_000) -> tuple[Any, pa.Table]:
    """``n`` census rows released with RR-on-Bins (seeded: test data), and their features."""
    ds = weeks_worked()
    y = np.asarray(ds.table.column("work").to_numpy(), dtype=float)[:n]
    counts = ds.support.counts(y)
    mech = optimize_rr_on_bins(ds.support, counts, 0.95, loss)
    ids = [f"w{i}" for i in range(n)]
    published = mech.describe(prior=counts, epsilon_prior=0.05, epsilon_total=1.0)
    rel = replace(release(ids, mechanism=published), bins=mech.randomize(y, rng=SeededRandom(2)))
    features = ds.features.slice(0, n).append_column("example_id", pa.array(ids))
    return rel, features


def wait(c: httpx.Client, job: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state: dict[str, Any] = c.get(f"/v1/jobs/{job}").json()
        if state["status"] in ("succeeded", "failed"):
            return state
        time.sleep(0.1)
    raise TimeoutError(job)


def train(c: httpx.Client, **body: Any) -> str:
    """Start a training job (``POST /v1/models``) and wait until it succeeded; its id."""
    r = c.post("/v1/models", json=body)
    assert r.status_code == 202, r.text
    job: str = r.json()["id"]
    assert wait(c, job)["status"] == "succeeded"
    return job


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


@dataclass
class PeakGrowth:
    baseline_mib: float
    mib: float = 0.0  # how far the peak resident set rose above the baseline inside the block


@contextmanager
def peak_rss_growth() -> Iterator[PeakGrowth]:
    """Measure the peak resident set of this process (the services under test run in its threads)
    inside the block: the kernel's high-water mark (VmHWM) is reset first (``/proc/self/clear_refs``),
    so the growth is the block's own, whatever ran before."""
    Path("/proc/self/clear_refs").write_text("5")
    growth = PeakGrowth(_status_mib("VmRSS"))
    yield growth
    growth.mib = _status_mib("VmHWM") - growth.baseline_mib
