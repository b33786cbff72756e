"""An exported model loads where labeldp is not installed: models trained through the features party's
REST API are downloaded and loaded, with skops and an explicit list of trusted types, in a new virtual
environment (no system site packages) holding only scikit-learn, skops, pandas — at the server's
versions — and the ``labeldp_model`` wheel built from ``packages/labeldp-model``; their predictions on
a data frame of raw rows equal the API's. The wheel declares numpy and scikit-learn as its only
dependencies, and ``labeldp`` cannot be imported there."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity
from labeldp.mechanisms import optimize_rr_top_k, randomized_response
from labeldp.samples import adult_income
from tests.support.features_party import census_release, deliver, pin_sender, put_table, train
from tests.support.messages import release
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "packages" / "labeldp-model"
# what the notebook installs besides the wheel, at the versions the server saved the models with
# (skops files are written for one scikit-learn; numpy for the arrays' format)
THIRD_PARTY = ("scikit-learn", "skops", "pandas", "numpy")

# run by the new environment's interpreter in isolated mode (-I: no PYTHONPATH, no user site, no
# current directory), so nothing of this repository can be imported by accident
NOTEBOOK = """
import importlib.util, json, sys
import pandas as pd
import skops.io as sio
from labeldp_model import TRUSTED_TYPES

assert importlib.util.find_spec("labeldp") is None, "labeldp is importable"
path, rows_file = sys.argv[1], sys.argv[2]
pipeline = sio.load(path, trusted=list(TRUSTED_TYPES))
frame = pd.DataFrame(json.load(open(rows_file)))
out = {"steps": [type(s).__module__ + "." + type(s).__name__ for s in pipeline],
       "predictions": pipeline.predict(frame).tolist()}
if hasattr(pipeline[-1], "predict_proba"):
    out["probabilities"] = pipeline.predict_proba(frame).tolist()
print(json.dumps(out))
"""


def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    """A command with this process's environment less what would point Python at this repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args[:4]}…\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps packages/labeldp-model``, from a copy (a build leaves ``build/`` and
    ``*.egg-info`` beside the sources), with the running setuptools when there is one (no download of
    a build environment)."""
    source = out / "labeldp-model"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(out), str(source)],
        cwd=out,
    )
    (wheel,) = out.glob("labeldp_model-*.whl")
    return wheel


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A new virtual environment holding scikit-learn, skops, pandas (with their dependencies) and the
    wheel; its interpreter."""
    _run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    python = where / "bin" / "python"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in THIRD_PARTY]
    install = ["-m", "pip", "install", "--quiet", "--only-binary=:all:", *pins, str(wheel)]
    _run([str(python), *install], cwd=where)
    return python


def test_a_downloaded_model_predicts_with_scikit_learn_skops_and_pandas_alone(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        requires = sorted(
            line.split(":", 1)[1].strip().split(">")[0].split("<")[0].split("=")[0].strip()
            for line in z.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        )
        extras = sorted(
            line.split(":", 1)[1].strip()
            for line in z.read(metadata).decode().splitlines()
            if line.startswith("Provides-Extra:")
        )
        modules = sorted(n for n in z.namelist() if n.endswith(".py"))
    # the base install needs only these; the trainers' libraries are optional extras
    assert requires == ["numpy", "scikit-learn"], requires
    assert {"torch", "lightgbm", "xgboost"} <= set(extras), extras
    assert all(m.startswith("labeldp_model/") for m in modules), modules

    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    regression, census = census_release("squared", n=6000)
    adult = adult_income()
    n = 4000
    y = np.asarray(adult.table.column("label").to_numpy(), dtype=np.int64)[:n]
    adult_ids = [f"a{i}" for i in range(n)]
    mechanism = optimize_rr_top_k([0.5, 0.5], 2.0).describe(prior=[0.5, 0.5], epsilon_prior=0.1)
    binary = replace(
        release(adult_ids, mechanism=mechanism, label_type="binary"),
        bins=randomized_response(y, 2, 2.0, rng=SeededRandom(5)),
    )
    census_rows = census.slice(0, 30).drop_columns(["example_id"]).to_pylist()
    census_rows[0] = {k: None for k in census_rows[0]}  # missing values and an unseen category
    census_rows[1] = {**census_rows[1], "morekids": "a value never seen"}
    adult_rows = adult.features.slice(0, 30).to_pylist()
    adult_rows[0] = {**adult_rows[0], "age": None}
    answers: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        pin_sender(c, sender)
        deliver(c, regression, sender)
        deliver(c, binary, sender)
        put_table(c, "census", census).raise_for_status()
        adult_table = adult.features.slice(0, n).append_column("example_id", pa.array(adult_ids))
        put_table(c, "adult", adult_table).raise_for_status()
        jobs = {
            "regressor": (train(c, release_id=regression.release_id, feature_table="census"), census_rows),
            "classifier": (train(c, release_id=binary.release_id, feature_table="adult"), adult_rows),
        }
        for name, (job, rows) in jobs.items():
            served = c.post(f"/v1/models/{job}/predictions", json={"rows": rows})
            assert served.status_code == 200, served.text
            download = c.get(f"/v1/models/{job}/artifact")
            assert download.status_code == 200, download.text
            (tmp_path / f"{name}.skops").write_bytes(download.content)
            answers[name] = (served.json(), rows)

    venv = tmp_path / "venv"
    python = fresh_venv(venv, wheel)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    isolated = [str(python), "-I", "-c"]
    listed = "import importlib.metadata as m, json; print(json.dumps([d.name for d in m.distributions()]))"
    installed = {name.lower().replace("_", "-") for name in json.loads(_run([*isolated, listed], tmp_path))}
    assert {"scikit-learn", "skops", "pandas", "labeldp-model"} <= installed and "labeldp" not in installed
    for name, (api, rows) in answers.items():
        rows_file = tmp_path / f"{name}.json"
        rows_file.write_text(json.dumps(rows))
        model = str(tmp_path / f"{name}.skops")
        out = json.loads(_run([*isolated, NOTEBOOK, model, str(rows_file)], tmp_path))
        assert out["steps"][0] == "sklearn.compose._column_transformer.ColumnTransformer", out["steps"]
        final = {"regressor": "AffineDebiasedRegressor", "classifier": "ReleaseClassifier"}[name]
        assert out["steps"][-1] == f"labeldp_model.estimators.{final}", out["steps"]
        assert out["predictions"] == api["predictions"], name  # the same libraries: exactly equal
        if name == "classifier":
            assert out["probabilities"] == api["probabilities"]
