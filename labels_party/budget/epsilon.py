"""Exact privacy-budget arithmetic: integer micro-ε, requests always rounded up.

No float is ever compared in the ledger; an ε arrives as a decimal string or float and is converted
once, rounding up, so the ledger charges at least what the mechanism spends.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

MICRO = 1_000_000


def to_micro(epsilon: float | str | Decimal, *, name: str = "epsilon") -> int:
    """ε as integer micro-ε, rounded up (0.1 → 100000; 0.1000001 → 100001)."""
    try:
        value = Decimal(repr(epsilon)) if isinstance(epsilon, float) else Decimal(epsilon)
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {epsilon!r}") from exc
    if not value.is_finite() or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return int((value * MICRO).to_integral_value(rounding=ROUND_CEILING))


def to_micro_floor(epsilon: float | str | Decimal, *, name: str = "epsilon") -> int:
    """Budget limits round *down* (a limit of 1/3 allows 333333 micro-ε, never more)."""
    try:
        value = Decimal(repr(epsilon)) if isinstance(epsilon, float) else Decimal(epsilon)
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {epsilon!r}") from exc
    if not value.is_finite() or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {epsilon!r}")
    return int((value * MICRO).to_integral_value(rounding=ROUND_FLOOR))


def from_micro(micro: int) -> Decimal:
    return Decimal(micro) / MICRO


def as_float(micro: int) -> float:
    """For display and for the mechanisms (which take floats); never for comparisons."""
    return float(from_micro(micro)) if micro else 0.0
