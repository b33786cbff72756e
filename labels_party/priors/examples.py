"""The examples priors are asked for: by default those a release of the dataset lists (its universe when
it declares one, else its labelled examples), or a subset of them. Only IDs and ledger keys are read —
never a label: which examples are priced is a function of public data (privacy invariant 10)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.common.errors import DomainError
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.orm import Dataset

IDENTITY = ["example_id", "example_key"]


def listed_examples(
    files: DatasetFiles, ds: Dataset, subset: list[str] | None
) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """(IDs, ledger keys) in the order the dataset stores them — the rule of
    ``labels_party.releases.examples.example_set``, without reading labels."""
    universe = files.read_universe(ds.universe_version)
    base = (
        universe.select(IDENTITY) if universe is not None else files.read_labels(ds.labels_version, IDENTITY)
    )
    if subset is not None:
        wanted = pa.array(subset, pa.string())
        if len(set(subset)) != len(subset):
            raise DomainError("duplicate-example-id", "example_ids contains duplicates")
        unknown = int(pc.sum(pc.invert(pc.is_in(wanted, value_set=base.column("example_id")))).as_py() or 0)
        if unknown:
            raise DomainError("unknown-example-ids", f"{unknown} example_ids are not in the dataset")
        base = base.filter(pc.is_in(base.column("example_id"), value_set=wanted))
    if base.num_rows == 0:
        raise DomainError("empty-release", "the dataset lists no examples to price")
    ids = base.column("example_id").combine_chunks()
    return ids, np.asarray(base.column("example_key").to_numpy(), dtype=np.int64)
