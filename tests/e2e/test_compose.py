"""`docker compose up --build --wait` for real: PostgreSQL, both parties, and the demo service, which
must exit 0; then both REST APIs through the ports published on 127.0.0.1; then everything is torn
down (containers, network, volumes).

A Docker engine is used if one answers; otherwise, as root, the build machines' offline Docker helper
(``offline-docker.sh up``, beside the repository) starts one with local stand-ins for the base images.
Outside CI the test is skipped — with the reason in pytest's summary — only where no engine can be
started; where ``CI`` is set, a missing engine fails the run instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from labeldp.processes import free_port, wait_healthy

pytestmark = [pytest.mark.docker, pytest.mark.processes]

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_DOCKER = ROOT.parent / "shared" / "tools" / "offline-docker.sh"


def _engine_answers(env: dict[str, str]) -> bool:
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=60, check=False)
    return done.returncode == 0


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"CI needs a Docker engine for the compose test: {reason}")
    pytest.skip(reason)


def _docker_env() -> tuple[dict[str, str], bool]:
    """The environment reaching a Docker engine, and whether this test run started it (and so must
    stop it)."""
    env = dict(os.environ)
    if _engine_answers(env):
        return env, False
    if not OFFLINE_DOCKER.exists():
        _unavailable(f"no Docker engine answers and {OFFLINE_DOCKER} is not there to start one")
    if os.geteuid() != 0:
        _unavailable("no Docker engine answers, and starting one (offline-docker.sh) needs root")
    up = subprocess.run(
        ["bash", str(OFFLINE_DOCKER), "up"], capture_output=True, text=True, timeout=1800, check=False
    )
    if up.returncode != 0:
        _unavailable(f"no Docker engine could be started: {up.stderr.strip()[-500:]}")
    for name, value in re.findall(r"(\w+)=(\S+)", up.stdout):
        env[name] = value
    if not _engine_answers(env):
        _unavailable("offline-docker.sh ran but the engine does not answer")
    return env, True


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[dict[str, str], list[str], dict[str, int]]]:
    env, started = _docker_env()
    ports = {"LABELS_PORT": free_port(), "FEATURES_PORT": free_port(), "FEATURES_GRPC_PORT": free_port()}
    env.update({k: str(v) for k, v in ports.items()})
    env["LABELDP_DASK_SCHEDULER"] = "tcp://dask-scheduler:8786"  # the demo's release runs on the cluster
    compose = ["docker", "compose", "-p", f"labeldp-test-{os.getpid()}", "--profile", "dask"]
    try:
        up = subprocess.run(
            [*compose, "up", "--build", "--wait"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield env, compose, ports
    finally:
        # leave nothing behind: containers, network, volumes, the images built here and their
        # dangling layers, and the engine itself when this run started it
        for cleanup in (
            [*compose, "down", "-v", "--remove-orphans", "--rmi", "local"],
            ["docker", "image", "prune", "-f"],
        ):
            subprocess.run(cleanup, cwd=ROOT, env=env, capture_output=True, timeout=300, check=False)
        if started:
            subprocess.run(
                ["bash", str(OFFLINE_DOCKER), "down"], capture_output=True, timeout=120, check=False
            )


def _run(env: dict[str, str], *cmd: str, timeout: float = 300) -> str:
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_compose_stack_runs_the_demo_and_serves_both_apis(
    stack: tuple[dict[str, str], list[str], dict[str, int]], tmp_path: Path
) -> None:
    env, compose, ports = stack
    # the monitoring profile is valid compose and adds exactly Prometheus and Grafana (not started here:
    # their images come from Docker Hub; tests/e2e/test_monitoring.py checks their files and queries)
    without_dask = [c for c in compose if c not in ("--profile", "dask")]
    plain = set(_run(env, *without_dask, "config", "--services").split())
    services = set(_run(env, *without_dask, "--profile", "monitoring", "config", "--services").split())
    assert services - plain == {"prometheus", "grafana"}
    assert set(_run(env, *compose, "config", "--services").split()) - plain == {
        "dask-scheduler",
        "dask-worker",
    }
    demo_container = _run(env, *compose, "ps", "-a", "-q", "demo")
    exit_code = _run(env, "docker", "wait", demo_container, timeout=600)
    logs = _run(env, *compose, "logs", "demo")
    assert exit_code == "0", logs[-3000:]
    assert "test error against the true labels" in logs and "mutual TLS" in logs
    # the consoles as a browser on this machine reaches them (not the compose network's names), and
    # where the keys to sign in with are
    labels_console = f"http://127.0.0.1:{ports['LABELS_PORT']}/console/"
    features_console = f"http://127.0.0.1:{ports['FEATURES_PORT']}/console/"
    assert f"console: {labels_console} (advertiser, its API key in /keys/labels-api-key)" in logs
    assert f"console: {features_console} (publisher, its API key in /keys/features-api-key)" in logs
    assert "labels-party:8400/console" not in logs
    report = json.loads(
        _run(env, *compose, "run", "--rm", "--no-deps", "--entrypoint", "cat", "demo", "/out/report.json")
    )
    assert report["budget"]["spent_max"] == 1.0 and report["match_rate"] > 0.98
    # the report and the figures out of the exited demo container, as docs/guides/deployment.md says
    _run(env, *compose, "cp", "demo:/out/.", str(tmp_path / "demo-output"))
    copied = json.loads((tmp_path / "demo-output" / "report.json").read_text())
    assert copied["run_id"] == report["run_id"]
    assert {"mechanism.png", "budget.png", "privacy_audit.png"} <= {
        p.name for p in (tmp_path / "demo-output").glob("*.png")
    }
    # the release was counted and randomized by the two Dask workers
    probe = (
        "from distributed import Client; c = Client('tcp://127.0.0.1:8786', timeout=10); "
        "print(len(c.scheduler_info()['workers'])); "
        "print(' '.join(c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))))"
    )
    workers, prefixes = _run(
        env, *compose, "exec", "-T", "dask-scheduler", "python", "-c", probe
    ).splitlines()
    assert workers == "2" and {"count_partition", "randomize_partition"} <= set(prefixes.split())

    labels = f"http://127.0.0.1:{ports['LABELS_PORT']}"
    features = f"http://127.0.0.1:{ports['FEATURES_PORT']}"
    for base in (labels, features):
        assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        unauthorized = httpx.get(f"{base}/v1/identity", timeout=10)
        assert unauthorized.status_code == 401
        assert unauthorized.headers["content-type"].startswith("application/problem+json")
    key = _run(env, *compose, "exec", "-T", "labels-party", "cat", "/keys/labels-api-key")
    datasets = httpx.get(
        f"{labels}/v1/datasets", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).json()["items"]
    assert [d["name"] for d in datasets] == [f"demo-prices-{report['run_id']}"]
    pkey = _run(env, *compose, "exec", "-T", "features-party", "cat", "/keys/features-api-key")
    received = httpx.get(f"{features}/v1/releases", headers={"Authorization": f"Bearer {pkey}"}, timeout=10)
    assert [r["release_id"] for r in received.json()["items"]] == [report["release_id"]]
    metrics = httpx.get(f"{labels}/metrics", timeout=10).text
    assert 'labeldp_deliveries_total{outcome="delivered"} 1.0' in metrics
    # the labels party's database is the compose PostgreSQL
    rows = _run(
        env, *compose, "exec", "-T", "postgres", "psql", "-U", "labeldp", "-d", "labels", "-tAc",
        "SELECT status FROM releases",
    )  # fmt: skip
    assert rows == "complete"
    # restarting a party keeps its tenant, keys and data (named volumes)
    _run(env, *compose, "restart", "labels-party")
    wait_healthy(labels, timeout=120)
    again = httpx.get(f"{labels}/v1/datasets", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert again.status_code == 200 and len(again.json()["items"]) == 1
