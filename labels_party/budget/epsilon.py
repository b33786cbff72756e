"""Exact privacy-budget arithmetic: integer micro-ε and atto-δ, requests always rounded up.

No float is ever compared in the ledger; an ε or δ arrives as a decimal string or float and is
converted once, rounding up, so the ledger charges at least what the mechanism spends. δ is counted in
units of 10⁻¹⁸ (a δ of 1/n² for n = 10⁹ is still 10⁰ units and any δ < 1 fits an int64).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

MICRO = 1_000_000
ATTO = 10**18


def _decimal(value: float | str | Decimal, name: str) -> Decimal:
    """The exact decimal a float prints as (``repr``), or a string's; finite."""
    try:
        out = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {value!r}") from exc
    if not out.is_finite():
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return out


def to_micro(epsilon: float | str | Decimal, *, name: str = "epsilon") -> int:
    """ε as integer micro-ε, rounded up (0.1 → 100000; 0.1000001 → 100001)."""
    value = _decimal(epsilon, name)
    if value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return int((value * MICRO).to_integral_value(rounding=ROUND_CEILING))


def to_micro_floor(epsilon: float | str | Decimal, *, name: str = "epsilon") -> int:
    """Budget limits round *down* (a limit of 1/3 allows 333333 micro-ε, never more)."""
    value = _decimal(epsilon, name)
    if value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {epsilon!r}")
    return int((value * MICRO).to_integral_value(rounding=ROUND_FLOOR))


def _delta(delta: float | str | Decimal, name: str) -> Decimal:
    value = _decimal(delta, name)
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be a finite number in [0, 1), got {delta!r}")
    return value


def to_atto(delta: float | str | Decimal, *, name: str = "delta") -> int:
    """δ as integer atto-δ (10⁻¹⁸), rounded up: a charge never records less than is spent."""
    value = _delta(delta, name)
    if value == 0:
        raise ValueError(f"{name} must be > 0")
    return int((value * ATTO).to_integral_value(rounding=ROUND_CEILING))


def to_atto_floor(delta: float | str | Decimal, *, name: str = "delta") -> int:
    """A δ budget in atto-δ, rounded down."""
    return int((_delta(delta, name) * ATTO).to_integral_value(rounding=ROUND_FLOOR))


def as_delta(atto: int) -> float:
    """For display only (rounded to nearest); comparisons stay in integers."""
    return float(Decimal(atto) / ATTO) if atto else 0.0


def from_micro(micro: int) -> Decimal:
    return Decimal(micro) / MICRO


def as_float(micro: int) -> float:
    """For display and for the mechanisms (which take floats); never for comparisons."""
    return float(from_micro(micro)) if micro else 0.0
