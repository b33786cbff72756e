"""A release as an export describes it: what a trainer outside the service needs to correct for it.

The features party's exports (``GET /v1/releases/{id}/training-set`` and ``…/released-values``) carry
one JSON description: in the file's schema metadata under ``METADATA_KEY`` (Parquet footer, Arrow IPC
schema) and, written by the client beside the file, as ``<file>.labeldp.json``. It states the release,
the columns, the published mechanism as the service received it (signed), and the exact numbers of its
randomized response (``correction``). ``Release`` reads it from any of the three; nothing here reads
Parquet or Arrow itself, so the package needs neither.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleaseFormatError
from labeldp_model.kinds import correction_of

METADATA_KEY = "labeldp.training_set"
FORMAT = "labeldp.training-set"
FORMAT_VERSION = 1
# a feature-aware release's export: each group's rows were released by the group's own mechanism, so
# the one ``correction`` holds only for the rows without a group; its rows carry their own unbiased
# target and weight (``Release.columns``: group, target, weight), and the corrections refuse it
GROUPED_FORMAT_VERSION = 2
SIBLING_SUFFIX = ".labeldp.json"  # the description beside an exported file: train.parquet.labeldp.json
MAX_DESCRIPTION_BYTES = 64 << 20  # a mechanism has at most 10⁶ support points; far below this


@dataclass(frozen=True)
class Release:
    """One exported release: its ID, the mechanism's kind, loss and ε, the correction its released
    values need, and the names of the export's columns (``example_id``, ``released_bin``,
    ``released_value`` and, for a training set, the feature columns)."""

    release_id: str
    kind: str
    loss: str
    epsilon: float
    correction: BinsCorrection
    columns: Mapping[str, Any] = field(default_factory=dict)
    description: Mapping[str, Any] = field(default_factory=dict, repr=False)
    group_count: int = 0  # a feature-aware release: train on its target and weight columns

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> Release:
        if description.get("format") != FORMAT:
            raise ReleaseFormatError(
                f"not a labeldp export description (format {description.get('format')!r})"
            )
        version = description.get("format_version")
        if version not in (FORMAT_VERSION, GROUPED_FORMAT_VERSION):
            raise ReleaseFormatError(
                f"format version {version!r}: this labeldp_model reads versions {FORMAT_VERSION} and "
                f"{GROUPED_FORMAT_VERSION}; upgrade it"
            )
        group_count = description.get("group_count", 0)
        if (version == GROUPED_FORMAT_VERSION) != (isinstance(group_count, int) and group_count > 0):
            raise ReleaseFormatError("a format 2 description states its groups (group_count), and only it")
        mechanism = description.get("mechanism")
        if not isinstance(mechanism, Mapping):
            raise ReleaseFormatError("the description has no mechanism")
        correction = correction_of(mechanism.get("kind"), description)
        columns = description.get("columns")
        epsilon = mechanism.get("epsilon")
        if not isinstance(columns, Mapping) or not isinstance(epsilon, int | float):
            raise ReleaseFormatError("the description lacks its columns or the mechanism's epsilon")
        return cls(
            release_id=str(description.get("release_id")),
            kind=str(mechanism["kind"]),
            loss=str(mechanism.get("loss")),
            epsilon=float(epsilon),
            correction=correction,
            columns=dict(columns),
            description=dict(description),
            group_count=int(group_count),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Release:
        if len(text) > MAX_DESCRIPTION_BYTES:
            raise ReleaseFormatError(f"a description is at most {MAX_DESCRIPTION_BYTES} bytes")
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise ReleaseFormatError(f"the description is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ReleaseFormatError("the description is not a JSON object")
        return cls.from_description(parsed)

    @classmethod
    def from_metadata(cls, metadata: Mapping[bytes, bytes] | Mapping[str, str] | None) -> Release:
        """From a file's schema metadata: ``pyarrow.parquet.read_schema(path).metadata`` (or an Arrow
        IPC stream's ``schema.metadata``)."""
        for key, value in (metadata or {}).items():
            if key in (METADATA_KEY, METADATA_KEY.encode()):
                return cls.from_json(value)
        raise ReleaseFormatError(f"the schema metadata has no {METADATA_KEY!r} entry: not a labeldp export")

    @classmethod
    def load(cls, path: str | Path) -> Release:
        """From a description file (``<export>.labeldp.json``), or from the export beside which it lies."""
        file = Path(path)
        if not file.name.endswith(SIBLING_SUFFIX):
            file = file.with_name(file.name + SIBLING_SUFFIX)
        if file.stat().st_size > MAX_DESCRIPTION_BYTES:
            raise ReleaseFormatError(f"{file}: a description is at most {MAX_DESCRIPTION_BYTES} bytes")
        return cls.from_json(file.read_bytes())

    @property
    def value_column(self) -> str:
        """The column holding each row's released value (what the corrections take)."""
        return str(self.columns.get("released_value", "released_value"))
