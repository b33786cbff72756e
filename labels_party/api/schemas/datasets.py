"""Bodies of ``/v1/datasets``: public specs and the answer to an upload."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from labeldp.common.inputs import Name
from labels_party.datasets.spec import DatasetSpec
from labels_party.storage.orm import Dataset


class DatasetIn(DatasetSpec):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [
                {
                    "name": "prices",
                    "label_type": "real",
                    "lo": 0,
                    "hi": 20000,
                    "support": {"kind": "uniform", "k": 201},
                },
                {"name": "conversions", "label_type": "count", "lo": 0, "hi": 52, "default_label": 0},
                {
                    "name": "purchases",
                    "label_type": "binary",
                    "lo": 0,
                    "hi": 1,
                    "semi_sensitive": [
                        {"name": "cart_adds", "kind": "number", "lo": 0, "hi": 100},
                        {"name": "remarketing_list", "kind": "category", "categories": ["none", "a", "b"]},
                    ],
                },
            ]
        },
    )

    name: Name


@lru_cache(maxsize=1024)
def _support_size(spec: str) -> int:
    """A stored spec's support size; validating a spec builds its grid, which listing datasets did for
    every dataset on every request (an eighth of the list route's time under 16 connections)."""
    return DatasetSpec.model_validate_json(spec).support_points()


class DatasetOut(BaseModel):
    id: str
    name: str
    spec: dict[str, Any]
    support_size: int
    label_count: int
    universe_count: int | None
    universe_users: int | None = Field(
        None,
        description="users the universe declares (an example without a user_id is its own user); "
        "with a universe, the only source of each example's user",
    )
    labels_version: int = Field(description="uploads of labels so far (each one publishes a new version)")
    universe_version: int = Field(description="uploads of the universe so far (0: none declared)")
    non_sensitive_version: int = Field(description="uploads of non-sensitive rows so far")
    created_at: AwareDatetime

    @classmethod
    def of(cls, ds: Dataset) -> DatasetOut:
        return cls(
            id=ds.id,
            name=ds.name,
            spec=ds.spec,
            support_size=_support_size(json.dumps(ds.spec, sort_keys=True)),
            label_count=ds.label_count,
            universe_count=ds.universe_count,
            universe_users=ds.universe_users,
            labels_version=ds.labels_version,
            universe_version=ds.universe_version,
            non_sensitive_version=ds.non_sensitive_version,
            created_at=ds.created_at,
        )


class UploadOut(BaseModel):
    rows: int
    clipped: int = 0
    label_count: int | None = None
    universe_count: int | None = None
    universe_users: int | None = None
    version: int
