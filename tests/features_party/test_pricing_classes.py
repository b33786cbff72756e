"""Pricing with a classifier (an RR-Top-k release), over the features party's real gRPC and REST: the
signed answer's groups and priors are ``labeldp.priors.price_classes`` of the model's predicted class
probabilities (read back through ``/predictions``), placed on the support — and classes a release did not
report share the mass it estimated for them."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

import grpc
import httpx
import numpy as np
import pyarrow as pa

from features_party.config import FeaturesSettings
from features_party.pricing.prices import on_support
from labeldp.common.identity import Identity
from labeldp.common.wire.pricing import GroupChunks, PricingAsk, open_priors, signed_request, spool_ids
from labeldp.common.wire.records import read_records
from labeldp.mechanisms import optimize_rr_top_k, randomized_response
from labeldp.priors import price_classes
from labeldp.samples import adult_income
from tests.support.features_party import deliver, pin_sender, put_table, train
from tests.support.messages import SENDER, release
from tests.support.metrics import scrape, value
from tests.support.seeded import SeededRandom
from tests.support.servers import features_server_thread, features_tenant_key

N, PRICED = 5000, 6000  # examples released and with features; IDs priced (the last 1,000 have no features)


def test_a_classifier_prices_by_its_class_probabilities(tmp_path: Path) -> None:
    settings = FeaturesSettings(
        party_id="publisher", data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True
    )
    key = features_tenant_key(settings, "ml")
    sender = Identity.generate()
    ds = adult_income()
    y = np.asarray(ds.table.column("label").to_numpy(), dtype=np.int64)[:N]
    ids = [f"a{i}" for i in range(PRICED)]
    mechanism = optimize_rr_top_k([0.5, 0.5], 2.0).describe(prior=[0.5, 0.5], epsilon_prior=0.1)
    rel = replace(
        release(ids[:N], mechanism=mechanism, label_type="binary"),
        bins=randomized_response(y, 2, 2.0, rng=SeededRandom(3)),
    )
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        put_table(c, "adult", ds.features.slice(0, N).append_column("example_id", pa.array(ids[:N])))
        model = train(c, release_id=rel.release_id, feature_table="adult")
        assert c.put(f"/v1/senders/{SENDER}/pricing", json={"model_id": model}).status_code == 200
        me = c.get("/v1/identity").json()

        now = int(time.time() * 1000)
        ask = PricingAsk(
            str(uuid.uuid4()), SENDER, "publisher", me["tenant_id"], now, now + 60_000,
            "binary", "zero_one", (0.0, 1.0), 16,
        )  # fmt: skip
        spooled = spool_ids(tmp_path / "ids", pa.array(ids))
        frames = [signed_request(ask, sender, spooled), *read_records(spooled.path)]
        with grpc.insecure_channel(f"127.0.0.1:{me['grpc_port']}") as channel:
            answer = list(
                channel.stream_stream("/labeldp.v1.FeaturesParty/PriceExamples")(iter(frames), timeout=60)
            )
        header, _ = open_priors(answer[0], me["key_id"])
        chunks = GroupChunks(header, spooled.sizes)
        for frame in answer[1:]:
            chunks.add(frame)
        groups = chunks.finish()
        priors = np.array([list(g.masses) for g in header.groups])

        predicted = c.post(f"/v1/models/{model}/predictions", json={"example_ids": ids[:N]}).json()
        probabilities = np.full((PRICED, 2), np.nan)
        probabilities[:N] = predicted["probabilities"]
        expected = price_classes(probabilities, 16)
        assert np.array_equal(groups, expected.groups) and (groups[N:] == -1).all()
        np.testing.assert_allclose(priors, expected.priors, rtol=1e-12)
        assert header.model_id == model and "higher class" in header.rule
        (record,) = c.get("/v1/pricings").json()["items"]
        assert (record["examples"], record["priced"], record["groups"]) == (PRICED, N, len(header.groups))
        samples = scrape(base)
        assert value(samples, "labeldp_pricings_total", outcome="answered") == 1
        assert value(samples, "labeldp_examples_priced_total") == PRICED


def test_unreported_classes_share_the_mass_the_release_estimated_for_them() -> None:
    """Five classes of which RR-Top-k reported the likeliest three: their predicted probabilities keep
    their support points, and the noisy prior's mass of the other three is shared evenly."""
    prior = np.array([0.5, 0.3, 0.1, 0.06, 0.04])
    mechanism = optimize_rr_top_k(prior, 2.0).describe(prior=prior, epsilon_prior=0.1)
    bins = np.asarray(mechanism.support_bins)
    reported = bins >= 0
    assert reported.sum() == 3
    outside = float(np.asarray(mechanism.prior)[~reported].sum())
    q = np.array([[0.6, 0.3, 0.1], [0.1, 0.1, 0.8]]) * (1 - outside)  # rows sum to the reported mass
    out = on_support(q, mechanism)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    np.testing.assert_allclose(out[:, reported], q[:, bins[reported]])
    np.testing.assert_allclose(out[:, ~reported], outside / int((~reported).sum()))
