"""Loading a model trusts an explicit list of type names — exactly those the service's own pipelines
contain — never a prefix: every model kind the service trains loads with it, and a hostile artifact
(a skops file whose only unusual type is ``numpy.testing._private.utils.runstring``, which the old
``numpy.``-prefix rule trusted and skops then called with the attacker's code) is refused over the
REST API with 409 ``model-not-loadable`` and runs nothing."""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest
import skops.io as sio

from features_party.config import FeaturesSettings
from features_party.training import jobs
from features_party.training.fit import fit, fit_classifier
from labeldp.common.errors import DomainError
from labeldp.common.identity import Identity
from labeldp.mechanisms import BinsNoise, integer_grid, optimize_rr_on_bins, optimize_rr_top_k
from labeldp_model import AffineDebiasedRegressor, BinsCorrection, ReleaseClassifier, UnbiasedRegressor
from tests.support.features_party import census_release, deliver, pin_sender, put_table, wait
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

N = 2000


def _tables() -> dict[str, tuple[pa.Table, dict[str, str]]]:
    rng = np.random.default_rng(0)
    ids = pa.array([f"e{i}" for i in range(N)])
    x = rng.uniform(0, 10, N)
    city = rng.choice(["a", "b", "c", "d"], N)
    with_missing = pa.table(
        {
            "example_id": ids,
            "x": pa.array([None if i % 3 == 0 else v for i, v in enumerate(x)], pa.float64()),
            "city": pa.array([None if i % 4 == 0 else c for i, c in enumerate(city)]),
        }
    )
    both = {"x": "numeric", "city": "categorical"}
    return {
        "numbers and categories": (pa.table({"example_id": ids, "x": x, "city": city}), both),
        "numbers": (pa.table({"example_id": ids, "x": x}), {"x": "numeric"}),
        "categories": (pa.table({"example_id": ids, "city": city}), {"city": "categorical"}),
        "missing values": (with_missing, both),
    }


def _kinds() -> list[tuple[str, Any]]:
    """(name, trained) for every single-process model kind: regressors for each loss and debiasing,
    classifiers (binary, four classes) for each debiasing, over each table."""
    out = []
    ids = pa.array([f"e{i}" for i in range(N)])
    labels = np.clip(np.round(np.random.default_rng(1).uniform(0, 12, N)), 0, 12)
    support = integer_grid(0, 12)
    mechanism = optimize_rr_on_bins(support, support.counts(labels) / N, 2.0, "squared")
    released = pa.table(
        {"example_id": ids, "bin": pa.array(mechanism.randomize(labels, rng=SeededRandom(1)), pa.uint16())}
    )
    noise = BinsNoise.of(mechanism.bin_values, mechanism.epsilon)
    for (table, (features, schema)), model, loss, debias in itertools.product(
        _tables().items(),
        ["hgb", "linear"],
        ["squared", "absolute", "poisson"],
        ["none", "affine", "unbiased"],
    ):
        if not (debias == "unbiased" and loss == "poisson"):
            trained = fit(released, features, schema, noise, loss, model=model, debias=debias)
            out.append((f"{model} {loss} {debias} on {table}", trained))
    for classes in (2, 4):
        y = np.random.default_rng(classes).integers(0, classes, N)
        prior = [1 / classes] * classes
        published = optimize_rr_top_k(prior, 2.0).describe(prior=prior, epsilon_prior=0.1)
        bins = pa.table({"example_id": ids, "bin": pa.array(y, pa.uint16())})
        for (table, (features, schema)), model, debias in itertools.product(
            _tables().items(), ["hgb", "linear"], ["none", "affine"]
        ):
            trained = fit_classifier(
                bins,
                features,
                schema,
                BinsNoise.of_published(published),
                model=model,
                debias=debias,
            )
            out.append((f"{model} {classes}-class {debias} on {table}", trained))
    return out


@pytest.mark.slow  # trains every kind the service offers (~30 small models): make test, not make check
def test_every_kind_the_service_trains_needs_only_the_listed_types(tmp_path: Path) -> None:
    """The list is exactly what the service's pipelines contain (LightGBM's: the cluster test), and
    every kind saved by the service loads back through it. A library upgrade that renames a type fails
    here, not in production."""
    own = {
        f"{c.__module__}.{c.__qualname__}"
        for c in (AffineDebiasedRegressor, UnbiasedRegressor, ReleaseClassifier, BinsCorrection)
    }
    assert set(jobs.MODEL_TYPES) >= own
    assert not any(t.startswith(("labeldp.", "labels_party.", "features_party.")) for t in jobs.MODEL_TYPES)
    assert all("*" not in t and not t.endswith(".") for t in jobs.MODEL_TYPES)
    seen: set[str] = set()
    published = optimize_rr_on_bins(integer_grid(0, 3), np.full(4, 0.25), 1.0, "squared").describe(
        prior=np.full(4, 0.25), epsilon_prior=0.1
    )
    for name, trained in _kinds():
        folder = tmp_path / str(len(seen)) / name.replace(" ", "-")
        jobs.save(trained, published, folder)
        untrusted = set(sio.get_untrusted_types(file=folder / jobs.ARTIFACT))
        assert untrusted <= set(jobs.MODEL_TYPES), (name, untrusted - set(jobs.MODEL_TYPES))
        seen |= untrusted
        jobs.load(folder)
    lightgbm = {"collections.OrderedDict", "lightgbm.basic.Booster", "lightgbm.sklearn.LGBMRegressor"}
    # (UnbiasedRegressor: the pipelines trained on unbiased targets — debias "unbiased" among the kinds)
    assert seen == set(jobs.MODEL_TYPES) - lightgbm  # nothing on the list that no pipeline needs


def hostile_artifact(module: str, name: str, marker: Path) -> bytes:
    """A skops file that, loaded by a loader trusting ``module.name``, calls it with code that
    creates ``marker`` (skops rebuilds a ``ConstructorFromReduceNode`` by calling its type)."""
    code = f"import pathlib; pathlib.Path({str(marker)!r}).touch()"
    arguments: tuple[object, ...] = (code, {}) if name == "runstring" else (f"touch {marker}",)
    schema = json.loads(zipfile.ZipFile(io.BytesIO(sio.dumps(arguments))).read("schema.json"))
    content = {k: v for k, v in schema.items() if k not in ("protocol", "_skops_version")}
    root = {
        "__class__": name,
        "__module__": module,
        "__loader__": "ConstructorFromReduceNode",
        "content": content,
        "__id__": 1,
        "protocol": schema["protocol"],
        "_skops_version": schema["_skops_version"],
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("schema.json", json.dumps(root))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("module", "name"), [("numpy.testing._private.utils", "runstring"), ("os", "system")]
)
def test_a_hostile_artifact_is_refused_and_runs_nothing(tmp_path: Path, module: str, name: str) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings, "ml")
    rel, features = census_release("squared", n=2000)
    sender = Identity.generate()
    marker = tmp_path / "code-ran"
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        put_table(c, "census", features).raise_for_status()
        r = c.post(
            "/v1/models", json={"release_id": rel.release_id, "feature_table": "census", "model": "linear"}
        )
        job = r.json()["id"]
        assert wait(c, job)["status"] == "succeeded"
        artifact = settings.data_dir / "models" / job / jobs.ARTIFACT
        artifact.write_bytes(hostile_artifact(module, name, marker))  # before the service first loads it
        for answer in (
            c.get(f"/v1/models/{job}/artifact"),
            c.post(f"/v1/models/{job}/predictions", json={"example_ids": ["w1"]}),
        ):
            assert answer.status_code == 409, answer.text
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert (
                answer.json()["type"] == "model-not-loadable"
                and f"{module}.{name}" in answer.json()["detail"]
            )
        assert httpx.get(f"{base}/healthz").status_code == 200
    assert not marker.exists()
    # the file is what it claims: the old rule (trust what get_untrusted_types reports when it starts
    # with "numpy." or "sklearn.") would have loaded it, and its code would have run
    untrusted = sio.get_untrusted_types(file=artifact)
    if all(t.startswith(("numpy.", "sklearn.")) for t in untrusted):
        sio.load(artifact, trusted=untrusted)
        assert marker.exists()


@pytest.mark.parametrize("saved", [None, 1, 2])
def test_a_model_saved_in_an_older_format_needs_retraining(tmp_path: Path, saved: int | None) -> None:
    """Format 2 pipelines ended in labeldp's own classes (``labeldp.mechanisms.estimators``, gone now
    that they live in ``labeldp_model``): such a model, like an older bare estimator, is answered 409
    ``model-needs-retraining`` (over REST: tests/features_party/test_model_artifact.py), never
    half-loaded."""
    ids = pa.array([f"e{i}" for i in range(N)])
    features, schema = _tables()["numbers"]
    noise = BinsNoise.of([0.0, 1.0, 2.0], 1.0)
    bins = pa.table({"example_id": ids, "bin": pa.array(np.arange(N) % 3, pa.uint16())})
    trained = fit(bins, features, schema, noise, "squared", model="linear", debias="affine")
    published = optimize_rr_on_bins(integer_grid(0, 3), np.full(4, 0.25), 1.0, "squared").describe(
        prior=np.full(4, 0.25), epsilon_prior=0.1
    )
    jobs.save(trained, published, tmp_path)
    jobs.load(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta.pop("format")
    if saved is not None:
        meta["format"] = saved
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DomainError) as refused:
        jobs.load(tmp_path)
    assert refused.value.code == "model-needs-retraining" and refused.value.status == 409
    assert ("labeldp-model" in str(refused.value)) == (saved == 2)
