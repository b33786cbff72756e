"""One path for every job that charges the budget (a release, a semi-sensitive model, whatever comes
next): find, replay, insert and charge, claim, work under a lease, complete, fail, recover.

The order is the privacy invariants' (docs/architecture.md, invariants 1, 7 and 11):

1. **Find / replay.** A request whose Idempotency-Key already names a job gets that job back (the same
   request once resolved: ``idempotency.py``) or 422 ``idempotency-key-reused`` naming the fields that
   differ; nothing is charged again.
2. **Admit.** The caller has planned everything outside any transaction (reading files, calibrating
   noise): the write transaction holds only the charge. It takes the tenant's ledger lock *first*,
   inserts the job (the key's unique constraint fires here: a concurrent twin loses and gets the
   winner's job), charges the ledger, stamps the job with this process as its owner and a lease, and
   commits — the job and its charge together or not at all.
3. **Work** (every draw happens only now): under a heartbeat that extends the lease, then a status
   guard ``charged → complete``; a failure marks the job ``failed`` and records that the charge
   stands (noise may have been drawn).
4. **Recover.** Every process, at start-up and periodically, fails the ``charged`` jobs whose owner is
   certainly gone (same host) or whose lease expired, once, under the same status guard, recording the
   kept charge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import CursorResult, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from labeldp.common.db import utcnow
from labeldp.common.instance import Instance
from labeldp.common.leases import abandoned, heartbeat
from labels_party.budget.idempotency import Fingerprint
from labels_party.budget.ledger import Charging, Ledger, record_kept_charge
from labels_party.storage.orm import ChargedJob

log = logging.getLogger("labeldp.labels.charged")
INTERRUPTED = "interrupted before completion; the charge is kept (noise may have been drawn)"

Row = TypeVar("Row", bound=ChargedJob)


class ChargedWork(Generic[Row]):
    """The charged jobs of one kind (``model``: the ORM class). ``remove_outputs`` deletes whatever a
    failed or recovered job of this kind may have written; ``on_charged`` hears of each committed
    charge (its tenant), e.g. to refresh what readers keep of the spend."""

    def __init__(
        self,
        ledger: Ledger,
        model: type[Row],
        instance: Instance,
        lease_seconds: float,
        *,
        name: str,
        remove_outputs: Callable[[str], None],
        on_charged: Callable[[str], None] = lambda _tenant: None,
    ) -> None:
        self.ledger, self.model, self.instance = ledger, model, instance
        self.lease = timedelta(seconds=lease_seconds)
        self.name, self.remove_outputs, self.on_charged = name, remove_outputs, on_charged

    # -- 1. find and replay --------------------------------------------------------------------------
    def find(self, tenant_id: str, key: str, request: Fingerprint) -> Row | None:
        """The job this Idempotency-Key already names (checked against the resolved request)."""
        with self.ledger.sessions() as session:
            existing = session.execute(
                select(self.model).where(self.model.tenant_id == tenant_id, self.model.idempotency_key == key)
            ).scalar_one_or_none()
        return None if existing is None else self.replay(existing, request)

    @staticmethod
    def replay(existing: Row, request: Fingerprint) -> Row:
        if not request.matches(existing.request_hash):
            raise request.refuse(existing.request)
        return existing

    @staticmethod
    def stamp(row: Row, request: Fingerprint) -> None:
        """A new job keeps the resolved request its key is held to."""
        row.request_hash, row.request = request.digest, request.fields

    def winner(self, row: Row) -> Row | None:
        """After a new job's insert lost the key's unique constraint: the job that won it (if its
        request is this one's; else 422 ``idempotency-key-reused``)."""
        return self.find(row.tenant_id, row.idempotency_key, Fingerprint(row.request or {}))

    # -- 2. admit: insert and charge in one transaction ----------------------------------------------
    def claim(self, row: Row) -> None:
        """Stamp a job (before its charge commits) as this process's work."""
        row.owner = self.instance.token
        row.lease_expires_at = utcnow() + self.lease

    def insert(self, session: Session, row: Row) -> None:
        """Add a new job in the caller's transaction, owned by this process (the Idempotency-Key's
        unique constraint fires here)."""
        self.claim(row)
        session.add(row)
        session.flush()

    def admit(self, row: Row, charge: Callable[[Charging, Row], None]) -> tuple[Row, bool]:
        """Insert ``row`` and ``charge`` for it in one transaction that took the tenant's ledger lock
        first: ``(row, True)``. When a concurrent request with the same key won, its job and False."""
        try:
            with self.ledger.transaction(row.tenant_id) as tx:
                self.insert(tx.session, row)
                charge(tx, row)
                self.claim(row)  # again: the lease starts at the commit, however long the charge took
        except IntegrityError:
            existing = self.winner(row)
            if existing is None:
                raise
            return existing, False
        self.on_charged(row.tenant_id)
        return row, True

    def get(self, row_id: str) -> Row:
        with self.ledger.sessions() as session:
            row = session.get(self.model, row_id)
            assert row is not None  # charged jobs are never deleted
            return row

    # -- 3. work under a lease ---------------------------------------------------------------------
    def heartbeat(self, row_id: str) -> AbstractContextManager[None]:
        """Extend the lease every third of its length while the work runs."""
        model = self.model

        def beat() -> None:
            with self.ledger.sessions.begin() as s:
                s.execute(
                    update(model)
                    .where(model.id == row_id, model.status == "charged", model.owner == self.instance.token)
                    .values(lease_expires_at=utcnow() + self.lease)
                )

        return heartbeat(self.lease.total_seconds() / 3, beat, f"lease-{row_id[:8]}")

    def run(self, row_id: str, work: Callable[[], dict[str, Any]]) -> Row:
        """Do a charged job's work under its lease and mark it complete with the column values
        ``work`` returns; a failure is recorded (the charge stays) and re-raised. Returns the job as
        it ended."""
        try:
            with self.heartbeat(row_id):
                values = work()
        except Exception as exc:
            log.exception(f"{self.name} failed after its charge", extra={"release_id": row_id})
            self.fail(
                row_id, f"{type(exc).__name__}: {exc}"[:2000], f"{self.name} failed: {type(exc).__name__}"
            )
            self.remove_outputs(row_id)
            raise
        if not self.complete(row_id, **values):  # recovered by another process while this one stalled
            log.warning(f"{self.name} was recovered before it completed", extra={"release_id": row_id})
            self.remove_outputs(row_id)
        return self.get(row_id)

    def complete(self, row_id: str, **values: Any) -> bool:
        """``charged → complete`` with ``values``, unless recovery got there first."""
        with self.ledger.sessions.begin() as session:
            result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                update(self.model)
                .where(self.model.id == row_id, self.model.status == "charged")
                .values(status="complete", completed_at=utcnow(), **values)
            )
            return bool(result.rowcount)

    def fail(self, row_id: str, error: str, note: str) -> bool:
        """``charged → failed``, recording that the charge stands — once, whoever gets there first."""
        with self.ledger.sessions.begin() as session:
            row = session.execute(
                select(self.model)
                .where(self.model.id == row_id, self.model.status == "charged")
                .with_for_update()
            ).scalar_one_or_none()
            if row is None:
                return False
            row.status, row.error = "failed", error
            record_kept_charge(session, row.tenant_id, row.id, row.charged_micro, row.examples, note)
            return True

    # -- 4. recovery ---------------------------------------------------------------------------------
    def recover(self) -> int:
        """Fail the charged jobs whose owner is gone or whose lease expired; returns how many."""
        now = utcnow()
        with self.ledger.sessions() as session:
            candidates = session.execute(
                select(self.model.id, self.model.owner, self.model.lease_expires_at).where(
                    self.model.status == "charged"
                )
            ).all()
        stale = [row_id for row_id, owner, lease in candidates if abandoned(owner, lease, self.instance, now)]
        recovered = 0
        for row_id in stale:
            if self.fail(row_id, INTERRUPTED, "owner gone: " + INTERRUPTED):
                self.remove_outputs(row_id)
                recovered += 1
        return recovered
