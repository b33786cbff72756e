"""The tour (docs/tour.md) with nothing but the clients openapi-python-client generated from the two live
OpenAPI documents (``labels_client``, ``features_client`` on ``sys.path``). Run by
tests/e2e/test_generated_clients.py as ``python generated_tour.py LABELS_URL LABELS_KEY FEATURES_URL
FEATURES_KEY CA_PEM WORKDIR``; prints a JSON summary of what each step answered."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from features_client import AuthenticatedClient as FeaturesApi
from features_client.api.features import put_feature_table, report_join
from features_client.api.identity import get_identity as features_identity
from features_client.api.models import download_model, get_job, list_models, predict, start_training
from features_client.api.releases import get_received_release
from features_client.api.senders import pin_sender
from features_client.models import JoinIn, PredictIn, SenderIn, TrainingJobIn
from features_client.types import File as FeaturesFile
from labels_client import AuthenticatedClient as LabelsApi
from labels_client.api.budget import get_budget, get_ledger
from labels_client.api.datasets import create_dataset, put_labels
from labels_client.api.delivery import deliver_release
from labels_client.api.identity import get_identity as labels_identity
from labels_client.api.recipients import register_recipient
from labels_client.api.releases import audit_release, create_release, preview_release
from labels_client.models import DatasetIn, PreviewIn, RecipientIn, ReleaseIn
from labels_client.types import File as LabelsFile

from labeldp.samples import diamond_prices

N = 2000
EPSILON = 2  # the tour's release


def parquet(table: pa.Table) -> io.BytesIO:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    buf.seek(0)
    return buf


def main(labels_url: str, labels_key: str, features_url: str, features_key: str, ca: str, work: str) -> None:
    out: dict[str, Any] = {}
    a = LabelsApi(base_url=labels_url, token=labels_key, raise_on_unexpected_status=True)
    f = FeaturesApi(base_url=features_url, token=features_key, raise_on_unexpected_status=True)
    # each party registers the other
    advertiser, publisher = labels_identity.sync(client=a), features_identity.sync(client=f)
    sender = SenderIn(id=advertiser.party_id, public_key_pem=advertiser.public_key_pem)
    out["pinned"] = pin_sender.sync(client=f, body=sender).key_id == advertiser.key_id
    recipient = RecipientIn.from_dict(
        {
            "name": publisher.party_id,
            "grpc_address": f"localhost:{publisher.grpc_port}",
            "tls_ca_pem": Path(ca).read_text(),
            "fingerprint": publisher.key_id,
        }
    )
    out["recipient"] = register_recipient.sync(client=a, body=recipient).name
    # the advertiser: public parameters, labels, a free preview, one release delivered
    ds = diamond_prices()
    rows = np.random.default_rng(31).choice(ds.table.num_rows, size=N, replace=False)  # the tour's sample
    ids = pa.array([f"click-{i}" for i in range(N)])
    spec = {
        "name": "prices",
        "label_type": "real",
        "lo": 0,
        "hi": 20000,
        "support": {"kind": "uniform", "k": 201},
    }
    dataset = create_dataset.sync(client=a, body=DatasetIn.from_dict(spec))
    labels = parquet(pa.table({"example_id": ids, "label": ds.labels[rows]}))
    out["labels_stored"] = put_labels.sync(dataset.id, client=a, body=LabelsFile(payload=labels)).to_dict()
    preview = preview_release.sync(
        dataset.id, client=a, body=PreviewIn.from_dict({"epsilon": EPSILON, "recipient": publisher.party_id})
    )
    out["preview_expected_loss"] = preview.to_dict()["expected_loss"]
    body = ReleaseIn.from_dict({"epsilon": EPSILON, "recipient": publisher.party_id})
    release = create_release.sync(dataset.id, client=a, body=body, idempotency_key="tour-1")
    again = create_release.sync_detailed(dataset.id, client=a, body=body, idempotency_key="tour-1")
    out["replay"] = [again.status_code.value, again.parsed.id == release.id]
    out["delivery"] = deliver_release.sync(release.id, client=a).outcome
    out["audit_keys"] = sorted(audit_release.sync(release.id, client=a).to_dict())[:3]
    out["budget"] = get_budget.sync(dataset.id, client=a, epsilon=1).to_dict()["max_spent"]
    out["ledger"] = [e.kind for e in get_ledger.sync(client=a, limit=10).items]
    too_much = ReleaseIn.from_dict({"epsilon": 5.5, "recipient": publisher.party_id})
    refused = create_release.sync(dataset.id, client=a, body=too_much, idempotency_key="tour-2")
    # the declared 409 schema (BudgetRefusal, its type limited to the 409 codes): spent and left
    problem = refused.to_dict() if refused is not None and hasattr(refused, "to_dict") else {}
    out["refused"] = {"type": problem.get("type"), "left": problem.get("left")}
    # the publisher: the received release, features, the join, a training job, predictions, the model
    out["received"] = get_received_release.sync(release.id, client=f).example_count
    features = parquet(ds.features.take(rows).append_column("example_id", ids))
    put_feature_table.sync("diamonds", client=f, body=FeaturesFile(payload=features))
    join = report_join.sync(client=f, body=JoinIn(release_id=release.id, feature_table="diamonds"))
    out["in_both"] = join.in_both
    job = start_training.sync(client=f, body=TrainingJobIn(release_id=release.id, feature_table="diamonds"))
    deadline = time.monotonic() + 300
    while (state := get_job.sync(job.id, client=f).status) not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    out["job"] = state
    predictions = predict.sync(
        job.id, client=f, body=PredictIn.from_dict({"example_ids": ["click-1", "click-2"]})
    )
    out["predictions"] = predictions.to_dict()["predictions"]
    out["models"] = [m.id for m in list_models.sync(client=f).items] == [job.id]
    artifact = download_model.sync_detailed(job.id, client=f)
    (Path(work) / "model.skops").write_bytes(artifact.content)
    out["artifact_bytes"] = len(artifact.content)
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:7])
