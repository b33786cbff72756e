"""Releases through the labels party's real HTTP API with ``LABELDP_DASK_SCHEDULER`` pointing at a
Dask cluster the test runs (two worker processes): the work happens on the cluster, the released bins
follow the published mechanism (chi-square, α = 1e-6), the partitions are cleaned up, and an
unreachable cluster answers 503 before anything is charged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from distributed import Client, LocalCluster
from sqlalchemy import select
from sqlalchemy.orm import Session

from labeldp.mechanisms import PublishedMechanism
from labels_party.budget.ledger_keys import example_key, user_keys
from labels_party.budget.segments import SegmentStore
from labels_party.budget.summaries import spend_of_tenant
from labels_party.config import LabelsSettings
from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import Tenant, UserSpendShard
from tests.support.labels_api import (
    WEEKS,
    Api,
    charges,
    csv,
    dataset,
    heavy_users,
    labelled,
    noisy,
    problem,
    release,
    upload,
    users_csv,
    with_recipient,
)
from tests.support.servers import labels_server_thread
from tests.support.stats import ALPHA, chi_square_ok

pytestmark = pytest.mark.cluster


@dataclass
class Cluster:
    client: Client
    address: str


@pytest.fixture
def scheduler() -> Iterator[Cluster]:
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    yield Cluster(client, cluster.scheduler_address)
    client.close()
    cluster.close()


def api_with(tmp_path: Path, database_url: str, scheduler_address: str) -> Iterator[Api]:
    settings = LabelsSettings(
        data_dir=tmp_path / "data", database_url=database_url, dask_scheduler=scheduler_address
    )
    with labels_server_thread(settings) as base:
        yield Api(base, database_url, settings.data_dir)


def task_prefixes(client: Client) -> set[str]:
    """The kinds of task the cluster has run (a fresh cluster per test)."""
    return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))


def test_a_release_runs_on_the_cluster_and_follows_the_published_mechanism(
    scheduler: Cluster, tmp_path: Path, database_url: str
) -> None:
    for api in api_with(tmp_path, database_url, scheduler.address):
        c = with_recipient(api.tenant("acme", "10"))
        ds, truth = labelled(c)
        body = {"epsilon": 6.0, "epsilon_prior": 2.0, "recipient": "publisher"}
        preview = c.post(f"/v1/datasets/{ds}/releases:preview", json=body)
        assert preview.status_code == 200, preview.text
        r = release(c, ds, "dask", epsilon=6.0, epsilon_prior=2.0)
        assert r.status_code == 201, r.text
        assert {"count_partition", "randomize_partition"} <= task_prefixes(scheduler.client)
        mechanism = PublishedMechanism.model_validate(r.json()["mechanism"])
        # nothing named: the cluster releases RR-on-Bins, and the preview says so (not the unbiased
        # randomizer this process would choose for the same request)
        assert mechanism.kind == preview.json()["mechanism"]["kind"] == "rr_on_bins"
        assert mechanism.objective == preview.json()["mechanism"]["objective"]
        assert mechanism.epsilon_prior == 2.0 and mechanism.epsilon_randomize <= 4.0
        ids, out = noisy(c, r.json()["id"])
        assert sorted(ids) == sorted(truth)
        support = np.asarray(mechanism.support)
        true_bin = np.asarray(mechanism.support_bins)[np.searchsorted(support, [truth[i] for i in ids])]
        matrix = mechanism.bin_transition()
        for b in range(mechanism.m):
            ok, ratio = chi_square_ok(
                np.bincount(out[true_bin == b], minlength=mechanism.m), matrix[b], alpha=ALPHA
            )
            assert ok, f"true bin {b}: chi-square at {ratio:.2f} of its critical value"
        assert not any((api.data_dir / "partitions").glob("*"))  # the partitions are removed


def test_an_unreachable_cluster_is_refused_before_the_charge(tmp_path: Path, database_url: str) -> None:
    for api in api_with(tmp_path, database_url, "tcp://127.0.0.1:9"):
        c = with_recipient(api.tenant("acme", "10"))
        ds, _ = labelled(c, n=100)
        problem(release(c, ds, "down"), 503, "cluster-unavailable")
        assert charges(c) == []
        assert c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []


def test_the_charge_runs_on_the_cluster_exactly_once_and_refuses_leaving_nothing(
    scheduler: Cluster, tmp_path: Path, database_url: str
) -> None:
    """The ledger's merge and check ran on the workers and the spend lives in segment files; the
    budget route and an in-process (user-level) release read it; a release over the budget is a 409
    that charges nothing and leaves no partitions and no new segments behind."""
    for api in api_with(tmp_path, database_url, scheduler.address):
        c = with_recipient(api.tenant("acme", "1"))
        ds, truth = labelled(c, n=3000)
        r = release(c, ds, "first", epsilon=0.6)
        assert r.status_code == 201, r.text
        assert {"sort_keys", "merge_shard"} <= task_prefixes(scheduler.client)
        budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.4}).json()
        assert (budget["examples"], budget["max_spent"], budget["min_spent"]) == (3000, 0.6, 0.6)
        assert budget["can_take"] == 3000 and budget["users"]["spent"]["max"] == 0.6
        ledger = api.data_dir / "ledger"
        segments = {p.name for p in ledger.iterdir()}
        assert segments and all(p.startswith(("example-", "user-")) for p in segments)

        over = problem(release(c, ds, "over", epsilon=0.6), 409, "budget-exhausted")
        assert {"spent_in_shard"} <= task_prefixes(scheduler.client)  # what is left, told by the workers
        assert over["spent"] == {"typical": 0.6, "worst": 0.6}
        assert over["left"] == {"typical": 0.4, "worst": 0.4}
        assert [e["examples"] for e in charges(c)] == [3000]
        assert not any((api.data_dir / "partitions").glob("*"))
        assert {p.name for p in ledger.iterdir()} == segments

        body = {
            "epsilon_user": 0.4,
            "privacy_unit": "user",
            "contribution_bound": 1,
            "recipient": "publisher",
        }
        user_level = c.post(f"/v1/datasets/{ds}/releases", json=body, headers={"Idempotency-Key": "users"})
        assert user_level.status_code == 201, user_level.text  # in process, over the segment shards
        after = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.1}).json()
        assert after["can_take"] == 0 and after["max_spent"] == 1.0
        assert len(truth) == 3000


def test_stored_examples_a_universe_and_a_subset_are_released_on_the_cluster(
    scheduler: Cluster, tmp_path: Path, database_url: str
) -> None:
    """Every labelled example: the workers partition the stored labels file themselves, and charge
    each user ε per example (group privacy) with user keys computed there. A universe or a subset:
    the examples decided in the labels party, still charged and randomized on the cluster."""
    rows = heavy_users()
    for api in api_with(tmp_path, database_url, scheduler.address):
        c = with_recipient(api.tenant("acme", "10"))
        ds = dataset(c, **WEEKS, default_label=0)
        assert upload(c, ds, users_csv(rows)).status_code == 200
        r = release(c, ds, "all", epsilon=0.5)
        assert r.status_code == 201, r.text
        assert {"partition_stored", "sort_keys", "merge_shard"} <= task_prefixes(scheduler.client)
        ids, _ = noisy(c, r.json()["id"])
        assert ids == [e for e, _, _ in rows]  # the labels file's order
        engine = make_engine(api.database_url)
        with session_factory(engine)() as s:
            got_keys, got = spend_of_tenant(
                s, owner(s), SegmentStore(DataDir(api.data_dir).ledger), UserSpendShard
            )
        engine.dispose()
        example_keys_ = np.array([example_key(e) for e, _, _ in rows], dtype=np.int64)
        users = user_keys(pa.array([u for _, _, u in rows], pa.string()), example_keys_)
        expected = Counter(users.tolist())
        assert dict(zip(got_keys.tolist(), got.tolist(), strict=True)) == {
            k: 500_000 * count for k, count in expected.items()
        }

        universe = b"example_id\n" + b"\n".join(f"click{i}".encode() for i in range(10)) + b"\n"
        with_universe = dataset(c, "with-universe", **WEEKS, default_label=0)
        upload(c, with_universe, csv([("click1", 13), ("click3", 52)]))
        upload(c, with_universe, universe, what="universe")
        rel = release(c, with_universe, "u").json()
        assert rel["examples"] == 10 and rel["examples_defaulted"] == 8 and rel["universe_declared"]
        assert sorted(noisy(c, rel["id"])[0]) == sorted(f"click{i}" for i in range(10))

        subset = [e for e, _, _ in rows[:7]]
        part = release(c, ds, "subset", epsilon=0.5, example_ids=subset)
        assert part.status_code == 201, part.text
        assert noisy(c, part.json()["id"])[0] == subset
        assert not any((api.data_dir / "partitions").glob("*"))


def owner(session: Session) -> str:
    """The one tenant of the test's database."""
    return str(session.execute(select(Tenant.id)).scalar_one())


def test_a_semi_sensitive_model_after_a_cluster_release_reads_the_spend_in_segments(
    scheduler: Cluster, tmp_path: Path, database_url: str
) -> None:
    """A cluster release moves the tenant's spend into segment files; every later charge — here a
    semi-sensitive model, charged in this process — goes through the same ledger object, which always
    has the segment store (before: the model path forgot it and failed after any cluster release)."""
    pytest.importorskip("torch")
    from labels_party.budget.epsilon import to_atto_floor
    from labels_party.budget.ledger import set_delta_budget
    from tests.support.semi_sensitive_models import SPEC, body, parquet, synthetic

    for api in api_with(tmp_path, database_url, scheduler.address):
        c = with_recipient(api.tenant("acme", "10"))
        weeks, _ = labelled(c, n=2000)
        assert release(c, weeks, "dask", epsilon=1.0).status_code == 201
        assert {"randomize_partition"} <= task_prefixes(scheduler.client)
        engine = make_engine(database_url)
        with session_factory(engine).begin() as s:
            tenant = s.execute(select(Tenant)).scalar_one()
            set_delta_budget(s, tenant.id, to_atto_floor("1e-6"), api_key_id=None, note="test")
            assert any(row.segment for row in s.execute(select(UserSpendShard)).scalars())
        engine.dispose()
        labels, features = synthetic()
        ptype = {"Content-Type": "application/vnd.apache.parquet"}
        ds = c.post("/v1/datasets", json=SPEC).json()["id"]
        assert c.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
        put = c.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
        assert put.status_code == 200
        rid = release(c, ds, "classes", epsilon=2.0, loss="zero_one").json()["id"]  # in process (classes)
        model = c.post(
            f"/v1/datasets/{ds}/semi-sensitive-models",
            json=body(rid, epochs=1),
            headers={"Idempotency-Key": "m"},
        )
        assert model.status_code == 201, model.text
        assert [e["epsilon"] for e in charges(c)] == [1.0, 2.0, 2.0]
