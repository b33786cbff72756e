"""A structured interior-point method for the unbiased randomizer's program (docs/math.md §15.3).

The program on outputs ``z_1..z_n`` and support points ``y_1..y_k``: variables ``c_j`` (each output's
base) and ``X_ij = M(z_j | y_i) − c_j`` with ``0 ≤ X_ij ≤ g·c_j`` (``g = e^ε − 1``), minimizing
``Σ_j a_j c_j + Σ_ij q_ij X_ij`` subject to each support point's mass and mean (``2k`` rows). A
generic solver sees ``k·n`` coupling rows; here each output's block ``(c_j, X_·j)`` has an *arrow*
Hessian, inverted in closed form, so a Newton step needs only the ``2k × 2k`` normal matrix
``Σ_j [[1, z_j], [z_j, z_j²]] ⊗ (diag(1/D_·j) + w_j w_jᵀ/σ_j)`` — three matrix products, one Cholesky.

Mehrotra's predictor–corrector, started dual-feasible. Its answer is a warm start: the base ``c`` and
the duals of its best certified iterate, which ``unbiased_program`` turns into an exact optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labeldp.mechanisms._types import FloatArray

ITERATIONS = 200
TARGET_GAP = 1e-11  # relative gap at which the warm start stops
STALL = 12  # iterations without a better certified iterate: rounding has taken over
_STEP = 0.99  # of the way to the boundary


@dataclass(frozen=True)
class WarmStart:
    """The best certified iterate: relative gap, duals ``(α, β)``, dual objective, base ``c_j`` and
    shares ``t_ij = X_ij / (g·c_j)``."""

    gap: float
    duals: tuple[FloatArray, FloatArray]
    dual: float
    base: FloatArray
    share: FloatArray


@dataclass
class _Point:
    c: FloatArray  # n
    x: FloatArray  # k × n: X ≥ 0 (its own slack)
    s_upper: FloatArray  # k × n: g·c − X ≥ 0
    lam: FloatArray  # 2k: duals of the mass and mean rows
    z_lower: FloatArray  # k × n: duals of X ≥ 0
    z_upper: FloatArray  # k × n: duals of g·c − X ≥ 0


@dataclass
class _Step:
    dc: FloatArray
    dx: FloatArray
    dlam: FloatArray
    ds_upper: FloatArray
    dz_lower: FloatArray
    dz_upper: FloatArray


class _Program:
    """The program's data (scaled: labels in ``[−1, 1]``) and its residuals at a point."""

    def __init__(self, y: FloatArray, p: FloatArray, g: float, z: FloatArray) -> None:
        self.y, self.p, self.g, self.z = y, p, g, z
        self.k, self.n = y.size, z.size
        self.q = p[:, None] * (z[None, :] - y[:, None]) ** 2
        self.a = self.q.sum(axis=0)
        self.b = np.concatenate([np.ones(self.k), y])

    def start(self) -> _Point:
        """Primal: equal bases, every row half way up; dual: ``λ = 0`` and ``z_upper`` sharing each
        output's cost among its ``k`` couplings, so the dual residual starts at zero."""
        c = np.full(self.n, 1.0 / (self.n * (1.0 + self.g / 2)))
        x = np.tile(self.g * c / 2, (self.k, 1))
        z_upper = np.tile(self.a / (self.g * self.k), (self.k, 1)) + 1e-3 * float(self.a.mean())
        return _Point(c, x, self.g * c[None, :] - x, np.zeros(2 * self.k), self.q + z_upper, z_upper)

    def apply(self, c: FloatArray, x: FloatArray) -> FloatArray:
        """``A·(c, X)``: each row's mass and mean."""
        return np.concatenate([c.sum() + x.sum(axis=1), self.z @ c + x @ self.z])

    def transpose(self, lam: FloatArray) -> FloatArray:
        """``Aᵀλ`` on the ``X`` block (its column sums are the ``c`` block)."""
        return lam[: self.k, None] + self.z[None, :] * lam[self.k :, None]


class _Newton:
    """One point's Newton system, factored once for the predictor and the corrector."""

    def __init__(self, prog: _Program, pt: _Point) -> None:
        self.prog, self.pt = prog, pt
        g = prog.g
        at = prog.transpose(pt.lam)
        self.rp = prog.b - prog.apply(pt.c, pt.x)
        self.rd_x = prog.q - at - pt.z_lower + pt.z_upper
        self.rd_c = prog.a - at.sum(axis=0) - g * pt.z_upper.sum(axis=0)
        d_lower, d_upper = pt.z_lower / pt.x, pt.z_upper / pt.s_upper
        self.d = d_lower + d_upper
        self.u = -g * d_upper
        self.sigma = g * g * (d_upper * d_lower / self.d).sum(axis=0)  # the arrow's Schur complements
        w = (1.0 + g * d_upper / self.d) / np.sqrt(self.sigma)[None, :]
        inv_d, z = 1.0 / self.d, prog.z
        e0, e1, e2 = np.diag(inv_d.sum(axis=1)), np.diag(inv_d @ z), np.diag(inv_d @ (z * z))
        f0, f1, f2 = w @ w.T, (w * z) @ w.T, (w * z * z) @ w.T
        normal = np.block([[e0 + f0, e1 + f1], [e1 + f1, e2 + f2]])
        self.scale = 1.0 / np.sqrt(np.diag(normal))
        import scipy.linalg as sla  # here: at the top it slows every service start

        self.factor = sla.cho_factor(normal * self.scale[:, None] * self.scale[None, :])

    def _h_inv(self, r_c: FloatArray, r_x: FloatArray) -> tuple[FloatArray, FloatArray]:
        xc = (r_c - (self.u * r_x / self.d).sum(axis=0)) / self.sigma
        return xc, (r_x - self.u * xc[None, :]) / self.d

    def solve(self, rc_lower: FloatArray, rc_upper: FloatArray) -> _Step:
        """The step for complementarity targets ``rc`` (``s∘z`` should move by them)."""
        prog, pt = self.prog, self.pt
        v_lower, v_upper = rc_lower / pt.x, rc_upper / pt.s_upper
        rho_c, rho_x = prog.g * v_upper.sum(axis=0) - self.rd_c, v_lower - v_upper - self.rd_x
        hc, hx = self._h_inv(rho_c, rho_x)
        rhs = self.rp - prog.apply(hc, hx)
        import scipy.linalg as sla  # as above

        dlam = self.scale * sla.cho_solve(self.factor, self.scale * rhs)
        t = prog.transpose(dlam)
        dc, dx = self._h_inv(t.sum(axis=0) + rho_c, t + rho_x)
        ds_upper = prog.g * dc[None, :] - dx
        return _Step(
            dc,
            dx,
            dlam,
            ds_upper,
            (rc_lower - pt.z_lower * dx) / pt.x,
            (rc_upper - pt.z_upper * ds_upper) / pt.s_upper,
        )


def _to_boundary(v: FloatArray, dv: FloatArray) -> float:
    neg = dv < 0
    return float(min(1.0, (-v[neg] / dv[neg]).min())) if neg.any() else 1.0


def _lengths(pt: _Point, st: _Step) -> tuple[float, float]:
    primal = min(_to_boundary(pt.x, st.dx), _to_boundary(pt.s_upper, st.ds_upper))
    dual = min(_to_boundary(pt.z_lower, st.dz_lower), _to_boundary(pt.z_upper, st.dz_upper))
    return primal, dual


def interior_point(y: FloatArray, p: FloatArray, g: float, z: FloatArray) -> WarmStart | None:
    """The best certified iterate (primal and dual residuals below 10⁻⁶, relative), or ``None``."""
    prog = _Program(y, p, g, z)
    pt = prog.start()
    pairs = 2 * prog.k * prog.n
    best: WarmStart | None = None
    best_at = 0
    for iteration in range(ITERATIONS):
        try:
            newton = _Newton(prog, pt)
        except (np.linalg.LinAlgError, ValueError):
            break
        primal = float(prog.a @ pt.c + (prog.q * pt.x).sum())
        dual = float(prog.b @ pt.lam)
        infeasible = max(
            float(np.abs(newton.rp).max()) / (1.0 + float(np.abs(y).max())),
            max(float(np.abs(newton.rd_x).max()), float(np.abs(newton.rd_c).max()))
            / (1.0 + float(prog.a.max())),
        )
        gap = abs(primal - dual) / max(abs(dual), 1e-12)
        if infeasible < 1e-6 and (best is None or gap < best.gap):
            share = pt.x / (g * pt.c[None, :])
            best = WarmStart(
                gap, (pt.lam[: prog.k].copy(), pt.lam[prog.k :].copy()), dual, pt.c.copy(), share
            )
            best_at = iteration
        if best is not None and (best.gap <= TARGET_GAP or iteration - best_at > STALL):
            break
        mu = float((pt.x * pt.z_lower).sum() + (pt.s_upper * pt.z_upper).sum()) / pairs
        affine = newton.solve(-pt.x * pt.z_lower, -pt.s_upper * pt.z_upper)
        ap, ad = _lengths(pt, affine)
        mu_affine = (
            float(
                ((pt.x + ap * affine.dx) * (pt.z_lower + ad * affine.dz_lower)).sum()
                + ((pt.s_upper + ap * affine.ds_upper) * (pt.z_upper + ad * affine.dz_upper)).sum()
            )
            / pairs
        )
        target = min(max((mu_affine / mu) ** 2, 0.02), 0.5) * mu  # centring, kept off both extremes
        step = newton.solve(
            target - pt.x * pt.z_lower - affine.dx * affine.dz_lower,
            target - pt.s_upper * pt.z_upper - affine.ds_upper * affine.dz_upper,
        )
        ap, ad = (_STEP * length for length in _lengths(pt, step))
        pt = _Point(
            pt.c + ap * step.dc,
            pt.x + ap * step.dx,
            pt.s_upper + ap * step.ds_upper,
            pt.lam + ad * step.dlam,
            pt.z_lower + ad * step.dz_lower,
            pt.z_upper + ad * step.dz_upper,
        )
        if not (np.all(np.isfinite(pt.c)) and np.all(np.isfinite(pt.lam))):
            break
    return best
