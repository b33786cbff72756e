"""The work a release's charge pays for: draw the noise, write the output and the signed message —
in this process, or counting and randomizing on the labels party's Dask cluster (``cluster.py``).

Ownership, the lease, failure and recovery are every charged job's (``budget/charged_work.py``);
this module only privatizes.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.files import write_parquet_atomic, write_tables_atomic
from labeldp.common.wire.sender import Pieces
from labeldp.mechanisms import PublishedMechanism, release_labels, release_user_labels
from labeldp.mechanisms.grouped import NO_GROUP, release_grouped_labels, release_grouped_user_labels
from labeldp.scale import bin_array, output_tables, partitions_in, release_partitions
from labeldp.scale.release import ID_COLUMN, LABEL_COLUMN
from labels_party.budget.partitioned import KEY_COLUMN, USER_COLUMN
from labels_party.delivery.message import Addressee, Signer, write_message
from labels_party.releases.cluster import ReleaseCluster
from labels_party.releases.plan import Plan
from labels_party.releases.record import record_table, write_groups, write_record
from labels_party.storage.data_dir import DataDir

log = logging.getLogger("labeldp.labels.releases")


class ReleaseWork:
    """The noise, the output and the signed message of a charged release."""

    def __init__(self, data_dir: DataDir, signer: Signer, cluster: ReleaseCluster) -> None:
        self.data_dir, self.signer, self.cluster = data_dir, signer, cluster

    def privatize(self, release_id: str, plan: Plan, recipient: Addressee) -> dict[str, object]:
        """Draw the noise and write the output and the signed message; the release's columns on
        completion (``ChargedWork.run`` records them)."""
        if plan.groups is not None:
            published, capped = self._privatize_grouped(release_id, plan, recipient)
        else:
            published, capped = self._privatize(release_id, plan, recipient)
        return {
            "mechanism": published.model_dump(mode="json"),
            "examples_capped": capped if plan.user else None,
        }

    def _privatize(self, release_id: str, plan: Plan, recipient: Addressee) -> tuple[PublishedMechanism, int]:
        """Draw the noise, write the output (example_id, bin code) and the signed message. Examples
        over a user-level release's bound have the code ``m`` (no label information)."""
        if self.cluster.runs(plan):
            return self._privatize_on_cluster(release_id, plan, recipient), 0
        examples = plan.in_memory
        if plan.user is None:
            result = release_labels(
                examples.labels,
                plan.support,
                plan.epsilon,
                plan.loss,
                plan.epsilon_prior,
                objective=plan.objective,
                mechanism=plan.mechanism,
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
                objective=plan.objective,
            )
        published = result.published()
        bins = np.asarray(result.bin_indices)
        table = pa.table({"example_id": examples.ids, "bin": bin_array(bins, published.bin_codes)})
        record = record_table(examples.keys, examples.user_keys, examples.labels)
        write_record(self.data_dir, release_id, [record])
        write_parquet_atomic(self.data_dir.release(release_id), table)
        self._message(release_id, plan, recipient, published, [(examples.ids, bins)])
        return published, int(result.capped.sum())

    def _privatize_grouped(
        self, release_id: str, plan: Plan, recipient: Addressee
    ) -> tuple[PublishedMechanism, int]:
        """A feature-aware release: every example with a group randomized by its group's mechanism,
        the others by the release's own (``labeldp.mechanisms.grouped``). The output gains each
        example's ``group`` (-1: none), the group mechanisms are kept beside it, and the message
        carries both."""
        assert plan.groups is not None
        examples = plan.in_memory
        if plan.user is None:
            result = release_grouped_labels(
                examples.labels,
                plan.groups.groups,
                plan.groups.priors,
                plan.support,
                plan.epsilon,
                plan.loss,
                plan.epsilon_prior if plan.groups.fallback else None,
                objective=plan.objective,
            )
        else:
            split = plan.user.split
            result = release_grouped_user_labels(
                examples.labels,
                plan.groups.groups,
                plan.groups.priors,
                examples.user_keys,
                examples.keys,
                plan.support,
                plan.epsilon,
                plan.loss,
                plan.user.bound,
                salt=plan.user.salt,
                epsilon_prior=split.epsilon_prior,
                epsilon_bound=split.epsilon_bound if plan.user.bound == "private" else None,
                objective=plan.objective,
            )
        published = result.published()
        groups = result.published_groups()
        bins = np.asarray(result.bin_indices)
        codes = max([published.bin_codes, *(g.bin_codes for g in groups)])
        table = pa.table(
            {
                "example_id": examples.ids,
                "bin": bin_array(bins, codes),
                "group": pa.array(result.groups, pa.int16()),
            }
        )
        write_record(
            self.data_dir, release_id, [record_table(examples.keys, examples.user_keys, examples.labels)]
        )
        write_groups(self.data_dir, release_id, groups)
        write_parquet_atomic(self.data_dir.release(release_id), table)
        write_message(
            self.data_dir,
            self.signer,
            release_id=release_id,
            recipient=recipient,
            label_type=plan.spec.label_type,
            mechanism=published,
            pieces=[(examples.ids, bins, np.asarray(result.groups))],
            groups=tuple(groups),
            priors_id=plan.groups.priors_id,
        )
        capped = (np.asarray(result.groups) == NO_GROUP) & (bins >= published.m)  # over τ: no group
        return published, int(capped.sum())

    def _privatize_on_cluster(self, release_id: str, plan: Plan, recipient: Addressee) -> PublishedMechanism:
        """Counting and randomizing on the cluster's workers (``labeldp.scale``) over the partitions
        ``stage`` wrote; the prior's noise and the optimization run here, after the charge like every
        draw. The stored output and the message are streamed from the output partitions, one at a
        time, each checked against the digest its worker returned and against the examples it was
        given, in order."""
        folder = self.data_dir.partitions(release_id)
        parts = partitions_in(folder / "in")
        result = release_partitions(
            self.cluster.engine(),
            parts,
            folder / "out",
            plan.support,
            plan.epsilon,
            plan.loss,
            plan.epsilon_prior,
            plan.objective,
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
        write_record(self.data_dir, release_id, (_record_of(part) for part in parts))
        write_tables_atomic(self.data_dir.release(release_id), schema, checked())
        pieces = (
            (t.column("example_id").combine_chunks(), np.asarray(t.column("bin").to_numpy(), dtype=np.int64))
            for t in output_tables(result)
        )
        self._message(release_id, plan, recipient, published, pieces)
        shutil.rmtree(folder, ignore_errors=True)
        return published

    def _message(
        self, release_id: str, plan: Plan, recipient: Addressee, published: PublishedMechanism, pieces: Pieces
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
        self.data_dir.release(release_id).unlink(missing_ok=True)
        self.data_dir.release_record(release_id).unlink(missing_ok=True)
        self.data_dir.release_groups(release_id).unlink(missing_ok=True)
        self.data_dir.message(release_id).unlink(missing_ok=True)
        shutil.rmtree(self.data_dir.partitions(release_id), ignore_errors=True)


def _record_of(partition: str) -> pa.Table:
    """The record of one input partition (its rows are the output's, in order)."""
    t = pq.read_table(partition, columns=[KEY_COLUMN, USER_COLUMN, LABEL_COLUMN])
    return record_table(*(t.column(name).to_numpy() for name in (KEY_COLUMN, USER_COLUMN, LABEL_COLUMN)))
