"""The features party on a real Dask LocalCluster.

The join report (``features_party.tables.joins``): the Dask merge counts exactly what the
single-process report and plain set arithmetic count, and the API sends large joins to the
configured cluster (503 when it does not answer). Training (``features_party.training.distributed``):
the Dask merge joins exactly what the single-process join does, the encoder chooses the same
categories, LightGBM's Dask learner learns (its unbiased validation loss against the binned true
labels is far below a constant's and close to the single-process model's), and the exported
pipeline — debiasing included — survives saving and loading with the same predictions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster
from sklearn.pipeline import Pipeline

from features_party.config import FeaturesSettings
from features_party.tables import joins
from features_party.training import jobs
from features_party.training.distributed import fit_on_cluster
from features_party.training.fit import TrainingError, fit, validation_mask
from labeldp.common.identity import Identity
from labeldp.mechanisms import BinsNoise, PublishedMechanism, integer_grid, optimize_rr_on_bins
from labeldp_model import AffineDebiasedRegressor
from tests.support.features_party import census_release, deliver, pin_sender, put_table, wait
from tests.support.messages import release as release_message
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

pytestmark = pytest.mark.cluster

N = 40_000
SCHEMA = {"x": "numeric", "city": "categorical"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as running:
        yield running


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        yield c


@dataclass(frozen=True)
class Release:
    release_file: Path
    feature_file: Path
    noise: BinsNoise
    published: PublishedMechanism


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """A count label that depends on a number and a city; features for 90 % of the released IDs."""
    rng = np.random.default_rng(5)
    folder = tmp_path_factory.mktemp("release")
    x = rng.uniform(0, 10, N)
    city = rng.choice([f"c{i}" for i in range(30)], N)
    effect = {f"c{i}": i % 7 for i in range(30)}
    labels = np.clip(np.round(2 * x + np.array([effect[c] for c in city]) + rng.normal(0, 1, N)), 0, 30)
    support = integer_grid(0, 30)
    prior = support.counts(labels) / N
    mechanism = optimize_rr_on_bins(support, prior, 2.0, "squared")
    bins = mechanism.randomize(labels, rng=SeededRandom(1))
    ids = pa.array([f"e{i}" for i in range(N)])
    release_file, feature_file = folder / "release.parquet", folder / "features.parquet"
    pq.write_table(
        pa.table({"example_id": ids, "bin": pa.array(bins, pa.uint8())}), release_file, row_group_size=7_000
    )
    keep = rng.random(N) < 0.9
    features = pa.table({"example_id": ids, "x": pa.array(x), "city": pa.array(city)}).filter(pa.array(keep))
    pq.write_table(features, feature_file, row_group_size=6_000)
    published = mechanism.describe(prior=prior, epsilon_prior=0.5)
    return Release(release_file, feature_file, BinsNoise.of_published(published), published)


def test_cluster_join_report_counts_what_one_process_counts(
    client: Client, release: Release, tmp_path: Path
) -> None:
    released = set(pq.read_table(release.release_file).column("example_id").to_pylist())
    featured = set(pq.read_table(release.feature_file).column("example_id").to_pylist())
    truth = joins.JoinReport.of(len(released), len(featured), len(released & featured))
    assert truth.only_in_release > 0 and truth.in_both > 0  # the fixture has both kinds
    on_cluster = joins.join_report_on_cluster(client, str(release.release_file), str(release.feature_file))
    assert on_cluster == joins.join_report(release.release_file, release.feature_file) == truth
    # no IDs in common, and an empty side
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"example_id": [f"x{i}" for i in range(5000)]}), other, row_group_size=1000)
    assert joins.join_report_on_cluster(client, str(release.release_file), str(other)) == joins.JoinReport.of(
        N, 5000, 0
    )
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"example_id": pa.array([], pa.string())}), empty)
    assert joins.join_report_on_cluster(client, str(empty), str(other)) == joins.JoinReport.of(0, 5000, 0)


@contextmanager
def features_party_with(
    folder: Path, scheduler: str | None, rel: Any, table: tuple[str, pa.Table]
) -> Iterator[httpx.Client]:
    """A features party configured with ``scheduler`` that holds ``rel`` and the feature table."""
    settings = FeaturesSettings(data_dir=folder, grpc_port=0, allow_plaintext=True, dask_scheduler=scheduler)
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        assert put_table(c, *table).status_code == 201
        yield c


def finished_tasks(client: Client, name: str) -> int:
    """How many tasks whose prefix contains ``name`` the cluster has finished so far."""

    def finished(dask_scheduler: Any) -> int:
        return sum(
            int(prefix.state_counts.get("memory", 0)) + int(prefix.state_counts.get("released", 0))
            for key, prefix in dask_scheduler.task_prefixes.items()
            if name in key
        )

    return int(client.run_on_scheduler(finished))


def test_the_api_counts_large_joins_on_the_configured_cluster(
    cluster: LocalCluster, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(joins, "CLUSTER_FROM_ROWS", 1)  # every join is "large"
    rel = release_message([f"e{i}" for i in range(3000)])
    features = pa.table({"example_id": [f"e{i}" for i in range(2000, 6000)], "f": np.arange(4000.0)})
    body = {"release_id": rel.release_id, "feature_table": "users"}
    reports: list[dict[str, Any]] = []
    for i, scheduler in enumerate((None, cluster.scheduler_address, "tcp://127.0.0.1:9")):
        with features_party_with(tmp_path / str(i), scheduler, rel, ("users", features)) as c:
            before = finished_tasks(client, "parquet")
            r = c.post("/v1/joins", json=body)
            if scheduler == "tcp://127.0.0.1:9":  # configured, but nothing listens there
                assert r.status_code == 503 and r.json()["type"] == "cluster-unavailable", r.text
                continue
            assert r.status_code == 200, r.text
            reports.append(r.json())
            ran_on_cluster = finished_tasks(client, "parquet") > before
            assert ran_on_cluster == (scheduler is not None)
    assert reports[0] == reports[1]
    assert (reports[1]["in_both"], reports[1]["only_in_release"], reports[1]["only_in_features"]) == (
        1000,
        2000,
        3000,
    )


def test_cluster_model_learns_like_the_single_process_one_and_exports(
    client: Client, release: Release, tmp_path: Path
) -> None:
    release_file, feature_file, noise = release.release_file, release.feature_file, release.noise
    trained = fit_on_cluster(client, str(release_file), str(feature_file), SCHEMA, noise, "squared")
    local = fit(pq.read_table(release_file), pq.read_table(feature_file), SCHEMA, noise, "squared")
    # the same join and the same hash split
    for name in ("train_examples", "validation_examples", "examples_capped"):
        assert trained.metrics[name] == local.metrics[name]
    # the same encoding: categories counted over the whole training split by a reduction
    cluster_categories = trained.model.named_steps["encode"].named_transformers_["categorical"].categories_
    local_categories = local.model.named_steps["encode"].named_transformers_["categorical"].categories_
    assert [list(c) for c in cluster_categories] == [list(c) for c in local_categories]
    # it learned: far below answering the mean, close to the single-process gradient boosting
    values = noise.bin_values[pq.read_table(release_file).column("bin").to_numpy().astype(np.int64)]
    constant = float(np.var(values))
    ours = trained.metrics["validation_loss_vs_binned_true_labels_unbiased"]
    theirs = local.metrics["validation_loss_vs_binned_true_labels_unbiased"]
    assert ours < 0.5 * constant and ours < 1.15 * theirs + 0.05, (ours, theirs, constant)
    # one exported pipeline with the release's debiasing, unchanged by saving and loading
    assert isinstance(trained.model, Pipeline)
    assert isinstance(trained.model.named_steps["model"], AffineDebiasedRegressor)
    jobs.save(trained, release.published, tmp_path / "model")
    import skops.io as sio

    # what skops does not trust by default is on the service's explicit list (test_model_loading.py)
    assert set(sio.get_untrusted_types(file=tmp_path / "model" / jobs.ARTIFACT)) <= set(jobs.MODEL_TYPES)
    loaded = jobs.load(tmp_path / "model")
    rows = pq.read_table(feature_file).slice(0, 500)
    np.testing.assert_array_equal(loaded.predict(rows), trained.predict(rows))


def test_a_feature_aware_release_is_debiased_row_by_row_on_the_cluster(
    client: Client, tmp_path: Path
) -> None:
    """The cluster learns a grouped release as one process does (``fit`` with ``groups``): the same
    rows, a per-row unbiased validation estimate close to the single-process model's, far below the
    same labels released without groups at the same ε; the exported model needs no group."""
    from labeldp.mechanisms import GroupedNoise, release_grouped_labels, release_labels
    from tests.features_party.test_grouped_training import EPSILON, K, features, group_priors, synthetic

    ids, x, y, groups = synthetic()
    grouped = release_grouped_labels(y, groups, group_priors(), integer_grid(0, K - 1), EPSILON, "squared")
    mechanisms = (*grouped.published_groups(), grouped.published())
    noise = GroupedNoise.of_published(mechanisms[-1], mechanisms[:-1])
    own = BinsNoise.of_published(mechanisms[-1])
    release_file, feature_file = tmp_path / "grouped.parquet", tmp_path / "features.parquet"
    rows = {"example_id": pa.array(ids), "bin": pa.array(grouped.bin_indices, pa.uint16())}
    pq.write_table(
        pa.table({**rows, "group": pa.array(grouped.groups, pa.int16())}), release_file, row_group_size=6000
    )
    pq.write_table(features(ids, x), feature_file, row_group_size=7000)
    schema = {"x": "numeric", "z": "numeric"}
    trained = fit_on_cluster(
        client, str(release_file), str(feature_file), schema, own, "squared", groups=noise
    )
    local = fit(
        pq.read_table(release_file), pq.read_table(feature_file), schema, own, "squared", groups=noise
    )
    for name in ("train_examples", "validation_examples", "examples_capped", "group_count"):
        assert trained.metrics[name] == local.metrics[name], name
    ours = trained.metrics["validation_loss_vs_binned_true_labels_unbiased"]
    theirs = local.metrics["validation_loss_vs_binned_true_labels_unbiased"]
    assert ours < 1.15 * theirs + 0.3, (ours, theirs)
    assert not isinstance(trained.model.named_steps["model"], AffineDebiasedRegressor)
    plain = release_labels(y, integer_grid(0, K - 1), EPSILON, "squared", mechanism="rr_on_bins")
    plain_file = tmp_path / "plain.parquet"
    pq.write_table(
        pa.table({**rows, "bin": pa.array(plain.bin_indices, pa.uint16())}), plain_file, row_group_size=6000
    )
    plain_noise = BinsNoise.of_published(plain.published())
    baseline = fit_on_cluster(client, str(plain_file), str(feature_file), schema, plain_noise, "squared")
    held = features(ids, x).filter(pa.array(validation_mask(pa.array(ids), 0.2)))
    truth = y[validation_mask(pa.array(ids), 0.2)]
    rmse = {
        name: float(np.sqrt(np.mean((model.predict(held) - truth) ** 2)))
        for name, model in (("grouped", trained), ("plain", baseline))
    }
    assert rmse["grouped"] < 0.9 * rmse["plain"], rmse


def test_refuses_what_it_cannot_train(client: Client, release: Release) -> None:
    release_file, feature_file, noise = release.release_file, release.feature_file, release.noise
    with pytest.raises(TrainingError, match="regression models"):
        fit_on_cluster(client, str(release_file), str(feature_file), SCHEMA, noise, "zero_one")
    with pytest.raises(TrainingError, match="unbiased targets"):
        fit_on_cluster(
            client, str(release_file), str(feature_file), SCHEMA, noise, "poisson", debias="unbiased"
        )


def test_the_api_trains_lightgbm_on_the_configured_cluster(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    rel, features = census_release("squared")
    for scheduler in (None, cluster.scheduler_address):
        with features_party_with(tmp_path / str(bool(scheduler)), scheduler, rel, ("census", features)) as c:
            body = {"release_id": rel.release_id, "feature_table": "census", "model": "lightgbm"}
            before = finished_tasks(client, "train_part")
            r = c.post("/v1/models", json=body)
            if scheduler is None:
                assert r.status_code == 422 and r.json()["type"] == "cluster-not-configured", r.text
                continue
            assert r.status_code == 202, r.text
            done = wait(c, r.json()["id"])
            assert done["status"] == "succeeded", done
            model = c.get(f"/v1/models/{done['id']}").json()
            assert model["model"] == "lightgbm" and model["metrics"]["validation_examples"] > 1000
            # LightGBM's training tasks ran on the cluster
            assert finished_tasks(client, "train_part") > before
            predicted = c.post(f"/v1/models/{done['id']}/predictions", json={"example_ids": ["w1", "w2"]})
            assert predicted.status_code == 200 and len(predicted.json()["predictions"]) == 2
            assert c.get(f"/v1/models/{done['id']}/artifact").status_code == 200
