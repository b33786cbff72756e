"""Files a crash leaves behind are removed when a service starts: spool folders of processes that are
gone, and temporary files of atomic writes; a live process's spool is left alone."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from features_party.config import FeaturesSettings
from labeldp.common.instance import Instance
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import features_server_thread, labels_server_thread


def plant(data: Path) -> dict[str, Path]:
    me = Instance.current()
    gone = Instance(me.host, me.boot, 2**22 + 7, "1", "dead0000")  # a pid that cannot be running
    live = Instance(me.host, me.boot, os.getpid(), me.started, "live0000")  # this very process
    old = time.time() - 7200
    files = {
        "gone": data / "tmp" / gone.token / "upload.csv",
        "live": data / "tmp" / live.token / "upload.csv",
        "stale": data / "datasets" / "d1" / ".labels-v2.parquet.0123abcd.tmp",
        "fresh": data / "datasets" / "d1" / ".labels-v3.parquet.4567cdef.tmp",
        # a staged upload and an atomic write of a writer that died a moment ago, and one of this process
        "dead-writer-staging": data / "datasets" / "d1" / f".staging~{gone.token}~00aa.tmp",
        "dead-writer-release": data / "releases" / f".r1.parquet~{gone.token}~00bb.tmp",
        "live-writer": data / "releases" / f".r2.parquet~{live.token}~00cc.tmp",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial data")
    os.utime(files["stale"], (old, old))
    return files


@pytest.mark.parametrize("party", ["labels", "features"])
def test_start_up_removes_what_dead_processes_left(tmp_path: Path, party: str) -> None:
    data = tmp_path / party
    files = plant(data)
    if party == "labels":
        server = labels_server_thread(LabelsSettings(data_dir=data, database_url=sqlite_url(data)))
    else:
        server = features_server_thread(FeaturesSettings(data_dir=data, grpc_port=0, allow_plaintext=True))
    with server:
        assert not files["gone"].exists() and not files["gone"].parent.exists()
        assert not files["stale"].exists()
        assert files["live"].exists() and files["fresh"].exists()  # a live owner, a young file
        # a dead writer's temporary files go at once, however young; a live writer's stay
        assert not files["dead-writer-staging"].exists() and not files["dead-writer-release"].exists()
        assert files["live-writer"].exists()
