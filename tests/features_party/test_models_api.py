"""Training jobs, models and predictions over real HTTP; a restart reproduces the predictions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity
from labeldp.mechanisms import PublishedMechanism
from tests.support.features_party import census_release, deliver, pin_sender, put_table, wait
from tests.support.messages import release
from tests.support.metrics import scrape, value
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

N = 20_000


def test_train_inspect_predict_and_survive_a_restart(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    other_key = features_tenant_key(settings, "other")
    sender = Identity.generate()
    rel, features = census_release("poisson")
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        other = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {other_key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        put = put_table(c, "census", features)
        assert put.status_code == 201, put.text
        r = c.post(
            "/v1/models", json={"release_id": rel.release_id, "feature_table": "census", "debias": "affine"}
        )
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        done = wait(c, job)
        assert done["status"] == "succeeded", done
        assert done["progress"]["iterations"] == 200 and done["progress"]["elapsed_s"] > 0
        model = c.get(f"/v1/models/{job}").json()
        # each count means one thing from start to end: the release's examples; those the model fits on
        assert done["progress"]["release_examples"] == N
        assert done["progress"]["training_examples"] == model["metrics"]["train_examples"]
        assert model["loss"] == "poisson" and model["debias"] == "affine"
        stamps = [model["created_at"], done["created_at"], done["finished_at"]]
        stamps += [t["updated_at"] for t in c.get("/v1/feature-tables").json()["items"]]
        stamps += [r["received_at"] for r in c.get("/v1/releases").json()["items"]]
        stamps += [s["created_at"] for s in c.get("/v1/senders").json()["items"]]
        assert all(s.endswith(("+00:00", "Z")) for s in stamps), stamps  # timezone-aware UTC
        assert model["metrics"]["validation_examples"] > 0
        mechanism = PublishedMechanism.model_validate(model["provenance"]["mechanism"])
        assert model["metrics"]["release_binning_loss_under_noisy_prior"] == pytest.approx(
            mechanism.binning_loss_under_prior()
        )
        assert (
            model["provenance"]["release_id"] == rel.release_id
            and model["provenance"]["epsilon_total"] == 1.0
        )
        assert model["provenance"]["feature_table"] == "census" and model["provenance"]["code_version"]
        by_id = c.post(f"/v1/models/{job}/predictions", json={"example_ids": ["w1", "w2", "w3"]}).json()[
            "predictions"
        ]
        rows = features.slice(1, 3).drop_columns(["example_id"]).to_pylist()
        by_rows = c.post(f"/v1/models/{job}/predictions", json={"rows": rows}).json()["predictions"]
        assert np.allclose(by_id, by_rows) and all(p > 0 for p in by_id)
        # 4xx paths: each answers clearly and creates no job
        models_before = c.get("/v1/models").json()["items"]
        assert c.post("/v1/models", json={"release_id": "nope", "feature_table": "census"}).status_code == 404
        assert (
            c.post("/v1/models", json={"release_id": rel.release_id, "feature_table": "nope"}).status_code
            == 404
        )
        bad = c.post(
            "/v1/models", json={"release_id": rel.release_id, "feature_table": "census", "debias": "unbiased"}
        )
        assert bad.status_code == 422 and bad.json()["type"] == "invalid-debias"
        svm = {"release_id": rel.release_id, "feature_table": "census", "model": "svm"}
        assert c.post("/v1/models", json=svm).status_code == 422
        assert c.get("/v1/models").json()["items"] == models_before
        assert (
            other.get(f"/v1/models/{job}").status_code == 404
            and other.get(f"/v1/jobs/{job}").status_code == 404
        )
        missing = c.post(f"/v1/models/{job}/predictions", json={"rows": [{"age": 30}]})
        assert missing.status_code == 422 and missing.json()["type"] == "missing-features"
        unknown = c.post(f"/v1/models/{job}/predictions", json={"example_ids": ["zzz"]}).json()
        assert unknown["type"] == "unknown-example-ids" and unknown["example_ids"] == ["zzz"]
        asked = [f"q{i}" for i in range(12)] + ["zzz"]  # 13 unknown
        many = c.post(f"/v1/models/{job}/predictions", json={"example_ids": asked}).json()
        assert many["unknown"] == 13 and many["example_ids"] == asked[:10]  # the first 10, in order
        assert many["detail"] == "13 example_ids are not in feature table 'census': 'q0', 'q1', 'q2', …"
        # a job that fails keeps its error
        c.put(
            "/v1/feature-tables/strangers",
            content=b"example_id,x\nq1,1\nq2,2\n",
            headers={"Content-Type": "text/csv"},
        ).raise_for_status()
        failed = wait(
            c,
            c.post("/v1/models", json={"release_id": rel.release_id, "feature_table": "strangers"}).json()[
                "id"
            ],
        )
        assert failed["status"] == "failed" and "in both" in failed["error"]
        metrics_before = model["metrics"]
        m = scrape(base)
        assert value(m, "labeldp_training_jobs_total", outcome="started") == 2
        assert value(m, "labeldp_training_jobs_total", outcome="succeeded") == 1
        assert value(m, "labeldp_training_jobs_total", outcome="failed") == 1
        assert value(m, "labeldp_training_jobs_in_progress") == 0
        assert value(m, "labeldp_received_releases_total", outcome="stored") == 1
        assert value(m, "labeldp_examples_received_total") == N
        assert value(m, "labeldp_http_requests_total", method="POST", route="/v1/models", status="202") == 2
        assert value(m, "labeldp_http_requests_total", method="POST", route="/v1/models", status="404") == 2
        assert (  # route templates, never concrete IDs
            value(m, "labeldp_http_requests_total", method="GET", route="/v1/models/{model_id}", status="200")
            >= 1
        )
    with features_server_thread(settings) as base:  # a restart: the model is loaded from its skops file
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert c.get(f"/v1/models/{job}").json()["metrics"] == metrics_before
        again = c.post(f"/v1/models/{job}/predictions", json={"example_ids": ["w1", "w2", "w3"]}).json()[
            "predictions"
        ]
        assert np.array_equal(again, by_id)


def test_binary_release_trains_a_classifier(tmp_path: Path) -> None:
    from labeldp.mechanisms import optimize_rr_top_k, randomized_response
    from labeldp.samples import adult_income

    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    ds = adult_income()
    n = 20_000
    y = np.asarray(ds.table.column("label").to_numpy(), dtype=np.int64)[:n]
    ids = [f"a{i}" for i in range(n)]
    # randomized response over both classes is RR-Top-k with k = 2: the message says so
    mechanism = optimize_rr_top_k([0.5, 0.5], 2.0).describe(prior=[0.5, 0.5], epsilon_prior=0.1)
    rel = replace(
        release(ids, mechanism=mechanism, label_type="binary"),
        bins=randomized_response(y, 2, 2.0, rng=SeededRandom(3)),
    )
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        adult = ds.features.slice(0, n).append_column("example_id", pa.array(ids))
        put_table(c, "adult", adult).raise_for_status()
        bad = c.post(
            "/v1/models", json={"release_id": rel.release_id, "feature_table": "adult", "debias": "unbiased"}
        )
        assert bad.status_code == 422 and bad.json()["type"] == "invalid-debias"
        job = c.post("/v1/models", json={"release_id": rel.release_id, "feature_table": "adult"}).json()["id"]
        assert wait(c, job)["status"] == "succeeded"
        model = c.get(f"/v1/models/{job}").json()
        assert (
            model["loss"] == "zero_one"
            and 0 <= model["metrics"]["validation_error_vs_true_labels_unbiased"] <= 0.5
        )
        out = c.post(f"/v1/models/{job}/predictions", json={"example_ids": ids[:50]}).json()
        assert out["classes"] == [0.0, 1.0] and set(out["predictions"]) <= {0.0, 1.0}
        assert np.allclose(np.sum(out["probabilities"], axis=1), 1.0)
