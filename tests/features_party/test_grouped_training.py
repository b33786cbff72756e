"""Training on a feature-aware release: every row debiased by its own group's mechanism.

Synthetic labels with a strong feature → label relationship (``y ≈ 20·x`` on the support 0..20), the
groups deciles of ``x`` (a public rule on features) with each group's prior the label distribution the
generating model gives its ``x`` range (functions of features only, never of the labels released);
a tenth of the examples has no group. The same labels are released once with groups and once without,
at the same ε; the grouped release's models must predict the true labels better, its validation
estimate must stay unbiased, and what cannot be trained soundly is refused before a job exists."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.special import ndtr
from sklearn.linear_model import LinearRegression

from features_party.config import FeaturesSettings
from features_party.exports import partitions
from features_party.training.fit import TrainingError, fit, validation_mask
from labeldp.common.wire.sender import ReleaseMessage
from labeldp.mechanisms import (
    BinsNoise,
    GroupedNoise,
    ObjectiveName,
    integer_grid,
    release_grouped_labels,
    release_labels,
    target_error,
)
from labeldp.mechanisms.grouped import GroupedRelease
from labeldp_model import Release, ReleaseError, unbiased_targets
from tests.support.features_party import deliver, pin_sender, put_table, wait
from tests.support.messages import grouped_message, release
from tests.support.servers import features_server_thread, features_tenant_key

N, K, G, SPREAD = 20_000, 21, 10, 1.5
EPSILON = 1.0


def synthetic(n: int = N) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """IDs, the feature ``x``, the labels and each example's group (-1 for every tenth)."""
    rng = np.random.default_rng(41)  # test data only: the labels, never the release's noise
    x = rng.uniform(0, 1, n)
    y = np.clip(np.round(20 * x + rng.normal(0, SPREAD, n)), 0, K - 1)
    groups = np.minimum((x * G).astype(np.int64), G - 1)
    groups[np.arange(n) % 10 == 0] = -1
    return [f"s{i:06d}" for i in range(n)], x, y, groups


def group_priors() -> np.ndarray:
    """Each decile's label distribution under the generating model (x uniform in the decile)."""
    points = np.arange(K, dtype=np.float64)
    out = np.zeros((G, K))
    for g in range(G):
        for x in np.linspace(g / G, (g + 1) / G, 41):
            upper = np.where(points == K - 1, np.inf, (points + 0.5 - 20 * x) / SPREAD)
            lower = np.where(points == 0, -np.inf, (points - 0.5 - 20 * x) / SPREAD)
            out[g] += ndtr(upper) - ndtr(lower)
    return out / out.sum(axis=1, keepdims=True)


def grouped_release(
    y: np.ndarray, groups: np.ndarray, objective: ObjectiveName | None = None
) -> GroupedRelease:
    return release_grouped_labels(
        y, groups, group_priors(), integer_grid(0, K - 1), EPSILON, "squared", objective=objective
    )


def features(ids: list[str], x: np.ndarray) -> pa.Table:
    z = np.random.default_rng(5).uniform(0, 1, len(ids))  # a feature that says nothing
    return pa.table({"example_id": pa.array(ids), "x": pa.array(x), "z": pa.array(z)})


def test_fit_debiases_each_row_by_its_own_mechanism() -> None:
    ids, x, y, groups = synthetic()
    # the label objective: its two narrow bins per group keep the per-row estimator's noise at about
    # 0.24 over 4,000 examples, so the tolerance below is about 4 of its standard errors. The default
    # (model) objective's three wide bins per group make it about 0.8 (measured: 6 of 15 releases
    # outside the same tolerance), too wide to tell a biased estimator from an unbiased one
    grouped = grouped_release(y, groups, objective="label")
    mechanisms = (*grouped.published_groups(), grouped.published())
    noise = GroupedNoise.of_published(mechanisms[-1], mechanisms[:-1])
    table = pa.table(
        {
            "example_id": pa.array(ids),
            "bin": pa.array(grouped.bin_indices, pa.uint16()),
            "group": pa.array(grouped.groups, pa.int16()),
        }
    )
    feats, schema = features(ids, x), {"x": "numeric", "z": "numeric"}
    own = BinsNoise.of_published(grouped.published())
    valid = validation_mask(pa.array(ids), 0.2)
    at = np.where(groups < 0, G, groups)
    binned = np.empty(N)
    for j, m in enumerate(mechanisms):
        binned[at == j] = np.asarray(m.bin_values)[np.asarray(m.support_bins)[y[at == j].astype(int)]]
    held_out = feats.filter(pa.array(valid))
    for debias in ("affine", "unbiased"):
        trained = fit(table, feats, schema, own, "squared", model="linear", debias=debias, groups=noise)
        assert trained.metrics["group_count"] == G
        assert trained.metrics["train_examples_with_group"] == int(((groups >= 0) & ~valid).sum())
        predictions = trained.predict(held_out)  # no group needed: the correction is in the targets
        actual = float(np.mean((predictions - binned[valid]) ** 2))
        estimate = trained.metrics["validation_loss_vs_binned_true_labels_unbiased"]
        # the per-row estimator is unbiased; its noise over 4,000 examples is well under a third
        # (a false alarm about once in 10,000 runs)
        assert abs(estimate - actual) < 0.35 * actual + 0.2, (debias, estimate, actual)
    # 'affine' cannot correct a model of a mixture after the fact: it trains on the same targets, and
    # its predictions are clipped into where a row's binned label can lie, whichever mechanism it had
    final = trained.model[-1]
    assert type(final).__name__ == "UnbiasedRegressor" and type(final.estimator).__name__ == "Ridge"
    lo, hi = noise.span
    assert (
        (final.lower, final.upper)
        == (lo, hi)
        == (
            min(min(m.bin_values) for m in mechanisms),
            max(max(m.bin_values) for m in mechanisms),
        )
    )
    assert np.all((lo <= predictions) & (predictions <= hi))
    far = features(["far-0", "far-1"], np.array([-1e3, 1e3]))  # a linear model's predictions run off
    assert np.array_equal(np.sort(trained.predict(far)), [lo, hi])
    with pytest.raises(TrainingError, match="Poisson"):
        fit(table, feats, schema, own, "poisson", debias="affine", groups=noise)
    none = fit(table, feats, schema, own, "poisson", model="linear", debias="none", groups=noise)
    assert none.metrics["group_count"] == G


def rmse(c: httpx.Client, job: str, ids: list[str], y: np.ndarray) -> float:
    out = c.post(f"/v1/models/{job}/predictions", json={"example_ids": ids}).json()["predictions"]
    return float(np.sqrt(np.mean((np.asarray(out) - y) ** 2)))


def test_a_grouped_release_trains_better_models_through_rest(tmp_path: Path) -> None:
    """Delivered over gRPC, trained over REST (hgb and linear): against the true labels of the
    held-out examples, gradient boosting on the grouped release beats it on the same labels released
    without groups at the same ε (the groups' narrow bins carry far less noise; at 10:49 UTC on
    2026-11-27, RMSE 1.52 against 3.29), and so does the linear model, within 3% of one fit on the
    true labels (1.452 against 1.452; 1.92 without groups, whose few wide bins bias it)."""
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    from labeldp.common.identity import Identity

    sender = Identity.generate()
    ids, x, y, groups = synthetic()
    grouped = grouped_message(ids, grouped_release(y, groups))
    plain_release = release_labels(y, integer_grid(0, K - 1), EPSILON, "squared")
    plain = replace(release(ids, mechanism=plain_release.published()), bins=plain_release.bin_indices)
    valid = validation_mask(pa.array(ids), 0.2)
    held = [i for i, v in zip(ids, valid, strict=True) if v]
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        pin_sender(c, sender)
        deliver(c, grouped, sender)
        deliver(c, plain, sender)
        put_table(c, "synthetic", features(ids, x)).raise_for_status()
        view = c.get(f"/v1/releases/{grouped.release_id}").json()
        assert (view["priors_id"], view["group_count"]) == (grouped.priors_id, G)
        assert "groups" not in view["header"] and view["header"]["group_count"] == G
        listed = {r["release_id"]: r for r in c.get("/v1/releases").json()["items"]}
        assert (listed[plain.release_id]["priors_id"], listed[plain.release_id]["group_count"]) == (None, 0)
        assert listed[grouped.release_id]["group_count"] == G
        errors: dict[tuple[str, str], float] = {}
        for rel, name in ((grouped, "grouped"), (plain, "plain")):
            for model in ("hgb", "linear"):
                r = c.post(
                    "/v1/models",
                    json={"release_id": rel.release_id, "feature_table": "synthetic", "model": model},
                )
                assert r.status_code == 202, r.text
                done = wait(c, r.json()["id"], timeout=900)  # a shared machine can be slow
                assert done["status"] == "succeeded", done
                errors[name, model] = rmse(c, r.json()["id"], held, y[valid])
                if name == "grouped":
                    info = c.get(f"/v1/models/{r.json()['id']}").json()
                    assert info["metrics"]["group_count"] == G
                    assert info["provenance"]["priors_id"] == grouped.priors_id
        oracle = LinearRegression().fit(x[~valid, None], y[~valid])
        oracle_rmse = float(np.sqrt(np.mean((oracle.predict(x[valid, None]) - y[valid]) ** 2)))
        assert errors["grouped", "hgb"] < 0.9 * errors["plain", "hgb"], errors
        assert errors["grouped", "linear"] < min(1.03 * oracle_rmse, errors["plain", "linear"]), errors
        # its exports carry each row's group, its unbiased target and weight under its own mechanism
        exported = c.get(
            f"/v1/releases/{grouped.release_id}/training-set", params={"feature_table": "synthetic"}
        )
        assert exported.status_code == 200, exported.text
        check_grouped_export(pq.read_table(io.BytesIO(exported.content)), grouped, ids)
        # forced onto the partitioned join (spilled partitions, memory-mapped codes): the same export
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(partitions, "IN_MEMORY_UP_TO", 10)
            patch.setattr(partitions, "PARTITION_ROWS", 4000)
            patch.setattr(partitions, "SPILL_BINS_FROM", 100)
            spilled = c.get(
                f"/v1/releases/{grouped.release_id}/training-set", params={"feature_table": "synthetic"}
            )
        assert pq.read_table(io.BytesIO(spilled.content)).equals(pq.read_table(io.BytesIO(exported.content)))
        values = c.get(f"/v1/releases/{grouped.release_id}/released-values")
        assert values.status_code == 200, values.text
        check_grouped_export(pq.read_table(io.BytesIO(values.content)), grouped, ids)


def check_grouped_export(table: pa.Table, message: ReleaseMessage, ids: list[str]) -> None:
    """An export's grouped columns, against each row's own mechanism computed independently here."""
    assert message.example_groups is not None
    order = {e: i for i, e in enumerate(ids)}
    rows = np.array([order[e] for e in table.column("example_id").to_pylist()])
    groups, bins = message.example_groups[rows], np.asarray(message.bins)[rows]
    assert np.array_equal(table.column("released_group").to_numpy(), groups)
    assert np.array_equal(table.column("released_bin").to_numpy(), bins)
    mechanisms = (*message.groups, message.mechanism)
    errors = {j: target_error(m) for j, m in enumerate(mechanisms)}
    for j, m in enumerate(mechanisms):
        at = np.where(groups < 0, len(message.groups), groups) == j
        noise = BinsNoise.of_published(m)
        values = noise.bin_values[bins[at]]
        target = (values - noise.b * noise.bin_values.sum()) / noise.a
        assert np.allclose(table.column("released_value").to_numpy()[at], values)
        assert np.allclose(table.column("unbiased_target").to_numpy()[at], target)
        assert np.allclose(
            table.column("target_weight").to_numpy()[at], errors[len(mechanisms) - 1] / errors[j]
        )
    release = Release.from_metadata(table.schema.metadata)
    assert (
        release.group_count == len(message.groups) and release.description["priors_id"] == message.priors_id
    )
    with pytest.raises(ReleaseError, match="feature-aware"):
        unbiased_targets(release, table.column("released_value").to_numpy())


def test_a_grouped_classification_release_is_refused_at_job_creation(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    from labeldp.common.identity import Identity

    sender = Identity.generate()
    ids, x, _, groups = synthetic(2000)
    labels = (x > 0.5).astype(np.int64)
    priors = np.array([[0.9, 0.1]] * 5 + [[0.1, 0.9]] * 5)
    out = release_grouped_labels(labels, groups, priors, integer_grid(0, 1), 1.0, "zero_one")
    message = grouped_message(ids, out, label_type="binary")
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, message, sender)
        put_table(c, "synthetic", features(ids, x)).raise_for_status()
        assert c.get(f"/v1/releases/{message.release_id}").json()["group_count"] == G
        bad = c.post("/v1/models", json={"release_id": message.release_id, "feature_table": "synthetic"})
        assert bad.status_code == 422 and bad.json()["type"] == "unsupported-release", bad.text
        assert "feature-aware" in bad.json()["detail"]
        assert c.get("/v1/models").json()["items"] == []


def test_one_model_trains_on_both_stages_each_row_by_its_own_mechanism(tmp_path: Path) -> None:
    """The loop's last step: a stage-1 release (one mechanism) and a stage-2 feature-aware release
    (one per group) train one model (``also_release_ids``), every row debiased by the mechanism that
    released it — a stage 1 of the unbiased randomizer too (the default's: its outputs are the targets).
    It fits on both stages' rows, predicts the true labels at least as well as the stage-2 release alone
    and better than stage 1 alone; releases that cannot be mixed are refused (422, another tenant's
    404) before a job exists."""
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    other_key = features_tenant_key(settings, "other")
    from labeldp.common.identity import Identity

    sender = Identity.generate()
    ids, x, y, groups = synthetic()
    first = np.arange(len(ids)) % 5 == 0  # stage 1: a fifth, chosen by position (no label read)
    ids_1 = [i for i, f in zip(ids, first, strict=True) if f]
    ids_2 = [i for i, f in zip(ids, first, strict=True) if not f]
    stage_1 = release_labels(y[first], integer_grid(0, K - 1), EPSILON, "squared", mechanism="rr_on_bins")
    plain = replace(release(ids_1, mechanism=stage_1.published()), bins=stage_1.bin_indices)
    grouped = grouped_message(ids_2, grouped_release(y[~first], groups[~first]))
    other_support = release_labels(
        np.minimum(y, 10), integer_grid(0, 10), EPSILON, "squared", mechanism="rr_on_bins"
    )
    narrow = replace(release(ids, mechanism=other_support.published()), bins=other_support.bin_indices)
    by_default = release_labels(y[first], integer_grid(0, K - 1), EPSILON, "squared")  # the unbiased one
    assert by_default.published().kind == "unbiased"
    unbiased = replace(release(ids_1, mechanism=by_default.published()), bins=by_default.bin_indices)
    valid = validation_mask(pa.array(ids), 0.2)
    held = [i for i, v in zip(ids, valid, strict=True) if v]
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        other = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {other_key}"}, timeout=120)
        pin_sender(c, sender)
        pin_sender(other, sender)
        mine, theirs = (client.get("/v1/identity").json()["tenant_id"] for client in (c, other))
        plain, grouped, narrow, unbiased = (
            replace(m, recipient_tenant=mine) for m in (plain, grouped, narrow, unbiased)
        )
        for message in (plain, grouped, narrow, unbiased):
            deliver(c, message, sender)
        foreign = replace(release(ids[:50]), recipient_tenant=theirs)
        deliver(other, foreign, sender)
        put_table(c, "synthetic", features(ids, x)).raise_for_status()

        def train(release_id: str, also: list[str]) -> httpx.Response:
            body = {"release_id": release_id, "feature_table": "synthetic", "also_release_ids": also}
            return c.post("/v1/models", json=body)

        jobs_before = c.get("/v1/models").json()["items"]
        for also, status, code in (
            ([plain.release_id], 422, "invalid-request"),  # the first again
            ([grouped.release_id, grouped.release_id], 422, "invalid-request"),
            ([narrow.release_id], 422, "incompatible-releases"),
            ([foreign.release_id], 404, "not-found"),
        ):
            r = train(plain.release_id, also)
            assert (r.status_code, r.json().get("type")) == (status, code), r.text
        assert c.get("/v1/models").json()["items"] == jobs_before

        errors: dict[str, float] = {}
        for name, first_id, also in (
            ("both", plain.release_id, [grouped.release_id]),
            ("stage 2", grouped.release_id, []),
            ("stage 1", plain.release_id, []),
            # the default's stage 1 (the unbiased randomizer): its outputs are its rows' targets
            ("both, stage 1 unbiased", unbiased.release_id, [grouped.release_id]),
            ("stage 1 unbiased", unbiased.release_id, []),
        ):
            r = train(first_id, also)
            assert r.status_code == 202, r.text
            done = wait(c, r.json()["id"], timeout=900)
            assert done["status"] == "succeeded", done
            info = c.get(f"/v1/models/{r.json()['id']}").json()
            if also:
                assert info["provenance"]["also_release_ids"] == also
                trained = info["metrics"]["train_examples"]
                assert trained == int((~valid).sum()), (trained, int((~valid).sum()))  # both stages' rows
            errors[name] = rmse(c, r.json()["id"], held, y[valid])
    assert errors["both"] < errors["stage 1"], errors
    assert errors["both"] <= 1.05 * errors["stage 2"], errors
    assert errors["both, stage 1 unbiased"] < errors["stage 1 unbiased"], errors
    assert errors["both, stage 1 unbiased"] <= 1.05 * errors["stage 2"], errors


def test_a_poisson_model_is_not_trained_on_an_unbiased_release_beside_others(tmp_path: Path) -> None:
    """An unbiased release's outputs can be negative: Poisson regression fits none of them, and beside
    another release the job would fail late (or, listed first, train another loss). 422 before a job,
    in either order; each release alone still trains."""
    from labeldp.common.identity import Identity

    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    ids, x, y, _ = synthetic(2_000)
    support = integer_grid(0, K - 1)
    rr = release_labels(y[:1000], support, EPSILON, "poisson", mechanism="rr_on_bins")
    unbiased = release_labels(y[1000:], support, EPSILON, "poisson", mechanism="unbiased")
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        pin_sender(c, sender)
        mine = c.get("/v1/identity").json()["tenant_id"]
        messages = [
            replace(release(part, mechanism=r.published()), bins=r.bin_indices, recipient_tenant=mine)
            for part, r in ((ids[:1000], rr), (ids[1000:], unbiased))
        ]
        for message in messages:
            deliver(c, message, sender)
        put_table(c, "synthetic", features(ids, x)).raise_for_status()
        first, second = (m.release_id for m in messages)
        before = c.get("/v1/models").json()["items"]
        for one, other in ((first, second), (second, first)):
            body = {
                "release_id": one,
                "feature_table": "synthetic",
                "also_release_ids": [other],
                "debias": "none",
            }
            r = c.post("/v1/models", json=body)
            assert (r.status_code, r.json().get("type")) == (422, "invalid-debias"), r.text
            assert "negative" in r.json()["detail"]
        assert c.get("/v1/models").json()["items"] == before
        alone = c.post("/v1/models", json={"release_id": second, "feature_table": "synthetic"})
        assert alone.status_code == 202, alone.text
