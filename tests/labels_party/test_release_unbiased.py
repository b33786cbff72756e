"""``mechanism: unbiased`` over real HTTP: a release publishes the unbiased randomizer's integers and
its released values average to the labels (outputs beyond the label range included); the preview
states its expected variance beside RR-on-Bins's expected loss, both checked against the published
rows; what it cannot serve is a 422 decided before anything is charged; an Idempotency-Key holds the
mechanism asked for."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.factory import sampler_of
from labeldp.mechanisms.unbiased_weights import MAX_UNBIASED_EPSILON
from tests.support.labels_api import Api, charges, labelled, noisy, problem, release, with_recipient

HI = 9


def test_an_unbiased_release_and_its_preview(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10.0"))
    ds, truth = labelled(c, n=6_000, hi=HI)
    preview = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2.0, "recipient": "publisher", "mechanism": "unbiased"},
    )
    assert preview.status_code == 200, preview.text
    p = preview.json()
    shown = PublishedMechanism.model_validate(p["mechanism"])
    assert shown.kind == "unbiased" and p["keep_probability"] is None and p["move_probability"] is None
    counts = np.bincount(list(truth.values()), minlength=HI + 1).astype(float)
    y = np.arange(HI + 1.0)
    rows = sampler_of(shown).transition_matrix()  # the variance, from the published integers
    variance = float(
        counts / counts.sum() @ (rows * (np.asarray(shown.bin_values)[None, :] - y[:, None]) ** 2).sum(1)
    )
    assert p["expected_loss"] == pytest.approx(variance, rel=1e-9)
    assert p["unbiased_expected_variance"] == p["expected_loss"]
    rr = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2.0, "recipient": "publisher", "mechanism": "rr_on_bins"},
    ).json()
    assert p["rr_on_bins_expected_loss"] == pytest.approx(rr["expected_loss"], rel=1e-9)
    assert rr["unbiased_expected_variance"] is None  # an RR preview does not run the unbiased program
    assert charges(c) == []  # previews are free

    r = release(c, ds, "u1", epsilon=2.0, mechanism="unbiased")
    assert r.status_code == 201, r.text
    body = r.json()
    mech = PublishedMechanism.model_validate(body["mechanism"])
    assert mech.kind == "unbiased" and body["keep_probability"] is None
    assert mech.implemented_epsilon <= mech.epsilon_randomize
    assert len(charges(c)) == 1
    ids, codes = noisy(c, body["id"])
    values = np.asarray(mech.bin_values)[codes]
    labels = np.array([truth[i] for i in ids], dtype=float)
    assert values.min() < 0 or values.max() > HI  # unbiased outputs reach beyond [lo, hi]
    per_point = sampler_of(mech).transition_matrix() @ (np.asarray(mech.bin_values) ** 2)
    for point in range(HI + 1):  # each label's released values average to it (6σ)
        at = values[labels == point]
        sd = np.sqrt(per_point[point] - point**2)
        assert abs(at.mean() - point) <= 6 * sd / np.sqrt(at.size), point
    # the audit: its targets are the support points; the true-histogram attacker recomputed here
    audit = c.get(f"/v1/releases/{body['id']}/audit")
    assert audit.status_code == 200, audit.text
    a = audit.json()
    rows = sampler_of(mech).transition_matrix()
    joint = counts[:, None] * rows  # P(label, output) · n, by enumeration
    guess = joint.argmax(axis=0)
    assert a["realized"]["accuracy_with_release"] == np.mean(guess[codes] == labels)
    assert a["realized"]["accuracy_without_release"] == np.mean(counts.argmax() == labels)
    assert 0 <= a["true_distribution"]["additive_mean"] <= a["worst_case_additive_advantage"] < 1
    assert len(charges(c)) == 1  # the audit is free
    # the Idempotency-Key holds the mechanism asked for
    assert release(c, ds, "u1", epsilon=2.0, mechanism="unbiased").json()["id"] == body["id"]
    reused = problem(release(c, ds, "u1", epsilon=2.0, mechanism="rr_on_bins"), 422, "idempotency-key-reused")
    assert reused["fields"] == ["mechanism"]
    assert len(charges(c)) == 1


def test_what_the_unbiased_randomizer_cannot_serve_is_refused_before_the_charge(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "100.0"))
    ds, _ = labelled(c, n=500, hi=HI)
    user = {"privacy_unit": "user", "epsilon_user": 1.0, "contribution_bound": 2}
    for key, body, code in (
        ("b1", {"epsilon": 0.5, "loss": "absolute"}, "invalid-request"),  # its mean is not the median
        ("b2", {"epsilon": 0.5, "mechanism": "laplace"}, "invalid-request"),
        ("b3", {"epsilon": 0.5, "mechanism": "rr_top_k"}, "invalid-request"),  # classes only
        ("b4", {"epsilon": 0.5, "objective": "model"}, "invalid-request"),
        ("b5", {"epsilon": 0.5, "model_capacity": 10.0}, "invalid-request"),
        ("b6", {"epsilon": MAX_UNBIASED_EPSILON + 9}, "invalid-epsilon"),  # ε₂ beyond its safe range
        ("b7", user, "invalid-request"),  # example-level only
    ):
        payload = {"recipient": "publisher", "mechanism": "unbiased", **body}
        answer = c.post(f"/v1/datasets/{ds}/releases", json=payload, headers={"Idempotency-Key": key})
        assert answer.status_code == 422 and answer.json()["type"] == code, (key, answer.text)
        preview = c.post(f"/v1/datasets/{ds}/releases:preview", json=payload)
        problem(preview, 422, code)
    assert charges(c) == [] and c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []
