"""Superseded feature-table versions over a running service: deleted once superseded for the grace
period, never while a queued or running training job reads them, and never the current one; a
version file a crashed upload left without its row goes once older than ``UNCOMMITTED_S`` (a younger
one may be an upload about to commit its row), whatever the grace."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import update

from features_party.config import FeaturesSettings
from features_party.storage import db
from features_party.storage.orm import FeatureTable, TrainingJob
from features_party.tables.service import UNCOMMITTED_S
from labeldp.common.db import utcnow
from labeldp.common.instance import Instance
from tests.support.servers import features_server_thread, features_tenant_key


def eventually(condition: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def upload(c: httpx.Client, rows: int) -> None:
    body = "example_id,x\n" + "".join(f"e{i},{i}\n" for i in range(rows))
    r = c.put("/v1/feature-tables/t", content=body.encode(), headers={"Content-Type": "text/csv"})
    assert r.status_code in (200, 201), r.text


def test_superseded_versions_go_after_the_grace_period_unless_a_job_reads_them(tmp_path: Path) -> None:
    settings = FeaturesSettings(
        data_dir=tmp_path / "features",
        grpc_port=0,
        allow_plaintext=True,
        superseded_grace_seconds=0,
        training_lease_seconds=0.5,  # collection runs every quarter second
    )
    key = features_tenant_key(settings, "ml")
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        upload(c, 10)
        engine = db.make_engine(settings.resolved_database_url())
        sessions = db.session_factory(engine)
        with sessions() as s:
            table = s.query(FeatureTable).one()
        folder = settings.data_dir / "feature-tables" / table.id
        job = str(uuid.uuid4())
        with sessions.begin() as s:  # a job another live process queued on version 1
            s.add(
                TrainingJob(
                    id=job,
                    tenant_id=table.tenant_id,
                    release_id=str(uuid.uuid4()),
                    feature_table="t",
                    feature_table_version=1,
                    kind="hgb",
                    debias="affine",
                    loss="squared",
                    validation_fraction=0.2,
                    status="queued",
                    owner=replace(Instance.current(), nonce="0000beef").token,
                    lease_expires_at=utcnow() + timedelta(hours=1),
                    progress={"stage": "queued"},
                    metrics={},
                    provenance={"feature_table_id": table.id},
                )
            )
        orphan = folder / "v9.parquet"  # an upload that crashed between its file and its row
        upload(c, 20)
        upload(c, 30)
        orphan.write_bytes((folder / "v3.parquet").read_bytes())
        long_ago = time.time() - UNCOMMITTED_S - 60
        os.utime(orphan, (long_ago, long_ago))
        # a file no row names yet, written just now: an upload about to commit, kept whatever the grace
        (folder / "v10.parquet").write_bytes((folder / "v3.parquet").read_bytes())

        def versions() -> set[str]:
            return {p.name for p in folder.glob("v*.parquet")}

        assert eventually(lambda: versions() == {"v1.parquet", "v3.parquet", "v10.parquet"}), versions()
        assert c.get("/v1/feature-tables/t").json()["rows"] == 30
        with sessions.begin() as s:
            s.execute(update(TrainingJob).where(TrainingJob.id == job).values(status="failed"))
        assert eventually(lambda: versions() == {"v3.parquet", "v10.parquet"}), versions()
        time.sleep(0.6)
        assert versions() == {"v3.parquet", "v10.parquet"}
        assert c.get("/v1/feature-tables/t").json()["version"] == 3
        engine.dispose()


def test_by_default_a_superseded_version_outlives_a_reader_that_just_looked_it_up(tmp_path: Path) -> None:
    settings = FeaturesSettings(
        data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True, training_lease_seconds=0.5
    )
    assert settings.superseded_grace_seconds == 3600
    key = features_tenant_key(settings, "ml")
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        upload(c, 10)
        upload(c, 20)
        time.sleep(1.0)  # several collections
        assert len(list((settings.data_dir / "feature-tables").rglob("v*.parquet"))) == 2
