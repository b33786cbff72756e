"""Charging the ledger for 1M and 10M examples, on SQLite and on a throwaway PostgreSQL cluster.

Each size is charged twice: first on fresh examples (rows inserted), then again on the same
examples (rows updated), each in one transaction including the budget check and the commit.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import timed, write
from labels_party.budget.ledger import UserCharge, charge
from labels_party.budget.segments import SegmentStore
from labels_party.storage.db import make_engine, migrate, session_factory, sqlite_url
from labels_party.tenants import create_tenant
from tests.support import postgres

SIZES = (1_000_000, 10_000_000)
TARGETS = {1_000_000: 3.0, 10_000_000: 60.0}


def measure(url: str, backend: str, sizes: tuple[int, ...]) -> list[dict[str, object]]:
    engine = make_engine(url)
    migrate(engine)
    sessions = session_factory(engine)
    rows: list[dict[str, object]] = []
    keys_rng = np.random.default_rng(7)  # benchmark-only: synthetic example keys
    for n in sizes:
        with sessions.begin() as s:
            tenant = create_tenant(s, f"bench-{backend}-{n}", 10_000_000).tenant_id
        keys = np.unique(keys_rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64))
        for phase in ("insert", "update", "update + users"):

            def run(keys: np.ndarray = keys, tenant: str = tenant, phase: str = phase) -> None:
                users = UserCharge.of_examples(keys ^ 0x5A5A, 100_000) if "users" in phase else None
                with sessions.begin() as s:
                    charge(
                        s,
                        tenant,
                        keys,
                        100_000,
                        users=users,
                        release_id=None,
                        api_key_id=None,
                        note=phase,
                        store=SegmentStore(Path(tempfile.gettempdir()) / "bench-ledger-unused"),
                    )

            seconds, _ = timed(run)
            rows.append({"backend": backend, "examples": n, "phase": phase, "seconds": seconds})
            print(rows[-1], flush=True)
    engine.dispose()
    return rows


def main(sizes: tuple[int, ...] = SIZES) -> None:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += measure(sqlite_url(Path(tmp)), "SQLite (WAL, synchronous=FULL)", sizes)
    with postgres.cluster() as url:
        rows += measure(url, "PostgreSQL 15 (local, fsync off)", sizes)
    lines = ["| backend | examples | phase | seconds | target |", "|---|---|---|---|---|"]
    for r in rows:
        n = int(str(r["examples"]))
        lines.append(
            f"| {r['backend']} | {n:,} | {r['phase']} | {float(str(r['seconds'])):.2f} | ≤ {TARGETS[n]:g} |"
        )
    write("ledger", "\n".join(lines), rows)


if __name__ == "__main__":
    main(tuple(int(a) for a in sys.argv[1:]) or SIZES)
