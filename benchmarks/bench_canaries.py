"""The black-box ε check against a live labels party (``labeldp audit epsilon``): 10⁶ canaries.

A real labels party (``labeldp labels serve`` in its own process, SQLite) receives 10⁶ binary canaries,
releases them once at ε, and the Clopper–Pearson lower bound (α = 1e-6) is compared with the release's
implemented ε: it must stay below it and come within 10%. Measured: the bound, its ratio to ε, and
the wall time of the whole check (upload, charge, release, download, bound).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import write
from labeldp.audit.canaries import canary_audit
from labeldp.client import LabelsClient
from labels_party.storage.db import sqlite_url
from tests.support.servers import LabelsProcess, tenant_key

EPSILONS = (0.5, 1.0, 2.0, 4.0)
CANARIES = 1_000_000


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="labeldp-bench-canaries-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        url = sqlite_url(data)
        _, key = tenant_key(url, "auditor", str(sum(EPSILONS) + 1))
        server = LabelsProcess(data, url, Path(tmp) / "server.log")
        server.start()
        try:
            httpx.post(
                f"{server.base_url}/v1/recipients",
                json={"name": "publisher"},
                headers={"Authorization": f"Bearer {key}"},
            ).raise_for_status()
            with LabelsClient(server.base_url, key) as client:
                for eps in EPSILONS:
                    start = time.perf_counter()
                    result = canary_audit(client, "publisher", eps, CANARIES, 1e-6)
                    rows.append({**result.as_dict(), "seconds": time.perf_counter() - start})
        finally:
            server.stop()
    lines = [
        f"{CANARIES:,} binary canaries per check, α = 1e-6, a live labels party (SQLite) in its own process.",
        "",
        "| ε | implemented ε | lower bound | bound / implemented | passed | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['epsilon']:g} | {r['implemented_epsilon']:.4f} | {r['epsilon_low']:.4f} | "
            f"{r['epsilon_low'] / r['implemented_epsilon']:.3f} | {r['passed']} | {r['seconds']:.1f} |"
        )
    write("canaries", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
