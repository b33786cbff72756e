"""A label release over partitioned Parquet: counting and randomizing run where the partitions are.

The steps are those of ``labeldp.mechanisms.release_labels``, split by where they run:

1. **workers** count each partition's labels on the public support (exact integers, no noise);
2. **this process** adds the prior's discrete Laplace noise to the summed counts, from its own CSPRNG,
   and optimizes the mechanism for the noisy prior (both small: ``k`` numbers);
3. **workers** randomize each partition with a ChaCha20 stream keyed from *their own* ``os.urandom``
   (``SecureRandom()`` inside the task): no key, seed or stream position ever travels from here to a
   worker, so no process other than the one drawing a partition's noise can reproduce it. Tasks are
   submitted as impure, so the engine never reuses a result for the same inputs.

Each output partition is written atomically and its SHA-256 returned; ``digest`` chains them in
partition order. The budget must be charged by the caller *before* ``release_partitions`` is called:
step 1 draws no noise, and step 2 is the first draw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.files import write_parquet_atomic
from labeldp.mechanisms import (
    Loss,
    Objective,
    ObjectiveName,
    PublishedMechanism,
    RROnBins,
    Support,
    noisy_histogram,
    normalize_counts,
    optimize_rr_on_bins,
    prior_split,
)
from labeldp.mechanisms._types import FloatArray, IntArray
from labeldp.mechanisms.losses import check_labels_for_loss, resolve_loss
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector
from labeldp.scale.engine import Engine

LABEL_COLUMN = "label"
ID_COLUMN = "example_id"
PARTITION_ROWS = 1_000_000


@dataclass(frozen=True)
class PartitionOutput:
    path: str
    rows: int
    sha256: str  # of the output file's bytes


@dataclass(frozen=True)
class PartitionedRelease:
    mechanism: RROnBins
    prior: FloatArray
    epsilon_prior: float
    epsilon_randomize: float
    epsilon: float
    examples: int
    outputs: list[PartitionOutput]

    @property
    def digest(self) -> str:
        """SHA-256 over the partitions' digests in partition order (the order the message lists them)."""
        chain = hashlib.sha256()
        for out in self.outputs:
            chain.update(bytes.fromhex(out.sha256))
        return chain.hexdigest()

    def published(self) -> PublishedMechanism:
        return self.mechanism.describe(
            prior=self.prior, epsilon_prior=self.epsilon_prior, epsilon_total=self.epsilon
        )


def bin_array(bins: npt.ArrayLike, codes: int) -> pa.Array:
    """The stored ``bin`` column: one byte per example while the ``codes`` fit, else two."""
    return pa.array(bins, pa.uint8() if codes <= 256 else pa.uint16())


def write_partitions(
    folder: Path,
    ids: pa.Array,
    labels: FloatArray,
    rows: int = PARTITION_ROWS,
    extra: Mapping[str, npt.NDArray[np.int64]] | None = None,
) -> list[str]:
    """Split in-memory examples into Parquet partitions of ``rows`` (for a cluster to read); ``extra``
    adds columns aligned with ``ids`` (e.g. the ledger's keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, start in enumerate(range(0, len(ids), rows)):
        path = folder / f"part-{i:05d}.parquet"
        columns = {ID_COLUMN: ids[start : start + rows], LABEL_COLUMN: pa.array(labels[start : start + rows])}
        for name, values in (extra or {}).items():
            columns[name] = pa.array(values[start : start + rows])
        write_parquet_atomic(path, pa.table(columns))
        paths.append(str(path))
    return paths


def partitions_in(folder: Path) -> list[str]:
    """The partitions ``write_partitions`` wrote into ``folder``, in order."""
    return [str(p) for p in sorted(folder.glob("part-*.parquet"))]


def count_partition(path: str, support: Support, loss: Loss) -> IntArray:
    """Exact label counts of one partition on the support (runs on a worker; draws nothing)."""
    labels = finite_vector(
        pq.read_table(path, columns=[LABEL_COLUMN]).column(LABEL_COLUMN).to_numpy(), path, allow_empty=True
    )
    check_labels_for_loss(labels, loss, path)
    return support.counts(labels)


def randomize_partition(path: str, out_path: str, mechanism: RROnBins) -> PartitionOutput:
    """Randomize one partition with a stream keyed on this worker, and write it atomically."""
    table = pq.read_table(path, columns=[ID_COLUMN, LABEL_COLUMN])
    bins = mechanism.randomize(table.column(LABEL_COLUMN).to_numpy())  # fresh SecureRandom(), here
    output = pa.table({ID_COLUMN: table.column(ID_COLUMN), "bin": bin_array(bins, mechanism.m)})
    write_parquet_atomic(Path(out_path), output)
    with open(out_path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return PartitionOutput(out_path, table.num_rows, digest)


def release_partitions(
    engine: Engine,
    parts: Sequence[str],
    out_dir: Path,
    support: Support,
    epsilon: float,
    loss: str | Loss = "squared",
    epsilon_prior: float | None = None,
    objective: Objective | ObjectiveName | None = None,
) -> PartitionedRelease:
    """Release every label of ``parts`` (Parquet files with ``example_id`` and ``label``) with total
    budget ``epsilon`` into ``out_dir/part-NNNNN.parquet``, one output per input, in order; the bins
    for ``objective`` (``labeldp.mechanisms.release_labels``)."""
    eps = check_epsilon(epsilon)
    loss_spec = resolve_loss(loss)
    if loss_spec.name == "zero_one":
        raise ParameterError("partitioned releases serve regression losses (RR-on-Bins)", "loss")
    if not parts:
        raise ParameterError("at least one partition is needed", "parts")
    counts = np.sum(engine.map(count_partition, list(parts), support=support, loss=loss_spec), axis=0)
    n = int(counts.sum())
    if n == 0:
        raise ParameterError("the partitions hold no labels", "parts")
    eps_prior, eps_randomize = prior_split(eps, n, support.k, epsilon_prior)
    at = Objective.of(objective, loss_spec.name, eps_randomize).epsilon_for(eps_randomize, n)
    prior = normalize_counts(noisy_histogram(counts, eps_prior))  # the first draw: after the charge
    mechanism = optimize_rr_on_bins(support, prior, eps_randomize, loss_spec, optimize_at=at)
    out_dir.mkdir(parents=True, exist_ok=True)
    outs = [str(out_dir / f"part-{i:05d}.parquet") for i in range(len(parts))]
    outputs = engine.map(randomize_partition, list(parts), outs, mechanism=mechanism)
    return PartitionedRelease(mechanism, prior, eps_prior, eps_randomize, eps, n, outputs)


def output_tables(release: PartitionedRelease) -> Iterator[pa.Table]:
    """Each partition's released ``(example_id, bin)`` rows, one partition at a time, checked against
    the digest its worker returned (a file changed after it was written is refused)."""
    for out in release.outputs:
        data = Path(out.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != out.sha256:
            raise RuntimeError(f"output partition {out.path} changed after it was written")
        table = pq.read_table(pa.BufferReader(data))
        if table.num_rows != out.rows:
            raise RuntimeError(f"output partition {out.path} has {table.num_rows} rows, not {out.rows}")
        yield table
