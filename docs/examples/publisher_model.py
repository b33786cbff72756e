# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The publisher's model: release to prediction
#
# The publisher's side of one release, through the services' real interfaces and the Python client
# (`labeldp.client`): a release arrives signed over gRPC, is joined to the publisher's features,
# trains a model as a background job, answers predictions, and leaves the service as one
# scikit-learn pipeline that predicts exactly what the service does.
#
# Both services run here as local processes on loopback — the same set-up `make demo` starts: a
# development CA with mutual-TLS certificates, SQLite, one tenant per party created with the CLI. The
# data is 4,000 diamond sales from `labeldp.samples`: the advertiser knows the prices, the publisher
# the features.

# %%
import atexit
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import skops.io as sio
from pyarrow import csv

from labeldp.client import FeaturesClient, LabelsClient
from labeldp.demo.parties import local_parties
from labeldp.samples import diamond_prices
from labeldp_model import TRUSTED_TYPES

work = Path(tempfile.mkdtemp(prefix="labeldp-example-"))
prices = diamond_prices()
n = 4_000
ids = pa.array([f"click-{i}" for i in range(n)])
csv.write_csv(pa.table({"example_id": ids, "label": prices.labels[:n]}), work / "labels.csv")
features = prices.features.slice(0, n).append_column("example_id", ids)
csv.write_csv(features, work / "features.csv")

services = ExitStack()  # the services stay up between cells; the last cell (or leaving Python) stops them
atexit.register(services.close)
conn = services.enter_context(local_parties(work, work / "logs", uuid.uuid4().hex[:8], 1.0, None, say=print))
labels = services.enter_context(LabelsClient(conn.labels_url, conn.labels_key))
publisher = services.enter_context(FeaturesClient(conn.features_url, conn.features_key))

# %% [markdown]
# ## The advertiser's part, briefly
#
# Each side registers the other — the publisher pins the advertiser's signing key, the advertiser
# registers the publisher's receiver — then the advertiser declares the public parameters, uploads
# its labels, and releases them at ε = 1 to the publisher ([advertiser's guide](../guides/advertiser.md)).

# %%
advertiser_id = labels.identity()
publisher_id = publisher.identity()
publisher.pin_sender(advertiser_id["party_id"], advertiser_id["public_key_pem"])
labels.register_recipient(
    publisher_id["party_id"],
    conn.grpc_address,
    conn.tls_ca_pem,
    publisher_id["key_id"],
    publisher_id["tenant_id"],
)

dataset = labels.create_dataset(
    {"name": "prices", "label_type": "real", "lo": 0, "hi": 20_000, "support": {"kind": "uniform", "k": 201}}
)
labels.upload_labels(dataset["id"], work / "labels.csv")
release = labels.release(dataset["id"], 1.0, publisher_id["party_id"], "squared", idempotency_key="example-1")
delivery = labels.deliver(release["id"])
print(f"release {release['id']}: {delivery['outcome']}")

# %% [markdown]
# ## 1. The release, as the publisher received it
#
# The receiver verified the signature against the pinned key before reading any example, then the
# digest of every chunk. What the publisher learns about the mechanism is public by design: the bins,
# their values, the ε split and the noisy prior — and the most any attacker can gain from it.

# %%
received = publisher.received_release(release["id"])
mechanism = received["mechanism"]
print(
    f"from {received['sender_id']}: {received['example_count']:,} examples, "
    f"{len(mechanism['bin_values'])} bins {np.round(mechanism['bin_values'], 1)}"
)
print(
    f"worst-case additive advantage {received['worst_case_additive_advantage']:.3f}, "
    f"max multiplicative advantage {received['max_multiplicative_advantage']:.3f}"
)
assert received["example_count"] == n

# %% [markdown]
# ## 2. Features, and the join
#
# The publisher uploads its features for the same click IDs; the service infers the schema (numbers
# numeric, text categorical). The join report says how many released examples have features.

# %%
table = publisher.upload_table("diamonds", work / "features.csv")
print("schema:", table["schema"])
joined = publisher.join(release["id"], "diamonds")
print(joined)

# %% [markdown]
# ## 3. Train
#
# Training is a background job. The model follows the release's published mechanism: a
# gradient-boosting regressor with the release's loss on the noisy bins, whose predictions are mapped
# back through the mechanism's exact keep/move probabilities (`debias: affine`).

# %%
job = publisher.wait_for_job(publisher.train(release["id"], "diamonds", model="hgb", debias="affine")["id"])
model = publisher.model(job["id"])
print(model["status"], model["loss"], model["debias"])
print({k: v for k, v in model["metrics"].items() if isinstance(v, float)})

# %% [markdown]
# ## 4. Predictions from the service
#
# By example ID (rows of a feature table), or for raw feature rows.

# %%
by_id = publisher.predict(job["id"], ["click-1", "click-2"])
row = {
    "carat": 0.23,
    "cut": "Ideal",
    "color": "E",
    "clarity": "SI2",
    "depth": 61.5,
    "table": 55.0,
    "x": 3.95,
    "y": 3.98,
    "z": 2.43,
}
by_row = publisher.predictions(job["id"], rows=[row])["predictions"]
print("click-1, click-2:", np.round(by_id, 1), "  a new diamond:", np.round(by_row, 1))

# %% [markdown]
# ## 5. Take the model out
#
# The artifact is the very `Pipeline` the service predicts with, saved with skops (never pickle): the
# raw feature columns in, the debiased prediction out. Loading it trusts an explicit list of type
# names (`labeldp_model.TRUSTED_TYPES`: scikit-learn's and numpy's, and the small `labeldp_model`
# package's debiasing step), never what the file asks for; a notebook needs only scikit-learn, skops,
# pandas and `pip install ./packages/labeldp-model`, not labeldp.

# %%
path = work / "model.skops"
publisher.download_model(job["id"], path)
print(sio.get_untrusted_types(file=path))  # what the file names beyond skops's defaults: all on the list
pipeline = sio.load(path, trusted=list(TRUSTED_TYPES))
local = pipeline.predict(pd.DataFrame([row]))
print("locally:", np.round(local, 1))
assert np.allclose(local, by_row)  # exactly what POST /v1/models/{id}/predictions answers

# %% [markdown]
# ## Clean up
#
# Stop both services (a notebook would run this cell last).

# %%
services.close()
