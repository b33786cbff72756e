"""Partitioned releases on a real Dask LocalCluster (two worker processes) and in this process: the
same output distribution (chi-square against the exact transition matrix and between engines, fixed
false-alarm rate), noise drawn on the workers from their own keys, outputs and digests complete, and
bad partitions refused before any noise is drawn."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from labeldp.mechanisms import ParameterError, RROnBins, Support
from labeldp.scale import LOCAL, DaskEngine, Engine, InProcess, release_partitions
from labeldp.scale.release import randomize_partition

pytestmark = pytest.mark.cluster

ALPHA = 1e-6  # false-alarm rate of each statistical test


@pytest.fixture(scope="module")
def cluster() -> Iterator[DaskEngine]:
    engine = DaskEngine(LOCAL, workers=2)
    yield engine
    engine.close()


@pytest.fixture(params=["in-process", "dask"])
def engine(request: pytest.FixtureRequest, cluster: DaskEngine) -> Engine:
    return cluster if request.param == "dask" else InProcess()


def write_parts(folder: Path, labels: np.ndarray, parts: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, chunk in enumerate(np.array_split(np.arange(labels.size), parts)):
        path = folder / f"in-{i}.parquet"
        ids = pa.array([f"ex-{j}" for j in chunk])
        pq.write_table(pa.table({"example_id": ids, "label": pa.array(labels[chunk])}), path)
        paths.append(str(path))
    return paths


MECHANISM = RROnBins(
    1.5, Support(np.arange(8.0)), np.array([0, 0, 0, 1, 1, 2, 2, 3]), np.array([1.0, 3.5, 5.5, 7.0])
)


def output_table(engine: Engine, folder: Path, per_point: int) -> np.ndarray:
    """Counts of (input support point, output bin) over ``per_point`` labels at each point."""
    labels = np.repeat(np.arange(8.0), per_point)
    parts = write_parts(folder / "in", labels, 6)
    outs = [str(folder / f"out-{i}.parquet") for i in range(len(parts))]
    engine.map(randomize_partition, parts, outs, mechanism=MECHANISM)
    bins = np.concatenate([pq.read_table(o).column("bin").to_numpy() for o in outs]).astype(np.int64)
    table = np.zeros((8, MECHANISM.m), dtype=np.int64)
    np.add.at(table, (labels.astype(np.int64), bins), 1)
    return table


def test_both_engines_draw_from_the_exact_distribution_and_agree(cluster: DaskEngine, tmp_path: Path) -> None:
    per_point = 20_000
    local = output_table(InProcess(), tmp_path / "local", per_point)
    remote = output_table(cluster, tmp_path / "dask", per_point)
    exact = MECHANISM.transition_matrix()
    tests = 2 + 8  # two goodness-of-fit tests, eight homogeneity tests (Bonferroni)
    for table in (local, remote):
        statistic = float(np.sum((table - per_point * exact) ** 2 / (per_point * exact)))
        dof = 8 * (MECHANISM.m - 1)
        assert stats.chi2.sf(statistic, dof) > ALPHA / tests
    for point in range(8):
        result = stats.chi2_contingency(np.vstack([local[point], remote[point]]))
        assert result.pvalue > ALPHA / tests


def test_workers_draw_with_their_own_fresh_keys(cluster: DaskEngine, tmp_path: Path) -> None:
    """Identical partitions, and the same partition submitted twice, get different noise: no stream
    is shared, replayed or cached by the engine (a seed sent from here would repeat)."""
    labels = np.tile(np.arange(8.0), 2_000)
    part = write_parts(tmp_path / "in", labels, 1)[0]
    outs = [str(tmp_path / f"out-{i}.parquet") for i in range(4)]
    cluster.map(randomize_partition, [part] * 4, outs, mechanism=MECHANISM)
    drawn = [pq.read_table(o).column("bin").to_numpy() for o in outs]
    for a in range(4):
        for b in range(a + 1, 4):
            assert not np.array_equal(drawn[a], drawn[b])


def test_release_writes_every_partition_in_order_with_its_digest(engine: Engine, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 50, size=30_000).astype(float)
    parts = write_parts(tmp_path / "in", labels, 5)
    support = Support(np.arange(0.0, 50.0))
    release = release_partitions(engine, parts, tmp_path / "out", support, 2.0, "squared")
    assert release.examples == labels.size
    assert release.epsilon_prior + release.epsilon_randomize <= 2.0
    assert release.prior.shape == (50,) and release.prior.sum() == pytest.approx(1.0)
    chain = hashlib.sha256()
    for part, out in zip(parts, release.outputs, strict=True):
        table = pq.read_table(out.path)
        assert table.column("example_id").equals(pq.read_table(part).column("example_id"))
        assert out.rows == table.num_rows
        assert int(np.max(table.column("bin").to_numpy())) < release.mechanism.m
        assert hashlib.sha256(Path(out.path).read_bytes()).hexdigest() == out.sha256
        chain.update(bytes.fromhex(out.sha256))
    assert release.digest == chain.hexdigest()
    assert release.published().epsilon == 2.0


@pytest.mark.parametrize(
    ("bad", "loss", "message"),
    [(np.nan, "squared", "finite"), (-1.0, "poisson", ">= 0 under Poisson")],
)
def test_bad_partition_is_refused_before_any_noise(
    engine: Engine, tmp_path: Path, bad: float, loss: str, message: str
) -> None:
    labels = np.arange(1.0, 601.0) % 20
    labels[450] = bad
    parts = write_parts(tmp_path / "in", labels, 3)
    with pytest.raises(ParameterError, match=message):
        release_partitions(engine, parts, tmp_path / "out", Support(np.arange(0.0, 20.0)), 1.0, loss)
    assert not (tmp_path / "out").exists()  # nothing randomized, nothing written


def test_classes_and_empty_inputs_are_refused(tmp_path: Path) -> None:
    support = Support(np.arange(3.0))
    with pytest.raises(ParameterError, match="regression"):
        release_partitions(InProcess(), ["x"], tmp_path, support, 1.0, "zero_one")
    with pytest.raises(ParameterError, match="at least one"):
        release_partitions(InProcess(), [], tmp_path, support, 1.0)


def shifted(x: int, *, amount: int, keep: bool) -> int:
    return x if keep else x + amount


def test_consecutive_calls_sharing_a_value_all_complete(cluster: DaskEngine) -> None:
    """A release makes many short calls sharing small values (a charge's ``amount`` and flags). With
    content-hashed scatter keys about one call in 600 lost its shared value to the release of the
    previous call's identical one and was cancelled; every call must complete."""
    for _ in range(600):
        assert cluster.map(shifted, list(range(6)), amount=5, keep=False) == [x + 5 for x in range(6)]
