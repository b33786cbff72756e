"""Priors for a feature-aware release, at scale: the features party prices 10M example IDs with a gradient
boosting model (the steps its gRPC server runs for ``PriceExamples``: verify the signed request, spool
and hash the ID chunks, decode and check the IDs, read the feature table, predict, group, sign), against
the model's bare prediction of the same rows in the same run (what any pricing must pay); and the labels
party's checks of the answer. Target (issue 41): pricing 10M examples in ≤ 60 s.

Two stage-1 models price: one trained on an RR-on-Bins release with the affine correction, a fixed 200
trees (nothing stops it early: the size earlier runs measured), and one trained on the release a
request without a mechanism gets (the default rule; here the unbiased randomizer), which stops early
on held-out rows as the service trains it — the model the feature-aware loop's stage 1 gives.
Prediction time grows with the trees; what labeldp adds does not.

Each size runs in its own process (its peak memory is its own). The data are synthetic (a seeded
generator: benchmark data, never a service's noise).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import peak_rss_mib, run_isolated, write

TRAIN = 200_000
FEATURES = 10
MISSING = 0.05  # of the priced IDs have no feature row


def ids(start: int, n: int) -> pa.Array:
    return pa.array(np.char.add("click-", np.arange(start, start + n).astype(str)).tolist(), pa.string())


def case(n: int, max_groups: int, stage1: str = "rr_on_bins") -> None:
    from features_party import tenants
    from features_party.pricing import Pricer
    from features_party.receiver.service import Receiver
    from features_party.storage import db
    from features_party.storage.data_dir import DataDir
    from features_party.storage.orm import FeatureTable, PricingGrant, Sender, TrainingJob
    from features_party.tables.service import FeatureTables
    from features_party.training.fit import fit
    from features_party.training.jobs import save
    from labeldp.common.db import sqlite_url
    from labeldp.common.identity import Identity, public_key_pem
    from labeldp.common.wire.pricing import GroupChunks, PricingAsk, open_priors, signed_request, spool_ids
    from labeldp.common.wire.records import read_records
    from labeldp.common.wire.sender import ReleaseMessage, build_frames
    from labeldp.mechanisms import integer_grid, optimal_mechanism
    from labeldp.mechanisms.debias import release_noise
    from labeldp.mechanisms.factory import default_mechanism
    from labels_party.priors.verify import Expected, check_header

    rng = np.random.default_rng(0)  # benchmark-only synthetic data
    priced = n
    rows = int(n * (1 - MISSING))
    X = rng.normal(size=(rows, FEATURES))
    truth = np.clip(np.rint(15 + 4 * X[:, 0] - 3 * X[:, 1] + 2 * X[:, 2] * X[:, 3]), 0, 30)
    support = integer_grid(0, 30)
    with tempfile.TemporaryDirectory() as tmp:
        data = DataDir(Path(tmp))
        engine = db.make_engine(sqlite_url(Path(tmp), "features.db"))
        db.migrate(engine)
        sessions = db.session_factory(engine)
        sender, me = Identity.generate(), Identity.generate()
        with sessions.begin() as s:
            tenant = tenants.create_tenant(s, "pub").tenant_id
            s.add(
                Sender(
                    tenant_id=tenant,
                    id="advertiser",
                    key_id=sender.key_id,
                    public_key_pem=public_key_pem(sender.public_key),
                )
            )
        # stage 1: a release of the first TRAIN examples, received as the receiver receives it
        kind = default_mechanism("squared", 1.9, TRAIN, support.k) if stage1 == "default" else "rr_on_bins"
        mechanism = optimal_mechanism(support, support.counts(truth[:TRAIN]), 1.9, "squared", kind=kind)
        published = mechanism.describe(
            prior=support.counts(truth[:TRAIN]), epsilon_prior=0.1, epsilon_total=2.0
        )
        now = int(time.time() * 1000)
        message = ReleaseMessage(
            release_id=str(uuid.uuid4()), sender_id="advertiser", recipient_id="publisher",
            created_at_unix_ms=now, expires_at_unix_ms=now + 3_600_000, label_type="count",
            mechanism=published, example_ids=ids(0, TRAIN), bins=mechanism.randomize(truth[:TRAIN]),
            recipient_tenant=tenant,
        )  # fmt: skip
        receiver = Receiver(sessions, data, "publisher", 1 << 34)
        frames = [f.SerializeToString() for f in build_frames(message, sender)]
        spool = receiver.spool(receiver.open(frames[0]))  # type: ignore[arg-type]
        for frame in frames[1:]:
            spool.add(frame)
        spool.finish()
        # the feature table (every example but the last 5%), and a model trained on stage 1
        columns = {f"x{j}": X[:, j] for j in range(FEATURES)}
        table = pa.table({"example_id": ids(0, rows), **columns})
        table_id = str(uuid.uuid4())
        data.table(table_id, 1).parent.mkdir(parents=True)
        pq.write_table(table, data.table(table_id, 1))
        schema = dict.fromkeys(columns, "numeric")
        release = pa.table(
            {"example_id": message.example_ids, "bin": pa.array(message.bins.astype(np.uint16))}
        )
        noise = release_noise(published)
        trained = fit(release, table.slice(0, TRAIN), schema, noise, "squared", model="hgb", debias="affine")
        trees = int(trained.model.named_steps["model"].estimator.n_iter_)
        job = str(uuid.uuid4())
        save(trained, published, data.model(job))
        with sessions.begin() as s:
            s.add(
                FeatureTable(
                    id=table_id, tenant_id=tenant, name="clicks", version=1, rows=rows, schema=schema
                )
            )
            s.add(
                TrainingJob(
                    id=job, tenant_id=tenant, release_id=message.release_id, feature_table="clicks",
                    feature_table_version=1, kind="hgb", debias=trained.debias, loss="squared",
                    validation_fraction=0.2, status="succeeded", progress={}, metrics=trained.metrics,
                    provenance={},
                )
            )  # fmt: skip
            s.flush()  # the grant names the job
            s.add(PricingGrant(tenant_id=tenant, sender_id="advertiser", model_id=job))
        del table, release, X

        # the labels party's request: n IDs, spooled and signed
        start = time.perf_counter()
        spooled = spool_ids(Path(tmp) / "request.ids", ids(0, priced))
        ask = PricingAsk(
            str(uuid.uuid4()), "advertiser", "publisher", tenant, now, now + 600_000, "count", "squared",
            tuple(float(v) for v in support.values), max_groups,
        )  # fmt: skip
        first = signed_request(ask, sender, spooled)
        request_s = time.perf_counter() - start

        pricer = Pricer(sessions, data, "publisher", me, FeatureTables(sessions, data), 1 << 34)
        start = time.perf_counter()
        stream = pricer.open(first)
        for chunk in read_records(spooled.path):
            stream.add(chunk)
        answer = stream.finish()
        pricing_s = time.perf_counter() - start
        stream.close()

        # the baseline: the model's prediction of the same rows, read from the same table
        start = time.perf_counter()
        features = pq.read_table(data.table(table_id, 1))
        for at in range(0, features.num_rows, 1 << 20):
            trained.predict(features.slice(at, 1 << 20))
        predict_s = time.perf_counter() - start

        # the labels party's checks of the answer
        start = time.perf_counter()
        header, _ = open_priors(answer[0], me.key_id)
        expected = Expected(
            ask.request_id,
            "advertiser",
            "publisher",
            tenant,
            ask.support,
            max_groups,
            priced,
            len(spooled.sizes),
        )
        check_header(header, expected, int(time.time() * 1000))
        groups = GroupChunks(header, spooled.sizes)
        for frame in answer[1:]:
            groups.add(frame)
        codes = groups.finish()
        verify_s = time.perf_counter() - start
        engine.dispose()
    print(
        json.dumps(
            {
                "examples": priced,
                "stage1": f"{published.kind}, {trees} trees",
                "priced": int((codes >= 0).sum()),
                "groups": len(header.groups),
                "request_s": request_s,
                "pricing_s": pricing_s,
                "predict_s": predict_s,
                "verify_s": verify_s,
                "answer_mib": sum(map(len, answer)) / 2**20,
                "peak_mib": peak_rss_mib(),
            }
        )
    )


def main() -> None:
    results = [
        run_isolated("benchmarks.bench_pricing", "case", str(n), "1024", stage1)
        for stage1 in ("rr_on_bins", "default")
        for n in (1_000_000, 10_000_000)
    ]
    lines = [
        "| stage-1 model | examples priced (G = 1,024) | with a group | groups | "
        "pricing s (target ≤ 60 at 10M) | bare prediction s | ratio | labeldp's part s | "
        "request (spool, sign) s | answer checked s | answer MiB | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['stage1']} | {r['examples']:,} | {r['priced']:,} | {r['groups']} | {r['pricing_s']:.1f} | "
        f"{r['predict_s']:.1f} | {r['pricing_s'] / r['predict_s']:.2f} | "
        f"{r['pricing_s'] - r['predict_s']:.1f} | {r['request_s']:.1f} | "
        f"{r['verify_s']:.2f} | "
        f"{r['answer_mib']:.1f} | {r['peak_mib']:.0f} |"
        for r in results
    ]
    write("pricing", "\n".join(lines), results)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "case":
        case(int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5])
    else:
        main()
