"""The two services the demo talks to: started here as real processes, or already running elsewhere.

Locally (``labeldp demo``) it does what an operator would: a development CA with a server certificate
for the publisher's gRPC receiver and a client certificate for the advertiser (mutual TLS), one
tenant per party created with the ``labeldp`` CLI, and both ``serve`` commands on free loopback ports
with SQLite (or the given PostgreSQL URL for the labels party). Every process is stopped on the way
out, whether the demo succeeded, failed or was interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labeldp.common.tls import dev_ca
from labeldp.processes import FeaturesProcess, LabelsProcess, free_port, port_is_free

RELEASES_OF_BUDGET = 3  # the local advertiser tenant's per-example budget: three releases at the demo's ε


@dataclass(frozen=True)
class Connection:
    """How the demo reaches both parties, and how the labels party reaches the publisher's receiver."""

    labels_url: str
    labels_key: str
    features_url: str
    features_key: str
    grpc_address: str
    tls_ca_pem: str | None  # the CA that signed the receiver's certificate; None: plaintext gRPC


def cli(env: dict[str, str], *args: str) -> str:
    """Run ``labeldp ARGS`` as a separate process (as an operator would) and return its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "labeldp.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"labeldp {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _key(output: str) -> str:
    return output.strip().splitlines()[-1]


@contextmanager
def local_parties(
    workdir: Path,
    logs: Path,
    run_id: str,
    epsilon: float,
    postgres_url: str | None,
    say: Callable[[str], None],
    delta_budget: float = 0.0,
    ports: tuple[int | None, int | None] = (None, None),
) -> Iterator[Connection]:
    """Both parties as processes; ``ports`` are their REST ports (labels, features), free ones if None
    (a given port that is taken is refused here, before a process starts, as a ``ValueError``)."""
    for port in ports:
        if port is not None and not port_is_free(port):
            raise ValueError(f"port {port} on 127.0.0.1 is in use: choose another or leave it out")
    certs = dev_ca(workdir / "certs", ("localhost", "127.0.0.1"))
    say(f"development CA and mTLS certificates in {certs.ca.parent}")
    grpc_port = free_port()
    labels_env = {
        "LABELDP_DATA_DIR": str(workdir / "labels"),
        "LABELDP_PARTY_ID": "advertiser",
        "LABELDP_TLS_CERT": str(certs.client_cert),
        "LABELDP_TLS_KEY": str(certs.client_key),
    }
    if postgres_url:
        labels_env["LABELDP_DATABASE_URL"] = postgres_url
    else:
        labels_env["LABELDP_DATABASE_URL"] = f"sqlite:///{workdir / 'labels' / 'labels.db'}"
    features_env = {
        "LABELDP_FEATURES_DATA_DIR": str(workdir / "features"),
        "LABELDP_FEATURES_DATABASE_URL": f"sqlite:///{workdir / 'features' / 'features.db'}",
        "LABELDP_FEATURES_PARTY_ID": "publisher",
        "LABELDP_FEATURES_GRPC_HOST": "127.0.0.1",
        "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
        "LABELDP_FEATURES_TLS_CERT": str(certs.server_cert),
        "LABELDP_FEATURES_TLS_KEY": str(certs.server_key),
        "LABELDP_FEATURES_TLS_CA": str(certs.ca),
    }
    tenant = f"advertiser-{run_id}"
    budget = RELEASES_OF_BUDGET * epsilon
    delta = ("--delta", repr(delta_budget)) if delta_budget else ()
    labels_key = _key(
        cli(labels_env, "labels", "tenant", "create", tenant, "--epsilon-per-example", f"{budget:g}", *delta)
    )
    features_key = _key(cli(features_env, "features", "tenant", "create", f"publisher-{run_id}"))
    say(f"tenants created with the CLI: {tenant} (ε budget {budget:g} per example), publisher-{run_id}")
    logs.mkdir(parents=True, exist_ok=True)
    labels_port, features_port = ports
    features = FeaturesProcess(features_env, logs / "features-party.log", port=features_port)
    labels = LabelsProcess(labels_env, logs / "labels-party.log", port=labels_port)
    try:
        features.start()
        say(
            f"features party (publisher) at {features.base_url}, gRPC 127.0.0.1:{grpc_port} "
            f"(pid {features.pid})"
        )
        labels.start()
        database = "PostgreSQL" if postgres_url else "SQLite"
        say(f"labels party (advertiser) at {labels.base_url} on {database} (pid {labels.pid})")
        yield Connection(
            labels.base_url,
            labels_key,
            features.base_url,
            features_key,
            f"localhost:{grpc_port}",
            certs.ca.read_text(),
        )
    finally:
        labels.stop(grace=15)
        features.stop(grace=15)
        say("both services stopped")
