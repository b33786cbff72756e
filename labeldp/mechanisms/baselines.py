"""Comparison baselines (paper Appendix D; docs/math.md §7), each clipped to the public ``[lo, hi]``.

Labels are clipped to ``[lo, hi]`` first, so the sensitivity is ``Δ = hi − lo`` (Appendix F), and
outputs are clipped again (post-processing). These exist to measure RR-on-Bins against; the
continuous ones use 53-bit floating-point uniforms from the CSPRNG, which is standard for baselines
but not bit-exact DP (Mironov 2012), so production releases use RR-on-Bins.
"""

from __future__ import annotations

import math

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.randomized_response import randomized_response
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, as_support
from labeldp.mechanisms.validation import ParameterError, check_bounds, check_epsilon, finite_vector


def _prepare(
    labels: ArrayLike, lo: float, hi: float, epsilon: float
) -> tuple[FloatArray, float, float, float]:
    eps = check_epsilon(epsilon)
    lo_f, hi_f = check_bounds(lo, hi)
    y = np.clip(finite_vector(labels, "labels", allow_empty=True), lo_f, hi_f)
    return y, lo_f, hi_f, eps


def _integer_bounds(lo: float, hi: float) -> int:
    if lo != math.floor(lo) or hi != math.floor(hi):
        raise ParameterError("discrete mechanisms need integer bounds lo and hi")
    return int(hi - lo)


def _geometric(q: float, n: int, rng: SecureRandom) -> IntArray:
    """``P(G = g) = (1 − q)·q^g`` for ``g >= 0`` (inverse CDF)."""
    if q <= 0:
        return np.zeros(n, dtype=np.int64)
    return np.floor(np.log(rng.uniform01(n)) / math.log(q)).astype(np.int64)


def _signs(n: int, rng: SecureRandom) -> IntArray:
    return 1 - 2 * rng.integers_below(2, n)


def laplace(
    labels: ArrayLike, lo: float, hi: float, epsilon: float, *, rng: SecureRandom | None = None
) -> FloatArray:
    """Continuous Laplace: ``y + Laplace(Δ/ε)``, clipped."""
    y, lo, hi, eps = _prepare(labels, lo, hi, epsilon)
    stream = rng or SecureRandom()
    scale = (hi - lo) / eps
    noise = scale * (np.log(stream.uniform01(y.size)) - np.log(stream.uniform01(y.size)))
    return np.clip(y + noise, lo, hi)


def discrete_laplace(
    labels: ArrayLike, lo: int, hi: int, epsilon: float, *, rng: SecureRandom | None = None
) -> FloatArray:
    """Discrete Laplace for integer labels: ``y + Z``, ``P(Z = z) ∝ e^{−ε|z|/Δ}``, clipped."""
    y, lo_f, hi_f, eps = _prepare(labels, lo, hi, epsilon)
    delta = _integer_bounds(lo_f, hi_f)
    stream = rng or SecureRandom()
    q = math.exp(-eps / delta)
    z = _geometric(q, y.size, stream) - _geometric(q, y.size, stream)
    return np.clip(np.rint(y) + z, lo_f, hi_f)


def staircase_gamma(epsilon: float) -> float:
    """The staircase's optimal step fraction ``γ* = 1/(1 + e^{ε/2})`` (Geng & Viswanath)."""
    return 1.0 / (1.0 + math.exp(epsilon / 2))


def staircase_noise(n: int, delta: float, epsilon: float, rng: SecureRandom) -> FloatArray:
    """Continuous staircase noise with ``γ*`` (Geng & Viswanath's sampler): density ``a·b^j`` on
    ``[jΔ, (j+γ)Δ)`` and ``a·b^{j+1}`` on ``[(j+γ)Δ, (j+1)Δ)``, mirrored, with ``b = e^{−ε}``."""
    gamma, b = staircase_gamma(epsilon), math.exp(-epsilon)
    sign = _signs(n, rng)
    period = _geometric(b, n, rng)
    u = rng.uniform01(n)
    outer = rng.uniform01(n) >= gamma / (gamma + (1 - gamma) * b)
    magnitude = np.where(outer, period + gamma + (1 - gamma) * u, period + gamma * u) * delta
    return np.asarray(sign * magnitude, dtype=np.float64)


def staircase(
    labels: ArrayLike, lo: float, hi: float, epsilon: float, *, rng: SecureRandom | None = None
) -> FloatArray:
    """Continuous staircase mechanism with ``γ*``, clipped."""
    y, lo, hi, eps = _prepare(labels, lo, hi, epsilon)
    return np.clip(y + staircase_noise(y.size, hi - lo, eps, rng or SecureRandom()), lo, hi)


def discrete_staircase_step(delta: int, epsilon: float) -> int:
    """The discrete staircase's ``r = max(1, round(γ*·Δ))``."""
    return min(delta, max(1, round(staircase_gamma(epsilon) * delta)))


def discrete_staircase_noise(n: int, delta: int, epsilon: float, rng: SecureRandom) -> IntArray:
    """``P(Z = z) ∝ b^{⌊|z|/Δ⌋}``, times ``b`` when ``|z| mod Δ >= r`` (Definition 24), ``b = e^{−ε}``."""
    r, b = discrete_staircase_step(delta, epsilon), math.exp(-epsilon)
    p_inner = r / (r + (delta - r) * b)
    z = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        period = _geometric(b, m, rng)
        inner = rng.uniform01(m) < p_inner
        offset = np.where(inner, rng.integers_below(r, m), r + rng.integers_below(max(delta - r, 1), m))
        magnitude = period * delta + offset
        sign = _signs(m, rng)
        ok = ~((sign < 0) & (magnitude == 0))  # zero has one sign, not two
        z[todo[ok]] = (sign * magnitude)[ok]
        todo = todo[~ok]
    return z


def discrete_staircase(
    labels: ArrayLike, lo: int, hi: int, epsilon: float, *, rng: SecureRandom | None = None
) -> FloatArray:
    """Discrete staircase mechanism for integer labels, clipped."""
    y, lo_f, hi_f, eps = _prepare(labels, lo, hi, epsilon)
    delta = _integer_bounds(lo_f, hi_f)
    return np.clip(
        np.rint(y) + discrete_staircase_noise(y.size, delta, eps, rng or SecureRandom()), lo_f, hi_f
    )


def exponential_mechanism(
    labels: ArrayLike,
    lo: float,
    hi: float,
    epsilon: float,
    *,
    integer: bool = False,
    rng: SecureRandom | None = None,
) -> FloatArray:
    """Exponential mechanism with score ``−|ŷ − y|`` on ``[lo, hi]`` (integers if ``integer``):
    density ``∝ exp(−ε|ŷ − y|/(2Δ))``, sampled by rejection from the matching (discrete) Laplace."""
    y, lo, hi, eps = _prepare(labels, lo, hi, epsilon)
    stream = rng or SecureRandom()
    delta = hi - lo
    out = np.empty(y.size)
    todo = np.arange(y.size)
    for _ in range(100_000):
        if not todo.size:
            return out
        m = todo.size
        if integer:
            _integer_bounds(lo, hi)
            q = math.exp(-eps / (2 * delta))
            proposal = np.rint(y[todo]) + _geometric(q, m, stream) - _geometric(q, m, stream)
        else:
            scale = 2 * delta / eps
            proposal = y[todo] + scale * (np.log(stream.uniform01(m)) - np.log(stream.uniform01(m)))
        ok = (proposal >= lo) & (proposal <= hi)
        out[todo[ok]] = proposal[ok]
        todo = todo[~ok]
    raise RuntimeError("exponential mechanism rejection sampling did not finish")  # pragma: no cover


def rr_over_support(
    labels: ArrayLike, support: Support | ArrayLike, epsilon: float, *, rng: SecureRandom | None = None
) -> FloatArray:
    """Randomized response treating each support value as a category."""
    sup = as_support(support)
    idx = sup.snap(labels)
    return sup.values[randomized_response(idx, sup.k, epsilon, rng=rng)]


def laplace_channel(
    support: ArrayLike, lo: float, hi: float, epsilon: float, cells: int = 512
) -> tuple[FloatArray, FloatArray]:
    """``P(output cell | support value)`` of ``laplace`` (noise ``Δ/ε``, clipped to ``[lo, hi]``) with
    the output read to ``cells`` equal cells of ``[lo, hi]`` (the clipped mass in the end cells), and
    the cells' midpoints. Reading the output coarsely is post-processing, so what an attacker learns
    from this channel is a lower bound on what it learns from the exact output, converging as
    ``cells`` grows (for privacy audits: labeldp.mechanisms.advantage.channel_advantages)."""
    lo_f, hi_f = check_bounds(lo, hi)
    eps = check_epsilon(epsilon)
    y = np.clip(finite_vector(support, "support"), lo_f, hi_f)
    if not 1 <= cells <= 1 << 16:
        raise ParameterError("cells must be in 1..65536", "cells")
    edges = np.linspace(lo_f, hi_f, cells + 1)
    from scipy import stats  # here, not at the top: it adds about 0.4 s to every service start

    cdf = stats.laplace.cdf(edges[None, :], loc=y[:, None], scale=(hi_f - lo_f) / eps)
    cdf[:, 0], cdf[:, -1] = 0.0, 1.0  # everything below lo lands in the first cell, above hi in the last
    return np.diff(cdf, axis=1), (edges[1:] + edges[:-1]) / 2
