"""Interval costs ``c(a, b)`` of Algorithm 2, a whole row at a time.

For a fixed right end ``i`` (intervals are half-open ``[r, i)`` of support indices, ``r < i``),
``row(i)`` returns ``c(r, i)`` for every ``r`` at once:

    c(r, i) = min_ŷ  Σ_t p_t ℓ(ŷ, y_t)  +  (e^ε − 1) Σ_{r<=t<i} p_t ℓ(ŷ, y_t)

Squared and Poisson losses use prefix sums (O(1) per interval), absolute loss a weighted median found
by binary search in the monotone cumulative weights (O(log k)), and any other convex loss a
vectorized golden-section search (O(k) per interval, for small supports). Costs are shifted by a
constant per unit of weight so that they are non-negative; that shift adds the same constant to the
expected loss of every mechanism, so it never changes which bins are optimal.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from labeldp.mechanisms._types import FloatArray, IntArray
from labeldp.mechanisms.losses import Loss
from labeldp.mechanisms.validation import ParameterError

_GOLDEN = (math.sqrt(5) - 1) / 2


def _prefix(x: FloatArray) -> FloatArray:
    out = np.zeros(x.size + 1)
    np.cumsum(x, out=out[1:])
    return out


class IntervalCosts(ABC):
    def __init__(self, y: FloatArray, p: FloatArray, epsilon: float) -> None:
        self.y, self.p, self.k = y, p, int(y.size)
        self.g = math.expm1(epsilon)  # e^ε − 1, accurate for tiny ε
        self._r = np.arange(self.k, dtype=np.int64)

    def row(self, i: int) -> FloatArray:
        """``c(r, i)`` for ``r = 0 .. i-1``."""
        return self._costs(i, self._r[:i])[0]

    def cost(self, r: int, i: int) -> float:
        """``c(r, i)`` for one interval ``[r, i)``."""
        return float(self._costs(i, np.array([r], dtype=np.int64))[0][0])

    def partition_cost(self, starts: IntArray) -> float:
        """``Σ c(bin)`` over the bins starting at ``starts`` (the last ends at ``k``)."""
        ends = np.append(starts[1:], self.k)
        return float(sum(self.cost(int(a), int(b)) for a, b in zip(starts, ends, strict=True)))

    def value(self, r: int, i: int) -> float:
        """The optimal output value ŷ for the interval ``[r, i)``."""
        return float(self._costs(i, np.array([r], dtype=np.int64))[1][0])

    @abstractmethod
    def _costs(self, i: int, r: IntArray) -> tuple[FloatArray, FloatArray]:
        """Costs and minimizers for the intervals ``[r, i)``."""


class SquaredCosts(IntervalCosts):
    def __init__(self, y: FloatArray, p: FloatArray, epsilon: float) -> None:
        super().__init__(y, p, epsilon)
        self.mu = float(np.dot(p, y))
        yc = y - self.mu  # centring keeps S2 − S1²/W well conditioned
        self.P, self.S, self.Q = _prefix(p), _prefix(p * yc), _prefix(p * yc * yc)

    def _costs(self, i: int, r: IntArray) -> tuple[FloatArray, FloatArray]:
        P, S, Q, g, k = self.P, self.S, self.Q, self.g, self.k
        W = P[k] + g * (P[i] - P[r])
        S1 = S[k] + g * (S[i] - S[r])
        S2 = Q[k] + g * (Q[i] - Q[r])
        mean = S1 / W
        return np.maximum(S2 - S1 * mean, 0.0), mean + self.mu


class PoissonCosts(IntervalCosts):
    """Poisson log loss, shifted by ``y − y·log y`` per unit weight (the half Poisson deviance)."""

    def __init__(self, y: FloatArray, p: FloatArray, epsilon: float) -> None:
        super().__init__(y, p, epsilon)
        from scipy.special import xlogy  # here: at the top it slows every service start

        self.P, self.S = _prefix(p), _prefix(p * y)
        self.G = _prefix(p * (y - xlogy(y, y)))

    def _costs(self, i: int, r: IntArray) -> tuple[FloatArray, FloatArray]:
        P, S, G, g, k = self.P, self.S, self.G, self.g, self.k
        W = P[k] + g * (P[i] - P[r])
        S1 = S[k] + g * (S[i] - S[r])
        y_hat = S1 / W
        from scipy.special import xlogy  # as above

        cost = S1 - xlogy(S1, y_hat) - (G[k] + g * (G[i] - G[r]))
        return np.maximum(cost, 0.0), y_hat


class AbsoluteCosts(IntervalCosts):
    """Absolute loss: ŷ is a weighted median, located in each of the three monotone pieces of the
    cumulative weight (before, inside and after the boosted interval)."""

    def __init__(self, y: FloatArray, p: FloatArray, epsilon: float) -> None:
        super().__init__(y, p, epsilon)
        self.mu = float(np.dot(p, y))
        self.yc = y - self.mu
        self.P, self.S = _prefix(p), _prefix(p * self.yc)
        self._P1 = self.P[1:]

    def _first_reaching(self, target: FloatArray) -> IntArray:
        """Smallest prefix length ``j >= 1`` with ``P[j] >= target`` (``k + 1`` if none)."""
        return np.searchsorted(self._P1, target, side="left").astype(np.int64) + 1

    def _costs(self, i: int, r: IntArray) -> tuple[FloatArray, FloatArray]:
        P, S, g, k = self.P, self.S, self.g, self.k
        Pr, Sr = P[r], S[r]
        inside = P[i] - Pr
        W = P[k] + g * inside
        half = W / 2
        j_before = self._first_reaching(half)
        j_inside = np.maximum(self._first_reaching((half + g * Pr) / (1 + g)), r + 1)
        j_after = np.maximum(self._first_reaching(half - g * inside), i + 1)
        j = np.where(j_before <= r, j_before, np.where(j_inside <= i, j_inside, j_after))
        np.clip(j, 1, k, out=j)
        boosted = j > r
        jj = np.minimum(j, i)
        cw = P[j] + np.where(boosted, g * (P[jj] - Pr), 0.0)
        cs = S[j] + np.where(boosted, g * (S[jj] - Sr), 0.0)
        total_s = S[k] + g * (S[i] - Sr)
        y_hat = self.yc[j - 1]
        cost = y_hat * cw - cs + (total_s - cs) - y_hat * (W - cw)
        return np.maximum(cost, 0.0), y_hat + self.mu


class GenericCosts(IntervalCosts):
    """Any convex loss: golden-section search on ``[y_1, y_k]`` for every interval at once.

    Each row evaluates the loss on an ``i × k`` grid, so this path is for small supports.
    """

    ITERATIONS = 90  # shrinks the bracket by 0.618**90 ≈ 1.5e-19
    MAX_SUPPORT = 2_000

    def __init__(self, y: FloatArray, p: FloatArray, epsilon: float, loss: Loss) -> None:
        if y.size > self.MAX_SUPPORT:
            raise ParameterError(
                f"custom (callable) losses support at most {self.MAX_SUPPORT} support points, got {y.size}; "
                "use a coarser support or one of the named losses"
            )
        super().__init__(y, p, epsilon)
        self.loss = loss

    def _objective(self, y_hat: FloatArray, w: FloatArray) -> FloatArray:
        vals = self.loss(y_hat[:, None], self.y[None, :])
        return np.asarray(np.einsum("rt,rt->r", w, np.where(w > 0, vals, 0.0)), dtype=np.float64)

    def _costs(self, i: int, r: IntArray) -> tuple[FloatArray, FloatArray]:
        t = np.arange(self.k)
        in_interval = (t[None, :] >= r[:, None]) & (t[None, :] < i)
        w = self.p[None, :] * (1 + self.g * in_interval)
        a = np.full(r.size, self.y[0])
        b = np.full(r.size, self.y[-1])
        c = b - _GOLDEN * (b - a)
        d = a + _GOLDEN * (b - a)
        fc, fd = self._objective(c, w), self._objective(d, w)
        for _ in range(self.ITERATIONS):
            left = fc < fd  # minimum lies in [a, d]
            b = np.where(left, d, b)
            a = np.where(left, a, c)
            new_c = b - _GOLDEN * (b - a)
            new_d = a + _GOLDEN * (b - a)
            c_next = np.where(left, new_c, d)
            d_next = np.where(left, c, new_d)
            f_new = self._objective(np.where(left, c_next, d_next), w)
            fc, fd = np.where(left, f_new, fd), np.where(left, fc, f_new)
            c, d = c_next, d_next
        y_hat = (a + b) / 2
        return self._objective(y_hat, w), y_hat


def interval_costs(loss: Loss, y: FloatArray, p: FloatArray, epsilon: float) -> IntervalCosts:
    if loss.name == "squared":
        return SquaredCosts(y, p, epsilon)
    if loss.name == "poisson":
        return PoissonCosts(y, p, epsilon)
    if loss.name == "absolute":
        return AbsoluteCosts(y, p, epsilon)
    return GenericCosts(y, p, epsilon, loss)
