"""Privacy at the seams of the semi-sensitive path, through the real HTTP API (SQLite and PostgreSQL).

Every charged path — a hybrid model on an example-level and on a user-level label release, and DP-SGD
alone — run on two neighbouring datasets of one click universe: everything they publish and charge
other than noisy labels, the noisy prior and the weights must be identical (invariants 10 and 12):

* **a label row appears outside the universe** (a conversion for a click the universe does not list:
  with a universe, having a row is itself a label, so nothing may depend on it);
* **one label changes**.

And a job that builds on a release reads what the release froze: a user map changed in between is
refused (``user-map-changed``), nothing charged — the release's τ and kept set hold only for the users
it used.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")  # the dpsgd extra; `make test` installs it

from labeldp.mechanisms import float_at_most
from labels_party.semi_sensitive.plan import SemiSensitiveRequest, plan_model
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import SemiSensitiveModel
from tests.support.semi_sensitive_models import SPEC, Party, parquet

CLICKS = 240
USER_OF = [f"u{i // 3}" if i < 180 else None for i in range(CLICKS)]  # 60 users of 3 clicks, 60 alone
SCHEDULE: dict[str, Any] = {"delta": 1e-7, "epochs": 1, "batch_size": 60}


def clicks() -> tuple[pa.Table, pa.Table, pa.Table]:
    """The universe (with users), the label rows (every click: a label release for a model lists
    labelled examples only) and the publisher's non-sensitive rows."""
    g = np.random.default_rng(11)
    cart, shoes = g.integers(0, 11, CLICKS), g.integers(0, 2, CLICKS)
    ids = [f"c{i}" for i in range(CLICKS)]
    universe = pa.table({"example_id": ids, "user_id": pa.array(USER_OF, pa.string())})
    labels = pa.table(
        {
            "example_id": ids,
            "label": ((0.6 * cart - 3 + 1.5 * shoes + g.logistic(size=CLICKS)) > 0).astype(np.int64),
            "cart_adds": cart,
            "remarketing": np.where(shoes == 1, "shoes", "none"),
        }
    )
    features = pa.table(
        {
            "example_id": ids,
            "hour": g.integers(0, 24, CLICKS),
            "device": np.where(g.integers(0, 2, CLICKS) == 1, "mobile", "desktop"),
        }
    )
    return universe, labels, features


def neighbour(kind: str, labels: pa.Table) -> pa.Table:
    if kind == "a label row appears outside the universe":
        extra = pa.table(
            {"example_id": ["outside-0"], "label": [1], "cart_adds": [9], "remarketing": ["shoes"]}
        )
        return pa.concat_tables([labels, extra.cast(labels.schema)])
    flipped = labels.column("label").to_pylist()
    flipped[7] = 1 - flipped[7]
    return labels.set_column(1, "label", pa.array(flipped, pa.int64()))


def put(c: Any, path: str, table: pa.Table) -> None:
    r = c.put(path, content=parquet(table), headers={"Content-Type": "application/vnd.apache.parquet"})
    assert r.status_code == 200, r.text


def dataset(p: Party, labels: pa.Table, universe: pa.Table, features: pa.Table) -> str:
    c = p.client
    assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = str(c.post("/v1/datasets", json=SPEC).json()["id"])
    put(c, f"/v1/datasets/{ds}/universe", universe)
    put(c, f"/v1/datasets/{ds}/labels", labels)
    put(c, f"/v1/datasets/{ds}/non-sensitive-features", features)
    return ds


def post(p: Party, path: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    r = p.client.post(path, json=body, headers={"Idempotency-Key": key})
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def guarantee(p: Party, model: dict[str, Any]) -> dict[str, Any]:
    """The signed message's guarantee, without what names this run (its release id)."""
    raw = p.client.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    g: dict[str, Any] = json.loads(base64.b64decode(json.loads(raw)["payload"]))["guarantee"]
    g.pop("label_release_id", None)
    return g


def public_view(p: Party, labels: pa.Table) -> dict[str, Any]:
    """Everything published or charged by every charged path of the semi-sensitive models, besides
    noisy labels, the noisy prior and the weights."""
    p.set_delta("1e-3")
    universe, _, features = clicks()
    ds = dataset(p, labels, universe, features)
    models = f"/v1/datasets/{ds}/semi-sensitive-models"
    plan = p.client.post(f"{models}:plan", json={"epsilon": 3.0, **SCHEDULE})
    assert plan.status_code == 200, plan.text
    example = post(p, f"/v1/datasets/{ds}/releases", "r", {"epsilon": 2.0, "recipient": "publisher"})
    user = post(
        p,
        f"/v1/datasets/{ds}/releases",
        "ru",
        {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": 2, "recipient": "publisher"},
    )
    made = {
        "hybrid": post(p, models, "m", {"label_release_id": example["id"], "epsilon_dpsgd": 1.0, **SCHEDULE}),
        "hybrid, user level": post(
            p, models, "mu", {"label_release_id": user["id"], "epsilon_dpsgd": 1.0, **SCHEDULE}
        ),
        "DP-SGD alone": post(p, models, "a", {"recipient": "publisher", "epsilon_dpsgd": 1.5, **SCHEDULE}),
    }
    fields = ("examples", "epsilon_dpsgd", "delta", "noise_multiplier", "sampling_rate", "steps", "clip_norm")
    ledger = [
        (e["kind"], e["epsilon_micro"], e["examples"], e["users"], e["user_epsilon"], e["delta"])
        for e in p.client.get("/v1/ledger").json()["items"]
    ]
    return {
        "plan": plan.json(),
        "releases": [(r["examples"], r["users"], r["examples_capped"]) for r in (example, user)],
        "models": {k: ({f: m[f] for f in fields}, guarantee(p, m)) for k, m in made.items()},
        "ledger": ledger,
        "budget": p.client.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).json(),
    }


@pytest.mark.parametrize("kind", ["a label row appears outside the universe", "one label changes"])
def test_neighbouring_datasets_publish_and_charge_the_same_on_every_model_path(
    party: Party, kind: str
) -> None:
    _, labels, _ = clicks()
    view = public_view(party, labels)
    view_prime = public_view(party.tenant("d-prime"), neighbour(kind, labels))
    assert view == view_prime
    # what they agree on is the universe, not the label rows
    assert view["plan"]["examples"] == CLICKS
    alone = view["models"]["DP-SGD alone"][0]
    assert alone["examples"] == CLICKS and alone["sampling_rate"] == 60 / CLICKS
    user_level = view["models"]["hybrid, user level"][1]
    assert user_level["contribution_bound"] == 2 and user_level["examples"] == CLICKS - 60  # ≤ 2 of 3 each
    assert [row[3] for row in view["ledger"] if row[0] == "charge"] == [120] * 5  # the universe's users


def test_a_user_map_changed_after_a_release_is_refused_for_models_built_on_it(party: Party) -> None:
    """The issue's case: 300 clicks each its own user, a user-level release at τ = 1; then the universe
    maps e0–e9 to one user. A hybrid model on that release would charge that user 10·ε₂ while stating
    τ = 1 and a δ for one example — its guarantee holds for the release's users, not today's. Refused
    before anything is charged; under the unchanged map the same request completes and says τ = 1."""
    n = 300
    p = party
    p.set_delta("1e-2")
    p.set_user_budget("20")
    g = np.random.default_rng(5)
    ids = [f"e{i}" for i in range(n)]
    universe = pa.table({"example_id": ids, "user_id": pa.nulls(n, pa.string())})
    labels = pa.table(
        {
            "example_id": ids,
            "label": g.integers(0, 2, n),
            "cart_adds": g.integers(0, 11, n),
            "remarketing": np.where(g.integers(0, 2, n) == 1, "shoes", "none"),
        }
    )
    features = pa.table({"example_id": ids, "hour": g.integers(0, 24, n), "device": np.full(n, "mobile")})
    ds = dataset(p, labels, universe, features)
    release = post(
        p,
        f"/v1/datasets/{ds}/releases",
        "r",
        {"privacy_unit": "user", "epsilon_user": 1.0, "contribution_bound": 1, "recipient": "publisher"},
    )
    merged = pa.table(
        {"example_id": ids, "user_id": pa.array(["heavy"] * 10 + [None] * (n - 10), pa.string())}
    )
    put(p.client, f"/v1/datasets/{ds}/universe", merged)  # accepted: label rows carry no users
    before = p.client.get("/v1/ledger").json()["items"]
    body = {
        "label_release_id": release["id"],
        "epsilon_dpsgd": 1.0,
        "delta": 1e-6,
        "epochs": 1,
        "batch_size": 100,
    }
    refused = p.client.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body, headers={"Idempotency-Key": "m"}
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"] == "user-map-changed" and "10 of release" in refused.json()["detail"]
    assert p.client.get("/v1/ledger").json()["items"] == before and p.rows(SemiSensitiveModel) == []
    # the map as the release froze it: the same request completes and states the release's τ
    put(p.client, f"/v1/datasets/{ds}/universe", universe)
    model = post(p, f"/v1/datasets/{ds}/semi-sensitive-models", "m2", body)
    g2 = guarantee(p, model)
    assert (g2["unit"], g2["contribution_bound"], g2["examples"]) == ("user", 1, n)
    [charge] = [e for e in p.client.get("/v1/ledger").json()["items"] if e["kind"] == "charge" and e["delta"]]
    assert charge["users"] == n and charge["user_epsilon"] == 1.0  # each user pays ε₂ once


def test_dpsgd_alone_refuses_a_universe_with_unlabelled_clicks(party: Party) -> None:
    """With a universe, a click without a label row cannot train (having a row is its label): DP-SGD alone
    and its plan answer 422 ``unusable-dataset``, nothing charged."""
    party.set_delta("1e-3")
    universe, labels, features = clicks()
    ds = dataset(party, labels.slice(0, CLICKS - 1), universe, features)
    models = f"/v1/datasets/{ds}/semi-sensitive-models"
    plan = party.client.post(f"{models}:plan", json={"epsilon": 3.0, **SCHEDULE})
    assert plan.status_code == 422 and plan.json()["type"] == "unusable-dataset"
    alone = {"recipient": "publisher", "epsilon_dpsgd": 1.0, **SCHEDULE}
    refused = party.client.post(models, json=alone, headers={"Idempotency-Key": "a"})
    assert refused.status_code == 422 and refused.json()["type"] == "unusable-dataset"
    assert "1 examples of the universe have no label" in refused.json()["detail"]
    assert [e for e in party.client.get("/v1/ledger").json()["items"] if e["kind"] == "charge"] == []
    assert party.rows(SemiSensitiveModel) == []


def test_dpsgd_noise_is_calibrated_to_the_charge_rounded_down(party: Party) -> None:
    """ε₂ = 0.1 is charged as 100,000 micro-ε; the double 0.1 lies above one tenth, so σ must be
    calibrated to the largest double not above the charge — never to the request's float."""
    from fractions import Fraction

    from labeldp.semi_sensitive import epsilon_spent

    party.set_delta("1e-3")
    universe, labels, features = clicks()
    ds = dataset(party, labels, universe, features)
    request = SemiSensitiveRequest(None, 0.1, 1e-7, epochs=1, batch_size=60, recipient="publisher")
    engine = make_engine(party.database_url)
    try:
        plan = plan_model(session_factory(engine), _data_dir(party), party.tenant_id, ds, request)
    finally:
        engine.dispose()
    assert plan.epsilon_micro == 100_000
    assert plan.epsilon_dpsgd == float_at_most(Fraction(1, 10)) < 0.1
    assert Fraction(epsilon_spent(plan.schedule, plan.noise_multiplier, 1e-7)) <= Fraction(1, 10)


def _data_dir(p: Party) -> Any:
    from labels_party.storage.data_dir import DataDir

    return DataDir(p.data_dir)


def test_a_model_is_refused_on_a_feature_aware_release(party: Party) -> None:
    """A seam of two features: the hybrid's label phase reads one mechanism's transition, and a
    feature-aware release randomized its examples with one mechanism per group — building on it is
    refused (409 ``release-has-groups``) before anything is charged. The priors are stored as the
    labels party stores a features party's checked answer (its own store, files and row)."""
    from labeldp.v1 import priors_pb2 as ppb
    from labels_party.budget.ledger_keys import example_keys
    from labels_party.priors import PriorsStore
    from labels_party.storage.orm import Priors, Recipient

    n, p = 200, party
    p.set_delta("1e-2")
    g = np.random.default_rng(3)
    ids = [f"e{i}" for i in range(n)]
    universe = pa.table({"example_id": ids, "user_id": pa.nulls(n, pa.string())})
    labels = pa.table(
        {
            "example_id": ids,
            "label": g.integers(0, 2, n),
            "cart_adds": g.integers(0, 11, n),
            "remarketing": np.where(g.integers(0, 2, n) == 1, "shoes", "none"),
        }
    )
    features = pa.table({"example_id": ids, "hour": g.integers(0, 24, n), "device": np.full(n, "mobile")})
    ds = dataset(p, labels, universe, features)
    with p.session() as s:
        recipient = s.query(Recipient).filter_by(tenant_id=p.tenant_id).one().id
    header = ppb.PriorsHeader(support=[0.0, 1.0])
    frame = ppb.PriorsFrame(header=ppb.SignedPriors(header=header.SerializeToString())).SerializeToString()
    row = Priors(
        id="00000000-0000-4000-8000-00000000000a",
        tenant_id=p.tenant_id,
        dataset_id=ds,
        recipient_id=recipient,
        features_priors_id="00000000-0000-4000-8000-00000000000b",
        request_id="00000000-0000-4000-8000-00000000000c",
        model_id="00000000-0000-4000-8000-00000000000d",
        rule="two groups",
        loss="squared",
        groups=2,
        max_groups=2,
        support_k=2,
        examples_requested=n,
        examples_priced=n,
        message_sha256="0" * 64,
    )
    engine = make_engine(p.database_url)
    try:
        PriorsStore(session_factory(engine), _data_dir(p)).add(
            row,
            pa.array(ids),
            np.asarray(example_keys(ids), dtype=np.int64),
            np.arange(n, dtype=np.int64) % 2,
            np.array([[0.8, 0.2], [0.3, 0.7]]),
            [frame],
        )
    finally:
        engine.dispose()
    release = post(
        p,
        f"/v1/datasets/{ds}/releases",
        "grouped",
        {"epsilon": 1.0, "recipient": "publisher", "prior": {"from": "features-party", "priors_id": row.id}},
    )
    assert release["priors_id"] == row.id
    before = p.client.get("/v1/ledger").json()["items"]
    body = {
        "label_release_id": release["id"],
        "epsilon_dpsgd": 1.0,
        "delta": 1e-6,
        "epochs": 1,
        "batch_size": 50,
    }
    refused = p.client.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body, headers={"Idempotency-Key": "m"}
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"] == "release-has-groups"
    assert p.client.get("/v1/ledger").json()["items"] == before and p.rows(SemiSensitiveModel) == []


def test_a_model_is_refused_on_an_unbiased_release(party: Party) -> None:
    """A seam of two features: the hybrid's label phase trains through a release's keep and move
    probabilities, and the unbiased randomizer's outputs (here on the two labels: four outputs, two of
    them outside [0, 1]) have none — building on it is refused (409 ``release-is-unbiased``) before
    anything is charged, and an RR-on-Bins release of the same labels is accepted."""
    party.set_delta("1e-3")
    universe, labels, features = clicks()
    ds = dataset(party, labels, universe, features)
    unbiased = post(
        party,
        f"/v1/datasets/{ds}/releases",
        "u",
        {"epsilon": 2.0, "recipient": "publisher", "mechanism": "unbiased"},
    )
    assert unbiased["mechanism"]["kind"] == "unbiased"
    before = party.client.get("/v1/ledger").json()["items"]
    body = {"label_release_id": unbiased["id"], "epsilon_dpsgd": 1.0, **SCHEDULE}
    refused = party.client.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body, headers={"Idempotency-Key": "m"}
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"] == "release-is-unbiased"
    assert party.client.get("/v1/ledger").json()["items"] == before
    assert party.rows(SemiSensitiveModel) == []
    rr = post(party, f"/v1/datasets/{ds}/releases", "rr", {"epsilon": 2.0, "recipient": "publisher"})
    assert rr["mechanism"]["kind"] == "rr_on_bins"  # the default on two points
    model = post(
        party,
        f"/v1/datasets/{ds}/semi-sensitive-models",
        "m2",
        {"label_release_id": rr["id"], "epsilon_dpsgd": 1.0, **SCHEDULE},
    )
    assert model["label_release_id"] == rr["id"]
