"""A cluster release's input partitions: (example ID, label, ledger key, user key), one Parquet file per
about a million examples, in the order the message will list them.

A plan whose examples the dataset stores as they are (``StoredExamples``) is partitioned by the
workers straight from the labels file, whole row groups at a time, so the labels party never holds the
examples; a plan built in memory (a universe or a subset decided the examples) is written from here.
Either way nothing is drawn: this runs before the charge.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.files import write_parquet_atomic
from labeldp.scale import Engine, write_partitions
from labeldp.scale.release import ID_COLUMN, LABEL_COLUMN
from labels_party.budget.ledger_keys import user_keys
from labels_party.budget.partitioned import KEY_COLUMN, USER_COLUMN
from labels_party.releases.examples import ExampleSet, StoredExamples
from labels_party.releases.plan import Plan


def partition_stored(path: str, row_groups: list[int], out: str) -> int:
    """On a worker: one input partition from whole row groups of a stored labels file."""
    table = pq.ParquetFile(path).read_row_groups(
        row_groups, columns=["example_id", "example_key", "label", "user_id"]
    )
    keys = np.asarray(table.column("example_key").to_numpy(), dtype=np.int64)
    partition = pa.table(
        {
            ID_COLUMN: table.column("example_id"),
            LABEL_COLUMN: pa.array(table.column("label").to_numpy(), pa.float64()),
            KEY_COLUMN: pa.array(keys, pa.int64()),
            USER_COLUMN: pa.array(user_keys(table.column("user_id").combine_chunks(), keys), pa.int64()),
        }
    )
    write_parquet_atomic(Path(out), partition)
    return partition.num_rows


def write_input_partitions(engine: Engine, plan: Plan, folder: Path) -> list[str]:
    """The plan's examples as input partitions under ``folder``, in message order."""
    examples = plan.examples
    if isinstance(examples, StoredExamples):
        outs = [str(folder / f"part-{i:05d}.parquet") for i in range(len(examples.groups))]
        rows = engine.map(partition_stored, [str(examples.path)] * len(outs), examples.groups, outs)
        if sum(rows) != examples.n:
            raise RuntimeError("the labels file changed while it was partitioned")
        return outs
    assert isinstance(examples, ExampleSet)
    extra = {KEY_COLUMN: examples.keys, USER_COLUMN: examples.user_keys}
    return write_partitions(folder, examples.ids, examples.labels, extra=extra)
