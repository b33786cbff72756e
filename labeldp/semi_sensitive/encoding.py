"""Feature columns to a model's inputs, by public declarations only.

A number ``x`` declared on ``[lo, hi]`` becomes ``(x − lo)/(hi − lo)`` clipped to ``[0, 1]`` (with
``log`` scale ``log1p(x − lo)/log1p(hi − lo)``, for heavy-tailed amounts such as money); a
category becomes a one-hot block in the declared order (a value outside it, all zeros). Nothing is
fitted to the data, so the encoding itself reveals nothing about any example and both parties (and
whoever serves the model) compute the same inputs from the same declaration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms.validation import ParameterError


@dataclass(frozen=True)
class ColumnEncoding:
    name: str
    kind: Literal["number", "category"]
    lo: float = 0.0
    hi: float = 1.0
    categories: tuple[str, ...] = ()
    log: bool = False

    @classmethod
    def of(cls, declared: Mapping[str, Any]) -> ColumnEncoding:
        """From a column declaration (a dataset spec's, or a model message's)."""
        if declared["kind"] == "number":
            lo, hi = float(declared["lo"]), float(declared["hi"])
            return cls(str(declared["name"]), "number", lo, hi, log=declared.get("scale") == "log")
        return cls(str(declared["name"]), "category", categories=tuple(declared["categories"]))

    @property
    def width(self) -> int:
        return 1 if self.kind == "number" else len(self.categories)


def input_width(columns: Sequence[ColumnEncoding]) -> int:
    return sum(c.width for c in columns)


def encode(values: Mapping[str, npt.ArrayLike], columns: Sequence[ColumnEncoding]) -> npt.NDArray[np.float64]:
    """The ``n × width`` input matrix of the declared columns (every column must be present)."""
    if not columns:
        raise ParameterError("at least one declared column is needed", "columns")
    parts: list[npt.NDArray[np.float64]] = []
    n: int | None = None
    for column in columns:
        if column.name not in values:
            raise ParameterError(f"column {column.name!r} is missing", column.name)
        raw = np.asarray(values[column.name])
        if n is not None and raw.shape[0] != n:
            raise ParameterError("columns differ in length", column.name)
        n = raw.shape[0]
        if column.kind == "number":
            x = np.clip(np.asarray(raw, dtype=np.float64), column.lo, column.hi) - column.lo
            span = column.hi - column.lo
            scaled = np.log1p(x) / np.log1p(span) if column.log else x / span
            parts.append(scaled[:, None])
        else:
            index = {c: i for i, c in enumerate(column.categories)}
            codes = np.fromiter((index.get(str(v), -1) for v in raw), dtype=np.int64, count=raw.shape[0])
            block = np.zeros((raw.shape[0], len(column.categories)))
            known = codes >= 0
            block[np.flatnonzero(known), codes[known]] = 1.0
            parts.append(block)
    return np.hstack(parts)
