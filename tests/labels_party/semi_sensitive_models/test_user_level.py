"""Semi-sensitive models and users: a user-level label release gives a user-level model, and with a
per-user budget the δ charged is every user's group-privacy δ (refused before anything when it is not
below one)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")  # the dpsgd extra; `make test` installs it

from labels_party.storage.orm import SemiSensitiveModel
from tests.support.semi_sensitive_models import (
    SPEC,
    N,
    Party,
    body,
    parquet,
    synthetic,
    users_dataset,
)


def test_a_user_level_label_release_gives_a_user_level_model(party: Party) -> None:
    """After a user-level release (τ kept examples per user), DP-SGD trains on the kept examples only;
    every user pays τ·ε₂ more, the tenant pays the group-privacy δ, and the guarantee says so."""
    party.set_delta("1e-6")
    c = party.client
    labels, features = synthetic()
    users = pa.array([f"user-{i // 4}" for i in range(N)])  # 300 users with 4 clicks each
    labels = labels.add_column(2, "user_id", users)
    assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json=SPEC).json()["id"]
    ptype = {"Content-Type": "application/vnd.apache.parquet"}
    assert c.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
    put = c.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
    assert put.status_code == 200
    made = c.post(
        f"/v1/datasets/{ds}/releases",
        headers={"Idempotency-Key": "u"},
        json={
            "privacy_unit": "user",
            "epsilon_user": 3.0,
            "contribution_bound": 2,
            "recipient": "publisher",
            "loss": "zero_one",
        },
    )
    assert made.status_code == 201, made.text
    rid = made.json()["id"]
    model = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models",
        json=body(rid, batch_size=100),
        headers={"Idempotency-Key": "m"},
    )
    assert model.status_code == 201, model.text
    assert model.json()["examples"] == 600  # τ = 2 of each user's 4 clicks
    raw = c.get(f"/v1/semi-sensitive-models/{model.json()['id']}/message").content
    payload = json.loads(base64.b64decode(json.loads(raw)["payload"]))
    g = payload["guarantee"]
    delta_tau = 1e-7 * (1 + np.exp(2.0))
    assert g["unit"] == "user" and g["contribution_bound"] == 2 and g["epsilon_user"] == 3.0 + 2 * 2.0
    assert g["delta_user"] == pytest.approx(delta_tau, rel=1e-12) and g["delta_user"] >= delta_tau
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon_user": 1}).json()
    assert budget["users"]["spent"]["max"] == 7.0 and budget["users"]["spent"]["p50"] == 7.0
    assert budget["delta_spent"] == pytest.approx(delta_tau, rel=1e-9)


def test_with_a_per_user_budget_the_delta_charged_is_every_users_group_privacy_delta(party: Party) -> None:
    """An example-level model costs a user with c training examples (c·ε₂, δ·Σ_{i<c} e^{iε₂}) by group
    privacy; with a per-user budget the tenant's δ counter takes that δ, so that it bounds every user's
    δ as the per-user ledger bounds their ε. A δ that would not be below 1 is refused (422) before
    anything is charged; without a per-user budget the counter takes δ (per example)."""
    party.set_delta("0.5")
    c = party.client
    ds, rid = users_dataset(party, 4, "plain")
    plain = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "a"}
    )
    assert plain.status_code == 201, plain.text
    assert [e["delta"] for e in c.get("/v1/ledger").json()["items"] if e["delta"]][-1] == 1e-7
    party.set_user_budget("100")
    ds, rid = users_dataset(party, 4, "grouped")
    grouped = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "b"}
    )
    assert grouped.status_code == 201, grouped.text
    expected = 1e-7 * sum(np.exp(i * 2.0) for i in range(4))
    assert (
        grouped.json()["delta"] == pytest.approx(expected, rel=1e-9) and grouped.json()["delta"] >= expected
    )
    entry = [e for e in c.get("/v1/ledger").json()["items"] if e["delta"] and e["kind"] == "charge"][-1]
    assert entry["delta"] == pytest.approx(expected, rel=1e-9) and entry["user_epsilon"] == 8.0
    ds, rid = users_dataset(party, 60, "vacuous")  # 60 examples of a user at ε₂ = 2: δ·e^118 > 1
    before = c.get("/v1/ledger").json()["items"]
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "c"}
    )
    assert refused.status_code == 422 and refused.json()["type"] == "user-delta-too-large", refused.text
    assert c.get("/v1/ledger").json()["items"] == before
    assert len(party.rows(SemiSensitiveModel)) == 2  # nothing left of the refused one


def test_a_user_level_run_whose_group_delta_is_not_below_one_is_refused_before_anything(party: Party) -> None:
    party.set_delta("0.5")
    c = party.client
    ds, rid = users_dataset(
        party, 40, "tau", privacy_unit="user", epsilon_user=3.0, contribution_bound=40, loss="zero_one"
    )
    before = len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"])
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "t"}
    )
    assert refused.status_code == 422 and refused.json()["type"] == "invalid-parameter", refused.text
    assert "group-privacy δ" in refused.json()["detail"]
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == before
    assert party.rows(SemiSensitiveModel) == []
