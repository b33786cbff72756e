"""Stored priors over the labels party's REST API on SQLite and a real PostgreSQL: listed, inspected and
deleted by their tenant alone, kept while a charged release that uses them runs, read whole by
``load_priors``. (Obtaining them from a features party is tested end to end in tests/e2e/test_priors.py;
here a verified answer is stored directly, the way the exchange stores one.)"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import text

from labeldp.common.identity import Identity
from labeldp.common.wire.pricing import PriorsAnswer, answer_frames
from labeldp.v1 import priors_pb2 as ppb
from labels_party.priors import PriorsStore, load_priors
from labels_party.priors.store import read_matrix
from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import Priors
from tests.support.labels_api import Api, dataset, problem, release, upload, with_recipient
from tests.support.servers import tenant_key
from tests.support.threads import under_gc_callback

SUPPORT = [float(v) for v in range(53)]


def store(api: Api, tenant: str, dataset_id: str, recipient_id: str, n: int = 50) -> str:
    """Priors for w0..w{n-1} in 3 groups (every fifth without one), stored as the exchange stores them."""
    ids = pa.array([f"w{i}" for i in range(n)])
    groups = np.array([-1 if i % 5 == 4 else i % 3 for i in range(n)], dtype=np.int64)
    priors = np.vstack(
        [np.full(53, 1 / 53), np.eye(53)[10] * 0.9 + 0.1 / 53, np.eye(53)[40] * 0.5 + 0.5 / 53]
    )
    request = ppb.PricingRequest(
        request_id=str(uuid.uuid4()), sender_id="advertiser", support=SUPPORT, example_count=n
    )
    now = int(time.time() * 1000)
    answer = PriorsAnswer(
        str(uuid.uuid4()), request, "publisher", now, now + 60_000, "model-1", "a rule", priors
    )
    frames = answer_frames(answer, groups, [n], Identity.generate())
    row = Priors(
        id=str(uuid.uuid4()), tenant_id=tenant, dataset_id=dataset_id, recipient_id=recipient_id,
        features_priors_id=answer.priors_id, request_id=request.request_id, model_id="model-1", rule="a rule",
        loss="squared", groups=3, max_groups=8, support_k=53, examples_requested=n,
        examples_priced=int((groups >= 0).sum()), message_sha256="0" * 64,
    )  # fmt: skip
    engine = make_engine(api.database_url)
    try:
        keys = np.arange(n, dtype=np.int64) * 7919
        PriorsStore(session_factory(engine), DataDir(api.data_dir)).add(
            row, ids, keys, groups, priors, frames
        )
    finally:
        engine.dispose()
    return row.id


def test_priors_are_listed_inspected_loaded_and_deleted_by_their_tenant(api: Api) -> None:
    tenant, key = tenant_key(api.database_url, "acme", "5")

    c = with_recipient(
        httpx.Client(base_url=api.base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    )
    ds = dataset(c)
    upload(c, ds, b"example_id,label\nw1,3\nw2,4\n").raise_for_status()
    recipient = c.get("/v1/recipients").json()["items"][0]["id"]
    pid = store(api, tenant, ds, recipient)

    (listed,) = c.get("/v1/priors").json()["items"]
    assert listed["id"] == pid and listed["examples_priced"] == 40 and listed["groups"] == 3
    assert [p["id"] for p in c.get(f"/v1/datasets/{ds}/priors").json()["items"]] == [pid]
    detail = c.get(f"/v1/priors/{pid}").json()
    assert detail["support"] == SUPPORT and detail["examples_without_group"] == 10
    assert [g["examples"] for g in detail["group_priors"]] == [14, 13, 13]
    assert np.argmax(detail["group_priors"][1]["masses"]) == 10
    np.testing.assert_allclose([sum(g["masses"]) for g in detail["group_priors"]], 1.0)

    engine = make_engine(api.database_url)
    try:
        got = load_priors(session_factory(engine), DataDir(api.data_dir), tenant, pid)
        assert got.ids.to_pylist() == [f"w{i}" for i in range(50)] and got.support == tuple(SUPPORT)
        assert got.groups.dtype == np.int64 and got.groups[4] == -1 and got.groups[5] == 2
        assert got.keys[3] == 3 * 7919 and got.priors.shape == (3, 53)
    finally:
        engine.dispose()

    other = api.tenant("mallory", "5")
    for r in (
        other.get(f"/v1/priors/{pid}"),
        other.delete(f"/v1/priors/{pid}"),
        other.get(f"/v1/datasets/{ds}/priors"),
    ):
        problem(r, 404, "not-found")
    assert other.get("/v1/priors").json()["items"] == []

    rel = release(c, ds, "r1")
    assert rel.status_code == 201, rel.text
    engine = make_engine(api.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE releases SET priors_id = :p, status = 'charged' WHERE id = :r"),
                {"p": pid, "r": rel.json()["id"]},
            )
        problem(c.delete(f"/v1/priors/{pid}"), 409, "priors-in-use")
        assert c.get(f"/v1/priors/{pid}").status_code == 200  # still there, files and all
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE releases SET status = 'complete' WHERE id = :r"), {"r": rel.json()["id"]}
            )
    finally:
        engine.dispose()
    assert c.delete(f"/v1/priors/{pid}").status_code == 204
    assert not any(p.exists() for p in DataDir(api.data_dir).priors_files(pid))
    problem(c.get(f"/v1/priors/{pid}"), 404, "not-found")
    assert c.get("/v1/priors").json()["items"] == []


def test_the_stored_matrix_reads_back_exactly_on_racing_threads_under_a_gc_callback(tmp_path: Path) -> None:
    """``read_matrix`` on eight threads switched every 10 µs with a Python callback on every garbage
    collection (hypothesis installs one): each read gives back the very matrix ``np.save`` wrote (where
    ``np.load``'s header parse could fail on CPython 3.11.7, gh-106905); a file this party did not write
    (another dtype or layout) is refused."""
    data = DataDir(tmp_path)
    (tmp_path / "priors").mkdir()
    rng = np.random.default_rng(5)
    shapes = [(1, 2), (3, 53), (1024, 256), (0, 31)]
    for i, shape in enumerate(shapes):
        with data.priors_matrix(f"m{i}").open("wb") as fh:
            np.save(fh, rng.dirichlet(np.ones(shape[1]), size=shape[0]), allow_pickle=False)
    expected = [np.load(data.priors_matrix(f"m{i}")) for i in range(len(shapes))]
    failures: list[str] = []

    def read(t: int) -> None:
        for r in range(60):
            i = (t + r) % len(shapes)
            try:
                got = read_matrix(data, f"m{i}")
                if got.dtype != np.float64 or not np.array_equal(got, expected[i]):
                    failures.append(f"m{i} read back different")
            except Exception as exc:  # any error fails the test below, named
                failures.append(repr(exc))

    with under_gc_callback():
        threads = [threading.Thread(target=read, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert failures == []
    for foreign in (np.zeros((2, 3), dtype="<f4"), np.asfortranarray(np.ones((2, 3))), np.ones(4)):
        with data.priors_matrix("x").open("wb") as fh:
            np.save(fh, foreign, allow_pickle=False)
        with pytest.raises(ValueError, match="not one this party wrote"):
            read_matrix(data, "x")
