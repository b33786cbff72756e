"""The demo's simulated world: one real dataset split into what each party holds.

The advertiser holds labels for its clicks (the training examples): it uploads only the non-default
labels (conversions) and declares every click as the release's universe, so the message lists every
click whatever its label. For a user-level run it uploads every click with its (synthetic) user.
The publisher holds features for nearly all of those clicks (1% are missing,
as with real logging, so the join's match rate is below 100%) and for a held-out test set whose true
labels the demo keeps to score the models; neither service ever sees them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.samples import LabelDataset, synthetic_users

TEST_EVERY = 5  # every 5th example is held out for testing (deterministic, no random generator)
MISSING_EVERY = 100  # 1 in 100 training examples has no features at the publisher

SPECS: dict[str, dict[str, Any]] = {  # public parameters, fixed before looking at any label
    "weeks": {"label_type": "count", "lo": 0, "hi": 52, "default_label": 0},
    "prices": {
        "label_type": "real",
        "lo": 0,
        "hi": 20_000,
        "support": {"kind": "uniform", "k": 201},
        "default_label": 0,
    },
}


@dataclass(frozen=True)
class World:
    dataset: LabelDataset
    run_id: str
    ids: np.ndarray  # example IDs (str), one per row of the dataset
    y: np.ndarray  # true labels
    test: np.ndarray  # held out: features at the publisher, labels only in the demo
    has_features: np.ndarray  # the publisher logged features for this example
    users: np.ndarray | None = None  # user-level runs: a synthetic user index per example

    @property
    def train(self) -> np.ndarray:
        return ~self.test

    @property
    def spec(self) -> dict[str, Any]:
        return {"name": f"demo-{self.dataset.name}-{self.run_id}", **SPECS[self.dataset.name]}

    def write_files(self, folder: Path) -> dict[str, Path]:
        """The advertiser's labels and universe and the publisher's feature table, as Parquet."""
        folder.mkdir(parents=True, exist_ok=True)
        train, y = self.train, self.y
        converted = train & (y != SPECS[self.dataset.name]["default_label"])
        label_type = pa.int64() if self.dataset.integer else pa.float64()
        files = {
            "labels": folder / "advertiser-labels.parquet",
            "universe": folder / "advertiser-clicks.parquet",
            "features": folder / "publisher-features.parquet",
        }
        labels = {"example_id": self.ids[converted], "label": pa.array(y[converted], label_type)}
        universe: dict[str, Any] = {"example_id": self.ids[train]}
        if self.users is not None:  # user-level: the universe says whose every click is (labels never do)
            universe["user_id"] = pa.array([f"{self.run_id}-user-{u}" for u in self.users[train]])
        pq.write_table(pa.table(labels), files["labels"])
        pq.write_table(pa.table(universe), files["universe"])
        keep = self.has_features | self.test
        features = self.dataset.features.filter(pa.array(keep))
        pq.write_table(features.append_column("example_id", pa.array(self.ids[keep])), files["features"])
        return files


def split(dataset: LabelDataset, run_id: str | None = None, *, with_users: bool = False) -> World:
    """A fresh run id prefixes the example IDs, so every demo run releases new examples (the budget
    ledger would rightly refuse to charge the same examples forever). ``with_users``: assign synthetic
    users with a heavy-tailed number of clicks each (the datasets have none)."""
    run_id = run_id or secrets.token_hex(3)
    n = dataset.table.num_rows
    index = np.arange(n)
    ids = np.array([f"{run_id}-click-{i:07d}" for i in range(n)], dtype=object)
    test = index % TEST_EVERY == 0
    has_features = index % MISSING_EVERY != 1
    users = synthetic_users(n) if with_users else None
    return World(dataset, run_id, ids, dataset.labels, test, has_features, users)
