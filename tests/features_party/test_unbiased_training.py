"""A release of the unbiased randomizer at the features party, over real gRPC and HTTP: models train on
its outputs with no debiasing (recorded as none) and predict inside the labels' range, the validation
loss estimate tracks the loss against the true labels, the exported training set states the identity
correction that ``labeldp_model`` reads, and the downloaded model predicts as the API does in a fresh
process."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity
from labeldp.mechanisms.unbiased_program import optimize_unbiased
from labeldp.samples import weeks_worked
from labeldp_model import Release
from tests.features_party.test_model_artifact import notebook
from tests.support.features_party import deliver, pin_sender, put_table, train
from tests.support.messages import release
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

N = 12_000


@pytest.mark.processes
def test_models_train_on_unbiased_outputs_without_debiasing(tmp_path: Path) -> None:
    ds = weeks_worked()
    y = np.asarray(ds.table.column("work").to_numpy(), dtype=float)[:N]
    counts = ds.support.counts(y)
    mech = optimize_unbiased(ds.support, counts, 1.0)
    ids = [f"w{i}" for i in range(N)]
    published = mech.describe(prior=counts / counts.sum(), epsilon_prior=0.05, epsilon_total=1.05)
    rel = replace(release(ids, mechanism=published), bins=mech.randomize(y, rng=SeededRandom(2)))
    features = ds.features.slice(0, N).append_column("example_id", pa.array(ids))
    values = mech.values_of(rel.bins)
    assert values.min() < 0 and values.max() > 52  # the targets reach beyond the label range

    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        received = c.get(f"/v1/releases/{rel.release_id}").json()
        assert received["mechanism"]["kind"] == "unbiased" and received["keep_probability"] is None
        assert put_table(c, "census", features).status_code == 201
        rows = features.slice(0, 2_000)
        truth = y[:2_000]
        constant = float(np.mean((truth - truth.mean()) ** 2))
        for kind, debias in (("hgb", "affine"), ("linear", "none")):
            job = train(c, release_id=rel.release_id, feature_table="census", model=kind, debias=debias)
            model = c.get(f"/v1/models/{job}").json()
            assert model["debias"] == "none", model  # nothing to undo: the outputs' mean is the label
            predicted = np.asarray(
                c.post(f"/v1/models/{job}/predictions", json={"example_ids": ids[:2_000]}).json()[
                    "predictions"
                ]
            )
            assert predicted.min() >= 0.0 and predicted.max() <= 52.0  # clipped into [lo, hi]
            loss = float(np.mean((predicted - truth) ** 2))
            assert loss < constant, (kind, loss, constant)  # it learned from the features
            estimate = model["metrics"]["validation_loss_vs_binned_true_labels_unbiased"]
            assert abs(estimate - loss) < 0.25 * loss + 10, (kind, estimate, loss)
            if kind == "hgb":
                download = c.get(f"/v1/models/{job}/artifact")
                assert download.status_code == 200
                raw = rows.drop_columns(["example_id"]).slice(0, 50).to_pylist()
                local = notebook(download.content, raw, tmp_path, "unbiased")
                assert local["steps"][-1] == "UnbiasedRegressor"
                api = c.post(f"/v1/models/{job}/predictions", json={"rows": raw}).json()["predictions"]
                assert local["predictions"] == api
        export = c.get(f"/v1/releases/{rel.release_id}/training-set", params={"feature_table": "census"})
        assert export.status_code == 200, export.text
        described = Release.from_metadata(pq.read_schema(io.BytesIO(export.content)).metadata)
        assert described.kind == "unbiased"
        assert described.correction.keep == 1.0 and described.correction.move == 0.0
        table = pq.read_table(io.BytesIO(export.content))
        released = dict(zip(ids, values.tolist(), strict=True))
        exported = dict(
            zip(
                table.column("example_id").to_pylist(),
                table.column("released_value").to_pylist(),
                strict=True,
            )
        )
        assert exported == released
