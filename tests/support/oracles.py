"""Independent references for the optimizer: a linear program over all ε-DP mechanisms and the
naive O(k³) dynamic program of Algorithm 2. Neither shares code with labels_party."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.optimize import linprog, minimize_scalar
from scipy.sparse import coo_matrix

Loss = Callable[[np.ndarray, np.ndarray], np.ndarray]


def squared(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (np.asarray(y_hat) - np.asarray(y)) ** 2


def absolute(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(y_hat) - np.asarray(y))


def poisson(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    y_hat, y = np.broadcast_arrays(np.asarray(y_hat, float), np.asarray(y, float))
    out = np.empty(y.shape)
    zero = y == 0
    out[zero] = y_hat[zero]
    with np.errstate(divide="ignore"):
        out[~zero] = y_hat[~zero] - y[~zero] * np.log(y_hat[~zero])
    return out


LOSSES: dict[str, Loss] = {"squared": squared, "absolute": absolute, "poisson": poisson}


def interval_objective(
    y: np.ndarray, p: np.ndarray, eps: float, a: int, b: int, loss: Loss
) -> Callable[[float], float]:
    """Σ_t p_t ℓ(ŷ, y_t) + (e^ε − 1) Σ_{a<=t<=b} p_t ℓ(ŷ, y_t) as a function of ŷ (inclusive a..b)."""
    w = p * (1 + math.expm1(eps) * ((np.arange(y.size) >= a) & (np.arange(y.size) <= b)))

    def f(v: float) -> float:
        vals = loss(np.full(y.size, v), y)
        return float(np.sum(np.where(w > 0, w * vals, 0.0)))

    return f


def interval_minimum(
    y: np.ndarray, p: np.ndarray, eps: float, a: int, b: int, loss: Loss
) -> tuple[float, float]:
    """(min value, argmin) of the interval objective, by direct numerical minimization."""
    f = interval_objective(y, p, eps, a, b, loss)
    if y.size == 1:
        return f(float(y[0])), float(y[0])
    candidates = [(f(float(v)), float(v)) for v in y]  # exact for the absolute loss
    res = minimize_scalar(f, bounds=(float(y[0]), float(y[-1])), method="bounded", options={"xatol": 1e-13})
    candidates.append((float(res.fun), float(res.x)))
    return min(candidates)


def numeric_costs(y: np.ndarray, p: np.ndarray, eps: float, loss: Loss) -> np.ndarray:
    """cost[a, b] for every inclusive interval, by numerical minimization (any loss; small k)."""
    k = y.size
    cost = np.full((k, k), np.inf)
    for a in range(k):
        for b in range(a, k):
            cost[a, b] = interval_minimum(y, p, eps, a, b, loss)[0]
    return cost


def direct_costs(y: np.ndarray, p: np.ndarray, eps: float, loss_name: str) -> np.ndarray:
    """cost[a, b] for the named losses, each interval evaluated directly in O(k) (no prefix sums)."""
    k = y.size
    g = math.expm1(eps)
    cost = np.full((k, k), np.inf)
    idx = np.arange(k)
    for a in range(k):
        b = np.arange(a, k)
        w = p[None, :] * (1 + g * ((idx[None, :] >= a) & (idx[None, :] <= b[:, None])))
        W = w.sum(axis=1)
        if loss_name in ("squared", "poisson"):
            y_hat = (w @ y) / W
            cost[a, a:] = np.sum(w * LOSSES[loss_name](y_hat[:, None], y[None, :]), axis=1)
        else:
            cum = np.cumsum(w, axis=1)
            j = np.argmax(cum >= W[:, None] / 2 - 1e-15 * W[:, None], axis=1)
            y_hat = y[j]
            cost[a, a:] = np.sum(w * np.abs(y_hat[:, None] - y[None, :]), axis=1)
    return cost


def naive_dp(cost: np.ndarray, eps: float) -> float:
    """Algorithm 2 exactly as written: A[i][j] over all i, j; returns the optimal expected loss."""
    k = cost.shape[0]
    A = np.full((k + 1, k + 1), np.inf)
    A[0, 0] = 0.0
    for j in range(1, k + 1):
        for i in range(j, k + 1):
            A[i, j] = np.min(A[:i, j - 1] + cost[:i, i - 1])
    m = np.arange(1, k + 1)
    return float(np.min(A[k, 1:] / (math.exp(eps) + m - 1)))


def lp_optimum(y: np.ndarray, p: np.ndarray, eps: float, outputs: np.ndarray, loss: Loss) -> float:
    """min Σ_i p_i Σ_o M[i,o] ℓ(o, y_i) over all ε-DP row-stochastic M (HiGHS dual simplex)."""
    k, n_out = y.size, outputs.size
    L = loss(outputs[None, :], y[:, None])
    c = (p[:, None] * np.where(np.isfinite(L), L, 1e30)).ravel()
    var = np.arange(k * n_out).reshape(k, n_out)
    rows, cols, vals = [], [], []
    r = 0
    e = math.exp(eps)
    for i in range(k):
        for i2 in range(k):
            if i == i2:
                continue
            for o in range(n_out):
                rows += [r, r]
                cols += [var[i, o], var[i2, o]]
                vals += [1.0, -e]
                r += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, k * n_out)).tocsr() if r else None
    a_eq = coo_matrix(
        (np.ones(k * n_out), (np.repeat(np.arange(k), n_out), var.ravel())), shape=(k, k * n_out)
    ).tocsr()
    res = linprog(
        c,
        A_ub=a_ub,
        b_ub=np.zeros(r) if r else None,
        A_eq=a_eq,
        b_eq=np.ones(k),
        bounds=(0, None),
        method="highs-ds",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    assert res.status == 0, res.message
    return float(res.fun)


def lp_output_set(y: np.ndarray, p: np.ndarray, eps: float, loss_name: str) -> np.ndarray:
    """The support plus every interval's loss minimizer (found numerically): a finite output set
    that contains the bin values of the optimal RR-on-Bins (Theorem 5)."""
    loss = LOSSES[loss_name]
    points = [float(v) for v in y]
    for a in range(y.size):
        for b in range(a, y.size):
            points.append(interval_minimum(y, p, eps, a, b, loss)[1])
    out = np.unique(np.array(points))
    if loss_name == "poisson":
        out = out[out > 0]
    return out


def unbiased_lp_optimum(y: np.ndarray, p: np.ndarray, eps: float, outputs: np.ndarray) -> float:
    """min Σ_i p_i Σ_o M[i,o](o − y_i)² over row-stochastic M on ``outputs`` with Σ_o o·M[i,o] = y_i
    (unbiased) and M[i,o] <= e^ε·M[i',o] for every pair of rows (ε-DP), written plainly: one variable
    per (row, output) and one inequality per ordered pair of rows and output (HiGHS dual simplex). It
    shares nothing with labeldp's program (no base variables, no columns, no interior point)."""
    k, n_out = y.size, outputs.size
    var = np.arange(k * n_out).reshape(k, n_out)
    cost = (p[:, None] * (outputs[None, :] - y[:, None]) ** 2).ravel()
    e = math.exp(eps)
    rows, cols, vals = [], [], []
    r = 0
    for i in range(k):
        for i2 in range(k):
            if i == i2:
                continue
            for o in range(n_out):
                rows += [r, r]
                cols += [var[i, o], var[i2, o]]
                vals += [1.0, -e]
                r += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, k * n_out)).tocsr()
    eq_rows = np.concatenate([np.repeat(np.arange(k), n_out), k + np.repeat(np.arange(k), n_out)])
    eq_vals = np.concatenate([np.ones(k * n_out), np.tile(outputs, k)])
    a_eq = coo_matrix((eq_vals, (eq_rows, np.tile(var.ravel(), 2))), shape=(2 * k, k * n_out)).tocsr()
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(r),
        A_eq=a_eq,
        b_eq=np.concatenate([np.ones(k), y]),
        bounds=(0, None),
        method="highs-ds",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    assert res.status == 0, res.message
    return float(res.fun)
