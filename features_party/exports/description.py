"""The description that goes with every export: what a trainer needs to correct for the release.

One JSON object (format ``labeldp_model.release.FORMAT``), in the file's schema metadata under
``labeldp_model.METADATA_KEY`` and written by the client beside the file: the release, the columns,
the published mechanism exactly as the sender signed it, and the correction's numbers — the bins'
values and the keep and move probabilities of the mechanism's integer sampler (``BinsNoise``, the same
numbers the service's own models are corrected with), so that ``labeldp_model`` never re-derives them.
"""

from __future__ import annotations

import json
from typing import Any

from features_party.receiver.store import published_mechanism
from features_party.storage.orm import FeatureTable, ReceivedRelease
from labeldp.mechanisms import BinsNoise, PublishedMechanism
from labeldp_model.release import FORMAT, FORMAT_VERSION

EXAMPLE_ID, BIN, VALUE = "example_id", "released_bin", "released_value"


def correction(mechanism: PublishedMechanism) -> dict[str, Any]:
    """The randomized response's numbers for a mechanism (its kind decides in ``labeldp_model.kinds``);
    the unbiased randomizer's released values need no correction: the identity (keep 1, move 0)."""
    if mechanism.kind == "unbiased":
        return {"bin_values": [float(v) for v in mechanism.bin_values], "keep": 1.0, "move": 0.0}
    noise = BinsNoise.of_published(mechanism)
    return {
        "bin_values": [float(v) for v in noise.bin_values],
        "keep": float(noise.keep),
        "move": float(noise.move),
        "outside_mass": float(noise.outside_mass),
    }


def describe(
    release: ReceivedRelease,
    table: FeatureTable | None,
    features: list[str],
    groups: dict[str, int],
) -> bytes:
    mechanism = published_mechanism(release)
    return json.dumps(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "export": "training-set" if table is not None else "released-values",
            "release_id": release.release_id,
            "sender_id": release.sender_id,
            "feature_table": None if table is None else {"name": table.name, "version": table.version},
            "columns": {EXAMPLE_ID: EXAMPLE_ID, BIN: BIN, VALUE: VALUE, "features": features},
            "capped_bin": mechanism.capped_bin,
            "mechanism": mechanism.model_dump(mode="json"),
            "correction": correction(mechanism),
            "row_groups": groups,
        },
        separators=(",", ":"),
    ).encode()
