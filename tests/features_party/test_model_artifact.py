"""A trained model leaves the service as one scikit-learn pipeline: downloaded over HTTP and loaded in a
fresh Python process (as a notebook would, with skops and pandas), it gives exactly the API's
predictions on raw feature rows — regression with the affine correction, a linear model with one-hot
encoding and scaling, and a classifier with debiased class probabilities."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

from features_party.config import FeaturesSettings
from features_party.training.jobs import MODEL_TYPES
from labeldp.common.identity import Identity
from labeldp.mechanisms import optimize_rr_top_k, randomized_response
from labeldp.samples import adult_income
from tests.support.features_party import census_release, deliver, pin_sender, put_table, train, wait
from tests.support.messages import release
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

# the README's recipe: an explicit list of type names (features_party/training/jobs.py MODEL_TYPES),
# never what get_untrusted_types reports
NOTEBOOK = """
import json, sys
import pandas as pd
import skops.io as sio

TRUSTED = json.loads(sys.argv[3])
path, rows_file = sys.argv[1], sys.argv[2]
untrusted = sio.get_untrusted_types(file=path)
pipeline = sio.load(path, trusted=TRUSTED)
frame = pd.DataFrame(json.load(open(rows_file)))
final = pipeline[-1]
out = {"steps": [type(s).__name__ for s in pipeline], "untrusted": untrusted,
       "encoders": {k: type(v).__name__ for k, v in pipeline[0].named_transformers_.items()}}
if hasattr(final, "predict_proba"):
    out["probabilities"] = pipeline.predict_proba(frame).tolist()
    out["classes"] = final.classes_.tolist()
out["predictions"] = pipeline.predict(frame).tolist()
print(json.dumps(out))
"""


def notebook(artifact: bytes, rows: list[dict[str, Any]], tmp_path: Path, name: str) -> dict[str, Any]:
    """Load the downloaded artifact in a fresh interpreter and predict on the raw rows."""
    path, rows_file = tmp_path / f"{name}.skops", tmp_path / f"{name}.json"
    path.write_bytes(artifact)
    rows_file.write_text(json.dumps(rows))
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, str(path), str(rows_file), json.dumps(list(MODEL_TYPES))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


@pytest.mark.processes
def test_exported_pipelines_reproduce_the_api_in_a_fresh_process(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    other_key = features_tenant_key(settings, "other")
    sender = Identity.generate()
    regression, census = census_release("squared")
    adult = adult_income()
    n = 8_000
    y = np.asarray(adult.table.column("label").to_numpy(), dtype=np.int64)[:n]
    adult_ids = [f"a{i}" for i in range(n)]
    mechanism = optimize_rr_top_k([0.5, 0.5], 2.0).describe(prior=[0.5, 0.5], epsilon_prior=0.1)
    binary = replace(
        release(adult_ids, mechanism=mechanism, label_type="binary"),
        bins=randomized_response(y, 2, 2.0, rng=SeededRandom(5)),
    )
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        other = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {other_key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, regression, sender)
        deliver(c, binary, sender)
        put_table(c, "census", census).raise_for_status()
        adult_table = adult.features.slice(0, n).append_column("example_id", pa.array(adult_ids))
        put_table(c, "adult", adult_table).raise_for_status()

        census_rows = census.slice(0, 40).drop_columns(["example_id"]).to_pylist()
        # a notebook's rows include missing values and categories the model never saw
        census_rows[0] = {k: None for k in census_rows[0]}
        census_rows[1] = {**census_rows[1], "morekids": "a value never seen"}
        adult_rows = adult.features.slice(0, 40).to_pylist()
        adult_rows[0] = {**adult_rows[0], "age": None}
        cases = {
            "hgb-affine": (
                train(c, release_id=regression.release_id, feature_table="census", debias="affine"),
                census_rows,
            ),
            "linear-none": (
                train(
                    c, release_id=regression.release_id, feature_table="census", model="linear", debias="none"
                ),
                census_rows,
            ),
            "classifier": (train(c, release_id=binary.release_id, feature_table="adult"), adult_rows),
        }
        for name, (job, rows) in cases.items():
            api = c.post(f"/v1/models/{job}/predictions", json={"rows": rows})
            assert api.status_code == 200, api.text
            download = c.get(f"/v1/models/{job}/artifact")
            assert download.status_code == 200, download.text
            assert download.headers["content-type"] == "application/octet-stream"
            assert f"model-{job}.skops" in download.headers["content-disposition"]
            local = notebook(download.content, rows, tmp_path, name)
            assert local["steps"][0] == "ColumnTransformer", local
            assert local["predictions"] == api.json()["predictions"], name  # exactly, not approximately
            if name == "classifier":
                assert local["steps"][-1] == "ReleaseClassifier" and local["classes"] == [0.0, 1.0]
                assert local["probabilities"] == api.json()["probabilities"]
            elif name == "hgb-affine":
                assert local["steps"][-1] == "AffineDebiasedRegressor"
                assert local["encoders"]["categorical"] == "OrdinalEncoder"
            else:  # linear models get one-hot categories and standardized numbers
                assert local["steps"][-1] == "Ridge"
                assert local["encoders"] == {"categorical": "OneHotEncoder", "numeric": "Pipeline"}
            assert all(np.isfinite(local["predictions"]))

        # the artifact is the tenant's own: another tenant, an unknown ID and an unfinished model are refused
        job = cases["hgb-affine"][0]
        assert other.get(f"/v1/models/{job}/artifact").status_code == 404
        missing = c.get("/v1/models/no-such-model/artifact")
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
        c.put(
            "/v1/feature-tables/strangers",
            content=b"example_id,x\nq1,1\nq2,2\n",
            headers={"Content-Type": "text/csv"},
        ).raise_for_status()
        failed = c.post(
            "/v1/models", json={"release_id": regression.release_id, "feature_table": "strangers"}
        )
        assert wait(c, failed.json()["id"])["status"] == "failed"
        refused = c.get(f"/v1/models/{failed.json()['id']}/artifact")
        assert refused.status_code == 409 and refused.json()["type"] == "model-not-ready"
    # a model saved before models were pipelines is refused with a clear code, not mis-served
    meta = settings.data_dir / "models" / job / "meta.json"
    old = {k: v for k, v in json.loads(meta.read_text()).items() if k != "format"}
    meta.write_text(json.dumps(old))
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        for r in (
            c.get(f"/v1/models/{job}/artifact"),
            c.post(f"/v1/models/{job}/predictions", json={"rows": census_rows[:2]}),
        ):
            assert r.status_code == 409 and r.json()["type"] == "model-needs-retraining", r.text
