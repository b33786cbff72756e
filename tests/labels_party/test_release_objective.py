"""The release request's objective over real HTTP: a model-objective release publishes the objective
and the ε its bins are optimal at (a function of ε₂, the released n and the declared capacity only),
the preview follows it, and bad values are refused with problem+json before anything is charged."""

from __future__ import annotations

import math

import httpx

from labeldp.mechanisms import DEFAULT_MODEL_CAPACITY
from labeldp.mechanisms.objective import LEARNING_AWARE_FROM_EPSILON
from tests.support.labels_api import Api, charges, csv, dataset, problem, release, upload, with_recipient


def expected_objective_epsilon(epsilon_randomize: float, n: int, capacity: float) -> float:
    """docs/math.md §12, written out independently: e^{ε_L} − 1 = (n/capacity)·(e^ε − 1)²/e^ε."""
    g = math.expm1(epsilon_randomize)
    return max(epsilon_randomize, math.log1p(max(n / capacity, 1.0) * g * g / (g + 1)))


def test_a_model_objective_release_publishes_its_objective(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10.0"))
    ds = dataset(c)
    n = 4_000
    assert upload_weeks(c, ds, n)
    label = release(c, ds, "label", epsilon=2.0, objective="label")
    model = release(c, ds, "model", epsilon=2.0, objective="model")
    small = release(c, ds, "small", epsilon=2.0, objective="model", model_capacity=10.0)
    for r in (label, model, small):
        assert r.status_code == 201, r.text
    assert label.json()["mechanism"]["objective"] == "label"
    assert label.json()["mechanism"]["objective_epsilon"] is None
    for r, capacity in ((model, DEFAULT_MODEL_CAPACITY), (small, 10.0)):
        mech = r.json()["mechanism"]
        assert mech["objective"] == "model"
        assert math.isclose(
            mech["objective_epsilon"],
            expected_objective_epsilon(mech["epsilon_randomize"], n, capacity),
            rel_tol=1e-12,
        )
        assert mech["implemented_epsilon"] <= mech["epsilon_randomize"]  # randomized at ε₂, not ε_L
    assert small.json()["mechanism"]["objective_epsilon"] > model.json()["mechanism"]["objective_epsilon"]
    assert len(charges(c)) == 3  # each release charged once, whatever its objective
    preview = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2.0, "recipient": "publisher", "objective": "model", "model_capacity": 10.0},
    )
    assert preview.status_code == 200, preview.text
    assert preview.json()["mechanism"]["objective"] == "model"
    replay = release(c, ds, "small", epsilon=2.0, objective="model", model_capacity=10.0)
    assert replay.status_code == 200 and replay.json()["id"] == small.json()["id"]
    problem(release(c, ds, "small", epsilon=2.0, objective="label"), 422, "idempotency-key-reused")
    assert len(charges(c)) == 3


def test_bad_objectives_are_refused_and_charge_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    assert upload_weeks(c, ds, 200)
    for key, body in (
        ("o1", {"objective": "best"}),
        ("o2", {"objective": "label", "model_capacity": 100.0}),
        ("o3", {"loss": "poisson", "model_capacity": 100.0}),  # Poisson's default objective: label
        ("o4", {"objective": "model", "model_capacity": 0.5}),
        ("o5", {"objective": "model", "model_capacity": "100"}),
        ("o6", {"objective": "model", "model_capacity": 1e13}),
        ("o7", {"objective": 1}),
    ):
        problem(release(c, ds, key, **body), 422, "invalid-request")
    assert charges(c) == [] and c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []


def test_the_default_follows_the_loss_and_the_epsilon(api: Api) -> None:
    """No mechanism and no objective in the request: the unbiased randomizer for the squared and
    Poisson losses from ε₂ = 0.2 up (on this 53-point support), RR-on-Bins under the label objective
    below; a named objective or capacity asks for RR-on-Bins, a capacity alone for the model
    objective whatever ε₂ — the public rule docs/concepts/mechanism.md states (nothing read from the
    labels: the same n and support at two ε)."""
    c = with_recipient(api.tenant("acme", "10.0"))
    ds = dataset(c)
    n = 4_000
    assert upload_weeks(c, ds, n)
    squared = release(c, ds, "squared", epsilon=2.0)
    poisson = release(c, ds, "poisson", epsilon=2.0, loss="poisson")
    small = release(c, ds, "small", epsilon=0.2)
    small_poisson = release(c, ds, "small-poisson", epsilon=0.2, loss="poisson")
    named = release(c, ds, "named", epsilon=2.0, objective="model")
    capacity = release(c, ds, "capacity", epsilon=0.2, model_capacity=10.0)
    for r in (squared, poisson, small, small_poisson, named, capacity):
        assert r.status_code == 201, r.text
    for r in (squared, poisson):
        mech = r.json()["mechanism"]
        assert mech["kind"] == "unbiased" and mech["epsilon_randomize"] >= LEARNING_AWARE_FROM_EPSILON
    for r in (small, small_poisson):
        mech = r.json()["mechanism"]
        assert mech["kind"] == "rr_on_bins" and mech["epsilon_randomize"] < LEARNING_AWARE_FROM_EPSILON
        assert mech["objective"] == "label" and mech["objective_epsilon"] is None
    for r, cap in ((named, DEFAULT_MODEL_CAPACITY), (capacity, 10.0)):
        mech = r.json()["mechanism"]
        assert mech["kind"] == "rr_on_bins" and mech["objective"] == "model"
        assert math.isclose(
            mech["objective_epsilon"],
            expected_objective_epsilon(mech["epsilon_randomize"], n, cap),
            rel_tol=1e-12,
        )


def upload_weeks(c: httpx.Client, ds: str, n: int) -> bool:
    return upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(n)])).status_code == 200
