"""The join report: how many example IDs a received release and a feature table have in common.

Two ways to count, one answer. In this process both ID columns are read whole and matched with a
hash set (~110 MiB per million IDs on each side). On a Dask cluster (``LABELDP_FEATURES_DASK_SCHEDULER``)
the workers read both files one row group at a time and match the IDs by an inner merge, which Dask
runs as a hash-partitioned shuffle: no process holds more than its share of either side, so the
report scales past one machine's memory. Both ID columns are unique (the receiver verifies a
release's IDs, table validation refuses duplicates), so the merge's row count is the number of IDs
in both. The cluster is used from ``CLUSTER_FROM_ROWS`` rows (both sides together); below that,
connecting to it costs more than the count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.scale import DaskEngine

log = logging.getLogger(__name__)

CLUSTER_FROM_ROWS = 20_000_000  # ≤ ~1.5 GiB here below it (BENCHMARKS.md, "join reports at scale")


@dataclass(frozen=True)
class JoinReport:
    release_examples: int
    feature_rows: int
    in_both: int
    only_in_release: int
    only_in_features: int

    @classmethod
    def of(cls, release_examples: int, feature_rows: int, in_both: int) -> JoinReport:
        return cls(
            release_examples, feature_rows, in_both, release_examples - in_both, feature_rows - in_both
        )

    @property
    def release_match_rate(self) -> float:
        return self.in_both / self.release_examples if self.release_examples else 0.0

    @property
    def feature_match_rate(self) -> float:
        return self.in_both / self.feature_rows if self.feature_rows else 0.0


def join_report(release_file: Path, table_file: Path) -> JoinReport:
    """In this process: match counts by example ID, reading only the two ID columns, each once."""
    release_ids = pq.read_table(release_file, columns=["example_id"]).column("example_id").combine_chunks()
    feature_ids = pq.read_table(table_file, columns=["example_id"]).column("example_id").combine_chunks()
    in_both = int(pc.sum(pc.is_in(release_ids, value_set=feature_ids)).as_py() or 0)
    return JoinReport.of(len(release_ids), len(feature_ids), in_both)


def join_report_on_cluster(client: Any, release_file: str, table_file: str) -> JoinReport:
    """On the cluster ``client`` is connected to; the files are paths the workers can read. Only the
    matches are counted there: each side's size is in its Parquet footer."""
    import dask.dataframe as dd

    release = dd.read_parquet(release_file, columns=["example_id"], split_row_groups=True)
    features = dd.read_parquet(table_file, columns=["example_id"], split_row_groups=True)
    with client.as_current():
        in_both = int(release.merge(features, on="example_id", how="inner").shape[0].compute())
    return JoinReport.of(rows_in(Path(release_file)), rows_in(Path(table_file)), in_both)


def rows_in(path: Path) -> int:
    """From the Parquet footer: nothing but the metadata is read."""
    return int(pq.ParquetFile(path).metadata.num_rows)


def report(release_file: Path, table_file: Path, scheduler: str | None) -> JoinReport:
    """The join report where it belongs: on the cluster when one is configured and the inputs are
    large, here otherwise (503 ``cluster-unavailable`` when the configured cluster does not answer)."""
    if scheduler is None or rows_in(release_file) + rows_in(table_file) < CLUSTER_FROM_ROWS:
        return join_report(release_file, table_file)
    try:
        engine = DaskEngine(scheduler)
    except (OSError, TimeoutError) as exc:
        log.warning("the Dask cluster did not answer", extra={"path": scheduler})
        raise DomainError(
            "cluster-unavailable", "the Dask cluster configured for joins did not answer", status=503
        ) from exc
    try:
        return join_report_on_cluster(engine.client, str(release_file), str(table_file))
    finally:
        engine.close()
