"""The work a release's charge pays for: draw the noise, write the output and the signed message —
in this process, or counting and randomizing on the labels party's Dask cluster.

Ownership, the lease, failure and recovery are every charged job's (``budget/charged_work.py``);
this module only privatizes.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.files import write_tables_atomic
from labeldp.common.wire import Pieces
from labeldp.mechanisms import PublishedMechanism, release_labels, release_user_labels
from labeldp.scale import DaskEngine, Engine, bin_array, output_tables, partitions_in, release_partitions
from labeldp.scale.release import ID_COLUMN
from labels_party.budget.partitioned import StagedKeys, stage_keys
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.message import Signer, message_path, write_message
from labels_party.releases.partitions import write_input_partitions
from labels_party.releases.plan import Plan

log = logging.getLogger("labeldp.labels.releases")


def release_path(data_dir: Path, release_id: str) -> Path:
    return data_dir / "releases" / f"{release_id}.parquet"


def partitions_path(data_dir: Path, release_id: str) -> Path:
    """Where a cluster release keeps its input and output partitions while it runs."""
    return data_dir / "partitions" / release_id


class ReleaseWork:
    def __init__(self, data_dir: Path, signer: Signer, *, scheduler: str | None = None) -> None:
        self.data_dir, self.signer = data_dir, signer
        self.scheduler = scheduler
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()

    def on_cluster(self, plan: Plan) -> bool:
        """Example-level regression releases run on the configured cluster; the others here."""
        return self.scheduler is not None and plan.user is None and plan.loss != "zero_one"

    def ready(self, plan: Plan) -> None:
        """Connect to the cluster now if the plan needs it (503 ``cluster-unavailable``, before any
        charge, when it does not answer)."""
        if self.on_cluster(plan):
            self.cluster()

    def cluster(self) -> Engine:
        with self._engine_lock:
            if self._engine is None:
                assert self.scheduler is not None
                try:
                    self._engine = DaskEngine(self.scheduler)
                except (OSError, TimeoutError) as exc:
                    log.warning("the Dask cluster did not answer", extra={"path": self.scheduler})
                    raise DomainError(
                        "cluster-unavailable",
                        "the Dask cluster configured for releases did not answer; nothing was charged",
                        status=503,
                    ) from exc
            return self._engine

    def close(self) -> None:
        with self._engine_lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None

    def stage(self, release_id: str, plan: Plan) -> StagedKeys:
        """Before a cluster release's charge: write its examples as partitions (IDs, labels, ledger keys,
        user keys) and have the workers sort the keys for the partitioned charge. Draws nothing."""
        folder = partitions_path(self.data_dir, release_id)
        parts = write_input_partitions(self.cluster(), plan, folder / "in")
        return stage_keys(self.cluster(), parts, folder / "keys")

    def discard(self, release_id: str) -> None:
        """Remove what ``stage`` wrote for a release that was not charged."""
        shutil.rmtree(partitions_path(self.data_dir, release_id), ignore_errors=True)

    def privatize(self, release_id: str, plan: Plan, recipient: str) -> dict[str, object]:
        """Draw the noise and write the output and the signed message; the release's columns on
        completion (``ChargedWork.run`` records them)."""
        published, capped = self._privatize(release_id, plan, recipient)
        return {
            "mechanism": published.model_dump(mode="json"),
            "examples_capped": capped if plan.user else None,
        }

    def _privatize(self, release_id: str, plan: Plan, recipient: str) -> tuple[PublishedMechanism, int]:
        """Draw the noise, write the output (example_id, bin code) and the signed message. Examples
        over a user-level release's bound have the code ``m`` (no label information)."""
        if self.on_cluster(plan):
            return self._privatize_on_cluster(release_id, plan, recipient), 0
        examples = plan.in_memory
        if plan.user is None:
            result = release_labels(
                examples.labels, plan.support, plan.epsilon, plan.loss, plan.epsilon_prior
            )
        else:
            split = plan.user.split
            result = release_user_labels(
                examples.labels,
                examples.user_keys,
                examples.keys,
                plan.support,
                plan.epsilon,
                plan.loss,
                plan.user.bound,
                salt=plan.user.salt,
                epsilon_prior=split.epsilon_prior,
                epsilon_bound=split.epsilon_bound if plan.user.bound == "private" else None,
            )
        published = result.published()
        bins = np.asarray(result.bin_indices)
        table = pa.table({"example_id": examples.ids, "bin": bin_array(bins, published.bin_codes)})
        DatasetFiles(self.data_dir, plan.dataset_id).write(release_path(self.data_dir, release_id), table)
        self._message(release_id, plan, recipient, published, [(examples.ids, bins)])
        return published, int(result.capped.sum())

    def _privatize_on_cluster(self, release_id: str, plan: Plan, recipient: str) -> PublishedMechanism:
        """Counting and randomizing on the cluster's workers (``labeldp.scale``) over the partitions
        ``stage`` wrote; the prior's noise and the optimization run here, after the charge like every
        draw. The stored output and the message are streamed from the output partitions, one at a
        time, each checked against the digest its worker returned and against the examples it was
        given, in order."""
        folder = partitions_path(self.data_dir, release_id)
        parts = partitions_in(folder / "in")
        result = release_partitions(
            self.cluster(), parts, folder / "out", plan.support, plan.epsilon, plan.loss, plan.epsilon_prior
        )
        published = result.published()

        def checked() -> Iterator[pa.Table]:
            at = 0
            for part, table in zip(parts, output_tables(result), strict=True):
                given = pq.read_table(part, columns=[ID_COLUMN]).column(ID_COLUMN)
                if not table.column(ID_COLUMN).equals(given):
                    raise RuntimeError("an output partition does not list its input's examples in order")
                at += table.num_rows
                yield table
            if at != plan.examples.n:
                raise RuntimeError("the output partitions do not cover the release's examples")

        schema = pq.read_schema(result.outputs[0].path)
        write_tables_atomic(release_path(self.data_dir, release_id), schema, checked())
        pieces = (
            (t.column("example_id").combine_chunks(), np.asarray(t.column("bin").to_numpy(), dtype=np.int64))
            for t in output_tables(result)
        )
        self._message(release_id, plan, recipient, published, pieces)
        shutil.rmtree(folder, ignore_errors=True)
        return published

    def _message(
        self, release_id: str, plan: Plan, recipient: str, published: PublishedMechanism, pieces: Pieces
    ) -> None:
        write_message(
            self.data_dir,
            self.signer,
            release_id=release_id,
            recipient=recipient,
            label_type=plan.spec.label_type,
            mechanism=published,
            pieces=pieces,
        )

    def remove_outputs(self, release_id: str) -> None:
        """Whatever a release that did not complete may have written."""
        release_path(self.data_dir, release_id).unlink(missing_ok=True)
        message_path(self.data_dir, release_id).unlink(missing_ok=True)
        shutil.rmtree(partitions_path(self.data_dir, release_id), ignore_errors=True)
