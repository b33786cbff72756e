"""Priors from the features party, end to end: the labels party's REST API asks a real features party
over gRPC with mutual TLS (``PriceExamples``) and stores its signed answer; the features party answers
only under its tenant's pricing grant, and prices with the granted model by the public rule of
``labeldp.priors``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from labeldp.common.identity import Identity
from labeldp.common.wire.pricing import PricingAsk, signed_request, spool_ids
from labeldp.common.wire.records import read_records
from labeldp.mechanisms import integer_grid
from labeldp.priors import price_values
from labels_party.priors import load_priors
from labels_party.priors.exchange import METHOD
from labels_party.storage.db import make_engine, session_factory
from tests.support.labels_api import problem
from tests.support.metrics import scrape, value
from tests.support.priors import EXAMPLES, RELEASED, SUPPORT, WITH_FEATURES, Parties, two_parties


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parties]:
    with two_parties(tmp_path_factory.mktemp("priors")) as found:
        yield found


def fetch(p: Parties, **body: object) -> httpx.Response:
    return p.labels.post(f"/v1/datasets/{p.dataset_id}/priors", json={"recipient": "publisher", **body})


def stored(p: Parties) -> list[dict[str, object]]:
    items: list[dict[str, object]] = p.labels.get("/v1/priors").json()["items"]
    return items


def test_without_a_grant_the_publisher_refuses_and_nothing_is_stored(parties: Parties) -> None:
    """(Counted from where the module's other tests left things: they may run before it, on its
    worker, in any order.)"""
    parties.features.delete(f"/v1/senders/{parties.labels_identity['party_id']}/pricing")
    before = stored(parties)
    pricings = parties.features.get("/v1/pricings").json()["items"]
    refused = value(scrape(parties.labels_base), "labeldp_priors_total", outcome="refused")
    r = parties.labels.post(f"/v1/datasets/{parties.dataset_id}/priors", json={"recipient": "publisher"})
    body = problem(r, 502, "priors-refused")
    assert body["grpc_status"] == "PERMISSION_DENIED" and "granted" in body["detail"]
    assert stored(parties) == before
    assert parties.features.get("/v1/pricings").json()["items"] == pricings
    assert value(scrape(parties.labels_base), "labeldp_priors_total", outcome="refused") == refused + 1
    features = scrape(str(parties.features.base_url).rstrip("/"))
    assert value(features, "labeldp_pricings_total", outcome="permission_denied") >= 1


def test_another_tenants_grant_prices_nothing_for_this_one(parties: Parties) -> None:
    """Tenant pub-b grants a model of its own… it has none: pub-a's model is 404 to it; and a grant pub-b
    could make covers only requests that name pub-b."""
    sender = parties.labels_identity["party_id"]
    parties.features.delete(f"/v1/senders/{sender}/pricing")  # pub-a grants nothing (whatever ran before)
    foreign = parties.features_b.put(f"/v1/senders/{sender}/pricing", json={"model_id": parties.model_id})
    problem(foreign, 404, "not-found")
    unknown_sender = parties.features.put("/v1/senders/nobody/pricing", json={"model_id": parties.model_id})
    problem(unknown_sender, 404, "not-found")
    r = parties.labels.post(f"/v1/datasets/{parties.dataset_id}/priors", json={"recipient": "publisher"})
    assert problem(r, 502, "priors-refused")["grpc_status"] == "PERMISSION_DENIED"


def test_priors_are_the_models_prices_by_the_public_rule(parties: Parties) -> None:
    granted = parties.grant()
    assert granted.status_code == 200, granted.text
    assert (
        parties.features.get(f"/v1/senders/{parties.labels_identity['party_id']}/pricing").json()["model_id"]
        == parties.model_id
    )
    ledger_before = parties.labels.get("/v1/ledger").json()["items"]
    r = fetch(parties, max_groups=16)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["examples_requested"] == EXAMPLES and out["examples_priced"] == WITH_FEATURES
    assert 1 <= out["groups"] <= 16 and out["model_id"] == parties.model_id and out["support_k"] == 53
    assert parties.labels.get("/v1/ledger").json()["items"] == ledger_before  # nothing charged

    # the same computation, independently: the model's predictions through the publisher's REST API,
    # its held-out spread, and labeldp.priors
    model = parties.features.get(f"/v1/models/{parties.model_id}").json()
    metrics = model["metrics"]
    upper = metrics["validation_loss_vs_binned_true_labels_unbiased"]
    upper += 2 * metrics["validation_loss_vs_binned_true_labels_unbiased_se"]
    assert metrics["validation_loss_vs_binned_true_labels_unbiased_se"] > 0
    mechanism = model["provenance"]["mechanism"]  # the release's: at most its noisy prior's spread
    prior, points = np.asarray(mechanism["prior"]), np.asarray(mechanism["support"], dtype=float)
    prior = prior / prior.sum()
    variance = prior @ points**2 - (prior @ points) ** 2
    predicted = parties.features.post(
        f"/v1/models/{parties.model_id}/predictions", json={"example_ids": parties.ids[:WITH_FEATURES]}
    ).json()["predictions"]
    unexplained = np.sqrt(max(variance - np.var(predicted), 0.0))  # at least what it leaves of the prior
    sigma = max(min(max(np.sqrt(max(upper, 0.0)), unexplained), np.sqrt(variance)), 1.0)
    mu = np.full(EXAMPLES, np.nan)
    mu[:WITH_FEATURES] = predicted
    expected = price_values(mu, float(sigma), integer_grid(0, 52), 16)
    assert f"σ={sigma:.6g}" in out["rule"]

    settings = parties.labels_settings
    engine = make_engine(settings.resolved_database_url())
    try:
        got = load_priors(session_factory(engine), settings.paths(), parties.labels_tenant_id, out["id"])
    finally:
        engine.dispose()
    assert got.ids.to_pylist() == parties.ids and got.support == SUPPORT
    assert np.array_equal(got.groups, expected.groups)
    np.testing.assert_allclose(got.priors, expected.priors, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.priors.sum(axis=1), 1.0, rtol=1e-12)
    assert got.dataset_id == parties.dataset_id and got.model_id == parties.model_id

    detail = parties.labels.get(f"/v1/priors/{out['id']}").json()
    assert detail["examples_without_group"] == EXAMPLES - WITH_FEATURES
    assert [g["examples"] for g in detail["group_priors"]] == np.bincount(
        expected.groups[expected.groups >= 0], minlength=out["groups"]
    ).tolist()
    np.testing.assert_allclose([g["masses"] for g in detail["group_priors"]], expected.priors, rtol=1e-12)
    # what left the publisher is on its record: who asked, which model, how many examples and groups
    (record,) = [
        p
        for p in parties.features.get("/v1/pricings").json()["items"]
        if p["id"] == out["features_priors_id"]
    ]
    assert (record["examples"], record["priced"], record["groups"]) == (
        EXAMPLES,
        WITH_FEATURES,
        out["groups"],
    )
    assert record["answer_sha256"] == out["message_sha256"]
    # files under the data directory, named by the labels party's own id
    folder = settings.data_dir / "priors"
    assert sorted(p.name for p in folder.iterdir() if out["id"] in p.name) == [
        f"{out['id']}.frames",
        f"{out['id']}.npy",
        f"{out['id']}.parquet",
    ]
    assert pq.read_table(folder / f"{out['id']}.parquet").schema.names == [
        "example_id",
        "example_key",
        "group",
    ]


def test_a_subset_and_the_grants_cap_on_groups(parties: Parties) -> None:
    assert parties.grant(max_groups=4).status_code == 200
    subset = parties.ids[RELEASED : RELEASED + 500]
    r = fetch(parties, max_groups=64, example_ids=subset)
    assert r.status_code == 201, r.text
    assert r.json()["examples_requested"] == 500 and r.json()["groups"] <= 4
    problem(fetch(parties, example_ids=["w1", "w1"]), 422, "duplicate-example-id")
    problem(fetch(parties, example_ids=["nope"]), 422, "unknown-example-ids")
    problem(fetch(parties, max_groups=5000), 422, "invalid-request")
    problem(
        parties.labels.post(f"/v1/datasets/{parties.dataset_id}/priors", json={"recipient": "x"}),
        422,
        "unknown-recipient",
    )
    assert parties.grant().status_code == 200


def test_an_unpinned_recipient_is_refused_before_it_is_dialled(parties: Parties) -> None:
    other = parties.labels_tenant("beta")
    assert other.post("/v1/recipients", json=parties.recipient(fingerprint=None)).status_code == 201
    ds = other.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
    other.put(
        f"/v1/datasets/{ds}/labels", content=b"example_id,label\nw1,3\n", headers={"Content-Type": "text/csv"}
    )
    pricings = len(parties.features.get("/v1/pricings").json()["items"])
    problem(
        other.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher"}), 409, "recipient-not-pinned"
    )
    assert other.get("/v1/priors").json()["items"] == []
    assert len(parties.features.get("/v1/pricings").json()["items"]) == pricings


def test_grants_are_refused_for_models_that_cannot_price(parties: Parties) -> None:
    """Refused grants leave the standing one as it was (granted here: a test may run alone, or on a
    worker of its own)."""
    assert parties.grant().status_code == 200
    sender = parties.labels_identity["party_id"]
    problem(
        parties.features.put(f"/v1/senders/{sender}/pricing", json={"model_id": "not-a-uuid"}),
        404,
        "not-found",
    )
    problem(
        parties.features.put(
            f"/v1/senders/{sender}/pricing", json={"model_id": parties.model_id, "max_groups": 0}
        ),
        422,
        "invalid-request",
    )
    assert parties.features.get(f"/v1/senders/{sender}/pricing").json()["model_id"] == parties.model_id


def test_a_grant_covers_only_requests_naming_its_tenant(parties: Parties) -> None:
    """pub-a's grant stands; a recipient that names pub-b — which pinned the same labels party but
    granted nothing — is refused: a pin or grant never acts for another tenant."""
    assert parties.grant().status_code == 200
    other = parties.labels_tenant("gamma")
    tenant_b = parties.features_b.get("/v1/identity").json()["tenant_id"]
    assert other.post("/v1/recipients", json=parties.recipient(recipient_tenant=tenant_b)).status_code == 201
    ds = other.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
    other.put(
        f"/v1/datasets/{ds}/labels", content=b"example_id,label\nw1,3\n", headers={"Content-Type": "text/csv"}
    )
    r = other.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher"})
    assert problem(r, 502, "priors-refused")["grpc_status"] == "PERMISSION_DENIED"
    assert parties.features_b.get("/v1/pricings").json()["items"] == []


def test_a_request_is_answered_once(parties: Parties) -> None:
    """The same signed request sent again (a replay by whoever holds it) is ALREADY_EXISTS."""
    assert parties.grant().status_code == 200
    signer = Identity.load_or_create(parties.labels_settings.identity_path())
    now = int(time.time() * 1000)
    ask = PricingAsk(
        str(uuid.uuid4()), "advertiser", "publisher", parties.identity["tenant_id"], now, now + 60_000,
        "count", "squared", SUPPORT, 4,
    )  # fmt: skip
    path = parties.labels_settings.data_dir / "replayed.ids"
    spooled = spool_ids(path, pa.array(parties.ids[:10]))
    frames = [signed_request(ask, signer, spooled), *read_records(path)]
    certs = parties.certs
    credentials = grpc.ssl_channel_credentials(
        certs.ca.read_bytes(), certs.client_key.read_bytes(), certs.client_cert.read_bytes()
    )
    with grpc.secure_channel(f"localhost:{parties.grpc_port}", credentials) as channel:
        call = channel.stream_stream(METHOD)
        assert len(list(call(iter(frames), timeout=60))) == 2  # the signed priors and one group chunk
        with pytest.raises(grpc.RpcError) as again:
            list(call(iter(frames), timeout=60))
    assert again.value.code() == grpc.StatusCode.ALREADY_EXISTS


def test_priors_are_listed_inspected_and_deleted_by_their_tenant_alone(parties: Parties) -> None:
    assert parties.grant().status_code == 200
    made = fetch(parties, max_groups=8).json()
    pid = made["id"]
    assert pid in [p["id"] for p in stored(parties)]
    listed = parties.labels.get(f"/v1/datasets/{parties.dataset_id}/priors").json()["items"]
    assert pid in [p["id"] for p in listed]
    other = parties.labels_tenant("delta")
    for r in (
        other.get(f"/v1/priors/{pid}"),
        other.delete(f"/v1/priors/{pid}"),
        other.get(f"/v1/datasets/{parties.dataset_id}/priors"),
        other.post(f"/v1/datasets/{parties.dataset_id}/priors", json={"recipient": "publisher"}),
    ):
        problem(r, 404, "not-found")
    assert pid not in [p["id"] for p in other.get("/v1/priors").json()["items"]]
    problem(parties.labels.get("/v1/priors/not-an-id"), 404, "not-found")

    # a charged release that uses them is still running: they stay
    engine = make_engine(parties.labels_settings.resolved_database_url())
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE releases SET priors_id = :p, status = 'charged' WHERE id = :r"),
                {"p": pid, "r": parties.release_id},
            )
        body = problem(parties.labels.delete(f"/v1/priors/{pid}"), 409, "priors-in-use")
        assert body["release_id"] == parties.release_id
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE releases SET status = 'complete' WHERE id = :r"), {"r": parties.release_id}
            )
    finally:
        engine.dispose()
    files = parties.labels_settings.paths().priors_files(pid)
    assert all(p.exists() for p in files)
    assert parties.labels.delete(f"/v1/priors/{pid}").status_code == 204
    assert not any(p.exists() for p in files)
    problem(parties.labels.get(f"/v1/priors/{pid}"), 404, "not-found")
    problem(parties.labels.delete(f"/v1/priors/{pid}"), 404, "not-found")
    release = parties.labels.get(f"/v1/releases/{parties.release_id}")
    assert release.status_code == 200  # the release that used them keeps its record


def test_the_cli_grants_fetches_shows_and_deletes(parties: Parties) -> None:
    from typer.testing import CliRunner

    from labeldp.cli import app

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, list(args))
        return result.exit_code, result.stdout, result.stderr

    def key(client: httpx.Client) -> str:
        return client.headers["Authorization"].removeprefix("Bearer ")

    F = ("--url", str(parties.features.base_url).rstrip("/"), "--api-key", key(parties.features))
    L = ("--url", parties.labels_base, "--api-key", key(parties.labels))
    sender = parties.labels_identity["party_id"]
    code, out, err = run(
        "features", "pricing", "grant", sender, "--model", parties.model_id, "--max-groups", "6", *F
    )
    assert code == 0, err
    assert out.strip() == f"model {parties.model_id} prices {sender}'s examples, at most 6 groups"
    code, out, _ = run("features", "pricing", "show", sender, *F)
    assert code == 0 and parties.model_id in out
    code, out, err = run(
        "labels", "priors", "fetch", "--dataset", "weeks", "--recipient", "publisher", "-q", *L
    )
    assert code == 0, err
    pid = out.strip()
    code, out, _ = run("labels", "priors", "show", pid, *L)
    assert code == 0, out
    detail = parties.labels.get(f"/v1/priors/{pid}").json()
    assert out.splitlines()[0] == (
        f"priors {pid}: {detail['groups']} groups over {WITH_FEATURES:,} of {EXAMPLES:,} examples "
        f"({EXAMPLES - WITH_FEATURES:,} without a group), model {parties.model_id}"
    )
    assert detail["groups"] <= 6 and len(out.splitlines()) == 2 + detail["groups"]
    code, out, _ = run("labels", "priors", "list", "--dataset", "weeks", *L)
    assert code == 0 and pid in out
    code, out, _ = run("features", "pricing", "log", "--json", *F)
    assert code == 0 and detail["features_priors_id"] in [p["id"] for p in json.loads(out)]
    code, out, _ = run("labels", "priors", "delete", pid, *L)
    assert code == 0 and out.strip() == f"priors {pid} deleted"
    code, _, err = run("labels", "priors", "show", pid, *L)
    assert code == 1 and "404 not-found" in err
    code, out, _ = run("features", "pricing", "withdraw", sender, *F)
    assert code == 0
    code, _, err = run("labels", "priors", "fetch", "--dataset", "weeks", "--recipient", "publisher", *L)
    assert code == 3 and "502 priors-refused" in err and "PERMISSION_DENIED" in err
    assert parties.grant().status_code == 200


def test_which_examples_are_priced_and_how_does_not_depend_on_a_label(parties: Parties) -> None:
    """Neighbouring datasets: two datasets whose uploads differ in one example's label — the requests list
    the same IDs in the same order and the publisher answers the same groups and priors, so nothing a
    priors exchange publishes or stores depends on a raw label (privacy invariant 13)."""
    assert parties.grant().status_code == 200
    client = parties.labels_tenant("neighbours")
    assert client.post("/v1/recipients", json=parties.recipient()).status_code == 201
    stored_ids = []
    for name, label_of_w7 in (("a", 7), ("b", 52)):
        ds = client.post(
            "/v1/datasets", json={"name": name, "label_type": "count", "lo": 0, "hi": 52}
        ).json()["id"]
        rows = "".join(f"w{i},{label_of_w7 if i == 7 else i % 53}\n" for i in range(400))
        body = "example_id,label\n" + rows
        assert client.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).is_success
        made = client.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher", "max_groups": 8})
        assert made.status_code == 201, made.text
        stored_ids.append(made.json()["id"])
    paths = parties.labels_settings.paths()
    a, b = (pq.read_table(paths.priors_groups(pid)) for pid in stored_ids)
    assert a.equals(b) and a.num_rows == 400
    np.testing.assert_array_equal(
        np.load(paths.priors_matrix(stored_ids[0])), np.load(paths.priors_matrix(stored_ids[1]))
    )


def test_deleting_a_dataset_deletes_its_priors(parties: Parties) -> None:
    assert parties.grant().status_code == 200
    client = parties.labels_tenant("short-lived")
    assert client.post("/v1/recipients", json=parties.recipient()).status_code == 201
    ds = client.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    client.put(
        f"/v1/datasets/{ds}/labels",
        content=b"example_id,label\nw1,3\nw2,4\n",
        headers={"Content-Type": "text/csv"},
    )
    made = client.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher"})
    assert made.status_code == 201, made.text
    files = parties.labels_settings.paths().priors_files(made.json()["id"])
    assert all(p.exists() for p in files)
    assert client.delete(f"/v1/datasets/{ds}").status_code == 204
    problem(client.get(f"/v1/priors/{made.json()['id']}"), 404, "not-found")
    assert not any(p.exists() for p in files) and client.get("/v1/priors").json()["items"] == []


def test_an_unreachable_publisher_is_retried_then_reported_without_network_detail(parties: Parties) -> None:
    from labeldp.processes import free_port

    client = parties.labels_tenant("far-away")
    gone = parties.recipient(grpc_address=f"127.0.0.1:{free_port()}", tls_ca_pem=None)
    assert client.post("/v1/recipients", json=gone).status_code == 201
    ds = client.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    client.put(
        f"/v1/datasets/{ds}/labels", content=b"example_id,label\nw1,3\n", headers={"Content-Type": "text/csv"}
    )
    body = problem(
        client.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher"}), 502, "priors-refused"
    )
    assert (
        body["grpc_status"] == "UNAVAILABLE" and body["attempts"] == parties.labels_settings.delivery_attempts
    )
    assert "could not be reached" in body["reason"] and "refused" not in body["reason"].lower().replace(
        "priors-refused", ""
    )
    assert client.get("/v1/priors").json()["items"] == []
