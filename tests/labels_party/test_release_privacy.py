"""Privacy regressions of the release path, caught through the labels party's real HTTP API.

Each test here fails if the service breaks one invariant: released bins that do not follow the
published mechanism (no noise, or noise at ε instead of ε₂); fresh noise on an idempotent replay;
output written for a refused release; a mechanism spending more than was charged; a failure after the
charge that forgets the charge or leaves output behind.
"""

from __future__ import annotations

import hashlib
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from labeldp.mechanisms import PublishedMechanism
from tests.support.labels_api import (
    Api,
    charges,
    csv,
    dataset,
    labelled,
    noisy,
    problem,
    release,
    upload,
    with_recipient,
)
from tests.support.stats import ALPHA, chi_square_ok

N = 60_000


def test_released_bins_follow_the_published_mechanism(api: Api) -> None:
    """Per true bin, the output bins are the published transition row (chi-square, α = 1e-6): fails if
    the service writes the true bins, skips the noise, or randomizes at ε instead of ε₂."""
    c = with_recipient(api.tenant("acme", "10"))
    ds, truth = labelled(c)
    r = release(c, ds, "chi", epsilon=6.0, epsilon_prior=2.0, mechanism="rr_on_bins")  # ε₂ = 4 (not 6)
    assert r.status_code == 201, r.text
    mechanism = PublishedMechanism.model_validate(r.json()["mechanism"])
    assert mechanism.m >= 3 and mechanism.epsilon_randomize < 4.01
    ids, out = noisy(c, r.json()["id"])
    support = np.asarray(mechanism.support)
    true_bin = np.asarray(mechanism.support_bins)[np.searchsorted(support, [truth[i] for i in ids])]
    matrix = mechanism.bin_transition()
    for b in range(mechanism.m):
        observed = np.bincount(out[true_bin == b], minlength=mechanism.m)
        assert observed.sum() > 1000
        ok, ratio = chi_square_ok(observed, matrix[b], alpha=ALPHA)
        assert ok, f"true bin {b}: chi-square at {ratio:.2f} of its critical value"
    keep = float(np.mean(out == true_bin))
    assert abs(keep - matrix[0, 0]) < 0.02  # the keep rate of ε₂, not of ε (which would be far higher)


def test_a_replay_returns_the_same_bytes_and_draws_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds, _ = labelled(c, 5000)
    first = release(c, ds, "same-key", epsilon=1.0)
    out_before = c.get(f"/v1/releases/{first.json()['id']}/noisy-labels").content
    message = api.data_dir / "messages" / f"{first.json()['id']}.frames"
    digest_before, mtime = hashlib.sha256(message.read_bytes()).hexdigest(), message.stat().st_mtime_ns
    again = release(c, ds, "same-key", epsilon=1.0)
    assert again.status_code == 200 and again.json() == first.json()
    assert c.get(f"/v1/releases/{first.json()['id']}/noisy-labels").content == out_before
    assert (
        hashlib.sha256(message.read_bytes()).hexdigest() == digest_before
        and message.stat().st_mtime_ns == mtime
    )
    rid = first.json()["id"]
    assert len(charges(c)) == 1
    assert sorted(p.name for p in (api.data_dir / "releases").iterdir()) == sorted(
        [f"{rid}.parquet", f"{rid}.record.parquet"]
    )


def test_a_refused_release_writes_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "1"))
    ds, _ = labelled(c, 2000)
    assert release(c, ds, "ok", epsilon=0.75).status_code == 201
    before = sorted(p.name for p in (api.data_dir / "releases").iterdir())
    messages = sorted(p.name for p in (api.data_dir / "messages").iterdir())
    problem(release(c, ds, "too-much", epsilon=0.5), 409, "budget-exhausted")
    assert sorted(p.name for p in (api.data_dir / "releases").iterdir()) == before
    assert sorted(p.name for p in (api.data_dir / "messages").iterdir()) == messages
    assert len(charges(c)) == 1


@pytest.mark.parametrize("epsilon", [0.1, 0.3, 0.333333, 1.0, 7.7, 30.0])
def test_nothing_spends_more_than_was_charged(api: Api, epsilon: float) -> None:
    c = with_recipient(api.tenant("acme", "100"))
    ds, _ = labelled(c, 3000)
    r = release(c, ds, f"e{epsilon}", epsilon=epsilon)
    assert r.status_code == 201, r.text
    body = r.json()
    mechanism = PublishedMechanism.model_validate(body["mechanism"])
    charged = Fraction(body["epsilon_charged_micro"], 1_000_000)
    assert Fraction(mechanism.epsilon) <= charged
    assert Fraction(mechanism.epsilon_prior) + Fraction(mechanism.epsilon_randomize) <= charged
    assert 0 <= mechanism.implemented_epsilon <= mechanism.epsilon_randomize
    entry = charges(c)[0]
    assert entry["epsilon_micro"] == body["epsilon_charged_micro"] >= round(epsilon * 1e6)


def test_a_failure_after_the_charge_keeps_the_charge_and_leaves_no_output(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "5"))
    ds, _ = labelled(c, 2000)
    releases_dir: Path = api.data_dir / "releases"
    releases_dir.parent.mkdir(parents=True, exist_ok=True)
    releases_dir.write_text("not a folder")  # the output cannot be written: the work after the charge fails
    r = release(c, ds, "doomed", epsilon=1.0)
    problem(r, 500, "internal-error")
    (rel,) = c.get(f"/v1/datasets/{ds}/releases").json()["items"]
    assert (rel["status"] == "failed" and "NotADirectoryError" in rel["error"]) or "FileExistsError" in rel[
        "error"
    ]
    kinds = [e["kind"] for e in c.get("/v1/ledger").json()["items"] if e["release_id"] == rel["id"]]
    assert kinds == ["charge", "charge_kept"]
    assert not (api.data_dir / "messages" / f"{rel['id']}.frames").exists()
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert budget["max_spent"] == budget["min_spent"] == 1.0  # the charge stands: noise may have been drawn
    problem(c.get(f"/v1/releases/{rel['id']}/noisy-labels"), 409, "release-not-complete")
    releases_dir.unlink()
    retry = release(c, ds, "doomed", epsilon=1.0)  # the same key answers the failed release, charging nothing
    assert retry.status_code == 200 and retry.json()["status"] == "failed" and len(charges(c)) == 1


def test_an_asynchronous_release_answers_after_the_charge(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "5"))
    ds, _ = labelled(c, 20_000)
    r = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 1.0, "recipient": "publisher"},
        headers={"Idempotency-Key": "async", "Prefer": "respond-async"},
    )
    assert r.status_code in (201, 202), r.text
    if r.status_code == 202:
        assert r.json()["status"] == "charged" and r.headers["Location"] == f"/v1/releases/{r.json()['id']}"
        assert r.headers["Preference-Applied"] == "respond-async"
    assert len(charges(c)) == 1  # charged before the answer
    import time

    deadline = time.monotonic() + 60
    while (
        c.get(f"/v1/releases/{r.json()['id']}").json()["status"] == "charged" and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    done = c.get(f"/v1/releases/{r.json()['id']}").json()
    assert done["status"] == "complete" and done["mechanism"]["kind"] == "unbiased"  # the default
    assert release(c, ds, "async", epsilon=1.0).json()["id"] == done["id"]  # replay: the same release


def test_every_draw_of_a_label_release_comes_after_its_charge_committed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy on the CSPRNG: every keystream byte a server thread draws is drawn when the ledger already
    holds as many committed charges as releases were asked for so far — example-level, user-level
    (given and chosen τ) and class releases alike. A release that drew its prior, its τ or its labels
    before its charge commits is seen drawing with one charge too few."""
    from sqlalchemy import func, select

    from labeldp.mechanisms import rng
    from labels_party.storage.db import make_engine, session_factory
    from labels_party.storage.orm import LedgerEntry

    engine = make_engine(api.database_url)
    committed_at_draw: list[int] = []
    original = rng.SecureRandom.random_bytes

    def spy(self: rng.SecureRandom, n: int) -> bytes:
        if threading.current_thread() is not threading.main_thread() and not getattr(self, "_seen", False):
            self._seen = True  # type: ignore[attr-defined]  # once per stream: the first draw
            with session_factory(engine)() as s:
                charged = s.execute(
                    select(func.count()).select_from(LedgerEntry).where(LedgerEntry.kind == "charge")
                ).scalar_one()
            committed_at_draw.append(int(charged))
        return original(self, n)

    monkeypatch.setattr(rng.SecureRandom, "random_bytes", spy)
    c = with_recipient(api.tenant("acme", "100"))
    ds, _ = labelled(c, n=5_000)
    users = dataset(c, "users", label_type="count", lo=0, hi=9)
    rows = "example_id,label,user_id\n" + "".join(f"x{i},{i % 10},u{i % 700}\n" for i in range(5_000))
    assert upload(c, users, rows.encode()).status_code == 200
    requests: list[tuple[str, dict[str, object]]] = [
        (ds, {"epsilon": 1.0}),
        (ds, {"epsilon": 1.0, "loss": "absolute"}),
        (users, {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": 3}),
        (users, {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": "auto"}),
        (users, {"privacy_unit": "user", "epsilon_user": 2.0, "contribution_bound": "private"}),
    ]
    for asked, (dataset_id, body) in enumerate(requests, start=1):
        before = len(committed_at_draw)
        made = c.post(
            f"/v1/datasets/{dataset_id}/releases",
            json={"recipient": "publisher", **body},
            headers={"Idempotency-Key": f"k{asked}"},
        )
        assert made.status_code == 201, made.text
        drawn = committed_at_draw[before:]
        assert drawn, f"release {asked} drew nothing through the spy"
        assert min(drawn) == asked, (asked, drawn)
    engine.dispose()


@pytest.mark.parametrize(
    "spec", [{"label_type": "count", "lo": 0, "hi": 9}, {"label_type": "binary", "lo": 0, "hi": 1}]
)
def test_a_release_publishes_the_declared_support_not_the_labels_seen(
    api: Api, spec: dict[str, object]
) -> None:
    """The support is a public parameter: grid points no label uses are published all the same (a support
    read off the labels would publish which values occur). The labels use 0 and 1 only; the count grid
    has ten points, and a binary dataset whose labels are all 1 still publishes both classes."""
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, "sparse", **spec)
    values = [1] * 40 if spec["label_type"] == "binary" else [i % 2 for i in range(40)]
    assert upload(c, ds, csv([(f"e{i}", y) for i, y in enumerate(values)])).status_code == 200
    r = release(c, ds, "r", epsilon=2.0)
    assert r.status_code == 201, r.text
    mechanism = PublishedMechanism.model_validate(r.json()["mechanism"])
    declared = list(range(int(spec["hi"]) + 1))  # type: ignore[call-overload]
    assert list(mechanism.support) == declared and len(mechanism.prior) == len(declared)
    preview = c.post(f"/v1/datasets/{ds}/releases:preview", json={"epsilon": 2.0, "recipient": "publisher"})
    assert list(PublishedMechanism.model_validate(preview.json()["mechanism"]).support) == declared


def test_the_budget_read_before_a_charge_is_not_the_budget_after_it(api: Api) -> None:
    """The budget answer is kept between reads (per ledger version): a read, a release, a read — the
    second read shows the charge (a kept answer that ignored the ledger's version would not)."""
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c)
    assert upload(c, ds, csv([(f"e{i}", i % 10) for i in range(20)])).status_code == 200
    before = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert before["spend_distribution"] == [{"spent_from": 0.0, "spent_to": 0.0, "count": 20}]
    assert c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json() == before  # kept
    assert release(c, ds, "r", epsilon=1.5).status_code == 201
    after = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert after["spend_distribution"] == [{"spent_from": 1.5, "spent_to": 1.5, "count": 20}]
    assert after["users"]["spend_distribution"] == [{"spent_from": 1.5, "spent_to": 1.5, "count": 20}]
