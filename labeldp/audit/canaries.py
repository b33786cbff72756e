"""A black-box check of a live labels party's sampler: a lower bound on the ε it really implements.

Upload ``n`` canaries with known binary labels (half 0, half 1) as a fresh dataset, release them once
at ε to a registered recipient, read the released bins back exactly as they will be delivered, and
bound ``log(P(out = a | a) / P(out = a | b))`` from below with Clopper–Pearson intervals
(``labeldp.mechanisms.empirical.epsilon_lower_bound``). For a correct sampler the bound stays below
the release's ``implemented_epsilon`` with probability at least ``1 − alpha``; a bound above it means
the deployed build randomizes too little (the check fails). With 10⁶ canaries the bound comes within a
few percent of ε. The canaries are new examples: only they are charged, ε each.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.client import ApiError, LabelsClient
from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.advantage import targets_of
from labeldp.mechanisms.empirical import epsilon_lower_bound


@dataclass(frozen=True)
class CanaryAudit:
    release_id: str
    canaries: int
    epsilon: float
    implemented_epsilon: float
    epsilon_low: float
    alpha: float
    rates: dict[str, float]

    @property
    def passed(self) -> bool:
        return self.epsilon_low <= self.implemented_epsilon

    def as_dict(self) -> dict[str, object]:
        return {
            "release_id": self.release_id,
            "canaries": self.canaries,
            "epsilon": self.epsilon,
            "implemented_epsilon": self.implemented_epsilon,
            "epsilon_low": self.epsilon_low,
            "alpha": self.alpha,
            "passed": self.passed,
            **self.rates,
        }


def canary_audit(
    labels: LabelsClient,
    recipient: str,
    epsilon: float,
    canaries: int = 1_000_000,
    alpha: float = 1e-6,
    epsilon_prior: float | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> CanaryAudit:
    if canaries < 100 or canaries > 10_000_000:
        raise ValueError("canaries must be between 100 and 10,000,000")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    run = secrets.token_hex(4)
    truth = np.arange(canaries, dtype=np.int64) % 2
    ids = pa.array([f"canary-{run}-{i:08d}" for i in range(canaries)])
    ds = labels.create_dataset({"name": f"canaries-{run}", "label_type": "binary", "lo": 0, "hi": 1})
    try:
        with tempfile.TemporaryDirectory(prefix="labeldp-canaries-") as tmp:
            path = Path(tmp) / "canaries.parquet"
            pq.write_table(pa.table({"example_id": ids, "label": pa.array(truth)}), path)
            say(f"uploading {canaries:,} canaries to dataset {ds['name']}")
            labels.upload_labels(ds["id"], path)
        say(f"releasing them once at ε = {epsilon:g}")
        rel = labels.release(ds["id"], epsilon, recipient, "zero_one", f"canaries-{run}", epsilon_prior)
    except BaseException:
        # nothing was released (a refused or failed release leaves no release behind): the canaries,
        # up to millions of rows, would only take room; a release that exists keeps its dataset
        with contextlib.suppress(ApiError):
            labels.delete_dataset(ds["id"])
        raise
    published = PublishedMechanism.model_validate(rel["mechanism"])
    out = pq.read_table(io.BytesIO(labels.noisy_labels(rel["id"])))
    position = {eid: i for i, eid in enumerate(ids.to_pylist())}
    rows = np.fromiter((position[e] for e in out.column("example_id").to_pylist()), dtype=np.int64)
    outputs = np.asarray(out.column("bin").to_numpy(), dtype=np.int64)
    targets = targets_of(published)[truth[rows]]
    bound = epsilon_lower_bound(published, targets, outputs, alpha)
    return CanaryAudit(
        rel["id"], canaries, epsilon, published.implemented_epsilon, bound.epsilon_low, alpha, bound.rates
    )
