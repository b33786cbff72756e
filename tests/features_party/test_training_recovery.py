"""Training jobs after a restart, through the features party's real HTTP API: a starting process fails
only the jobs whose owner is certainly gone or whose lease expired — never one another live process
queued or is running (before: every queued or running job was failed at start-up)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx

from features_party import tenants
from features_party.config import FeaturesSettings
from features_party.storage import db
from features_party.storage.orm import TrainingJob
from labeldp.common.db import utcnow
from labeldp.common.instance import Instance
from tests.support.servers import features_server_thread


def dead_pid() -> int:
    """The pid of a process that has exited (and, on this host, is not running again)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(child.stdout)


def test_a_restart_fails_only_the_jobs_whose_owner_is_gone(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    settings.data_dir.mkdir(parents=True)
    engine = db.make_engine(settings.resolved_database_url())
    db.migrate(engine)
    here = Instance.current()  # this test's process: alive for the whole test
    owners = {
        "alive, leased": (replace(here, nonce="0000beef").token, 3600),
        "dead pid on this host": (replace(here, pid=dead_pid(), nonce="0000dead").token, 3600),
        "another host, lease expired": ("elsewhere.boot.1.1.00000001", -5),
        "another host, leased": ("elsewhere.boot.2.2.00000002", 3600),
        "no owner (before 0.3)": (None, None),
    }
    ids: dict[str, str] = {}
    with db.session_factory(engine).begin() as s:
        new = tenants.create_tenant(s, "pub")
        for what, (owner, lease) in owners.items():
            ids[what] = str(uuid.uuid4())
            s.add(
                TrainingJob(
                    id=ids[what],
                    tenant_id=new.tenant_id,
                    release_id=str(uuid.uuid4()),
                    feature_table="clicks",
                    feature_table_version=1,
                    kind="hgb",
                    debias="affine",
                    loss="squared",
                    validation_fraction=0.2,
                    status="running" if "leased" in what else "queued",
                    owner=owner,
                    lease_expires_at=None if lease is None else utcnow() + timedelta(seconds=lease),
                    progress={"stage": "queued"},
                    metrics={},
                    provenance={},
                )
            )
    engine.dispose()
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {new.api_key}"})
        status = {what: c.get(f"/v1/models/{job}").json() for what, job in ids.items()}
    assert {what: s["status"] for what, s in status.items()} == {
        "alive, leased": "running",
        "dead pid on this host": "failed",
        "another host, lease expired": "failed",
        "another host, leased": "running",
        "no owner (before 0.3)": "failed",
    }
    assert "interrupted" in status["dead pid on this host"]["error"]
