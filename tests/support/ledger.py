"""The segment store of ledger tests whose charges all run in process: the ledger requires one, and
no shard of theirs ever moves into a segment file, so nothing is written under it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from labels_party.budget.segments import SegmentStore

SEGMENTS = SegmentStore(Path(tempfile.gettempdir()) / "labeldp-tests-in-process-ledger")
