"""The segment store of ledger tests whose charges all run in process: the ledger requires one, and
no shard of theirs ever moves into a segment file, so nothing is written under it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import Engine

from labels_party.budget.epsilon import to_micro_floor
from labels_party.budget.segments import SegmentStore
from labels_party.storage.db import session_factory
from labels_party.tenants import create_tenant

SEGMENTS = SegmentStore(Path(tempfile.gettempdir()) / "labeldp-tests-in-process-ledger")


def new_tenant(engine: Engine, budget: str, name: str = "acme") -> str:
    with session_factory(engine).begin() as s:
        return create_tenant(s, name, to_micro_floor(budget)).tenant_id
