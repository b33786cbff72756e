"""Reads under load: Locust (headless) against both parties on SQLite and PostgreSQL, each party in its
own process as ``labeldp … serve`` runs it.

For each party and database: 16 Locust users read (the labels party: datasets, one dataset, its budget,
the ledger, the health check; the features party: feature tables, one table, received releases, models,
the health check) for ``SECONDS``, first alone, then while a writer in this process keeps uploading
1M-row files (the labels party: labels, then a preview and a release of a small dataset; the features
party: a 1M-row feature table). Twice: paced at 10 requests a second per user (160 req/s, an open
load: the latency a client sees) and as fast as answers come (a closed loop: the capacity; its latency
is mostly queueing, p95 ~ users / throughput). Reported: requests per second, the p50/p95/p99 latency
of the reads (Locust's own percentiles), failures, and the writer's operations.

Then the budget route alone at 1M and 10M examples: the first ask (computed from every covered
example), the first after a release (the charge changed the spend; the histogram readers asked for is
refreshed in the background after it) and the next 30 (answered from the kept histograms).

``python -m benchmarks.bench_load [--code DIR] [--label NAME] [--budget-sizes 1000000,10000000]``:
``--code`` serves the parties from another checkout (e.g. the commit before a change) with this
benchmark's driver, so both runs load the same way.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import write
from labeldp.processes import FeaturesProcess, LabelsProcess
from tests.support import postgres

HERE = Path(__file__).resolve().parent
USERS = 16
SECONDS = 30
WRITER_ROWS = 1_000_000
PACE = 10  # requests a second per Locust user in the paced mix: 160 req/s, below either party's capacity
WRITES = {"labels": "with uploads and releases", "features": "with table uploads"}


@contextmanager
def database(kind: str, root: Path, party: str) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{root / f'{party}.db'}"
        return
    with postgres.cluster() as server:
        yield postgres.create_database(server, party)


def older(code: Path) -> dict[str, str]:
    """Run another checkout's code: first on the path, and the working directory not on it at all."""
    return {"PYTHONPATH": str(code), "PYTHONSAFEPATH": "1"}


def labels_process(root: Path, url: str, code: Path | None) -> LabelsProcess:
    env = {
        "LABELDP_DATA_DIR": str(root / "labels"),
        "LABELDP_DATABASE_URL": url,
        "LABELDP_LOG_LEVEL": "warning",
    }
    if code is not None:
        env.update(older(code))
    return LabelsProcess(env)


def features_process(root: Path, url: str, code: Path | None) -> FeaturesProcess:
    env = {
        "LABELDP_FEATURES_DATA_DIR": str(root / "features"),
        "LABELDP_FEATURES_DATABASE_URL": url,
        "LABELDP_FEATURES_LOG_LEVEL": "warning",
        "LABELDP_FEATURES_GRPC_PORT": "0",
        "LABELDP_FEATURES_ALLOW_PLAINTEXT": "true",
    }
    if code is not None:
        env.update(older(code))
    return FeaturesProcess(env)


def labels_csv(n: int, prefix: str) -> bytes:
    return ("example_id,label\n" + "".join(f"{prefix}{i},{i % 53}\n" for i in range(n))).encode()


def features_parquet(n: int) -> bytes:
    rng = np.random.default_rng(0)  # benchmark data only
    sink = io.BytesIO()
    table = pa.table(
        {"example_id": [f"f{i}" for i in range(n)], "x": rng.normal(size=n), "y": rng.normal(size=n)}
    )
    pq.write_table(table, sink)
    return sink.getvalue()


def run_locust(locustfile: str, base: str, env: dict[str, str], folder: Path) -> dict[str, float]:
    """Locust headless for ``SECONDS``; the aggregated read stats."""
    prefix = folder / "locust"
    subprocess.run(
        [
            str(Path(sys.executable).parent / "locust"),
            *f"--headless -u {USERS} -r {USERS} -t {SECONDS}s --only-summary --loglevel WARNING".split(),
            *["-f", str(HERE / "load" / locustfile), "--host", base, "--csv", str(prefix)],
        ],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    with open(f"{prefix}_stats.csv") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    total = rows["Aggregated"]
    return {
        "requests": float(total["Request Count"]),
        "failures": float(total["Failure Count"]),
        "rps": float(total["Requests/s"]),
        "p50_ms": float(total["50%"]),
        "p95_ms": float(total["95%"]),
        "p99_ms": float(total["99%"]),
    }


def measure(
    party: str, kind: str, locustfile: str, base: str, env: dict[str, str], folder: Path, write: Any
) -> list[dict[str, Any]]:
    """The read mix paced (``PACE`` requests a second per user) and saturating, each alone and then
    while ``write`` runs in a loop."""
    rows: list[dict[str, Any]] = []
    for pace in (PACE, 0):
        mix = f"{USERS * pace} req/s" if pace else "saturating"
        alone = run_locust(locustfile, base, {**env, "LOAD_RATE": str(pace)}, folder)
        rows.append({"party": party, "database": kind, "reads": mix, "load": "alone", **alone})
        with Writer(write) as writer:
            loaded = run_locust(locustfile, base, {**env, "LOAD_RATE": str(pace)}, folder)
        rows.append(
            {
                "party": party,
                "database": kind,
                "reads": mix,
                "load": WRITES[party],
                **loaded,
                "writes": writer.done,
                "write_failures": writer.failed,
            }
        )
        print(rows[-2:], flush=True)
    return rows


class Writer:
    """Keeps writing until stopped: ``step`` once per loop; counts what it did and its failures."""

    def __init__(self, step: Any) -> None:
        self.step, self.done, self.failed = step, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
                self.done += 1
            except Exception:
                self.failed += 1

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=600)


def labels_run(kind: str, code: Path | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="labeldp-load-") as tmp:
        root = Path(tmp)
        (root / "labels").mkdir()
        with database(kind, root, "labels") as url:
            server = labels_process(root, url, code)
            key = cli_key(server.env, "labels", "load", "--epsilon-per-example", "1000000")
            server.start()
            try:
                c = httpx.Client(
                    base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=600
                )
                c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
                spec = {"label_type": "count", "lo": 0, "hi": 52}
                read = c.post("/v1/datasets", json={"name": "read", **spec}).json()["id"]
                c.put(
                    f"/v1/datasets/{read}/labels",
                    content=labels_csv(10_000, "r"),
                    headers={"Content-Type": "text/csv"},
                ).raise_for_status()
                big = c.post("/v1/datasets", json={"name": "big", **spec}).json()["id"]
                small = c.post("/v1/datasets", json={"name": "small", **spec}).json()["id"]
                c.put(
                    f"/v1/datasets/{small}/labels",
                    content=labels_csv(10_000, "s"),
                    headers={"Content-Type": "text/csv"},
                ).raise_for_status()
                body = labels_csv(WRITER_ROWS, "b")
                env = {"LOAD_API_KEY": key, "LOAD_DATASET": read}
                counter = iter(range(10**9))

                def write_once() -> None:
                    c.put(
                        f"/v1/datasets/{big}/labels", content=body, headers={"Content-Type": "text/csv"}
                    ).raise_for_status()
                    c.post(
                        f"/v1/datasets/{small}/releases:preview",
                        json={"epsilon": 0.01, "recipient": "publisher", "mechanism": "rr_on_bins"},
                    ).raise_for_status()
                    c.post(
                        f"/v1/datasets/{small}/releases",
                        json={"epsilon": 0.001, "recipient": "publisher", "mechanism": "rr_on_bins"},
                        headers={"Idempotency-Key": f"w{next(counter)}"},
                    ).raise_for_status()

                rows += measure("labels", kind, "labels_reads.py", server.base_url, env, root, write_once)
            finally:
                server.stop()
    return rows


def features_run(kind: str, code: Path | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="labeldp-load-") as tmp:
        root = Path(tmp)
        (root / "features").mkdir()
        with database(kind, root, "features") as url:
            server = features_process(root, url, code)
            server.start()
            try:
                key = cli_key(server.env, "features", "load")
                c = httpx.Client(
                    base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=600
                )
                ptype = {"Content-Type": "application/vnd.apache.parquet"}
                c.put(
                    "/v1/feature-tables/read", content=features_parquet(10_000), headers=ptype
                ).raise_for_status()
                body = features_parquet(WRITER_ROWS)
                env = {"LOAD_API_KEY": key, "LOAD_TABLE": "read"}

                def write_once() -> None:
                    c.put("/v1/feature-tables/big", content=body, headers=ptype).raise_for_status()

                rows += measure("features", kind, "features_reads.py", server.base_url, env, root, write_once)
            finally:
                server.stop()
    return rows


def cli_key(env: dict[str, str], party: str, name: str, *options: str) -> str:
    """A tenant created by the CLI of the code under test (its own migrations), over the server's
    database and data directory; its bearer key."""
    with tempfile.TemporaryDirectory() as tmp:
        key_file = Path(tmp) / "key"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "labeldp.cli",
                party,
                "tenant",
                "create",
                name,
                "--key-file",
                str(key_file),
                *options,
            ],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        return key_file.read_text().strip()


def budget_run(sizes: list[int], code: Path | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="labeldp-load-") as tmp:
        root = Path(tmp)
        (root / "labels").mkdir()
        url = f"sqlite:///{root / 'labels.db'}"
        server = labels_process(root, url, code)
        key = cli_key(server.env, "labels", "budget", "--epsilon-per-example", "1000000")
        server.start()
        try:
            c = httpx.Client(
                base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=1800
            )
            c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
            for n in sizes:
                ds = c.post(
                    "/v1/datasets", json={"name": f"n{n}", "label_type": "count", "lo": 0, "hi": 52}
                ).json()["id"]
                path = root / f"labels-{n}.parquet"
                i = np.arange(n)
                pq.write_table(
                    pa.table({"example_id": pa.array([f"n{n}-{j}" for j in range(n)]), "label": i % 53}), path
                )
                with open(path, "rb") as fh:
                    c.put(
                        f"/v1/datasets/{ds}/labels",
                        content=fh,
                        headers={"Content-Type": "application/vnd.apache.parquet"},
                    ).raise_for_status()
                path.unlink()

                def ask(ds: str = ds) -> float:
                    start = time.perf_counter()
                    c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).raise_for_status()
                    return 1000 * (time.perf_counter() - start)

                cold = ask()  # nothing kept yet: computed from every covered example
                c.post(
                    f"/v1/datasets/{ds}/releases",
                    json={"epsilon": 0.5, "recipient": "publisher", "mechanism": "rr_on_bins"},
                    headers={"Idempotency-Key": f"b{n}"},
                ).raise_for_status()
                after = ask()  # the charge changed the spend: refreshed in the background meanwhile?
                rest = sorted(ask() for _ in range(30))
                rows.append(
                    {
                        "examples": n,
                        "cold_ms": cold,
                        "after_release_ms": after,
                        "p50_ms": statistics.median(rest),
                        "p95_ms": rest[int(0.95 * (len(rest) - 1))],
                    }
                )
                print(rows[-1], flush=True)
        finally:
            server.stop()
    return rows


def markdown(label: str, load: list[dict[str, Any]], budget: list[dict[str, Any]]) -> str:
    lines = [
        f"**{label}**: {USERS} Locust users, {SECONDS} s a row; the writer uploads {WRITER_ROWS:,} rows.",
        "",
        "| party | database | reads | load | requests/s | p50 ms | p95 ms | p99 ms | failed | writer ops |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in load:
        writes = f"{r['writes']} ({r['write_failures']} failed)" if "writes" in r else "–"
        lines.append(
            f"| {r['party']} | {r['database']} | {r['reads']} | {r['load']} | {r['rps']:.0f} | "
            f"{r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['failures']:.0f} | {writes} |"
        )
    if budget:
        lines += [
            "",
            "| budget route, examples | first ask, ms | first after a release, ms | next 30: p50 / p95, ms |",
            "|---:|---:|---:|---:|",
        ]
        for b in budget:
            lines.append(
                f"| {b['examples']:,} | {b['cold_ms']:.0f} | {b['after_release_ms']:.1f} | "
                f"{b['p50_ms']:.1f} / {b['p95_ms']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, default=None)
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--budget-sizes", default="1000000,10000000")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args(argv if argv is not None else [])
    globals()["SECONDS"] = args.seconds
    load: list[dict[str, Any]] = []
    for kind in args.databases.split(","):
        load += labels_run(kind, args.code)
        load += features_run(kind, args.code)
    sizes = [int(s) for s in args.budget_sizes.split(",") if s]
    budget = budget_run(sizes, args.code)
    name = "load" if args.code is None else "load_before"
    write(name, markdown(args.label, load, budget), {"load": load, "budget": budget})


if __name__ == "__main__":
    main(sys.argv[1:])
