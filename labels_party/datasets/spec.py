"""A dataset's public parameters: label type, bounds, support grid and policies.

Everything here is declared by the advertiser before any label is uploaded, so none of it can
depend on the labels (privacy invariant 3).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Self

import pyarrow as pa
from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from labeldp.common.errors import DomainError
from labeldp.mechanisms import (
    LOSSES_BY_LABEL_TYPE,
    LabelType,
    LossName,
    ParameterError,
    Support,
    check_loss,
    explicit_support,
    integer_grid,
    log_grid,
    uniform_grid,
)
from labels_party.datasets.store import LABEL_SCHEMA

# A dataset's support has at most this many points: the optimizer's work grows with k² (about 1 s
# for squared and 7 s for absolute loss at this size), and bins travel as uint16 (at most 65,535).
MAX_SUPPORT_POINTS = 10_000


class SupportSpec(BaseModel):
    kind: Literal["integer", "uniform", "log", "explicit"]
    step: int | None = Field(None, gt=0, description="integer grid step (kind=integer)")
    k: int | None = Field(
        None, ge=2, le=MAX_SUPPORT_POINTS, description="number of points (kind=uniform or log)"
    )
    include_zero: bool = Field(False, description="add 0 to a log grid (kind=log)")
    values: list[float] | None = Field(
        None, max_length=MAX_SUPPORT_POINTS, description="the support points (kind=explicit)"
    )


MAX_SEMI_SENSITIVE_COLUMNS = 64
MAX_CATEGORIES = 1_000
RESERVED_COLUMNS = frozenset({"example_id", "label", "user_id", "example_key", "example_check"})


class FeatureColumn(BaseModel):
    """A feature column for training with semi-sensitive features (docs/semi-sensitive.md): declared
    with public bounds or a public category list before any upload, so that neither its validation nor
    its encoding ever depends on the data."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$", description="column name in label uploads")
    kind: Literal["number", "category"]
    lo: float | None = Field(None, description="public lower bound (kind=number)")
    hi: float | None = Field(None, description="public upper bound (kind=number)")
    categories: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        None, max_length=MAX_CATEGORIES, description="every allowed value (kind=category)"
    )
    scale: Literal["linear", "log"] = Field(
        "linear", description="kind=number: the model reads (x − lo)/(hi − lo), or its log1p form (money)"
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.name in RESERVED_COLUMNS:
            raise ValueError(f"{self.name!r} is a reserved column name")
        if self.kind == "number":
            if self.lo is None or self.hi is None or self.categories is not None:
                raise ValueError(f"number column {self.name!r} needs lo and hi (and no categories)")
            if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.lo >= self.hi:
                raise ValueError(f"column {self.name!r}: bounds must be finite with lo < hi")
        else:
            if not self.categories or self.lo is not None or self.hi is not None:
                raise ValueError(f"category column {self.name!r} needs categories (and no bounds)")
            if len(set(self.categories)) != len(self.categories):
                raise ValueError(f"column {self.name!r}: categories must be distinct")
        return self

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.float64() if self.kind == "number" else pa.string()


class DatasetSpec(BaseModel):
    label_type: LabelType
    lo: float = Field(allow_inf_nan=False, description="public lower bound of the labels")
    hi: float = Field(allow_inf_nan=False, description="public upper bound of the labels (above lo)")
    support: SupportSpec | None = Field(
        None, description="default: the integer grid lo..hi (not for real labels)"
    )
    out_of_bounds: Literal["clip", "reject"] = "reject"
    default_label: float | None = Field(
        None, description="label for universe IDs that have no uploaded label"
    )
    semi_sensitive: list[FeatureColumn] = Field(
        default_factory=list,
        max_length=MAX_SEMI_SENSITIVE_COLUMNS,
        description="feature columns uploaded with the labels and protected like them (DP-SGD phase)",
    )
    non_sensitive: list[FeatureColumn] = Field(
        default_factory=list,
        max_length=MAX_SEMI_SENSITIVE_COLUMNS,
        description="the features party's columns, uploaded for the DP-SGD phase (public to an attacker)",
    )

    @field_validator("hi")
    @classmethod
    def _above_lo(cls, hi: float, info: ValidationInfo) -> float:
        """Named by its field, so that a caller learns which value to change."""
        lo = info.data.get("lo")
        if lo is not None and hi <= lo:
            raise ValueError(f"must be greater than lo ({lo:g})")
        return hi

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.label_type == "binary" and (self.lo, self.hi) != (0, 1):
            raise ValueError("binary labels have bounds [0, 1]")
        if self.label_type in ("count", "binary", "categorical"):
            if self.lo != int(self.lo) or self.hi != int(self.hi) or self.lo < 0:
                raise ValueError(f"{self.label_type} labels need integer bounds >= 0")
            if self.support is not None and self.support.kind != "integer":
                raise ValueError(f"{self.label_type} labels use an integer support grid")
        elif self.support is None:
            raise ValueError("real labels need an explicit support grid (uniform, log or explicit)")
        if (
            self.label_type == "categorical"
            and self.support is not None
            and self.support.step not in (None, 1)
        ):
            raise ValueError("categorical labels use every class 0..hi (step 1)")
        if self.default_label is not None:
            check_label_value(self, self.default_label, "default_label")
        points = self.support_points()
        if points > MAX_SUPPORT_POINTS:
            raise ValueError(
                f"the support would have {points} points; at most {MAX_SUPPORT_POINTS} are allowed"
            )
        self.build_support()  # raises ValueError for an unusable grid
        names = [c.name for c in (*self.semi_sensitive, *self.non_sensitive)]
        if len(set(names)) != len(names):
            raise ValueError("semi_sensitive and non_sensitive column names must all be distinct")
        if self.non_sensitive and not self.semi_sensitive:
            raise ValueError("non_sensitive columns are only used with semi_sensitive ones")
        return self

    def non_sensitive_schema(self) -> pa.Schema:
        """The stored non-sensitive rows: the example's identity, then the declared columns."""
        identity = [LABEL_SCHEMA.field(n) for n in ("example_id", "example_key", "example_check")]
        return pa.schema([*identity, *(pa.field(c.name, c.arrow_type) for c in self.non_sensitive)])

    def label_schema(self) -> pa.Schema:
        """The stored labels file's columns: the label columns, then the declared semi-sensitive ones."""
        return pa.schema([*LABEL_SCHEMA, *(pa.field(c.name, c.arrow_type) for c in self.semi_sensitive)])

    def support_points(self) -> int:
        """How many points the support has, counted without building it."""
        s = self.support
        if s is None or s.kind == "integer":
            step = 1 if s is None or s.step is None else s.step
            return int((int(self.hi) - int(self.lo)) // step + 1)
        if s.kind in ("uniform", "log"):
            return (s.k or 0) + (1 if s.kind == "log" and s.include_zero else 0)
        return len(s.values or [])

    def build_support(self) -> Support:
        s = self.support
        if s is None or s.kind == "integer":
            step = 1 if s is None or s.step is None else s.step
            return integer_grid(int(self.lo), int(self.hi), step)
        if s.kind == "uniform":
            return uniform_grid(self.lo, self.hi, _need(s.k, "support.k"))
        if s.kind == "log":
            return log_grid(self.lo, self.hi, _need(s.k, "support.k"), include_zero=s.include_zero)
        values = s.values or []
        if any(v < self.lo or v > self.hi for v in values):
            raise ValueError("explicit support values must lie within [lo, hi]")
        return explicit_support(values)

    @property
    def num_classes(self) -> int:
        return int(self.hi) + 1

    def support_for(self, loss: LossName) -> Support:
        """The public support a release optimizes over: the classes ``0..hi`` under the 0-1 loss, the
        declared grid otherwise."""
        if loss == "zero_one":
            return integer_grid(0, int(self.hi))
        return self.build_support()

    def loss(self, loss: str | None) -> LossName:
        """``loss`` if it suits these labels (the mechanism follows from it), else a 422; no loss
        means the label type's default (squared, or zero_one for categorical labels)."""
        if loss is None:
            return LOSSES_BY_LABEL_TYPE[self.label_type][0]
        try:
            name = check_loss(self.label_type, loss)
        except ParameterError as exc:
            raise DomainError("invalid-loss", str(exc)) from exc
        if name == "poisson" and self.lo < 0:
            raise DomainError("invalid-loss", "Poisson loss needs non-negative labels (lo >= 0)")
        return name


def _need(value: int | None, name: str) -> int:
    if value is None:
        raise ValueError(f"{name} is required for this support kind")
    return value


def check_label_value(spec: DatasetSpec, value: float, name: str) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite")
    if spec.label_type != "real" and value != int(value):
        raise ValueError(f"{name} must be an integer for {spec.label_type} labels")
    if not spec.lo <= value <= spec.hi:
        raise ValueError(f"{name} must lie within [{spec.lo:g}, {spec.hi:g}]")
