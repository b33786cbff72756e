"""The description that goes with every export: what a trainer needs to correct for the release.

One JSON object (format ``labeldp_model.release.FORMAT``), in the file's schema metadata under
``labeldp_model.METADATA_KEY`` and written by the client beside the file: the release, the columns,
the published mechanism exactly as the sender signed it, and the correction's numbers — the bins'
values and the keep and move probabilities of the mechanism's integer sampler (``BinsNoise``, the same
numbers the service's own models are corrected with), so that ``labeldp_model`` never re-derives them.
A feature-aware release's description is format version 2: it adds each group's correction, and its
rows carry their group, unbiased target and weight (``GROUP_COLUMNS``), since the one correction holds
only for the rows without a group.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from features_party.receiver.store import group_mechanisms, grouping, published_mechanism
from features_party.storage.orm import FeatureTable, ReceivedRelease
from labeldp.mechanisms import BinsNoise, GroupedNoise, PublishedMechanism
from labeldp_model.release import FORMAT, FORMAT_VERSION, GROUPED_FORMAT_VERSION

EXAMPLE_ID, BIN, VALUE = "example_id", "released_bin", "released_value"
GROUP, TARGET, WEIGHT = "released_group", "unbiased_target", "target_weight"
# a feature-aware release's exports add, after the released value (itself under each row's own
# mechanism): each row's group (-1: the release's own mechanism), its unbiased target under its own
# mechanism, and its weight (1 / E[(target − label)²] of that mechanism, relative to the release's own)
GROUP_COLUMNS = [pa.field(GROUP, pa.int16()), pa.field(TARGET, pa.float64()), pa.field(WEIGHT, pa.float64())]


def row_noise(release: ReceivedRelease) -> GroupedNoise | None:
    """A feature-aware release's per-row noise (None without groups)."""
    groups = group_mechanisms(release)
    return GroupedNoise.of_published(published_mechanism(release), groups) if groups else None


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
    row_groups: dict[str, int],
) -> bytes:
    mechanism = published_mechanism(release)
    groups = group_mechanisms(release)
    columns: dict[str, Any] = {EXAMPLE_ID: EXAMPLE_ID, BIN: BIN, VALUE: VALUE, "features": features}
    grouped: dict[str, Any] = {}
    if groups:  # a reader of format 1 would correct every row with the release's own mechanism: refused
        columns.update({"group": GROUP, "target": TARGET, "weight": WEIGHT})
        grouped = {
            "priors_id": grouping(release)[0],
            "group_count": len(groups),
            "group_corrections": [correction(g) for g in groups],
        }
    return json.dumps(
        {
            "format": FORMAT,
            "format_version": GROUPED_FORMAT_VERSION if groups else FORMAT_VERSION,
            "export": "training-set" if table is not None else "released-values",
            "release_id": release.release_id,
            "sender_id": release.sender_id,
            "feature_table": None if table is None else {"name": table.name, "version": table.version},
            "columns": columns,
            "capped_bin": mechanism.capped_bin,
            "mechanism": mechanism.model_dump(mode="json"),
            "correction": correction(mechanism),
            "row_groups": row_groups,
            **grouped,
        },
        separators=(",", ":"),
    ).encode()
