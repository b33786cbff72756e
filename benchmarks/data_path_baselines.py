"""The lower bounds ``bench_data_path.py`` measures labeldp against: the same work on the same data,
done the shortest way this machine knows, with nothing of labeldp's but the hash kernel.

- upload: read the file with pyarrow, one BLAKE2b-64 per ID (the compiled batch kernel: the cheapest
  keyed-hash identity the ledger could use), write one Parquet file.
- release: read the stored labels, draw 12 bytes of ChaCha20 per label (the randomizer's two words),
  map each label to one of the bins and keep or move it, write the bins, SHA-256 the file, sign the
  digest with Ed25519; then (``ledger``) the charge below.
- ledger charge: sort the keys, merge them into 256 sorted shards of what the ledger holds (a
  running sum of spend for keys already there), write every shard as a BLOB in one SQLite
  transaction.
- delivery: a raw grpcio client stream of the very records the message file holds, over loopback
  mTLS, to a server (its own process) that reads every frame and answers an empty receipt.
- join: pyarrow's hash join of the two ID columns, counted.
- reads: a bare FastAPI route under uvicorn with httptools, returning a small JSON object.

``python -m benchmarks.data_path_baselines grpc-sink PORT CERT KEY CA`` and ``… bare-route PORT``
serve the last two in their own process.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from labeldp.common.blake2b_batch import blake2b_batch

SHARDS = 256


def upload(path: Path, fmt: str, out: Path) -> int:
    table = pacsv.read_csv(path) if fmt == "csv" else pq.read_table(path)
    ids = table.column("example_id").combine_chunks()
    keys = blake2b_batch(ids, 8, persons=(b"labeldp-example",)).view(np.int64)[:, 0]
    pq.write_table(pa.table({"example_id": ids, "label": table.column("label"), "example_key": keys}), out)
    return table.num_rows


def release(labels: Path, out: Path, edges: np.ndarray) -> str:
    table = pq.read_table(labels, columns=["example_id", "label"])
    values = table.column("label").to_numpy()
    n = values.size
    stream = Cipher(algorithms.ChaCha20(os.urandom(32), os.urandom(16)), mode=None).encryptor()
    words = np.frombuffer(stream.update(bytes(12 * n)), dtype=np.uint32).reshape(n, 3)
    bins = np.searchsorted(edges, values, side="right").astype(np.uint16)
    keep = words[:, 0] < np.uint32(0.9 * 2**32)
    other = (words[:, 1].astype(np.uint64) * np.uint64(edges.size + 1)) >> np.uint64(32)
    bins = np.where(keep, bins, other.astype(np.uint16))
    pq.write_table(pa.table({"example_id": table.column("example_id"), "bin": bins}), out)
    digest = hashlib.sha256(out.read_bytes()).digest()
    return Ed25519PrivateKey.generate().sign(digest).hex()


def ledger(keys: np.ndarray, held: np.ndarray, db: Path, epsilon: int = 100_000) -> int:
    """Charge ``keys`` onto a ledger holding the sorted ``held`` keys: sort, merge shard by shard
    (spend of keys already there goes up, new keys are inserted), one transaction of BLOBs."""
    ordered = np.sort(keys)
    shard_new = (ordered.view(np.uint64) >> np.uint64(56)).astype(np.intp)
    shard_old = (held.view(np.uint64) >> np.uint64(56)).astype(np.intp)
    cut_new = np.searchsorted(shard_new, np.arange(SHARDS + 1))
    cut_old = np.searchsorted(shard_old, np.arange(SHARDS + 1))
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS shard (id INTEGER PRIMARY KEY, keys BLOB, spend BLOB)")
    rows = 0
    with conn:
        for s in range(SHARDS):
            new = ordered[cut_new[s] : cut_new[s + 1]]
            old = held[cut_old[s] : cut_old[s + 1]]
            both = np.sort(np.concatenate((old, new)))
            merged = both[np.concatenate(([True], both[1:] != both[:-1]))] if both.size else both
            spend = np.zeros(merged.size, dtype=np.int64)
            spend[np.searchsorted(merged, old)] += epsilon
            spend[np.searchsorted(merged, new)] += epsilon
            conn.execute(
                "INSERT OR REPLACE INTO shard VALUES (?, ?, ?)", (s, merged.tobytes(), spend.tobytes())
            )
            rows += merged.size
    conn.close()
    return rows


def join(release_path: Path, features_path: Path) -> int:
    left = pq.read_table(release_path, columns=["example_id"])
    right = pq.read_table(features_path, columns=["example_id"]).append_column(
        "f", pa.array(np.ones(pq.ParquetFile(features_path).metadata.num_rows, dtype=np.int8))
    )
    return left.join(right, "example_id", join_type="inner").num_rows


def _grpc_sink(port: int, cert: Path, key: Path, ca: Path) -> None:
    import grpc

    def consume(frames: Iterator[bytes], context: object) -> bytes:
        count = sum(len(frame) for frame in frames)  # every frame's bytes, read
        return count.to_bytes(8, "little")

    handler = grpc.method_handlers_generic_handler(
        "labeldp.v1.FeaturesParty", {"DeliverRelease": grpc.stream_unary_rpc_method_handler(consume)}
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(4),
        options=[("grpc.max_receive_message_length", 64 * 2**20)],
    )
    server.add_generic_rpc_handlers((handler,))
    creds = grpc.ssl_server_credentials(
        [(key.read_bytes(), cert.read_bytes())], root_certificates=ca.read_bytes(), require_client_auth=True
    )
    server.add_secure_port(f"localhost:{port}", creds)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def _bare_route(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/v1/ping")
    def ping() -> dict[str, object]:  # a thread-pool route, as labeldp's reads are
        return {"id": "00000000-0000-0000-0000-000000000000", "spent": "1.5", "items": []}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="httptools", access_log=False)


def ids_of(start: int, n: int) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(np.arange(start, start + n)), pa.string()), 9, "0")
    return pc.binary_join_element_wise("click-", digits, "")


if __name__ == "__main__":
    if sys.argv[1] == "grpc-sink":
        _grpc_sink(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
    elif sys.argv[1] == "bare-route":
        _bare_route(int(sys.argv[2]))
