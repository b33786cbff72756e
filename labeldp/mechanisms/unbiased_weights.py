"""The unbiased randomizer in exact integers: what both parties sample, publish, check and audit.

The optimal unbiased randomizer has one shape (docs/math.md §15): a base ``c_j`` on each output ``z_j``
that every label gets, and on top of it ``(e^ε − 1)·c_j`` on a *window* of consecutive outputs — the
same base mass for every label, its window sliding with the label so that the mean is the label. Here
that shape is integer: every row of weights sums to ``TOTAL = 2^53`` and

- output ``j`` gets ``L_j ≥ 1`` in every row (the **base weights**, published),
- at most ``H_j = min(⌊e^ε·L_j⌋, TOTAL − ΣL + L_j)`` in any row (``e^ε`` in 60-digit decimals shrunk
  as the keep threshold's is, so ``H_j ≤ e^ε·L_j`` holds exactly),
- and row ``i`` adds, on top of ``L``, ``R = TOTAL − ΣL`` units taken consecutively from the
  concatenated capacities ``D_j = H_j − L_j``, starting ``offset_i`` units into output ``start_i``
  (the **window**, published as those two integers).

Every column then lies in ``[L_j, H_j]``: each output's probability under any label is at most ``e^ε``
times its probability under any other, exactly, whatever the window positions (ε-DP holds by
construction; ``implemented_epsilon`` is what the integers spend, rounded up). Unbiasedness is the
window positions' job: the publisher puts each row's window where its mean, computed in exact
rational arithmetic, is nearest the label (``from_base``), within one unit of ``2^-53`` of the span.
Sampling draws one 53-bit integer per label and finds it among the row's cumulative weights.

``TOTAL`` is ``2^53`` so that every published integer is exact in JSON (a double) as well as on the
wire.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector

TOTAL = 1 << 53
_PRECISION = 60
MAX_BIAS = 1e-9  # |E[output | y] − y| / (hi − lo) a published randomizer may have (checked on receipt)
# The program's numerically safe ε: beyond it e^ε exceeds 10^7 and the ε-DP couplings span more than
# the solver's tolerances resolve (checked before the charge; docs/reference/limits.md).
MAX_UNBIASED_EPSILON = 16.0
MAX_UNBIASED_SUPPORT = 2_000  # the largest support the program is offered (its time grows ~k^2.5)
MAX_UNBIASED_OUTPUTS = 8_192  # outputs a published unbiased randomizer may have (the grid has ~k + 512)
# support points × outputs a receiver rebuilds (two int64 tables: at most 128 MiB; the optimizer's
# grid has k + 512 points, 5.0M cells at k = 2000)
MAX_UNBIASED_CELLS = 1 << 23


def check_unbiased_epsilon(epsilon: float, name: str = "epsilon") -> float:
    eps = check_epsilon(epsilon, name)
    if eps > MAX_UNBIASED_EPSILON:
        raise ParameterError(
            f"the unbiased randomizer's program is numerically safe for {name} <= "
            f"{MAX_UNBIASED_EPSILON:g}, got {epsilon!r}; use rr_on_bins",
            name,
        )
    return eps


def _safe_exp(epsilon: float) -> Decimal:
    """``e^ε`` in 60-digit decimals, shrunk by far more than its rounding so it never overshoots."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return Decimal(epsilon).exp() * (1 - Decimal(10) ** (5 - _PRECISION))


def high_weights(epsilon: float, base: list[int]) -> list[int]:
    """``H_j``: the most weight output ``j`` may get in any row (exactly ``≤ e^ε·L_j``)."""
    e = _safe_exp(epsilon)
    spare = TOTAL - sum(base)
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return [min(int((Decimal(b) * e).to_integral_value(rounding=ROUND_FLOOR)), spare + b) for b in base]


@dataclass(frozen=True, eq=False)
class UnbiasedWeights:
    """The integer form (module docstring): outputs, base weights and each support point's window."""

    epsilon: float
    outputs: FloatArray
    base: tuple[int, ...]
    starts: tuple[int, ...]
    offsets: tuple[int, ...]
    high: tuple[int, ...] = field(init=False, repr=False)
    table: IntArray = field(init=False, repr=False)  # k × m weights, each row summing to TOTAL
    _cumulative: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        z = finite_vector(self.outputs, "outputs")
        m, k = z.size, len(self.starts)
        if m < 2 or np.any(np.diff(z) <= 0):
            raise ParameterError("an unbiased randomizer has at least two increasing outputs", "outputs")
        base = [int(b) for b in self.base]
        if len(base) != m or min(base) < 1 or sum(base) >= TOTAL:
            raise ParameterError(
                f"base weights must be {m} integers >= 1 summing to less than 2^53", "base_weights"
            )
        if len(self.offsets) != k or k < 2:
            raise ParameterError("every support point (at least two) states its window", "windows")
        if k * m > MAX_UNBIASED_CELLS:
            raise ParameterError(
                f"{k} support points × {m} outputs exceed {MAX_UNBIASED_CELLS} weights", "outputs"
            )
        high = high_weights(eps, base)
        capacity = [h - b for h, b in zip(high, base, strict=True)]
        cum = [0]
        for d in capacity:
            cum.append(cum[-1] + d)
        spare = TOTAL - sum(base)
        if any(not 0 <= int(a) < m for a in self.starts) or any(
            not 0 <= int(o) < TOTAL for o in self.offsets
        ):
            raise ParameterError("a window starts outside the outputs or their capacity", "windows")
        for i, (a, off) in enumerate(zip(self.starts, self.offsets, strict=True)):
            if int(off) >= max(capacity[int(a)], 1) or cum[int(a)] + int(off) + spare > cum[m]:
                raise ParameterError(f"the window of support point {i} does not fit its outputs", "windows")
        table = self._filled(base, capacity, cum, self.starts, self.offsets, spare)
        z.setflags(write=False)
        table.setflags(write=False)
        cumulative = np.cumsum(table, axis=1)
        cumulative.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "outputs", z)
        object.__setattr__(self, "base", tuple(base))
        object.__setattr__(self, "starts", tuple(int(a) for a in self.starts))
        object.__setattr__(self, "offsets", tuple(int(o) for o in self.offsets))
        object.__setattr__(self, "high", tuple(high))
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "_cumulative", cumulative)

    @staticmethod
    def _filled(
        base: list[int],
        capacity: list[int],
        cum: list[int],
        starts: tuple[int, ...],
        offsets: tuple[int, ...],
        length: int,
    ) -> IntArray:
        """Every row: the base plus its window of ``length`` capacity units from ``offset`` into output
        ``start`` — the rest of that output's capacity, every capacity up to the output holding the
        window's last unit, and the part of that one it reaches. The capacities' running sums can pass
        2^63 (e^ε·2^53 at ε = 16), so they stay Python integers; every cell is below 2^53, exact in
        int64."""
        m, k = len(base), len(starts)
        first, last = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
        head, tail = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        for i, (a, off) in enumerate(zip(starts, offsets, strict=True)):
            s = cum[int(a)] + int(off)
            e = s + length
            b = min(bisect.bisect_left(cum, e) - 1, m - 1) if length else int(a)
            first[i], last[i] = int(a), max(b, int(a))
            if b <= a:
                head[i] = length
            else:
                head[i], tail[i] = cum[int(a) + 1] - s, e - cum[b]
        outputs = np.arange(m)
        inside = (outputs[None, :] > first[:, None]) & (outputs[None, :] < last[:, None])
        table = np.asarray(base, dtype=np.int64)[None, :] + inside * np.asarray(capacity, dtype=np.int64)
        rows = np.arange(k)
        table[rows, first] += head
        table[rows, last] += tail
        return table

    # -- from the program's solution ------------------------------------------------------------
    @classmethod
    def from_base(
        cls, epsilon: float, outputs: ArrayLike, base: ArrayLike, support: ArrayLike
    ) -> UnbiasedWeights:
        """The integer randomizer for a base ``c`` on ``outputs`` (the program's optimum): ``L_j =
        ⌊2^53·c_j⌋`` for the outputs with mass, and each support point's window where its mean, in
        exact rationals, is nearest the point."""
        eps = check_epsilon(epsilon)
        z = finite_vector(outputs, "outputs")
        c = finite_vector(base, "base")
        y = finite_vector(support, "support")
        keep = c * TOTAL >= 1.0
        z, c = z[keep], c[keep]
        weights = [math.floor(v * TOTAL) for v in c.tolist()]
        high = high_weights(eps, weights)
        capacity = [h - b for h, b in zip(high, weights, strict=True)]
        spare = TOTAL - sum(weights)
        if spare < 0 or spare > sum(capacity):
            raise ParameterError("this base admits no unbiased rows (its mass is off)", "base")
        starts, offsets = _windows(z, weights, capacity, spare, y)
        return cls(eps, z, tuple(weights), tuple(starts), tuple(offsets))

    # -- what readers need --------------------------------------------------------------------------
    @property
    def m(self) -> int:
        return int(self.outputs.size)

    @property
    def k(self) -> int:
        return len(self.starts)

    def transition(self) -> FloatArray:
        """``P(output j | support point i)``, exactly as sampled (each weight over 2^53 is exact)."""
        return self.table / float(TOTAL)

    @property
    def implemented_epsilon(self) -> float:
        """``max_j log(max_i W_ij / min_i W_ij)``, the smallest double not below the exact value."""
        col_max, col_min = self.table.max(axis=0), self.table.min(axis=0)
        j = max(range(self.m), key=lambda c: Fraction(int(col_max[c]), int(col_min[c])))
        if col_max[j] == col_min[j]:
            return 0.0
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            exact = (Decimal(int(col_max[j])) / Decimal(int(col_min[j]))).ln()
        approx = float(exact)
        return approx if Decimal(approx) >= exact else math.nextafter(approx, math.inf)

    def means(self) -> FloatArray:
        """``E[output | support point i]``, each by an exactly rounded sum."""
        return np.array([math.fsum((self.outputs * row).tolist()) / TOTAL for row in self.table])

    def variances(self, support: ArrayLike) -> FloatArray:
        """``E[(output − y_i)² | y_i]`` for each support point."""
        y = finite_vector(support, "support")
        return (self.transition() * (self.outputs[None, :] - y[:, None]) ** 2).sum(axis=1)

    def draw(self, rows: IntArray, rng: SecureRandom) -> IntArray:
        """One output index per label, given each label's support index: one 53-bit integer ``U``
        per label, and the output whose cumulative weight first exceeds ``U``."""
        u = (rng.uint64(rows.size) >> np.uint64(11)).astype(np.int64)
        out = np.empty(rows.size, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        bounds = np.searchsorted(rows[order], np.arange(self.k + 1))
        for i in range(self.k):
            at = order[bounds[i] : bounds[i + 1]]
            if at.size:
                out[at] = np.searchsorted(self._cumulative[i], u[at], side="right")
        return out


def _windows(
    z: FloatArray, base: list[int], capacity: list[int], spare: int, y: FloatArray
) -> tuple[list[int], list[int]]:
    """Each row's window start ``u`` (in capacity units) whose exact first moment is nearest the
    target ``2^53·y_i − Σ_j z_j L_j``: the moment ``G(u)`` increases with ``u``, so bisection over
    the integers finds it; arithmetic on integers scaled by a common power of two is exact."""
    values = [Fraction(v) for v in z.tolist()]
    labels = [Fraction(v) for v in y.tolist()]
    scale = max(f.denominator for f in (*values, *labels))
    zi = [int(v * scale) for v in values]
    cum = [0]
    moment = [0]
    for d, zj in zip(capacity, zi, strict=True):
        cum.append(cum[-1] + d)
        moment.append(moment[-1] + d * zj)
    total_cap = cum[-1]
    last = len(capacity) - 1

    def prefix(s: int) -> int:  # Σ z over the first s capacity units
        j = min(bisect.bisect_right(cum, s) - 1, last)
        return moment[j] + (s - cum[j]) * zi[j]

    def window_moment(u: int) -> int:
        return prefix(u + spare) - prefix(u)

    base_moment = sum(b * zj for b, zj in zip(base, zi, strict=True))
    top = total_cap - spare
    starts, offsets = [], []
    for label in labels:
        target = int(label * scale) * TOTAL - base_moment
        lo, hi = 0, top
        while lo < hi:  # the last u with G(u) <= target
            mid = (lo + hi + 1) // 2
            if window_moment(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        u = lo
        if u < top and abs(window_moment(u + 1) - target) < abs(window_moment(u) - target):
            u += 1
        a = min(bisect.bisect_right(cum, u) - 1, last)  # the output whose capacity holds unit u
        starts.append(a)
        offsets.append(u - cum[a])
    return starts, offsets
