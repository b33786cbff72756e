"""Releases, previews and the budget over the labels party's REST API (real HTTP, SQLite and
PostgreSQL): charged once and stored, idempotent replays free, exhausted budgets refused (409) and not
reset by re-uploads, validation errors charging nothing, previews free, concurrent releases never
overspending, and the budget's spend distribution."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from sqlalchemy import text, update

from labeldp.mechanisms import DEFAULT_MODEL_CAPACITY
from labels_party.budget.idempotency import previous_digest
from labels_party.releases.plan import ReleaseRequest
from labels_party.storage.db import make_engine
from labels_party.storage.orm import Release as ReleaseRow
from tests.support.labels_api import (
    WEEKS,
    Api,
    charges,
    csv,
    dataset,
    problem,
    race,
    release,
    upload,
    with_recipient,
)


def test_release_lifecycle_and_stored_output(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "2.0"))
    ds = dataset(c)
    assert upload(c, ds, csv([(f"ex{i}", i % 53) for i in range(500)])).status_code == 200
    r = release(c, ds, "k1", epsilon=1.0, loss="poisson")
    assert r.status_code == 201, r.text
    rel = r.json()
    assert rel["status"] == "complete" and rel["examples"] == 500
    assert rel["epsilon"] == 1.0 and rel["epsilon_charged_micro"] == 1_000_000
    assert rel["bins"] == sorted(rel["bins"]) and rel["mechanism"]["implemented_epsilon"] <= 1.0
    assert c.get(f"/v1/releases/{rel['id']}").json()["id"] == rel["id"]
    assert [x["id"] for x in c.get(f"/v1/datasets/{ds}/releases").json()["items"]] == [rel["id"]]
    out = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rel['id']}/noisy-labels").content))
    assert out.num_rows == 500 and set(out.column("example_id").to_pylist()) == {f"ex{i}" for i in range(500)}
    assert max(out.column("bin").to_pylist()) < len(rel["bins"])
    entries = charges(c)
    assert len(entries) == 1 and entries[0]["release_id"] == rel["id"] and entries[0]["examples"] == 500
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert budget == {
        "per_example_budget": 2.0,
        "examples": 500,
        "max_spent": 1.0,
        "min_spent": 1.0,
        "epsilon_asked": 1.0,
        "can_take": 500,
        "spend_distribution": [{"spent_from": 1.0, "spent_to": 1.0, "count": 500}],
        # every example is its own user (no user_id): an example-level release charged each ε once
        "users": {
            "per_user_budget": None,
            "users": 500,
            "spent": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "max": 1.0},
            "epsilon_user_asked": 1.0,
            "can_take": None,
            "spend_distribution": [{"spent_from": 1.0, "spent_to": 1.0, "count": 500}],
        },
        "delta_budget": 0.0,  # a pure-ε tenant
        "delta_spent": 0.0,
    }


def test_idempotency_key_is_required_and_replays_charge_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    r = c.post(f"/v1/datasets/{ds}/releases", json={"epsilon": 0.5, "recipient": "publisher"})
    problem(r, 400, "idempotency-key-required")
    first = release(c, ds, "same")
    again = release(c, ds, "same")
    assert first.status_code == 201 and again.status_code == 200
    assert again.content == first.content  # the first answer, byte for byte ...
    assert first.headers["Idempotent-Replayed"] == "false" and again.headers["Idempotent-Replayed"] == "true"
    # ... also when the retry states what the first left to its default (or the reverse): the request
    # is compared resolved, and an integer ε is the same number as its float
    stated = release(c, ds, "same", privacy_unit="example", loss="squared")
    assert stated.status_code == 200 and stated.content == first.content, stated.text
    # an objective left out follows from ε₂ (the unbiased randomizer, or the label objective below
    # 0.2): naming the model objective asks for another release
    named = {"objective": "model", "model_capacity": DEFAULT_MODEL_CAPACITY}
    assert problem(release(c, ds, "same", **named), 422, "idempotency-key-reused")["fields"] == [
        "model_capacity",
        "objective",
    ]
    whole = release(c, ds, "whole", epsilon=1)
    assert whole.status_code == 201, whole.text
    assert release(c, ds, "whole", epsilon=1.0, loss="squared").content == whole.content
    reused = problem(release(c, ds, "same", epsilon=0.25, loss="absolute"), 422, "idempotency-key-reused")
    # the names of what differs, never the values
    # (the absolute loss's objective is label whatever ε₂; the first left its own to ε₂)
    assert reused["fields"] == ["epsilon", "loss", "objective"]
    assert reused["detail"] == (
        "this Idempotency-Key was used for a different request (it differed in epsilon, loss, "
        "objective); nothing was charged for this one"
    )
    assert "0.25" not in reused["detail"] and "absolute" not in reused["detail"]
    other = problem(
        release(c, ds, "same", example_ids=["a"], objective="label"), 422, "idempotency-key-reused"
    )
    assert other["fields"] == ["example_ids", "objective"]
    assert len(charges(c)) == 2


def test_a_release_made_before_requests_were_resolved_replays_by_its_digest(api: Api) -> None:
    """A release from before migration 0015 keeps only the digest of its request as sent: the same
    body replays; another is refused, without names (none were kept)."""
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    first = release(c, ds, "old", loss="squared")
    legacy = ReleaseRequest(0.5, "squared", "publisher").digest(ds)
    engine = make_engine(api.database_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE releases SET request = NULL, request_hash = :h WHERE id = :id"),
            {"h": legacy, "id": first.json()["id"]},
        )
    engine.dispose()
    assert release(c, ds, "old", loss="squared").content == first.content
    reused = problem(release(c, ds, "old", loss="poisson"), 422, "idempotency-key-reused")
    assert reused["fields"] == [] and len(charges(c)) == 1


def test_a_release_keyed_under_the_previous_resolution_still_replays(api: Api) -> None:
    """Version 2 of the resolved request stored an omitted objective as the loss's default (model for
    the squared loss): such a key's retry leaving the objective out still replays; a new key's
    request with the objective left out never matches one that names it (version 3)."""
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    first = release(c, ds, "v2", loss="squared")
    stored = {**first_request(api, first.json()["id"]), "objective": "model"}
    stored["model_capacity"] = DEFAULT_MODEL_CAPACITY
    engine = make_engine(api.database_url)
    with engine.begin() as conn:
        conn.execute(  # through the ORM's column types: JSON on either database
            update(ReleaseRow)
            .where(ReleaseRow.id == first.json()["id"])
            .values(request_hash=previous_digest(stored), request=stored)
        )
    engine.dispose()
    assert release(c, ds, "v2", loss="squared").content == first.content
    # a different retry is refused naming what differs under the row's own resolution: ε alone
    assert problem(release(c, ds, "v2", epsilon=0.75), 422, "idempotency-key-reused")["fields"] == ["epsilon"]
    fresh = release(c, ds, "v3", loss="squared")
    assert fresh.status_code == 201, fresh.text
    problem(release(c, ds, "v3", objective="model"), 422, "idempotency-key-reused")
    # for a loss whose default never follows ε₂, stating the default objective is the same request
    absolute = release(c, ds, "abs", loss="absolute")
    assert release(c, ds, "abs", loss="absolute", objective="label").content == absolute.content
    assert len(charges(c)) == 3


def first_request(api: Api, release_id: str) -> dict[str, object]:
    """The resolved request a release's key is held to, as stored."""
    engine = make_engine(api.database_url)
    with engine.begin() as conn:
        raw = conn.execute(
            text("SELECT request FROM releases WHERE id = :id"), {"id": release_id}
        ).scalar_one()
    engine.dispose()
    return dict(json.loads(raw) if isinstance(raw, str) else raw)


def test_exhausted_budget_is_409_and_reuploading_ids_does_not_reset_it(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "1.0"))
    ds1 = dataset(c, "first")
    upload(c, ds1, csv([("a", 1), ("b", 2), ("c", 3)]))
    assert release(c, ds1, "r1", epsilon=0.75).status_code == 201
    body = problem(release(c, ds1, "r2", epsilon=0.5), 409, "budget-exhausted")
    assert body["examples_lacking_budget"] == 3
    ds2 = dataset(c, "copy")  # same example IDs under a new name
    upload(c, ds2, csv([("a", 1), ("b", 2), ("c", 3), ("d", 4)]))
    body = problem(release(c, ds2, "r3", epsilon=0.5), 409, "budget-exhausted")
    assert body["examples_lacking_budget"] == 3 and body["examples_requested"] == 4
    assert len(charges(c)) == 1
    assert release(c, ds2, "r4", epsilon=0.5, example_ids=["d"]).status_code == 201  # parallel composition


def test_a_budget_refusal_says_what_the_typical_and_the_worst_example_have_spent_and_left(
    api: Api,
) -> None:
    """Machine-readable spent / left over the release's examples (the median and the most spent, never
    one example's by key), the same numbers in words, and nothing charged."""
    c = with_recipient(api.tenant("acme", "1.0"))
    ds = dataset(c)
    upload(c, ds, csv([(e, 1) for e in "abcde"]))
    assert release(c, ds, "one", epsilon=0.75, example_ids=["a"]).status_code == 201
    body = problem(release(c, ds, "all", epsilon=0.5), 409, "budget-exhausted")
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).json()
    assert (body["examples_lacking_budget"], body["examples_requested"]) == (1, 5)
    assert (body["epsilon_requested"], body["per_example_budget"]) == (0.5, budget["per_example_budget"])
    assert body["spent"] == {"typical": 0.0, "worst": budget["max_spent"]}  # four of five spent nothing
    assert body["left"] == {"typical": 1.0, "worst": 1.0 - budget["max_spent"]}
    assert body["detail"] == (
        "1 of 5 examples lack budget for ε = 0.5: of the per-example budget 1, the typical example has "
        "spent 0 (1 left), the worst 0.75 (0.25 left)"
    )
    assert len(charges(c)) == 1  # nothing charged by the refusal
    assert c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).json() == budget


def test_release_validation_errors_store_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    problem(release(c, ds, "v1", recipient="stranger"), 422, "unknown-recipient")
    problem(release(c, ds, "v2", loss="hinge"), 422, "invalid-request")
    problem(release(c, ds, "v3", epsilon=-1), 422, "invalid-request")
    split = problem(release(c, ds, "v4", epsilon=1.0, epsilon_prior=1.0), 422, "invalid-epsilon")
    assert split["parameter"] == "epsilon_prior"  # the field, for a form to show it at
    unknown = problem(release(c, ds, "v5", example_ids=["a", "zzz", "yyy"]), 422, "unknown-example-ids")
    assert unknown["example_ids"] == ["zzz", "yyy"] and unknown["unknown"] == 2  # named, in the order sent
    problem(release(c, ds, "v6", loss="zero_one"), 422, "invalid-loss")
    empty = dataset(c, "empty")
    problem(release(c, empty, "v7"), 422, "empty-release")
    assert charges(c) == [] and c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []


def test_preview_is_free(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(300)]))
    r = c.post(f"/v1/datasets/{ds}/releases:preview", json={"epsilon": 1.0, "recipient": "publisher"})
    assert (
        r.status_code == 200
        and r.json()["m"] == len(r.json()["bin_values"])
        and r.json()["expected_loss"] > 0
    )
    assert charges(c) == []


def test_classes_are_released_and_previewed_with_rr_top_k(api: Api) -> None:
    """The factory picks the mechanism from the loss, for releases and previews alike: categorical
    labels and binary labels under the 0-1 loss use RR-Top-k over the classes."""
    c = with_recipient(api.tenant("acme", "10"))
    cat = dataset(c, "colors", label_type="categorical", lo=0, hi=4)
    upload(c, cat, csv([(f"e{i}", [0, 0, 0, 1, 1, 2, 3, 4][i % 8]) for i in range(800)]))
    preview = c.post(f"/v1/datasets/{cat}/releases:preview", json={"epsilon": 1.0, "recipient": "publisher"})
    assert preview.status_code == 200, preview.text
    assert preview.json()["mechanism"]["kind"] == "rr_top_k" and preview.json()["bin_values"][0] == 0.0
    problem(release(c, cat, "sq", loss="squared"), 422, "invalid-loss")
    r = release(c, cat, "cat", epsilon=2.0, loss="zero_one")
    assert r.status_code == 201, r.text
    rel = r.json()
    mechanism = rel["mechanism"]
    assert mechanism["kind"] == "rr_top_k" and mechanism["loss"] == "zero_one"
    assert mechanism["support"] == [0.0, 1.0, 2.0, 3.0, 4.0] and rel["bins"] == mechanism["bin_values"]
    assert mechanism["implemented_epsilon"] <= mechanism["epsilon_randomize"] <= rel["epsilon"]
    out = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rel['id']}/noisy-labels").content))
    assert out.num_rows == 800 and max(out.column("bin").to_pylist()) < len(rel["bins"])
    binary = dataset(c, "converted", label_type="binary", lo=0, hi=1)
    assert upload(c, binary, csv([(f"b{i}", int(i % 3 == 0)) for i in range(300)])).status_code == 200
    for loss, kind in (("zero_one", "rr_top_k"), ("squared", "rr_on_bins")):
        p = c.post(
            f"/v1/datasets/{binary}/releases:preview", json={"epsilon": 1.0, "recipient": "p", "loss": loss}
        )
        assert p.status_code == 200 and p.json()["mechanism"]["kind"] == kind, p.text
    assert len(charges(c)) == 1  # previews are free


@pytest.mark.slow
def test_64_concurrent_releases_when_budget_admits_exactly_10(api: Api) -> None:
    for trial in range(20):
        c = with_recipient(api.tenant(f"t{trial}", "1.0"))
        ds = dataset(c)
        upload(c, ds, csv([(f"e{i}", i % 53) for i in range(50)]))
        results = race(64, lambda i, c=c, ds=ds: release(c, ds, f"k{i}", epsilon=0.1))
        codes = sorted(r.status_code for r in results)
        assert codes.count(201) == 10 and codes.count(409) == 54, codes
        assert len(charges(c)) == 10
        assert c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.1}).json()["can_take"] == 0


def test_same_idempotency_key_concurrently_makes_one_release(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", i % 53) for i in range(50)]))
    results = race(16, lambda i: release(c, ds, "one-key"))
    assert {r.status_code for r in results} <= {200, 201}
    assert len({r.json()["id"] for r in results}) == 1
    assert len(charges(c)) == 1
    assert json.loads(c.get("/v1/ledger").text)["items"][-1]["kind"] == "charge"


def test_previews_can_use_a_released_or_a_public_prior(api: Api) -> None:
    """The default preview optimizes for the exact histogram (and says so); a preview can instead use
    the noisy prior an earlier release published, or a public prior — free either way."""
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c, **WEEKS)
    upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(3000)]))
    url = f"/v1/datasets/{ds}/releases:preview"
    exact = c.post(url, json={"epsilon": 1.0, "recipient": "publisher"}).json()
    assert exact["prior_source"] == "labels"
    rel = release(c, ds, "r", epsilon=1.0).json()
    released = c.post(
        url, json={"epsilon": 1.0, "recipient": "publisher", "prior_release_id": rel["id"]}
    ).json()
    assert released["prior_source"] == "release"
    assert released["mechanism"]["prior"] == pytest.approx(rel["mechanism"]["prior"], rel=1e-12)
    uniform = [1.0] * 53
    public = c.post(url, json={"epsilon": 1.0, "recipient": "publisher", "public_prior": uniform}).json()
    assert public["prior_source"] == "public" and public["mechanism"]["prior"] == [1 / 53] * 53
    problem(
        c.post(url, json={"epsilon": 1, "recipient": "p", "public_prior": [1.0, 2.0]}), 422, "invalid-prior"
    )
    problem(c.post(url, json={"epsilon": 1, "recipient": "p", "prior_release_id": "nope"}), 404, "not-found")
    other = dataset(c, "other", **WEEKS)
    upload(c, other, csv([("x", 1)]))
    body = {"epsilon": 1, "recipient": "p", "prior_release_id": rel["id"]}
    problem(c.post(f"/v1/datasets/{other}/releases:preview", json=body), 422, "invalid-prior")
    assert len(charges(c)) == 1  # only the release


def test_the_budget_states_the_spend_distribution_of_examples_and_users(api: Api) -> None:
    """Two releases over different examples leave two spend levels; the users (two examples each)
    spent twice as much as their examples (group privacy), as counts of examples and of users."""
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c)
    rows = [(f"e{i}", i % 10, f"u{i // 2}") for i in range(10)]
    body = "example_id,label,user_id\n" + "".join(f"{e},{y},{u}\n" for e, y, u in rows)
    assert upload(c, ds, body.encode()).status_code == 200
    assert release(c, ds, "all", epsilon=1.0).status_code == 201
    assert release(c, ds, "some", epsilon=0.5, example_ids=["e0", "e1", "e2", "e3"]).status_code == 201
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert budget["spend_distribution"] == [
        {"spent_from": 1.0, "spent_to": 1.0, "count": 6},
        {"spent_from": 1.5, "spent_to": 1.5, "count": 4},
    ]
    assert budget["users"]["spend_distribution"] == [
        {"spent_from": 2.0, "spent_to": 2.0, "count": 3},
        {"spent_from": 3.0, "spent_to": 3.0, "count": 2},
    ]
