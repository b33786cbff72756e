"""Privacy at the seam of a universe and users, through the real HTTP API (SQLite and PostgreSQL).

With a universe, whether an example has a label row *is* its label (a conversion among clicks). So
two neighbouring datasets — the same universe and user map, labels that differ for one example,
including whether it has a label row at all — must give identical everything a release publishes or
charges other than the noisy labels and the noisy prior: which examples are capped, how many users
there are, the bound ``auto`` picks, and every ledger row (docs/math.md, §10, the public-data lemma).
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.common.errors import DomainError
from labeldp.mechanisms import PublishedMechanism
from labels_party.budget.ledger_keys import example_keys
from labels_party.datasets.membership import user_keys_of
from tests.support.labels_api import Api, charges, dataset, problem, upload, with_recipient

COUNTS = [1 + i % 6 for i in range(24)]  # user u<i> has this many clicks
LABEL_OF_USER = [i % 4 for i in range(24)]  # every click of a user has one label (0: no conversion)
SPEC: dict[str, Any] = {"label_type": "count", "lo": 0, "hi": 9, "default_label": 0}


def universe() -> list[tuple[str, str | None]]:
    """Every click and its user; three clicks have no user (each is its own)."""
    clicks = [(f"c{u}-{j}", f"u{u}") for u, n in enumerate(COUNTS) for j in range(n)]
    return clicks + [(f"lone{j}", None) for j in range(3)]


def owner() -> dict[str, str]:
    return {e: u or e for e, u in universe()}


def base_labels() -> dict[str, int]:
    """D: a row for every click of a converting user, and explicit zeros for the first click of every
    other user; the rest take the default label 0."""
    rows = {}
    for u, n in enumerate(COUNTS):
        if LABEL_OF_USER[u]:
            rows.update({f"c{u}-{j}": LABEL_OF_USER[u] for j in range(n)})
        else:
            rows[f"c{u}-0"] = 0
    return rows


def neighbours() -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    d = base_labels()
    row_appears = dict(d)
    row_appears["c4-1"] = 0  # u4 (label 0, five clicks): one more explicit 0; the labels are unchanged
    label_changes = dict(d)
    label_changes["c1-0"] = 7  # u1 converted for 1, this click for 7
    outside = dict(d)
    outside["elsewhere-0"] = 5  # a conversion for a click the universe does not list
    return {
        "a label row appears": (d, row_appears),
        "one label changes": (d, label_changes),
        "a label row appears outside the universe": (d, outside),
    }


def universe_csv() -> bytes:
    lines = ["example_id,user_id"] + [f"{e},{u or ''}" for e, u in universe()]
    return ("\n".join(lines) + "\n").encode()


def labels_csv(rows: dict[str, int], with_users: bool) -> bytes:
    """Label rows; ``with_users``: each repeats its example's user (allowed: it changes nothing)."""
    users = dict(universe())
    if with_users:
        lines = ["example_id,label,user_id"] + [f"{e},{y},{users.get(e) or ''}" for e, y in rows.items()]
    else:
        lines = ["example_id,label"] + [f"{e},{y}" for e, y in rows.items()]
    return ("\n".join(lines) + "\n").encode()


def post(c: httpx.Client, ds: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"recipient": "publisher", **body},
        headers={"Idempotency-Key": key},
    )
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def capped_per_user(c: httpx.Client, release: dict[str, Any]) -> Counter[str]:
    """How many of each user's examples the release lists as capped (the code m)."""
    m = PublishedMechanism.model_validate(release["mechanism"]).m
    table = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{release['id']}/noisy-labels").content))
    owners = owner()
    ids, bins = table.column("example_id").to_pylist(), table.column("bin").to_pylist()
    return Counter(owners[e] for e, b in zip(ids, bins, strict=True) if b == m)


def public_view(c: httpx.Client, labels: dict[str, int], with_users: bool) -> dict[str, Any]:
    """Everything the service publishes or charges for one dataset, other than noisy labels and the
    noisy prior, after the same sequence of releases."""
    ds = dataset(c, "clicks", **SPEC)
    assert upload(c, ds, universe_csv(), what="universe").status_code == 200
    assert upload(c, ds, labels_csv(labels, with_users)).status_code == 200
    shown = c.get(f"/v1/datasets/{ds}").json()
    fixed = post(c, ds, "tau2", {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": 2})
    # ε₁ = 20: the prior's noise (scale 2/20) is zero with probability 1 − 10⁻⁸ per cell, and every
    # click of a user has one label, so the one-example-per-user histogram auto reads is exact
    auto = post(
        c,
        ds,
        "auto",
        {"privacy_unit": "user", "epsilon_user": 30.0, "epsilon_prior": 20.0, "contribution_bound": "auto"},
    )
    example_level = post(c, ds, "example", {"epsilon": 0.25})
    ledger = [
        (e["kind"], e["epsilon_micro"], e["examples"], e["users"], e["user_epsilon"], e["delta"])
        for e in charges(c)
    ]
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.1, "epsilon_user": 0.1}).json()
    return {
        "universe_users": shown["universe_users"],
        "tau2": (fixed["users"], fixed["examples"], fixed["examples_capped"], capped_per_user(c, fixed)),
        "auto": (
            auto["users"],
            auto["examples_capped"],
            PublishedMechanism.model_validate(auto["mechanism"]).contribution_bound,
            capped_per_user(c, auto).total(),
        ),
        "example_level": (example_level["examples"], example_level["epsilon_charged_micro"]),
        "ledger": ledger,
        "budget": budget,
    }


@pytest.mark.parametrize(
    "kind", ["a label row appears", "one label changes", "a label row appears outside the universe"]
)
def test_neighbouring_datasets_publish_and_charge_the_same_through_http(api: Api, kind: str) -> None:
    d, d_prime = neighbours()[kind]
    view = public_view(with_recipient(api.tenant("d", "100")), d, with_users=False)
    view_prime = public_view(with_recipient(api.tenant("d-prime", "100")), d_prime, with_users=True)
    if kind == "one label changes":  # auto reads the noisy prior, which may rightly differ then
        view["auto"], view_prime["auto"] = view["auto"][:1], view_prime["auto"][:1]
    assert view == view_prime
    # and what they agree on is the universe's user map, not the label rows
    per_user = Counter(owner().values())
    assert view["universe_users"] == len(per_user) == 27
    users, examples, capped, by_user = view["tau2"]
    assert (users, examples) == (27, len(universe()))
    assert by_user == Counter({u: n - 2 for u, n in per_user.items() if n > 2}) and capped == by_user.total()
    if kind != "one label changes":  # the same labels of the universe: auto's histogram and choice too
        tau = view["auto"][2]
        assert view["auto"][1] == sum(max(0, n - tau) for n in per_user.values()) == view["auto"][3]
    most = max(per_user.values())
    assert [row[3] for row in view["ledger"]] == [27, 27, 27]
    assert view["ledger"][2][4] == most * 0.25  # group privacy over the universe's heaviest user
    assert view["budget"]["users"]["users"] == 27


def test_a_per_user_budget_counts_every_universe_example_of_a_user(api: Api) -> None:
    """u owns four clicks in the universe and only one has a label row: an example-level release at
    ε = 1 costs u 4, over a per-user budget of 1.5 — refused, nothing charged."""
    c = with_recipient(api.tenant("acme", "10", per_user="1.5"))
    ds = dataset(c, "clicks", **SPEC)
    body = b"example_id,user_id\ne0,u\ne1,u\ne2,u\ne3,u\n"
    assert upload(c, ds, body, what="universe").json()["universe_users"] == 1
    assert upload(c, ds, b"example_id,label,user_id\ne0,1,u\n").status_code == 200
    refused = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 1.0, "recipient": "publisher"},
        headers={"Idempotency-Key": "k"},
    )
    got = problem(refused, 409, "user-budget-exhausted")
    assert got["users_lacking_budget"] == 1
    assert charges(c) == []
    ok = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 0.25, "recipient": "publisher"},
        headers={"Idempotency-Key": "k2"},
    )
    assert ok.status_code == 201, ok.text
    [entry] = charges(c)
    assert entry["users"] == 1 and entry["user_epsilon"] == 1.0  # 4 clicks × 0.25


def test_label_rows_may_repeat_a_universe_user_but_never_change_it(api: Api) -> None:
    c = api.tenant("acme", "10")
    ds = dataset(c, "clicks", **SPEC)
    assert upload(c, ds, b"example_id,user_id\ne0,u\ne1,u\ne2,\n", what="universe").status_code == 200
    before = c.get(f"/v1/datasets/{ds}").json()
    for body, rows in (
        (b"example_id,label,user_id\ne0,1,u\ne1,2,v\n", [2]),  # another user
        (b"example_id,label,user_id\ne2,1,w\n", [1]),  # e2 has none in the universe: its own user
    ):
        got = problem(upload(c, ds, body), 422, "user-id-conflict")
        assert got["rows"] == rows and got["columns"] == ["user_id"]
    assert c.get(f"/v1/datasets/{ds}").json() == before  # nothing stored
    fine = b"example_id,label,user_id\ne0,1,u\ne1,2,\ne2,3,\nelsewhere,4,z\n"  # repeats, blanks, not in it
    assert upload(c, ds, fine).status_code == 200


def test_a_universe_the_stored_label_rows_contradict_is_refused(api: Api) -> None:
    c = api.tenant("acme", "10")
    ds = dataset(c, "clicks", **SPEC)
    assert upload(c, ds, b"example_id,label,user_id\ne0,1,u\ne1,2,u\n").status_code == 200
    without_users = problem(
        upload(c, ds, b"example_id\ne0\ne1\ne2\n", what="universe"), 422, "user-id-conflict"
    )
    assert without_users["rows"] == [1, 2] and "user_id column" in without_users["detail"]
    other = problem(
        upload(c, ds, b"example_id,user_id\ne0,u\ne1,v\ne2,v\n", what="universe"), 422, "user-id-conflict"
    )
    assert other["rows"] == [2]
    assert c.get(f"/v1/datasets/{ds}").json()["universe_count"] is None
    ok = upload(c, ds, b"example_id,user_id\ne0,u\ne1,u\ne2,v\n", what="universe")
    assert ok.status_code == 200 and ok.json()["universe_users"] == 2


def test_stored_rows_from_before_the_rule_are_refused_at_release() -> None:
    """Label rows stored before universes carried users may disagree with one: a release then refuses
    (409) rather than let a label row decide a user."""
    ids = pa.array(["e0", "e1"], pa.string())
    keys = np.array([example_keys(["e0"])[0], example_keys(["e1"])[0]], dtype=np.int64)
    labels = pa.table({"example_id": ["e0"], "user_id": pa.array(["u"], pa.string())})
    old_universe = pa.table({"example_id": ["e0", "e1"]})  # no user_id column: each its own user
    with pytest.raises(DomainError) as refused:
        user_keys_of(ids, keys, labels, old_universe)
    assert refused.value.code == "user-id-conflict" and refused.value.status == 409
    agreeing = pa.table({"example_id": ["e0"], "user_id": pa.array([None], pa.string())})
    users = user_keys_of(ids, keys, agreeing, old_universe)
    assert users[0] != users[1]  # each its own user
