"""A 10M-example release delivered over loopback with mTLS: the receiver (``labeldp features serve``,
its own process) verifies the signature and digest, decodes and commits it. Reports the wall time of
the delivery (until the receipt), the receiver's peak resident memory, and the wire size against the
bound "example IDs' bytes + 1.05 bytes per example" (m <= 256)."""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pyarrow as pa

from benchmarks.common import peak_rss_of, write
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.tls import dev_ca
from labeldp.demo.parties import cli
from labeldp.mechanisms import RROnBins, integer_grid
from labeldp.processes import FeaturesProcess, free_port
from labels_party.delivery.addresses import dial_target
from labels_party.delivery.client import deliver
from labels_party.delivery.message import Addressee, Signer, write_message
from labels_party.storage.data_dir import DataDir

TARGET_SECONDS = 30.0
TARGET_MIB = 1024


def main(n: int = 10_000_000) -> None:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        certs = dev_ca(tmp / "certs")
        grpc_port = free_port()
        env = {
            "LABELDP_FEATURES_DATA_DIR": str(tmp / "features"),
            "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
            "LABELDP_FEATURES_TLS_CERT": str(certs.server_cert),
            "LABELDP_FEATURES_TLS_KEY": str(certs.server_key),
            "LABELDP_FEATURES_TLS_CA": str(certs.ca),
            # the default bound (4 GiB) is about 1B examples' message
            "LABELDP_FEATURES_MAX_RELEASE_BYTES": str(max(4 * 2**30, 6 * n)),
        }
        key = cli(env, "features", "tenant", "create", "bench").strip().splitlines()[-1]
        sender = Identity.generate()
        rng = np.random.default_rng(0)  # benchmark-only synthetic bins
        id_bytes = 0

        def pieces() -> Iterator[tuple[pa.Array, np.ndarray]]:
            """Pieces of 10M, made as the message consumes them: no more than one is ever held."""
            nonlocal id_bytes
            for a in range(0, n, 10_000_000):
                chunk = pa.array([f"click-{i:09d}" for i in range(a, min(n, a + 10_000_000))], pa.string())
                id_bytes += int(np.sum(pa.compute.binary_length(chunk).to_numpy()))
                yield chunk, rng.integers(0, 4, len(chunk))

        support = integer_grid(0, 52)
        edges = np.searchsorted([6, 18, 36], support.values, side="right")  # 4 bins: 0-5, 6-17, 18-35, 36-52
        mechanism = RROnBins(0.95, support, edges, np.array([1.0, 10.0, 25.0, 45.0])).describe(
            prior=np.full(53, 1 / 53), epsilon_prior=0.05, epsilon_total=1.0
        )
        build_start = time.perf_counter()
        path = write_message(
            DataDir(tmp / "labels"),
            Signer(sender, "advertiser", 3600),
            release_id=str(uuid.uuid4()),
            recipient=Addressee("publisher"),
            label_type="count",
            mechanism=mechanism,
            pieces=pieces(),
        )
        build_seconds = time.perf_counter() - build_start
        features = FeaturesProcess(env)
        features.start()
        try:
            client = httpx.Client(base_url=features.base_url, headers={"Authorization": f"Bearer {key}"})
            client.post(
                "/v1/senders", json={"id": "advertiser", "public_key_pem": public_key_pem(sender.public_key)}
            ).raise_for_status()
            assert features.proc is not None
            baseline = peak_rss_of(features.proc.pid)
            creds = grpc.ssl_channel_credentials(
                root_certificates=certs.ca.read_bytes(),
                private_key=certs.client_key.read_bytes(),
                certificate_chain=certs.client_cert.read_bytes(),
            )
            start = time.perf_counter()
            target = dial_target(f"localhost:{grpc_port}", None)
            outcome = deliver(path, target, creds, timeout_s=600, attempts=1)
            seconds = time.perf_counter() - start
            assert outcome.delivered, outcome
            peak = peak_rss_of(features.proc.pid)
            listed = client.get("/v1/releases").json()["items"]
            assert listed[0]["example_count"] == n
        finally:
            features.stop()
        bound = id_bytes + 1.05 * n
        row = {
            "examples": n,
            "build_message_s": build_seconds,
            "deliver_verify_commit_s": seconds,
            "receiver_peak_mib": peak,
            "receiver_idle_mib": baseline,
            "wire_bytes": outcome.wire_bytes,
            "id_bytes": id_bytes,
            "bound_bytes": bound,
        }
        wire = outcome.wire_bytes
        rows = [
            ("examples", f"{n:,}", ""),
            ("signing and storing the message (sender)", f"{build_seconds:.1f} s", ""),
            (
                "delivery over loopback mTLS until the receipt (verify, decode, commit)",
                f"{seconds:.1f} s",
                f"≤ {TARGET_SECONDS:g} s",
            ),
            (
                f"receiver peak RSS (idle before: {baseline:.0f} MiB)",
                f"{peak:.0f} MiB",
                f"≤ {TARGET_MIB} MiB",
            ),
            (
                "wire size",
                f"{wire / 1e6:.1f} MB ({wire / n:.2f} B/example)",
                f"≤ {bound / 1e6:.1f} MB (IDs + 1.05 B/example)",
            ),
        ]
        md = "\n".join(
            ["| measure | value | target |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)]
        )
        write("delivery", md, row)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000)
