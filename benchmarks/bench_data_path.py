"""The data path against the machine: each stage of labeldp beside a lower bound for the same work
(``data_path_baselines.py``), measured in the same run, alternately, ``RUNS`` times each; reported as
the ratio of the medians.

Seven rows (``N`` = 10M rows by default):

1. upload, CSV, REST until the answer (``labeldp labels serve``, its own process, SQLite);
2. upload, Parquet, the same rows;
3. release over REST (charge, prior, optimize, randomize, write, sign), the ledger included: the
   baseline is the bare release plus the baseline ledger charge of the same examples;
4. delivery over gRPC with mTLS until the receipt (``labeldp features serve``, its own process)
   against a raw grpcio stream of the same records to a server that only reads them;
5. the ledger charge of N examples onto a ledger holding the same N (in-process charge, SQLite);
6. the join report of N release IDs with N feature rows (4/5 in both) against pyarrow's hash join;
7. reads: the p50 latency of ``GET /v1/datasets/{id}/budget`` and ``GET /v1/datasets`` under 16
   connections (closed loop) against a bare FastAPI route served the same way.

``python -m benchmarks.bench_data_path [N] [--runs 3] [--profile DIR] [--only upload,release,…]``.
``--profile DIR`` records each labeldp stage's first run with py-spy (``pip install py-spy``; the
server and its file-work processes, or this process) and writes, per stage, where the samples fall
in labeldp's own code (the deepest labeldp frame of each sample) to DIR/STAGE.txt.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import data_path_baselines as base
from benchmarks.bench_upload import CONTENT_TYPES, make_csv, make_parquet
from benchmarks.common import run_isolated, timed, write
from labeldp.common.blake2b_batch import COMPILE_FROM
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.tls import dev_ca
from labeldp.demo.parties import cli
from labeldp.mechanisms import RROnBins, integer_grid
from labeldp.processes import FeaturesProcess, free_port
from labels_party.delivery.addresses import Target
from labels_party.delivery.client import deliver
from labels_party.delivery.message import Addressee, Signer, write_message
from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import sqlite_url
from tests.support.servers import LabelsProcess, tenant_key

RUNS = 3
TARGET = 3.0
CONNECTIONS = 16
READ_SECONDS = 8.0
IDLE = ("wait (threading", "select (", "_worker (concurrent", "accept (", "poll (", "epoll", "sleep (")
SPEC = {
    "name": "prices",
    "label_type": "real",
    "lo": 0,
    "hi": 20000,
    "support": {"kind": "uniform", "k": 201},
}
EDGES = np.linspace(0, 20000, 9)[1:-1]  # the baseline's bins: 8 over the public range
PY_SPY = str(Path(sys.executable).with_name("py-spy"))
OWN_CODE = ("labeldp/", "labels_party/", "features_party/")  # py-spy names files from their package


# -- profiles ------------------------------------------------------------------------------------------
class Profiles:
    """py-spy on the processes a stage runs in (or nothing, without ``--profile``)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def record(self, stage: str, pid: int) -> Iterator[None]:
        if self.folder is None:
            yield
            return
        raw = self.folder / f"{stage}.raw"
        spy = subprocess.Popen(
            [PY_SPY, "record", "--pid", str(pid), "--subprocesses", "--format", "raw", "--rate", "50",
             "--nonblocking", "--output", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)  # attached
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=120)
            (self.folder / f"{stage}.txt").write_text(summarize(raw))


def summarize(raw: Path, top: int = 10) -> str:
    """Where a stage's samples fall: by the deepest frame of labeldp's own code in each sample (else
    its deepest frame), and by the frame that was running (any code); idle threads (waiting on a
    lock, a socket, a queue) apart."""
    own: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    if not raw.exists():
        return "no samples\n"

    def name(frame: str) -> str:
        function, _, where = frame.partition(" (")
        return f"{where.rsplit(':', 1)[0]}:{function}"

    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first names the process
        if not frames or any(w in frames[-1] for w in IDLE):
            continue
        ours = [f for f in frames if any(f"({part}" in f for part in OWN_CODE)]
        own[name((ours or frames)[-1])] += int(count)
        leaves[name(frames[-1])] += int(count)
    total = sum(own.values()) or 1

    def table(counts: collections.Counter[str]) -> str:
        return "\n".join(f"{100 * c / total:5.1f}%  {n}" for n, c in counts.most_common(top))

    return (
        f"{total} busy samples at 50 Hz\n\nby labeldp's deepest frame:\n{table(own)}\n\n"
        f"by the running frame:\n{table(leaves)}\n"
    )


# -- the parts -----------------------------------------------------------------------------------------
def _alternate(
    runs: int, ours: Callable[[int], float], floor: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for i in range(runs):
        a.append(ours(i))
        b.append(floor(i))
        print(f"    run {i + 1}: labeldp {a[-1]:.2f}, baseline {b[-1]:.2f}", flush=True)
    return a, b


def _row(
    stage: str, ours: list[float], floor: list[float], unit: str = "s", note: str = ""
) -> dict[str, Any]:
    a, b = statistics.median(ours), statistics.median(floor)
    return {"stage": stage, "labeldp": a, "baseline": b, "ratio": a / b, "unit": unit, "runs": ours,
            "baseline_runs": floor, "note": note}  # fmt: skip


class Labels:
    """A labels-party server with a tenant, a recipient and the upload bodies."""

    def __init__(self, tmp: Path, n: int) -> None:
        self.tmp, self.n = tmp, n
        data = tmp / "labels"
        data.mkdir()
        url = sqlite_url(data)
        _, key = tenant_key(url, "bench", "1000")
        self.bodies = {"csv": tmp / "labels.csv", "parquet": tmp / "labels.parquet"}
        make_csv(self.bodies["csv"], n)
        make_parquet(self.bodies["parquet"], n)
        size = max(p.stat().st_size for p in self.bodies.values())
        self.server = LabelsProcess(data, url, env={"LABELDP_MAX_UPLOAD_BYTES": str(2 * size)})
        self.server.start()
        self.client = httpx.Client(
            base_url=self.server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=None
        )
        self.client.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        self.key = key
        self.dataset = ""
        self._warm(tmp / "warm.csv")

    def _warm(self, body: Path) -> None:
        """One small upload and release first: the file-work processes start and load (or, the first
        time on a machine, compile) the hash kernel, as a running service has; so does this process."""
        make_csv(body, 3 * COMPILE_FROM)
        ds = self.client.post("/v1/datasets", json={**SPEC, "name": "warm"}).json()["id"]
        with open(body, "rb") as fh:
            self.client.put(
                f"/v1/datasets/{ds}/labels", content=fh, headers={"Content-Type": CONTENT_TYPES["csv"]}
            ).raise_for_status()
        self.client.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 0.1, "recipient": "publisher", "mechanism": "rr_on_bins"},
            headers={"Idempotency-Key": "warm"},
        ).raise_for_status()
        base.upload(body, "csv", body.with_suffix(".parquet"))

    @property
    def pid(self) -> int:
        assert self.server.pid is not None
        return self.server.pid

    def upload(self, fmt: str) -> float:
        ds = self.client.post("/v1/datasets", json={**SPEC, "name": f"prices-{uuid.uuid4().hex[:8]}"}).json()[
            "id"
        ]
        start = time.perf_counter()
        with open(self.bodies[fmt], "rb") as fh:
            resp = self.client.put(
                f"/v1/datasets/{ds}/labels", content=fh, headers={"Content-Type": CONTENT_TYPES[fmt]}
            )
        seconds = time.perf_counter() - start
        resp.raise_for_status()
        assert resp.json()["label_count"] == self.n
        self.dataset = ds
        return seconds

    def release(self) -> float:
        start = time.perf_counter()
        resp = self.client.post(
            f"/v1/datasets/{self.dataset}/releases",
            # RR-on-Bins, as measured against its in-process baseline (the default here is the unbiased
            # randomizer, whose program alone takes seconds: BENCHMARKS.md, "unbiased-randomizer")
            json={"epsilon": 1.0, "recipient": "publisher", "mechanism": "rr_on_bins"},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        seconds = time.perf_counter() - start
        assert resp.status_code == 201, resp.text[:300]
        return seconds

    def stop(self) -> None:
        self.server.stop()


def upload_rows(labels: Labels, runs: int, profiles: Profiles) -> list[dict[str, Any]]:
    rows = []
    for fmt in ("csv", "parquet"):
        print(f"  upload, {fmt}", flush=True)
        out = labels.tmp / "baseline-upload.parquet"

        def ours(i: int, fmt: str = fmt) -> float:
            if i:
                return labels.upload(fmt)
            with profiles.record(f"upload-{fmt}", labels.pid):
                return labels.upload(fmt)

        def floor(_: int, fmt: str = fmt, out: Path = out) -> float:
            seconds, _rows = timed(lambda: base.upload(labels.bodies[fmt], fmt, out))
            return seconds

        rows.append(
            _row(
                f"upload, {fmt.upper() if fmt == 'csv' else 'Parquet'}, REST until the answer",
                *_alternate(runs, ours, floor),
            )
        )
    return rows


def release_row(labels: Labels, runs: int, profiles: Profiles) -> dict[str, Any]:
    print("  release", flush=True)
    stored = labels.tmp / "baseline-labels.parquet"
    base.upload(labels.bodies["parquet"], "parquet", stored)
    keys = pq.read_table(stored, columns=["example_key"]).column("example_key").to_numpy()
    held = np.sort(keys)  # after the first release every example holds spend: N onto N
    bare: list[float] = []

    def ours(i: int) -> float:
        if i:
            return labels.release()
        with profiles.record("release", labels.pid):
            return labels.release()

    def floor(i: int) -> float:
        a, _ = timed(lambda: base.release(stored, labels.tmp / "baseline-release.parquet", EDGES))
        b, _ = timed(lambda: base.ledger(keys, held, labels.tmp / f"baseline-ledger-{i}.db"))
        bare.append(a)
        return a + b

    row = _row(
        "release, REST (charge + prior + optimize + randomize + write + sign), ledger included",
        *_alternate(runs, ours, floor),
    )
    row["note"] = f"baseline without the ledger: {statistics.median(bare):.2f} s"
    return row


def delivery_row(tmp: Path, n: int, runs: int, profiles: Profiles) -> dict[str, Any]:
    print("  delivery", flush=True)
    certs = dev_ca(tmp / "certs")
    port = free_port()
    env = {
        "LABELDP_FEATURES_DATA_DIR": str(tmp / "features"),
        "LABELDP_FEATURES_GRPC_PORT": str(port),
        "LABELDP_FEATURES_TLS_CERT": str(certs.server_cert),
        "LABELDP_FEATURES_TLS_KEY": str(certs.server_key),
        "LABELDP_FEATURES_TLS_CA": str(certs.ca),
        "LABELDP_FEATURES_MAX_RELEASE_BYTES": str(max(4 * 2**30, 6 * n)),
    }
    key = cli(env, "features", "tenant", "create", "bench").strip().splitlines()[-1]
    sender = Identity.generate()
    rng = np.random.default_rng(0)  # benchmark-only synthetic bins
    support = integer_grid(0, 52)
    edges = np.searchsorted([6, 18, 36], support.values, side="right")
    mechanism = RROnBins(0.95, support, edges, np.array([1.0, 10.0, 25.0, 45.0])).describe(
        prior=np.full(53, 1 / 53), epsilon_prior=0.05, epsilon_total=1.0
    )

    def message(examples: int) -> Path:
        def pieces() -> Iterator[tuple[pa.Array, np.ndarray]]:
            for a in range(0, examples, 1_000_000):
                size = min(1_000_000, examples - a)
                yield base.ids_of(a, size), rng.integers(0, 4, size)

        return write_message(
            DataDir(tmp / "sender"), Signer(sender, "advertiser", 3600), release_id=str(uuid.uuid4()),
            recipient=Addressee("publisher"), label_type="count", mechanism=mechanism, pieces=pieces(),
        )  # fmt: skip

    messages = [message(n) for _ in range(runs)]
    warm = message(3 * COMPILE_FROM)  # delivered first: the receiver as a running service is (kernel loaded)
    creds = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes(),
        certificate_chain=certs.client_cert.read_bytes(),
    )
    features = FeaturesProcess(env)
    features.start()
    sink_port = free_port()
    sink = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.data_path_baselines", "grpc-sink", str(sink_port),
         str(certs.server_cert), str(certs.server_key), str(certs.ca)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        httpx.post(
            f"{features.base_url}/v1/senders",
            json={"id": "advertiser", "public_key_pem": public_key_pem(sender.public_key)},
            headers={"Authorization": f"Bearer {key}"},
        ).raise_for_status()
        assert features.proc is not None
        pid = features.proc.pid
        assert deliver(
            warm, Target(f"localhost:{port}", "localhost"), creds, timeout_s=600, attempts=1
        ).delivered

        def ours(i: int) -> float:
            def run() -> float:
                start = time.perf_counter()
                outcome = deliver(
                    messages[i], Target(f"localhost:{port}", "localhost"), creds, timeout_s=1800, attempts=1
                )
                assert outcome.delivered, outcome
                return time.perf_counter() - start

            if i:
                return run()
            with profiles.record("delivery", pid):
                return run()

        def floor(i: int) -> float:
            from labeldp.common.wire.records import read_records

            channel = grpc.secure_channel(f"localhost:{sink_port}", creds)
            try:
                call = channel.stream_unary("/labeldp.v1.FeaturesParty/DeliverRelease")
                start = time.perf_counter()
                call(read_records(messages[i]), timeout=1800)
                return time.perf_counter() - start
            finally:
                channel.close()

        return _row("delivery over gRPC with mTLS until the receipt", *_alternate(runs, ours, floor))
    finally:
        features.stop()
        sink.terminate()
        sink.wait(timeout=30)


def ledger_row(tmp: Path, n: int, runs: int) -> dict[str, Any]:
    print("  ledger charge", flush=True)
    folder = tmp / "ledger"
    folder.mkdir()
    from benchmarks.bench_ledger_scale import USER_MIX, make_parts

    parts = make_parts(folder, n)

    def ours(_: int) -> float:
        r = run_isolated(
            "benchmarks.bench_ledger_scale", "one", "in-process charge", str(folder), "fresh,again"
        )
        return float(r["again"]["seconds"])

    def floor(i: int) -> float:
        from labels_party.budget.partitioned import KEY_COLUMN

        k = np.concatenate(
            [pq.read_table(p, columns=[KEY_COLUMN]).column(KEY_COLUMN).to_numpy() for p in parts]
        )
        held = np.sort(k)
        seconds, _ = timed(lambda: base.ledger(k, held, folder / f"baseline-{i}.db"))
        # the real charge also keeps each user's spend (here every example is its own user): twice the work
        seconds += timed(
            lambda: base.ledger(k ^ USER_MIX, np.sort(k ^ USER_MIX), folder / f"baseline-u{i}.db")
        )[0]
        return seconds

    row = _row(f"ledger charge, {n / 1e6:g}M onto {n / 1e6:g}M (SQLite)", *_alternate(runs, ours, floor))
    row["note"] = "examples and users (every example its own user): the baseline charges both"
    return row


def join_row(tmp: Path, n: int, runs: int, profiles: Profiles) -> dict[str, Any]:
    print("  join report", flush=True)
    from benchmarks.bench_scale_join import write_inputs
    from features_party.tables.joins import join_report

    folder = tmp / "join"
    folder.mkdir()
    release, features = write_inputs(folder, n)

    def ours(_: int) -> float:
        seconds, report = timed(lambda: join_report(release, features))
        assert report.in_both == n - n // 5
        return seconds

    def floor(_: int) -> float:
        seconds, count = timed(lambda: base.join(release, features))
        assert count == n - n // 5
        return seconds

    return _row(
        f"join report, {n / 1e6:g}M × {n / 1e6:g}M",
        *_alternate(runs, ours, floor),
        note="baseline: pyarrow hash join",
    )


def _p50(base_url: str, path: str, headers: dict[str, str]) -> float:
    """The median latency (ms) of ``path`` with ``CONNECTIONS`` clients asking back to back."""
    latencies: list[float] = []
    lock = threading.Lock()
    started = threading.Barrier(CONNECTIONS, action=lambda: ends.append(time.perf_counter() + READ_SECONDS))
    ends: list[float] = []

    def user() -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as c:
            for _ in range(5):  # warm: connections open, caches filled (a first budget ask computes it)
                c.get(path).raise_for_status()
            started.wait()
            stop = ends[0]
            mine = []
            while time.perf_counter() < stop:
                t = time.perf_counter()
                c.get(path).raise_for_status()
                mine.append(1000 * (time.perf_counter() - t))
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=user) for _ in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statistics.median(latencies)


def reads_rows(labels: Labels, runs: int, profiles: Profiles) -> list[dict[str, Any]]:
    print("  reads", flush=True)
    port = free_port()
    bare = subprocess.Popen([sys.executable, "-m", "benchmarks.data_path_baselines", "bare-route", str(port)])
    try:
        wait_healthy_bare(f"http://127.0.0.1:{port}")
        headers = {"Authorization": f"Bearer {labels.key}"}
        rows = []
        for name, path in (("budget", f"/v1/datasets/{labels.dataset}/budget"), ("list", "/v1/datasets")):

            def ours(i: int, path: str = path, name: str = name) -> float:
                if i:
                    return _p50(labels.server.base_url, path, headers)
                with profiles.record(f"reads-{name}", labels.pid):
                    return _p50(labels.server.base_url, path, headers)

            def floor(_: int) -> float:
                return _p50(f"http://127.0.0.1:{port}", "/v1/ping", {})

            rows.append(
                _row(
                    f"reads, {CONNECTIONS} connections: {name} p50", *_alternate(runs, ours, floor), unit="ms"
                )
            )
        return rows
    finally:
        bare.terminate()
        bare.wait(timeout=30)


def wait_healthy_bare(url: str) -> None:
    for _ in range(200):
        try:
            if httpx.get(f"{url}/v1/ping", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def markdown(rows: list[dict[str, Any]], n: int, runs: int) -> str:
    lines = [
        f"{n:,} rows; medians of {runs} runs each, labeldp and its baseline alternately in the same run.",
        "",
        "| stage | labeldp | baseline in the same run | ratio | target | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:

        def fmt(v: float, ms: bool = r["unit"] == "ms") -> str:
            return f"{v:.1f} ms" if ms else f"{v:.2f} s"

        verdict = "met" if r["ratio"] <= TARGET else "**not met**"
        lines.append(
            f"| {r['stage']} | {fmt(r['labeldp'])} | {fmt(r['baseline'])} | {r['ratio']:.1f}× "
            f"| ≤ {TARGET:g}×: {verdict} | {r['note']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--only", default="upload,release,delivery,ledger,join,reads")
    args = parser.parse_args(argv if argv is not None else [])
    os.environ.setdefault("PYTHON", sys.executable)  # run_isolated's interpreter: this one
    stages = set(args.only.split(","))
    profiles = Profiles(args.profile)
    n, runs = args.n, args.runs
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="labeldp-data-path-") as tmp_s:
        tmp = Path(tmp_s)
        if stages & {"upload", "release", "reads"}:
            labels = Labels(tmp, n)
            try:
                rows += upload_rows(labels, runs, profiles) if "upload" in stages else []
                if not labels.dataset:
                    labels.upload("parquet")
                rows += [release_row(labels, runs, profiles)] if "release" in stages else []
                rows += reads_rows(labels, runs, profiles) if "reads" in stages else []
            finally:
                labels.stop()
            for body in labels.bodies.values():
                body.unlink()
        if "delivery" in stages:
            rows.append(delivery_row(tmp, n, runs, profiles))
        if "ledger" in stages:
            rows.append(ledger_row(tmp, n, runs))
        if "join" in stages:
            rows.append(join_row(tmp, n, runs, profiles))
    order = ["upload, CSV", "upload, Parquet", "release", "delivery", "ledger", "join", "reads"]
    rows.sort(key=lambda r: next(i for i, p in enumerate(order) if r["stage"].startswith(p)))
    write("data_path", markdown(rows, n, runs), {"n": n, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main(sys.argv[1:])
