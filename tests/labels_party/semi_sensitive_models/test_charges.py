"""Training with semi-sensitive features through the labels party's REST API (SQLite and PostgreSQL):
the (ε₂, δ) charge comes before any draw, a refused charge draws nothing and leaves nothing, bad
requests are refused before the charge, the plan is free, and the noise stored spends no more than was
charged."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")  # the dpsgd extra; `make test` installs it

from labeldp.common.identity import load_public_key
from labeldp.common.model_message import ModelMessageError, verify_model
from labeldp.semi_sensitive import TwoTower, predict
from labeldp.semi_sensitive.encoding import ColumnEncoding, encode
from labels_party.storage.orm import SemiSensitiveModel
from tests.support.semi_sensitive_models import (
    DrawSpy,
    N,
    Party,
    body,
    parquet,
    prepared,
    prepared_dataset,
    synthetic,
)
from tests.support.servers import tenant_key


def test_a_model_is_charged_first_trained_signed_and_verifiable(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    party.set_delta("1e-6")
    ds, rid = prepared(party)
    c = party.client
    spy = DrawSpy(party, monkeypatch)
    made = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m1"}
    )
    assert made.status_code == 201, made.text
    model = made.json()
    assert model["status"] == "complete" and model["examples"] == N and model["steps"] == 12
    assert spy.seen and all(spy.seen)  # every draw came after the (ε₂, δ) charge committed
    # the ledger: ε₁ for the release, then (ε₂, δ) for the model, on every example
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert [(e["epsilon"], e["delta"], e["examples"]) for e in charges] == [(3.0, None, N), (2.0, 1e-7, N)]
    budget = c.get(f"/v1/datasets/{ds}/budget").json()
    assert budget["max_spent"] == budget["min_spent"] == 5.0 and budget["delta_spent"] == 1e-7
    # a replay returns the same model and charges nothing
    again = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m1"}
    )
    assert again.status_code == 200 and again.content == made.content
    assert again.headers["Idempotent-Replayed"] == "true" and made.headers["Idempotent-Replayed"] == "false"
    url = f"/v1/datasets/{ds}/semi-sensitive-models"
    stated = c.post(url, json=body(rid, epochs=2.0, clip_norm=1.0), headers={"Idempotency-Key": "m1"})
    assert stated.status_code == 200 and stated.content == made.content  # a default stated, 2 as 2.0
    reused = c.post(url, json=body(rid, epochs=3, delta=2e-7), headers={"Idempotency-Key": "m1"})
    assert reused.status_code == 422 and reused.json()["fields"] == ["delta", "epochs"], reused.text
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == 2
    # the message verifies with the labels party's pinned key and carries the guarantee
    raw = c.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    identity = c.get("/v1/identity").json()
    key = load_public_key(identity["public_key_pem"])

    def pinned(sender: str, key_id: str) -> Any:
        return key if (sender, key_id) == (identity["party_id"], identity["key_id"]) else None

    payload = verify_model(raw, pinned)
    g = payload.guarantee
    assert (g.epsilon_labels, g.epsilon_dpsgd, g.delta, g.epsilon_total) == (3.0, 2.0, 1e-7, 5.0)
    assert g.adjacency == "replace-one" and g.label_release_id == rid and g.examples == N
    assert g.noise_multiplier == model["noise_multiplier"] > 0
    # the weights are a working model that reads both kinds of columns
    net = TwoTower.from_arrays(3, 3, payload.architecture["width"], payload.weights)
    labels, features = synthetic()
    non = [
        ColumnEncoding("hour", "number", 0, 24),
        ColumnEncoding("device", "category", categories=("mobile", "desktop")),
    ]
    semi = [
        ColumnEncoding("cart_adds", "number", 0, 10),
        ColumnEncoding("remarketing", "category", categories=("none", "shoes")),
    ]
    x_non = encode({k: features.column(k).to_numpy(zero_copy_only=False) for k in ("hour", "device")}, non)
    x_semi = encode(
        {k: labels.column(k).to_numpy(zero_copy_only=False) for k in ("cart_adds", "remarketing")}, semi
    )
    p = predict(net, x_non, x_semi)
    assert p.shape == (N,) and np.all((p > 0) & (p < 1))
    # tampering: any changed byte of the payload, a wrong key, or another sender is refused
    envelope = json.loads(raw)
    for i in (0, len(envelope["payload"]) // 2, len(envelope["payload"]) - 5):
        flipped = dict(
            envelope,
            payload=envelope["payload"][:i]
            + ("A" if envelope["payload"][i] != "A" else "B")
            + envelope["payload"][i + 1 :],
        )
        with pytest.raises(ModelMessageError):
            verify_model(json.dumps(flipped).encode(), pinned)
    with pytest.raises(ModelMessageError, match="not pinned"):
        verify_model(raw, lambda s, k: None)
    with pytest.raises(ModelMessageError):
        verify_model(raw[:-10], pinned)


def test_a_refused_charge_draws_nothing_and_leaves_nothing(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, rid = prepared(party)  # a pure-ε tenant: δ budget 0
    spy = DrawSpy(party, monkeypatch)
    c = party.client
    before = c.get("/v1/ledger").json()["items"]
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m"}
    )
    assert refused.status_code == 409 and refused.json()["type"] == "delta-budget-exhausted"
    party.set_delta("1e-6")
    too_much = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models",
        json=body(rid, epsilon_dpsgd=8.0),
        headers={"Idempotency-Key": "m2"},
    )
    assert too_much.status_code == 409 and too_much.json()["type"] == "budget-exhausted"  # 3 + 8 > 10
    assert spy.seen == []  # no stream opened: no noise drawn
    assert party.rows(SemiSensitiveModel) == []
    after = c.get("/v1/ledger").json()["items"]
    assert [e for e in after if e["kind"] == "charge"] == [e for e in before if e["kind"] == "charge"]
    assert not list((party.data_dir / "models").glob("*")) if (party.data_dir / "models").exists() else True


def test_bad_requests_are_refused_before_the_charge(party: Party) -> None:
    party.set_delta("1e-6")
    ds, rid = prepared(party, upload_features=False)
    c = party.client

    def post(payload: dict[str, Any], key: str = "k", path: str | None = None) -> httpx.Response:
        url = path or f"/v1/datasets/{ds}/semi-sensitive-models"
        return c.post(url, json=payload, headers={"Idempotency-Key": key})

    assert post(body(rid)).json()["type"] == "no-non-sensitive-rows"
    features = synthetic()[1]
    partial = features.slice(0, N - 5)
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(partial),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200
    missing = post(body(rid))
    assert missing.status_code == 422 and missing.json()["type"] == "missing-non-sensitive-rows"
    bad_value = features.set_column(1, "hour", pa.array([30] * N))
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(bad_value),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 422 and put.json()["type"] == "invalid-non-sensitive"
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(features),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200
    assert post(body("not-a-uuid")).status_code == 404
    assert post(body(rid, delta=0.5)).status_code == 422  # δ must be small
    assert post(body(rid, epochs=100, batch_size=1)).json()["type"] == "invalid-parameter"  # too many steps
    no_key = c.post(f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid))
    assert no_key.status_code == 400
    other = c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    assert (
        post(body(rid), path=f"/v1/datasets/{other}/semi-sensitive-models").json()["type"]
        == "not-semi-sensitive"
    )
    assert party.rows(SemiSensitiveModel) == []
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert len(charges) == 1  # the label release only


def test_what_the_request_alone_decides_comes_before_any_work(party: Party) -> None:
    """A request the tenant's budgets cannot pay whatever the dataset holds — δ over what the δ budget
    has left, ε₂ over the per-example budget — is refused for it (409) before the dataset is read or σ
    calibrated: the same request with a schedule the plan would refuse (too many steps, found only
    once the examples are counted) answers the 409, not the plan's 422 — eight at once too, while
    another tenant's release is made beside them. Nothing charged."""
    party.set_delta("1e-6")
    ds, rid = prepared(party)
    c = party.client
    steps = {"epochs": 100, "batch_size": 1}  # the plan's 422 (too many DP-SGD steps)

    def post(key: str, **extra: Any) -> httpx.Response:
        return c.post(
            f"/v1/datasets/{ds}/semi-sensitive-models",
            json=body(rid, **extra),
            headers={"Idempotency-Key": key},
        )

    assert post("plan", **steps).json()["type"] == "invalid-parameter"
    over_delta = post("delta", delta=2e-6, **steps)
    assert over_delta.status_code == 409 and over_delta.json()["type"] == "delta-budget-exhausted"
    assert over_delta.json()["delta_requested"] == 2e-6
    over_epsilon = post("epsilon", epsilon_dpsgd=11.0, **steps)
    assert over_epsilon.status_code == 409 and over_epsilon.json()["type"] == "budget-exhausted"
    assert over_epsilon.json()["per_example_budget"] == 10.0
    # eight of them at once (ε varied) while another tenant releases: all 409, its release made
    answers: list[int] = []
    eight = [
        threading.Thread(
            target=lambda n=n: answers.append(post(f"d{n}", delta=2e-6, epsilon_dpsgd=1 + n / 10).status_code)
        )
        for n in range(8)
    ]
    _, other_key = tenant_key(party.database_url, "other", "10")
    other = httpx.Client(
        base_url=str(c.base_url), headers={"Authorization": f"Bearer {other_key}"}, timeout=120
    )
    for t in eight:
        t.start()
    assert other.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    weeks = other.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    rows = "example_id,label\n" + "".join(f"e{i},{i % 53}\n" for i in range(500))
    assert (
        other.put(
            f"/v1/datasets/{weeks}/labels", content=rows, headers={"Content-Type": "text/csv"}
        ).status_code
        == 200
    )
    made = other.post(
        f"/v1/datasets/{weeks}/releases",
        json={"epsilon": 1, "recipient": "publisher"},
        headers={"Idempotency-Key": "o"},
    )
    assert made.status_code == 201, made.text
    for t in eight:
        t.join(timeout=120)
    assert answers == [409] * 8
    assert party.rows(SemiSensitiveModel) == []
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == 1  # the release


@pytest.mark.slow
def test_concurrent_models_answer_without_a_server_error(party: Party) -> None:
    """Plans and σ calibrations (seconds each) run outside any transaction and the write transaction
    holds only the charge: 20 concurrent (ε, δ) requests on SQLite (8 on PostgreSQL) on one tenant,
    whose budget admits three, answer 201 three times and 409 for the rest — never 5xx (before: 11 ×
    500 "database is locked" on SQLite after 61–73 s)."""
    party.set_delta("1e-6")
    ds, rid = prepared(party)  # ε = 3 spent; 10 per example: three models at ε₂ ≈ 2 fit
    c = party.client
    n = 20 if party.database_url.startswith("sqlite") else 8
    start = threading.Barrier(n)
    results: list[httpx.Response | None] = [None] * n

    def run(i: int) -> None:
        start.wait()
        with httpx.Client(base_url=str(c.base_url), headers=c.headers, timeout=600) as own:
            results[i] = own.post(  # a σ calibration of its own each: ε₂ = 2.000, 2.001, …
                f"/v1/datasets/{ds}/semi-sensitive-models",
                json=body(rid, epochs=1, epsilon_dpsgd=2.0 + i / 1000),
                headers={"Idempotency-Key": f"m{i}"},
            )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results if r is not None)
    errors = [r.text for r in results if r is not None and r.status_code >= 500]
    assert codes == [201] * 3 + [409] * (n - 3), errors
    models = party.rows(SemiSensitiveModel)
    assert len(models) == 3 and all(m.status == "complete" for m in models)
    spent = c.get(f"/v1/datasets/{ds}/budget").json()
    charged = 3.0 + sum(m.epsilon_dpsgd_micro for m in models) / 1e6
    assert spent["max_spent"] == spent["min_spent"] == pytest.approx(charged, abs=1e-9)
    assert charged <= 10 and spent["delta_spent"] == pytest.approx(3e-7)


def test_the_stored_noise_spends_no_more_than_was_charged_by_two_other_accountants(party: Party) -> None:
    """Recompute ε from the σ, q and T the model states (REST and its signed guarantee), with
    accountants the service does not call: a PLD accountant built here (replace-one, the service's
    adjacency) must give at most the charged ε₂, and Opacus's PRV accountant for add/remove adjacency
    — which replace-one contains, so its ε can only be smaller — too. Halving σ after calibration
    (ε ≈ 4.6 for a charged 2.0) fails both."""
    import dp_accounting
    from opacus.accountants import PRVAccountant

    party.set_delta("1e-6")
    ds, rid = prepared(party)
    made = party.client.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m"}
    )
    assert made.status_code == 201, made.text
    model = made.json()
    raw = party.client.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    g = json.loads(base64.b64decode(json.loads(raw)["payload"]))["guarantee"]
    sigma, q, steps = model["noise_multiplier"], model["sampling_rate"], model["steps"]
    assert (g["noise_multiplier"], g["sampling_rate"], g["steps"]) == (sigma, q, steps)
    charged = [e for e in party.client.get("/v1/ledger").json()["items"] if e["delta"]][-1]
    epsilon, delta = charged["epsilon"], charged["delta"]
    assert (epsilon, delta) == (2.0, 1e-7)
    pld = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    pld.compose(step, steps)
    assert pld.get_epsilon(delta) <= epsilon  # no tolerance: the calibration's final check is exact
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    assert prv.get_epsilon(delta) <= epsilon


def test_dpsgd_alone_needs_no_label_release_and_says_so_in_its_guarantee(party: Party) -> None:
    """Where the public plan skips the label phase, the model is DP-SGD alone on every labelled example:
    one (ε₂, δ) charge, addressed to the named recipient, with ε₁ = 0 and no release in its guarantee."""
    party.set_delta("1e-6")
    ds = prepared_dataset(party)
    c = party.client
    alone = {"recipient": "publisher", "epsilon_dpsgd": 2.0, "delta": 1e-7, "epochs": 2, "batch_size": 200}

    def post(payload: dict[str, Any], key: str) -> httpx.Response:
        return c.post(
            f"/v1/datasets/{ds}/semi-sensitive-models", json=payload, headers={"Idempotency-Key": key}
        )

    for idem, bad, code in (
        ("b1", {**alone, "label_release_id": "x"}, "invalid-request"),  # both sources
        ("b2", {k: v for k, v in alone.items() if k != "recipient"}, "invalid-request"),  # neither
        ("b3", {**alone, "recipient": "stranger"}, "unknown-recipient"),
    ):
        r = post(bad, idem)
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == code, r.text
    assert party.rows(SemiSensitiveModel) == [] and not [
        e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"
    ]
    made = post(alone, "alone")
    assert made.status_code == 201, made.text
    model = made.json()
    assert model["status"] == "complete" and model["label_release_id"] is None and model["examples"] == N
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert [(e["epsilon"], e["delta"], e["examples"]) for e in charges] == [(2.0, 1e-7, N)]
    raw = c.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    identity = c.get("/v1/identity").json()
    key = load_public_key(identity["public_key_pem"])
    payload = verify_model(
        raw, lambda s, k: key if (s, k) == (identity["party_id"], identity["key_id"]) else None
    )
    g = payload.guarantee
    assert (g.epsilon_labels, g.label_release_id, g.epsilon_dpsgd, g.epsilon_total) == (0.0, None, 2.0, 2.0)
    assert payload.recipient_id == "publisher"
    assert post(alone, "alone").json()["id"] == model["id"]  # a replay
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == 1


def test_the_plan_is_free_and_is_the_documented_rule(party: Party) -> None:
    """``:plan`` answers the public rule for the dataset's labelled examples: the label phase exactly
    when the paper's split leaves DP-SGD a step noise σ/B at most the threshold; never more than ε;
    refused values are problem+json; nothing is charged or stored."""
    ds = prepared_dataset(party)
    c = party.client
    url = f"/v1/datasets/{ds}/semi-sensitive-models:plan"
    small = c.post(url, json={"epsilon": 1.0, "delta": 1e-7, "batch_size": 200, "epochs": 2})
    large = c.post(url, json={"epsilon": 20.0, "delta": 1e-7, "batch_size": 1000, "epochs": 2})
    for r, eps in ((small, 1.0), (large, 20.0)):
        assert r.status_code == 200, r.text
        plan = r.json()
        assert plan["examples"] == N
        assert plan["label_phase"] is (plan["split_step_noise"] <= plan["max_step_noise"])
        assert plan["epsilon_labels"] + plan["epsilon_dpsgd"] <= eps
        if not plan["label_phase"]:
            assert (plan["epsilon_labels"], plan["epsilon_dpsgd"]) == (0.0, eps)
        else:
            assert (plan["epsilon_labels"], plan["epsilon_dpsgd"]) == (
                min(0.6 * eps, 3.0),
                eps - min(0.6 * eps, 3.0),
            )
    assert small.json()["label_phase"] is False and large.json()["label_phase"] is True
    for bad in (
        {"epsilon": -1, "delta": 1e-7},
        {"epsilon": 1.0, "delta": 0.5},
        {"epsilon": "1", "delta": 1e-7},
    ):
        r = c.post(url, json=bad)
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    weeks = c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    r = c.post(f"/v1/datasets/{weeks}/semi-sensitive-models:plan", json={"epsilon": 1.0, "delta": 1e-7})
    assert r.status_code == 422 and r.json()["type"] == "not-semi-sensitive"
    assert party.rows(SemiSensitiveModel) == []
    assert not [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
