"""The privacy audit through the labels party's real HTTP API: the release record's data-independent
bounds, and the free, tenant-only audit endpoint checked against an independent dense computation
from the true labels and the stored outputs."""

from __future__ import annotations

import numpy as np

from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.advantage import channel_advantages, targets_of
from labeldp.mechanisms.empirical import epsilon_lower_bound
from tests.support.labels_api import (
    Api,
    charges,
    csv,
    dataset,
    noisy,
    problem,
    release,
    upload,
    with_recipient,
)


def test_release_records_state_the_worst_case_and_the_audit_matches_independent_math(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "weeks", label_type="count", lo=0, hi=9)
    truth = {f"e{i}": min(9, (i * i) % 13) for i in range(30_000)}  # skewed over 0..9
    assert upload(c, ds, csv(list(truth.items()))).status_code == 200
    r = release(c, ds, "audit", epsilon=2.0, mechanism="rr_on_bins")  # a bins release: keep and move
    assert r.status_code == 201, r.text
    body = r.json()
    mech = PublishedMechanism.model_validate(body["mechanism"])
    keep = mech.bin_transition()[0, 0]
    assert body["worst_case_additive_advantage"] == keep - 1 / mech.m
    assert body["max_multiplicative_advantage"] == mech.implemented_epsilon
    assert (body["keep_probability"], body["move_probability"]) == (keep, mech.bin_transition()[0, 1])
    assert c.get(f"/v1/releases/{body['id']}").json()["worst_case_additive_advantage"] == keep - 1 / mech.m

    spent = charges(c)
    audit = c.get(f"/v1/releases/{body['id']}/audit")
    assert audit.status_code == 200, audit.text
    a = audit.json()
    assert charges(c) == spent  # free
    assert a["examples"] == len(truth)

    # independently: the true histogram and a dense k × m channel, Bayes rule by enumeration
    support = np.asarray(mech.support)
    hist = np.bincount(np.searchsorted(support, list(truth.values())), minlength=support.size)
    dense = channel_advantages(hist, mech.transition_matrix(), targets_of(mech), support).summary()
    assert abs(a["true_distribution"]["additive_mean"] - dense["additive_mean"]) < 1e-12
    assert abs(a["true_distribution"]["mse_reduction_share"] - dense["mse_reduction_share"]) < 1e-9
    assert a["true_distribution"]["additive_mean"] <= a["worst_case_additive_advantage"]

    # realized: the true-histogram attacker's guesses on the stored outputs, recomputed here
    ids, out = noisy(c, body["id"])
    true_bin = np.asarray(mech.support_bins)[np.searchsorted(support, [truth[i] for i in ids])]
    joint = np.zeros((mech.m, mech.m))  # P(true bin, output)
    for b in range(mech.m):
        joint[b] = hist[np.asarray(mech.support_bins) == b].sum() * mech.bin_transition()[b]
    guess = joint.argmax(axis=0)
    realized = a["realized"]
    assert realized["accuracy_with_release"] == np.mean(guess[out] == true_bin)
    assert realized["accuracy_without_release"] == np.mean(joint.sum(axis=1).argmax() == true_bin)


def test_the_audit_is_the_tenants_alone_and_needs_a_complete_release(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "weeks", label_type="count", lo=0, hi=9)
    assert upload(c, ds, csv([(f"e{i}", i % 10) for i in range(500)])).status_code == 200
    rid = release(c, ds, "one", epsilon=1.0).json()["id"]
    other = api.tenant("rival", "10")
    problem(other.get(f"/v1/releases/{rid}/audit"), 404, "not-found")
    problem(c.get("/v1/releases/00000000-0000-0000-0000-000000000000/audit"), 404, "not-found")


def test_the_audit_runs_the_canary_check_on_the_releases_own_examples(api: Api) -> None:
    """Binary labels, half each, released once: the audit's ε lower bound is the canary check's
    (``labeldp audit epsilon``) on these examples — recomputed here from the labels and the stored
    outputs — below the implemented ε, at the asked alpha; a bad alpha is a 422 naming it."""
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "canaries", label_type="binary", lo=0, hi=1)
    truth = {f"c{i}": i % 2 for i in range(20_000)}
    assert upload(c, ds, csv(list(truth.items()))).status_code == 200
    body = release(c, ds, "canaries", epsilon=2.0, loss="zero_one").json()
    mech = PublishedMechanism.model_validate(body["mechanism"])
    ids, out = noisy(c, body["id"])
    targets = targets_of(mech)[[truth[i] for i in ids]]
    for alpha in (1e-6, 0.01):
        a = c.get(f"/v1/releases/{body['id']}/audit", params={"alpha": alpha}).json()
        bound = a["epsilon_lower_bound"]
        expected = epsilon_lower_bound(mech, targets, out, alpha)
        assert bound == {
            "epsilon_low": expected.epsilon_low,
            "alpha": alpha,
            "examples": len(truth),
            "rates": expected.rates,
        }
        assert 0 < bound["epsilon_low"] <= a["max_multiplicative_advantage"] == mech.implemented_epsilon
    loose = c.get(f"/v1/releases/{body['id']}/audit", params={"alpha": 0.01}).json()["epsilon_lower_bound"]
    assert (
        loose["epsilon_low"]
        > c.get(f"/v1/releases/{body['id']}/audit").json()["epsilon_lower_bound"]["epsilon_low"]
    )  # a larger false-alarm rate allows a tighter bound
    for bad in ("0", "1", "-0.5", "nan", "x"):
        body422 = problem(
            c.get(f"/v1/releases/{body['id']}/audit", params={"alpha": bad}), 422, "invalid-request"
        )
        assert any("alpha" in e["loc"] for e in body422["errors"])


def test_an_audit_over_labels_in_one_bin_states_no_bound(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "flat", label_type="binary", lo=0, hi=1)
    assert upload(c, ds, csv([(f"e{i}", 1) for i in range(300)])).status_code == 200
    rid = release(c, ds, "flat", epsilon=1.0, loss="zero_one").json()["id"]
    a = c.get(f"/v1/releases/{rid}/audit")
    assert a.status_code == 200 and a.json()["epsilon_lower_bound"] is None


def test_a_preview_states_the_bounds_the_release_would(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "weeks", label_type="count", lo=0, hi=9)
    assert upload(c, ds, csv([(f"e{i}", (i * 7) % 10) for i in range(5_000)])).status_code == 200
    p = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 1.5, "recipient": "publisher", "mechanism": "rr_on_bins"},
    ).json()
    mech = PublishedMechanism.model_validate(p["mechanism"])
    assert p["worst_case_additive_advantage"] == mech.worst_case_additive_advantage
    assert p["max_multiplicative_advantage"] == mech.implemented_epsilon
    assert (p["keep_probability"], p["move_probability"]) == (
        mech.bin_transition()[0, 0],
        mech.bin_transition()[0, 1] if mech.m > 1 else 0.0,
    )
    assert charges(c) == []


def test_the_audit_reads_the_labels_the_release_randomized_not_todays(api: Api) -> None:
    """Invariant 12: the audit builds on a release, so it reads what the release froze. Re-uploading
    every label afterwards (all to one value) leaves the audit exactly as it was; a release made after
    the re-upload audits the new labels."""
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "weeks", label_type="count", lo=0, hi=9)
    assert upload(c, ds, csv([(f"e{i}", (i * 7) % 10) for i in range(3_000)])).status_code == 200
    rr = {"mechanism": "rr_on_bins"}  # bins: one bin holds every label after the re-upload
    rid = release(c, ds, "before", epsilon=2.0, **rr).json()["id"]
    audit = c.get(f"/v1/releases/{rid}/audit").json()
    assert upload(c, ds, csv([(f"e{i}", 9) for i in range(3_000)])).status_code == 200
    assert c.get(f"/v1/releases/{rid}/audit").json() == audit
    later = release(c, ds, "after", epsilon=2.0, **rr).json()["id"]
    flat = c.get(f"/v1/releases/{later}/audit").json()
    assert flat["epsilon_lower_bound"] is None  # every label in one bin now
    assert audit["epsilon_lower_bound"] is not None
