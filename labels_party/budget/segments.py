"""Spend shards held as immutable segment files instead of database blobs.

A segment is one shard's sorted keys and their micro-ε spend, as a two-column Parquet file under the
ledger directory (``data_dir/ledger``), named by the server (kind, tenant, shard, a random suffix —
never anything from a request) and checked against the SHA-256 the shard row records on every read.
A segment is never modified: a charge writes a new one and the shard row is repointed in the charge's
commit, so a file that a committed row names always holds exactly the state that commit recorded.
Files no row names (a charge that lost its race, or a superseded state) are removed by
``collect_garbage`` once they are older than a grace period, so a reader that fetched a row just
before a commit can still open the file it names.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.files import write_parquet_atomic

Keys = npt.NDArray[np.int64]
_NAME = re.compile(r"(example|user)-[0-9a-f-]{36}-[0-9]{3}-[0-9a-f]{32}\.parquet")
GRACE_SECONDS = 3600.0


class SegmentError(RuntimeError):
    """A segment a shard row names is missing or does not match its recorded digest."""


def segment_name(kind: str, tenant_id: str, shard: int) -> str:
    name = f"{kind}-{tenant_id}-{shard:03d}-{uuid.uuid4().hex}.parquet"
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a segment name: {name!r}")
    return name


def write_segment(path: Path, keys: Keys, spent: Keys) -> str:
    """Write one shard's arrays atomically; returns the file's SHA-256."""
    write_parquet_atomic(
        path, pa.table({"key": pa.array(keys, pa.int64()), "spent": pa.array(spent, pa.int64())})
    )
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def read_segment(path: Path, sha256: str) -> tuple[Keys, Keys]:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise SegmentError(f"ledger segment {path.name} is missing") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SegmentError(f"ledger segment {path.name} does not match its recorded digest")
    table = pq.read_table(pa.BufferReader(data))
    return (
        np.asarray(table.column("key").to_numpy(), dtype=np.int64),
        np.asarray(table.column("spent").to_numpy(), dtype=np.int64),
    )


@dataclass(frozen=True)
class SegmentStore:
    """The ledger directory. Every process of the labels party and every worker of its cluster must
    see it at the same path (as they see ``data_dir``)."""

    root: Path

    def path(self, name: str) -> Path:
        if not _NAME.fullmatch(name):
            raise SegmentError(f"not a segment name: {name!r}")
        return self.root / name

    def read(self, name: str, sha256: str) -> tuple[Keys, Keys]:
        return read_segment(self.path(name), sha256)

    def remove(self, names: list[str]) -> None:
        for name in names:
            self.path(name).unlink(missing_ok=True)

    def collect_garbage(self, referenced: set[str], older_than: float = GRACE_SECONDS) -> int:
        """Remove segment files no shard row names, once older than ``older_than`` seconds."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - older_than
        removed = 0
        for path in self.root.iterdir():
            if _NAME.fullmatch(path.name) and path.name not in referenced and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
