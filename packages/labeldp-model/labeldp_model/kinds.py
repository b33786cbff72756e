"""Which correction a release's released values need, by the kind of its mechanism: the one place a
mechanism kind is named in this package.

A training-set export's description (``labeldp_model.release``) states the mechanism's kind and, for
the kinds below, the exact numbers of its randomized response (the bins' values and the keep and move
probabilities of the service's integer sampler, which this package never re-derives). Every correction
downstream — targets, losses, objectives, the PyTorch module — reads only the ``BinsCorrection`` built
here, so a new kind is one entry in ``KINDS``: a function from the description to its correction (a
randomizer whose released values are already unbiased maps to ``keep = 1, move = 0``, the identity).
A kind not listed raises ``UnknownMechanismError``: a correction must never be guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleaseFormatError, UnknownMechanismError

_SUM_TOLERANCE = 1e-9


def _number(section: Mapping[str, Any], name: str) -> float:
    value = section.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ReleaseFormatError(f"correction.{name} must be a finite number, got {value!r}")
    return float(value)


def randomized_response(description: Mapping[str, Any]) -> BinsCorrection:
    """RR-on-Bins and RR-Top-k: randomized response over the ``m`` bins, ``T = a·I + b·11ᵀ``."""
    section = description.get("correction")
    if not isinstance(section, Mapping):
        raise ReleaseFormatError("the description has no correction section")
    raw = section.get("bin_values")
    if not isinstance(raw, list) or not raw or any(isinstance(v, bool) for v in raw):
        raise ReleaseFormatError("correction.bin_values must be a non-empty list of numbers")
    try:
        values = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ReleaseFormatError("correction.bin_values must be a non-empty list of numbers") from exc
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ReleaseFormatError("correction.bin_values must be finite numbers")
    keep, move = _number(section, "keep"), _number(section, "move")
    outside = _number(section, "outside_mass") if "outside_mass" in section else 0.0
    m = values.size
    if not (0.0 <= move <= keep <= 1.0) or not 0.0 <= outside <= 1.0:
        raise ReleaseFormatError(f"keep {keep!r} and move {move!r} are not probabilities with keep ≥ move")
    if abs(keep + (m - 1) * move - 1.0) > _SUM_TOLERANCE:
        raise ReleaseFormatError(f"keep + (m − 1)·move must be 1 for m = {m} bins: {keep!r}, {move!r}")
    return BinsCorrection(values, keep, move, outside)


def identity(description: Mapping[str, Any]) -> BinsCorrection:
    """The unbiased randomizer: its released values have the label as their mean, so the correction
    is the identity — stated by the description as keep 1, move 0, and refused otherwise."""
    correction = randomized_response(description)
    if correction.keep != 1.0 or correction.move != 0.0 or correction.outside_mass != 0.0:
        raise ReleaseFormatError("an unbiased release's correction is the identity (keep 1, move 0)")
    return correction


# the mechanism kinds this package can correct for, and how (see the module docstring)
KINDS: dict[str, Callable[[Mapping[str, Any]], BinsCorrection]] = {
    "rr_on_bins": randomized_response,
    "rr_top_k": randomized_response,
    "unbiased": identity,
}


def correction_of(kind: object, description: Mapping[str, Any]) -> BinsCorrection:
    """The correction a release of mechanism ``kind`` needs; ``UnknownMechanismError`` for a kind this
    package does not know."""
    build = KINDS.get(kind) if isinstance(kind, str) else None
    if build is None:
        raise UnknownMechanismError(kind, sorted(KINDS))
    return build(description)
