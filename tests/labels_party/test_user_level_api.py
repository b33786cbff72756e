"""User-level releases and the per-user ledger through the labels party's real HTTP API (SQLite and
PostgreSQL): capping without labels, what a release states, group-privacy charges of example-level
releases, and a per-user budget that concurrent releases over several datasets never overspend."""

from __future__ import annotations

import io
from collections import Counter

import httpx
import numpy as np
import pyarrow.parquet as pq

from labeldp.mechanisms import PublishedMechanism
from tests.support.labels_api import (
    Api,
    charges,
    dataset,
    heavy_users,
    problem,
    race,
    release,
    upload,
    users_csv,
    with_recipient,
)


def post_release(c: httpx.Client, ds: str, key: str, body: dict[str, object]) -> httpx.Response:
    url, payload = f"/v1/datasets/{ds}/releases", {"recipient": "publisher", **body}
    return c.post(url, json=payload, headers={"Idempotency-Key": key})


def user_release(c: httpx.Client, ds: str, key: str, **body: object) -> httpx.Response:
    return post_release(
        c, ds, key, {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": 2, **body}
    )


def test_a_user_level_release_caps_by_user_and_states_its_guarantee(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "clicks", label_type="count", lo=0, hi=9)
    rows = heavy_users()
    assert upload(c, ds, users_csv(rows)).status_code == 200
    r = user_release(c, ds, "u1")
    assert r.status_code == 201, r.text
    body = r.json()
    per_user = Counter(u or e for e, _, u in rows)
    kept = sum(min(n, 2) for n in per_user.values())
    assert (
        body["privacy_unit"] == "user" and body["epsilon_user"] == 2.0 and body["contribution_bound"] == "2"
    )
    assert body["users"] == len(per_user) == 65 and body["examples"] == len(rows)
    assert body["examples_capped"] == len(rows) - kept
    mechanism = PublishedMechanism.model_validate(body["mechanism"])
    assert mechanism.privacy_unit == "user" and mechanism.contribution_bound == 2
    assert mechanism.prior_contribution_bound == 2 and mechanism.epsilon == 2.0
    # the output lists every ID; capped ones carry the code m, at most τ per user carry a real bin
    table = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{body['id']}/noisy-labels").content))
    ids, bins = table.column("example_id").to_pylist(), np.asarray(table.column("bin").to_numpy())
    assert sorted(ids) == sorted(e for e, _, _ in rows)
    assert int((bins == mechanism.m).sum()) == len(rows) - kept
    owner = {e: u or e for e, _, u in rows}
    informative = Counter(owner[e] for e, b in zip(ids, bins, strict=True) if b < mechanism.m)
    assert max(informative.values()) <= 2 and len(informative) == 65
    # the tenant's audit covers exactly the examples that carry label information
    audit = c.get(f"/v1/releases/{body['id']}/audit").json()
    assert audit["examples"] == kept
    assert audit["max_multiplicative_advantage"] == mechanism.implemented_epsilon
    # the ledger charged the kept examples ε₁/τ + ε₂ each and every user ε_user
    [entry] = charges(c)
    assert entry["examples"] == kept and entry["users"] == 65 and entry["user_epsilon"] == 2.0
    assert entry["epsilon"] >= mechanism.epsilon_per_example
    spent = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon_user": 0.5}).json()["users"]
    assert spent["users"] == 65 and spent["spent"]["max"] == 2.0 and spent["spent"]["p50"] == 2.0
    assert spent["per_user_budget"] is None and spent["can_take"] is None


def test_auto_and_private_bounds_finish_and_charge_the_worst_case_per_example(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "100"))
    ds = dataset(c, "clicks", label_type="count", lo=0, hi=9)
    rows = heavy_users()
    upload(c, ds, users_csv(rows))
    auto = user_release(c, ds, "auto", contribution_bound="auto", epsilon_user=4.0).json()
    private = user_release(c, ds, "private", contribution_bound="private", epsilon_user=4.0).json()
    for body in (auto, private):
        assert body["status"] == "complete", body
        mechanism = PublishedMechanism.model_validate(body["mechanism"])
        assert mechanism.prior_contribution_bound == 1 and mechanism.contribution_bound is not None
        assert body["examples_capped"] == sum(
            max(0, n - mechanism.contribution_bound) for n in Counter(u or e for e, _, u in rows).values()
        )
    assert PublishedMechanism.model_validate(private["mechanism"]).epsilon_bound == 0.4  # a tenth by default
    # τ was chosen after the noise, so every example was charged the most it could end up exposed to
    entries = charges(c)
    assert [e["examples"] for e in entries] == [len(rows), len(rows)]
    assert entries[0]["epsilon"] == 4.0 and entries[1]["epsilon"] == 3.6


def test_a_user_level_replay_charges_once_and_a_preview_states_the_unit(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10", per_user="5"))
    ds = dataset(c, "clicks", label_type="count", lo=0, hi=9)
    upload(c, ds, users_csv(heavy_users(20)))
    first = user_release(c, ds, "same")
    again = user_release(c, ds, "same")
    assert first.status_code == 201 and again.status_code == 200 and again.json() == first.json()
    reused = problem(user_release(c, ds, "same", contribution_bound=3), 422, "idempotency-key-reused")
    assert reused["fields"] == ["contribution_bound"]
    assert user_release(c, ds, "same", loss="squared").content == first.content  # the default, stated
    # user level: the loss's own objective whatever ε₂, so stating it is the same request
    assert user_release(c, ds, "same", objective="model").content == first.content
    assert len(charges(c)) == 1
    preview = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": 2, "recipient": "publisher"},
    )
    assert preview.status_code == 200, preview.text
    mechanism = preview.json()["mechanism"]
    assert mechanism["privacy_unit"] == "user" and mechanism["contribution_bound"] == 2
    assert len(charges(c)) == 1  # previews are free


def test_bad_user_level_requests_are_refused_and_charge_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "clicks", label_type="count", lo=0, hi=9)
    upload(c, ds, users_csv(heavy_users(10)))
    bodies: list[dict[str, object]] = [
        {"privacy_unit": "user", "epsilon": 1.0, "contribution_bound": 2},  # epsilon, not epsilon_user
        {"privacy_unit": "user", "epsilon_user": 1.0},  # no bound
        {"privacy_unit": "user", "epsilon_user": 1.0, "contribution_bound": 0},
        {"privacy_unit": "user", "epsilon_user": 1.0, "contribution_bound": "most"},
        {"privacy_unit": "user", "epsilon_user": 1.0, "contribution_bound": 2, "epsilon_bound": 0.1},
        {"epsilon": 1.0, "contribution_bound": 2},  # a bound on an example-level release
        {"privacy_unit": "person", "epsilon_user": 1.0, "contribution_bound": 2},
    ]
    for body in bodies:
        r = post_release(c, ds, "x", body)
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = user_release(c, ds, "prior", epsilon_user=1.0, epsilon_prior=1.0)  # nothing left to randomize
    problem(r, 422, "invalid-epsilon")
    assert charges(c) == [] and not any((api.data_dir / "releases").glob("*"))


def test_example_level_releases_charge_users_by_group_privacy(api: Api) -> None:
    """A user with c examples in an example-level release is charged c·ε; with a per-user budget the
    release that would take any user over it is refused (409, how many users) and charges nothing."""
    c = with_recipient(api.tenant("acme", "10", per_user="1.0"))
    ds = dataset(c, "clicks", label_type="count", lo=0, hi=9)
    upload(c, ds, users_csv(heavy_users(14)))  # users with up to 7 examples
    ok = release(c, ds, "small", epsilon=0.1)
    assert ok.status_code == 201, ok.text
    [entry] = charges(c)
    assert entry["user_epsilon"] == 0.7  # 7 examples × 0.1
    refused = release(c, ds, "big", epsilon=0.2)  # users with 4+ examples would reach 1.2 or more
    body = problem(refused, 409, "user-budget-exhausted")
    assert body["users_lacking_budget"] == 8 and body["users_requested"] == 19
    assert len(charges(c)) == 1
    spent = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon_user": 0.4}).json()["users"]
    assert spent["per_user_budget"] == 1.0 and spent["spent"]["max"] == 0.7
    # the refusal tells the users' spend as the budget route does: the median and the most, and left
    assert body["per_user_budget"] == 1.0 and body["epsilon_user_requested"] == 1.4  # 7 examples × 0.2
    assert body["spent"] == {"typical": spent["spent"]["p50"], "worst": 0.7}
    assert body["left"] == {"typical": 1.0 - spent["spent"]["p50"], "worst": 0.3}
    assert "users lack budget" in body["detail"] and "the worst 0.7 (0.3 left)" in body["detail"]
    assert spent["can_take"] == 19 - 2  # the two users with 7 examples are at 0.7: 1.1 would be over


def test_64_concurrent_user_level_releases_never_overspend_a_user_across_datasets(api: Api) -> None:
    """Two datasets share users (different example IDs). The per-user budget admits exactly ten
    releases of ε_user 0.1 between them, whichever dataset each one is of."""
    for trial in range(6):
        c = with_recipient(api.tenant(f"t{trial}", "100", per_user="1.0"))
        first, second = (dataset(c, f"d{trial}-{i}", label_type="count", lo=0, hi=9) for i in range(2))
        upload(c, first, users_csv(heavy_users(8, "a")))
        upload(c, second, users_csv(heavy_users(8, "b")[:-5]))  # the same eight users, other examples
        results = race(
            64,
            lambda i, c=c, pair=(first, second): user_release(
                c, pair[i % 2], f"k{i}", epsilon_user=0.1, contribution_bound=1
            ),
        )
        codes = Counter(r.status_code for r in results)
        assert codes[201] == 10 and codes[409] == 54, codes
        refused = next(r for r in results if r.status_code == 409)
        assert refused.json()["type"] == "user-budget-exhausted"
        assert len(charges(c)) == 10
        for ds, lone in ((first, 5), (second, 0)):  # only the first has users of its own (no user_id)
            spent = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon_user": 0.1}).json()["users"]
            assert spent["spent"]["max"] == 1.0 and spent["can_take"] == lone
