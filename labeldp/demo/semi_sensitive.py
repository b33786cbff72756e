"""``labeldp demo --semi-sensitive``: UCI Adult with half of its columns semi-sensitive, through both
services (docs/semi-sensitive.md).

The advertiser uploads income labels with its seven semi-sensitive columns and the publisher its click
table, declaring seven columns non-sensitive; one label release spends ε₁ = min(0.6·ε, 3) and is
delivered; the publisher exports the declared columns of the released clicks (public to an attacker by
definition) and the advertiser uploads them; the labels party trains with (ε − ε₁, δ = 1/n²) — the
label phase on the release, then DP-SGD — and delivers the signed model over gRPC; the publisher
verifies and stores it. The demo then scores, on held-out rows whose labels neither service saw,
the hybrid model against what label DP alone buys (the truncated model on the release's noisy labels,
non-sensitive columns only) and a non-private model.
"""

from __future__ import annotations

import io
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table
from sklearn.metrics import roc_auc_score

from labeldp.client import FeaturesClient, LabelsClient
from labeldp.common.identity import load_public_key
from labeldp.common.model_message import verify_model
from labeldp.demo.flow import register
from labeldp.demo.parties import local_parties
from labeldp.demo.world import TEST_EVERY
from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.debias import BinsNoise
from labeldp.samples import adult_semi_sensitive

DELTA_RELEASES = 10  # the tenant's δ budget: ten DP-SGD runs at δ = 1/n²


def run_semi_sensitive_demo(
    epsilon: float,
    out: Path,
    postgres_url: str | None = None,
    console: Console | None = None,
    ports: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    from labeldp.semi_sensitive import HybridBudget, Hyper, TwoTower, predict, train_full, train_truncated
    from labeldp.semi_sensitive.encoding import ColumnEncoding, encode

    console = console or Console(width=None if Console().is_terminal else 110)
    started = time.monotonic()
    data = adult_semi_sensitive()
    n = data.labels.num_rows
    test = np.arange(n) % TEST_EVERY == 0
    train = ~test
    delta = 1.0 / int(train.sum()) ** 2
    budget = HybridBudget.split(epsilon, delta)
    run_id = secrets.token_hex(3)
    console.print(
        f"[bold]labeldp demo --semi-sensitive[/]: UCI Adult, {int(train.sum()):,} training clicks; "
        f"ε = {epsilon:g} → ε₁ = {budget.epsilon_labels:g} (labels), ε₂ = {budget.epsilon_dpsgd:g} with "
        f"δ = {delta:.3g} (DP-SGD)"
    )
    timings: dict[str, float] = {}

    def say(text: str) -> None:
        console.print(f"      {text}")

    def mark(key: str, since: float) -> float:
        now = time.monotonic()
        timings[key] = round(now - since, 2)
        return now

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="labeldp-demo-") as tmp:
        work = Path(tmp)
        t = time.monotonic()
        parties = local_parties(
            work,
            out / "logs",
            run_id,
            epsilon,
            postgres_url,
            say,
            delta_budget=DELTA_RELEASES * delta,
            ports=ports,
        )
        with (
            parties as conn,
            LabelsClient(conn.labels_url, conn.labels_key) as labels,
            FeaturesClient(conn.features_url, conn.features_key) as features,
        ):
            advertiser, publisher = register(labels, features, conn)
            t = mark("start", t)
            spec = {
                "name": f"demo-adult-{run_id}",
                "label_type": "binary",
                "lo": 0,
                "hi": 1,
                "semi_sensitive": data.semi_sensitive,
                "non_sensitive": data.non_sensitive,
            }
            ds = labels.create_dataset(spec)["id"]
            mask = pa.array(train)
            pq.write_table(data.labels.filter(mask), work / "labels.parquet")
            labels.upload_labels(ds, work / "labels.parquet")
            non_sensitive = [str(c["name"]) for c in data.non_sensitive]
            pq.write_table(data.features.filter(mask), work / "clicks.parquet")
            features.upload_table(f"clicks-{run_id}", work / "clicks.parquet", non_sensitive=non_sensitive)
            say(
                f"advertiser uploaded {int(train.sum()):,} labels with 7 semi-sensitive columns; publisher "
                "its click table, declaring 7 columns non-sensitive"
            )
            t = mark("upload", t)
            release = labels.release(
                ds, budget.epsilon_labels, publisher, "zero_one", f"demo-{run_id}-labels"
            )
            labels.deliver(release["id"])
            say(f"label release {release['id']}: ε₁ = {release['epsilon']:g} charged, delivered over gRPC")
            (work / "rows.parquet").write_bytes(
                features.non_sensitive_rows(f"clicks-{run_id}", release["id"])
            )
            labels.upload_non_sensitive(ds, work / "rows.parquet")
            say(
                "publisher exported the non-sensitive columns of the released clicks; "
                "advertiser uploaded them"
            )
            t = mark("release", t)
            body = {"label_release_id": release["id"], "epsilon_dpsgd": budget.epsilon_dpsgd, "delta": delta}
            model = labels.create_model(ds, body, f"demo-{run_id}-model")
            say(
                f"model {model['id']}: (ε₂, δ) charged first, then the label phase and "
                f"{model['steps']} DP-SGD "
                f"steps at σ = {model['noise_multiplier']:.3f}"
            )
            t = mark("train", t)
            labels.deliver_model(model["id"])
            received = features.received_model(model["id"])
            artifact = features.received_model_artifact(model["id"])
            me = labels.identity()
            key = load_public_key(me["public_key_pem"])
            payload = verify_model(
                artifact, lambda s, k: key if (s, k) == (advertiser, me["key_id"]) else None
            )
            say(
                f"delivered over gRPC; {publisher} verified and stored it "
                f"({len(artifact):,} bytes, one artifact)"
            )
            t = mark("deliver", t)
            noisy = pq.read_table(io.BytesIO(labels.noisy_labels(release["id"])))
            mechanism = PublishedMechanism.model_validate(release["mechanism"])

        # scoring, on rows neither service saw labels for
        def matrix(table: pa.Table, declared: list[dict[str, object]]) -> np.ndarray:
            values = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
            return encode(values, [ColumnEncoding.of(d) for d in declared])

        x_non = matrix(data.features, data.non_sensitive)
        x_semi = matrix(data.labels, data.semi_sensitive)
        y = data.labels.column("label").to_numpy().astype(np.int64)
        hybrid = TwoTower.from_arrays(
            x_non.shape[1], x_semi.shape[1], payload.architecture["width"], payload.weights
        )
        width_non, width_semi = x_non.shape[1], x_semi.shape[1]
        reference = train_full(
            TwoTower(width_non, width_semi), x_non[train], x_semi[train], y[train], Hyper(5, 256, 1e-3)
        )
        train_ids = data.labels.column("example_id").filter(pa.array(train))
        position = pc.index_in(train_ids, value_set=noisy.column("example_id"))
        bins = noisy.column("bin").take(position).to_numpy().astype(np.int64)  # each training row's bin
        label_only = TwoTower(x_non.shape[1], x_semi.shape[1])
        noise = BinsNoise.of_published(mechanism)
        if noise.m == 2:
            train_truncated(label_only, x_non[train], bins, noise, Hyper(3, 256, 1e-3))
        aucs = {
            "non-private (all columns)": float(
                roc_auc_score(y[test], predict(reference, x_non[test], x_semi[test]))
            ),
            "label DP only (non-sensitive columns)": float(
                roc_auc_score(y[test], predict(label_only, x_non[test]))
            ),
            "hybrid (label DP, then DP-SGD)": float(
                roc_auc_score(y[test], predict(hybrid, x_non[test], x_semi[test]))
            ),
        }
        mark("score", t)
    timings["total"] = round(time.monotonic() - started, 1)
    base = aucs["non-private (all columns)"]
    table = Table(title=f"test AUC on {int(test.sum()):,} held-out examples")
    for column in ("model", "AUC", "relative AUC loss"):
        table.add_column(column)
    for name, value in aucs.items():
        table.add_row(name, f"{value:.4f}", f"{100 * (base - value) / base:.2f} %")
    console.print(table)
    report = {
        "dataset": "income",
        "run_id": run_id,
        "epsilon": epsilon,
        "epsilon_labels": budget.epsilon_labels,
        "epsilon_dpsgd": budget.epsilon_dpsgd,
        "delta": delta,
        "guarantee": received["guarantee"],
        "test_auc": aucs,
        "timings_s": timings,
    }
    (out / "semi-sensitive-report.json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out / 'semi-sensitive-report.json'}; done in {timings['total']:.0f} s")
    return report
