"""Scale-out: label releases over partitioned Parquet, on this process or a Dask cluster."""

from labeldp.scale.engine import LOCAL, DaskEngine, Engine, InProcess, engine_for
from labeldp.scale.release import (
    PartitionedRelease,
    PartitionOutput,
    bin_array,
    output_tables,
    partitions_in,
    release_partitions,
    write_partitions,
)

__all__ = [
    "LOCAL",
    "DaskEngine",
    "Engine",
    "InProcess",
    "PartitionOutput",
    "PartitionedRelease",
    "bin_array",
    "engine_for",
    "output_tables",
    "partitions_in",
    "release_partitions",
    "write_partitions",
]
