"""The work after a release's charge: draw the noise, write the output and the signed message, and
finish — under a lease, so that several processes can share one database safely.

A charged release records its owner (``Instance.token``) and a lease that the owner's heartbeat keeps
extending while it works. Recovery, which every process runs at start-up and then periodically, only
fails a ``charged`` release whose owner is certainly gone (same host, process no longer running) or
whose lease has expired; every state change is guarded by the status it expects, so a slow owner and
a recovering process can never both record the outcome, and a charge is never recorded twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import utcnow
from labeldp.common.instance import Instance
from labeldp.mechanisms import PublishedMechanism, release_labels, release_user_labels
from labels_party.budget.ledger import record_kept_charge
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.message import Signer, message_path, write_message
from labels_party.releases.plan import Plan
from labels_party.storage.orm import Release

log = logging.getLogger("labeldp.labels.releases")
INTERRUPTED = "interrupted before completion; the charge is kept (noise may have been drawn)"


def release_path(data_dir: Path, release_id: str) -> Path:
    return data_dir / "releases" / f"{release_id}.parquet"


class ReleaseWork:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: Path,
        signer: Signer,
        instance: Instance,
        lease_seconds: float,
    ) -> None:
        self.sessions, self.data_dir, self.signer = sessions, data_dir, signer
        self.instance, self.lease = instance, timedelta(seconds=lease_seconds)

    def claim(self, release: Release) -> None:
        """Stamp a new release (before its charge commits) as this process's work."""
        release.owner = self.instance.token
        release.lease_expires_at = utcnow() + self.lease

    @contextmanager
    def heartbeat(self, release_id: str) -> Iterator[None]:
        """Extend the lease every third of its length while the work runs."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.lease.total_seconds() / 3):
                try:
                    with self.sessions.begin() as s:
                        s.execute(
                            update(Release)
                            .where(
                                Release.id == release_id,
                                Release.status == "charged",
                                Release.owner == self.instance.token,
                            )
                            .values(lease_expires_at=utcnow() + self.lease)
                        )
                except Exception:  # a missed beat only shortens the lease; the next one retries
                    log.exception("lease heartbeat failed", extra={"release_id": release_id})

        thread = threading.Thread(target=beat, daemon=True, name=f"lease-{release_id[:8]}")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    def run(self, release_id: str, plan: Plan, recipient: str) -> Release:
        """Privatize and finish a charged release; a failure is recorded (the charge stays) and
        re-raised. Returns the release as it ended."""
        try:
            with self.heartbeat(release_id):
                published, capped = self._privatize(release_id, plan, recipient)
        except Exception as exc:
            log.exception("release failed after its charge", extra={"release_id": release_id})
            self._fail(
                release_id, f"{type(exc).__name__}: {exc}"[:2000], f"release failed: {type(exc).__name__}"
            )
            self._remove_outputs(release_id)
            raise
        with self.sessions.begin() as session:
            result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                update(Release)
                .where(Release.id == release_id, Release.status == "charged")
                .values(
                    status="complete",
                    mechanism=published.model_dump(mode="json"),
                    examples_capped=capped if plan.user else None,
                    completed_at=utcnow(),
                )
            )
            done = result.rowcount
        if not done:  # recovered by another process while this one was stalled: its record stands
            log.warning("release was recovered before it completed", extra={"release_id": release_id})
            self._remove_outputs(release_id)
        with self.sessions() as session:
            ended = session.get(Release, release_id)
            assert ended is not None
            return ended

    def _privatize(self, release_id: str, plan: Plan, recipient: str) -> tuple[PublishedMechanism, int]:
        """Draw the noise, write the output (example_id, bin code) and the signed message. Examples
        over a user-level release's bound have the code ``m`` (no label information)."""
        if plan.user is None:
            result = release_labels(
                plan.examples.labels, plan.support, plan.epsilon, plan.loss, plan.epsilon_prior
            )
        else:
            split = plan.user.split
            result = release_user_labels(
                plan.examples.labels,
                plan.examples.user_keys,
                plan.examples.keys,
                plan.support,
                plan.epsilon,
                plan.loss,
                plan.user.bound,
                salt=plan.user.salt,
                epsilon_prior=split.epsilon_prior,
                epsilon_bound=split.epsilon_bound if plan.user.bound == "private" else None,
            )
        published = result.published()
        dtype = pa.uint8() if published.bin_codes <= 256 else pa.uint16()
        table = pa.table({"example_id": plan.examples.ids, "bin": pa.array(result.bin_indices, dtype)})
        DatasetFiles(self.data_dir, plan.dataset_id).write(release_path(self.data_dir, release_id), table)
        write_message(
            self.data_dir,
            self.signer,
            release_id=release_id,
            recipient=recipient,
            label_type=plan.spec.label_type,
            mechanism=published,
            example_ids=plan.examples.ids,
            bins=np.asarray(result.bin_indices),
        )
        return published, int(result.capped.sum())

    def _fail(self, release_id: str, error: str, note: str) -> bool:
        """Mark a charged release failed and record that its charge stands — once, whoever gets there
        first (the status guard)."""
        with self.sessions.begin() as session:
            row = session.execute(
                select(Release).where(Release.id == release_id, Release.status == "charged").with_for_update()
            ).scalar_one_or_none()
            if row is None:
                return False
            row.status, row.error = "failed", error
            record_kept_charge(session, row.tenant_id, row.id, row.epsilon_micro, row.examples, note)
            return True

    def _remove_outputs(self, release_id: str) -> None:
        release_path(self.data_dir, release_id).unlink(missing_ok=True)
        message_path(self.data_dir, release_id).unlink(missing_ok=True)

    def recover(self) -> int:
        """Fail the charged releases whose owner is gone or whose lease expired; returns how many."""
        now = utcnow()
        with self.sessions() as session:
            candidates = session.execute(
                select(Release.id, Release.owner, Release.lease_expires_at).where(Release.status == "charged")
            ).all()
        stale = [
            rid
            for rid, owner, lease in candidates
            if owner != self.instance.token
            and (lease is None or lease < now or self.instance.owner_is_gone(owner))
        ]
        recovered = 0
        for rid in stale:
            if self._fail(rid, INTERRUPTED, "owner gone: " + INTERRUPTED):
                self._remove_outputs(rid)
                recovered += 1
        return recovered
