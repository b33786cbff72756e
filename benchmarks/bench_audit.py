"""Randomized response against label aggregation (LLP), measured the way an attacker experiences it.

Reproduces the comparison of the label-inference auditing paper on UCI Adult (docs/math.md §11):

* **RR** — binary randomized response at ε (labeldp's mechanism for two classes), the model a
  logistic regression fitted by maximum likelihood through the known noise,
  ``P(ỹ = 1 | x) = l + (h − l)·σ(w·x)`` (forward correction: the published mechanism makes the
  noise known; a plain logistic regression on the noisy labels loses 0.01–0.05 AUC);
* **LLP** — random bags of k examples release only their label proportion; the model a logistic
  regression trained by proportion matching (squared error between a bag's mean prediction and its
  released proportion: a proper loss whose gradient is affine in the proportion, so unbiased noisy
  proportions train it without bias);
* **LLP+Geom** — the bag's count plus two-sided geometric noise at ε, clipped to [0, k], and debiased
  to E[unclipped | clipped] (memoryless property) before training.

The attacker knows P(y | x) (estimated by gradient boosting on the clean training labels, cross-fitted
— the paper's proxy for the distribution) and, for LLP, everyone's features in the bag. Per example the
exact additive advantage is computed from the Poisson-binomial distribution of the bag's other labels
(LLP) or its convolution with the clipped geometric noise (LLP+Geom); RR's comes from
``labeldp.mechanisms.advantage``. The multiplicative advantage is taken at the realized output: for
LLP it is infinite when a bag is all 0s or all 1s. "Skewed" repeats the measurement on Adult with 4
in 5 positives dropped (about 6% positive).

All randomness here is the seeded test stream or numpy's seeded generator (benchmark only).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from scipy.optimize import minimize
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from benchmarks.common import RESULTS, write
from labeldp.mechanisms import RRTopK, sampler_of
from labeldp.mechanisms.advantage import advantages
from labeldp.samples import adult_income
from tests.support.seeded import SeededRandom

RR_EPSILONS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
BAG_SIZES = (2, 4, 8, 16, 32, 64)
GEOM = ((2, 1.0), (8, 0.5), (8, 1.0), (8, 2.0), (32, 1.0), (32, 2.0))
RUNS = 3
INF = 12.0  # where infinite multiplicative advantages are drawn
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "audit_llp.png"


def data(skewed: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ds = adult_income()
    table = ds.features
    y = ds.labels.astype(np.int64)
    keep = (y == 0) | (np.arange(y.size) % 5 == 0) if skewed else np.ones(y.size, dtype=bool)
    y = y[keep]
    test = np.arange(y.size) % 5 == 0
    names = table.column_names
    text = [
        c
        for c in names
        if pa.types.is_string(table.schema.field(c).type)
        or pa.types.is_large_string(table.schema.field(c).type)
    ]
    cat = np.column_stack([table.column(c).to_numpy(zero_copy_only=False).astype(str)[keep] for c in text])
    num = np.column_stack(
        [
            np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)[keep]
            for c in names
            if c not in text
        ]
    )
    onehot = OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=20).fit(cat[~test])
    scale = StandardScaler().fit(num[~test])
    X = np.hstack([onehot.transform(cat).toarray(), scale.transform(num)])
    return X[~test], y[~test], X[test], y[test]


def class_conditionals(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The attacker's P(y = 1 | x): gradient boosting on the clean labels, 5-fold cross-fitted."""
    model = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, random_state=0)
    eta = cross_val_predict(model, X, y, cv=5, method="predict_proba")[:, 1]
    return np.clip(eta, 1e-6, 1 - 1e-6)


# -- the PETs and what the attacker learns from them ---------------------------------------------------
def others_distribution(eta_bags: np.ndarray) -> np.ndarray:
    """For each bag (B × k) and member i, the distribution of the sum of the other k − 1 labels:
    (B, k, k) with the last axis 0..k−1 (Poisson-binomial, by dynamic programming)."""
    B, k = eta_bags.shape
    out = np.zeros((B, k, k))
    for i in range(k):
        dist = np.zeros((B, k))
        dist[:, 0] = 1.0
        for j in range(k):
            if j == i:
                continue
            p = eta_bags[:, j : j + 1]
            dist = dist * (1 - p) + np.concatenate([np.zeros((B, 1)), dist[:, :-1]], axis=1) * p
        out[:, i] = dist
    return out


def geometric_channel(k: int, epsilon: float) -> np.ndarray:
    """P(released count o | true count s) of clipped two-sided geometric noise, (k+1) × (k+1)."""
    a = math.exp(-epsilon)
    s = np.arange(k + 1)[:, None]
    o = np.arange(k + 1)[None, :]
    g = (1 - a) / (1 + a) * a ** np.abs(o - s)
    g[:, 0] = a ** s[:, 0] / (1 + a)
    g[:, k] = a ** (k - s[:, 0]) / (1 + a)
    return g


def llp_audit(
    eta: np.ndarray, y: np.ndarray, bags: np.ndarray, noise: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per example (in bag order): exact additive advantage, multiplicative advantage at the realized
    output, and the released output (count, or noisy count) per bag."""
    e, lab = eta[bags], y[bags]
    others = others_distribution(e)  # B, k, k (sum of others = 0..k−1)
    counts = lab.sum(axis=1)
    # P(S = s | y_i) for s = 0..k
    given0 = np.concatenate([others, np.zeros((*others.shape[:2], 1))], axis=2)
    given1 = np.concatenate([np.zeros((*others.shape[:2], 1)), others], axis=2)
    if noise is not None:
        given0, given1 = given0 @ noise, given1 @ noise
    joint1, joint0 = e[:, :, None] * given1, (1 - e)[:, :, None] * given0
    informed = np.maximum(joint1, joint0).sum(axis=2)
    additive = np.maximum(informed - np.maximum(e, 1 - e), 0.0)
    if noise is None:
        released = counts
    else:
        rng = np.random.default_rng(int(counts.sum()))
        cdf = np.cumsum(noise[counts], axis=1)
        released = (cdf > rng.random(counts.size)[:, None]).argmax(axis=1)
    at = np.broadcast_to(released[:, None], e.shape)
    p1 = np.take_along_axis(given1, at[:, :, None], axis=2)[:, :, 0]
    p0 = np.take_along_axis(given0, at[:, :, None], axis=2)[:, :, 0]
    with np.errstate(divide="ignore"):
        mult = np.abs(np.log(p1) - np.log(p0))
    return additive.ravel(), mult.ravel(), released


def debiased(released: np.ndarray, k: int, epsilon: float) -> np.ndarray:
    """E[count + noise | clipped]: the clipped ends move out by the geometric overshoot a/(1 − a)."""
    a = math.exp(-epsilon)
    out = released.astype(np.float64)
    out[released == 0] -= a / (1 - a)
    out[released == k] += a / (1 - a)
    return out


def prop_match(X: np.ndarray, bags: np.ndarray, proportions: np.ndarray, l2: float = 1e-4) -> np.ndarray:
    """Logistic model by proportion matching: min Σ_b (mean_{i∈b} σ(x_i·w) − p_b)² / B + l2·|w|²."""
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    B, k = bags.shape

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        p = 1 / (1 + np.exp(-np.clip(Xb @ w, -30, 30)))
        diff = p[bags].mean(axis=1) - proportions
        weight = np.zeros(X.shape[0])
        weight[bags] = (2 / (B * k)) * diff[:, None] * (p * (1 - p))[bags]
        grad = Xb.T @ weight + 2 * l2 * np.append(w[:-1], 0.0)
        return float(np.mean(diff**2) + l2 * w[:-1] @ w[:-1]), grad

    start = np.zeros(Xb.shape[1])
    mean = float(np.clip(proportions.mean(), 0.01, 0.99))
    start[-1] = math.log(mean / (1 - mean))
    return np.asarray(minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500}).x)


def forward_corrected(X: np.ndarray, noisy: np.ndarray, keep: float, l2: float = 1e-4) -> np.ndarray:
    """Logistic model fitted to RR labels by maximum likelihood through the noise (keep ``h``)."""
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    h, low = keep, 1 - keep

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = 1 / (1 + np.exp(-np.clip(Xb @ w, -30, 30)))
        p = low + (h - low) * s
        nll = -np.mean(noisy * np.log(p) + (1 - noisy) * np.log(1 - p))
        d = -(noisy / p - (1 - noisy) / (1 - p)) * (h - low) * s * (1 - s) / X.shape[0]
        return float(nll + l2 * w[:-1] @ w[:-1]), Xb.T @ d + 2 * l2 * np.append(w[:-1], 0.0)

    return np.asarray(
        minimize(loss, np.zeros(Xb.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 1000}).x
    )


def auc_of(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(roc_auc_score(y, np.hstack([X, np.ones((X.shape[0], 1))]) @ w))


def run(skewed: bool, train_models: bool) -> dict[str, Any]:
    X, y, Xt, yt = data(skewed)
    eta = class_conditionals(X, y)
    rows: list[dict[str, Any]] = []
    mult_samples: dict[str, np.ndarray] = {}
    for eps in RR_EPSILONS:
        published = RRTopK(eps, 2, np.array([0, 1])).describe(prior=[0.5, 0.5], epsilon_prior=0.0)
        adv = advantages(published, np.stack([1 - eta, eta], axis=1))
        aucs = []
        if train_models:
            for r in range(RUNS):
                noisy = sampler_of(published).randomize(y, rng=SeededRandom(100 * r + int(eps * 100)))
                aucs.append(auc_of(forward_corrected(X, noisy, published.threshold.keep_probability), Xt, yt))
        rows.append(
            _row("RR", f"ε={eps:g}", adv.additive, np.full(y.size, published.implemented_epsilon), aucs)
        )
        if eps == 1.0:
            mult_samples["RR ε=1"] = np.full(y.size, published.implemented_epsilon)
    configs: list[tuple[str, str, int, float | None]] = [("LLP", f"k={k}", k, None) for k in BAG_SIZES]
    configs += [("LLP+Geom", f"k={k}, ε={e:g}", k, e) for k, e in GEOM]
    for kind, label, k, geom_eps in configs:
        noise = None if geom_eps is None else geometric_channel(k, geom_eps)
        adds, mults, aucs = [], [], []
        for r in range(RUNS):
            order = np.random.default_rng(1000 + r).permutation(y.size)
            bags = order[: (y.size // k) * k].reshape(-1, k)
            additive, mult, released = llp_audit(eta, y, bags, noise)
            adds.append(additive)
            mults.append(mult)
            if train_models:
                proportions = (released if geom_eps is None else debiased(released, k, geom_eps)) / k
                aucs.append(auc_of(prop_match(X, bags, proportions), Xt, yt))
        rows.append(_row(kind, label, np.concatenate(adds), np.concatenate(mults), aucs))
        if (kind, k, geom_eps) in (("LLP", 8, None), ("LLP+Geom", 8, 1.0)):
            mult_samples[f"{kind} {label}"] = mults[0]
    return {
        "positives": float(y.mean()),
        "examples": int(y.size),
        "rows": rows,
        "mult_samples": mult_samples,
    }


def _row(kind: str, label: str, additive: np.ndarray, mult: np.ndarray, aucs: list[float]) -> dict[str, Any]:
    finite = mult[np.isfinite(mult)]
    return {
        "pet": kind,
        "parameter": label,
        "additive_mean": float(additive.mean()),
        "additive_p99": float(np.quantile(additive, 0.99)),
        "mult_infinite_share": float(np.mean(~np.isfinite(mult))),
        "mult_p99": float(np.sort(mult)[int(0.99 * (mult.size - 1))]),  # inf-safe order statistic
        "mult_max_finite": float(finite.max()) if finite.size else 0.0,
        "auc": float(np.mean(aucs)) if aucs else None,
        "auc_se": float(np.std(aucs, ddof=1) / math.sqrt(len(aucs))) if len(aucs) > 1 else None,
    }


def dominance(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each LLP / LLP+Geom point: RR's AUC at the same mean additive advantage (interpolated
    along RR's ε curve) against the point's AUC."""
    rr = sorted((r for r in rows if r["pet"] == "RR"), key=lambda r: r["additive_mean"])
    xs = np.array([r["additive_mean"] for r in rr])
    ys = np.array([r["auc"] for r in rr])
    out = []
    for r in rows:
        if r["pet"] == "RR":
            continue
        inside = xs[0] <= r["additive_mean"] <= xs[-1]
        rr_auc = float(np.interp(r["additive_mean"], xs, ys)) if inside else None
        right = int(np.searchsorted(xs, r["additive_mean"]))
        neighbours = rr[max(right - 1, 0) : right + 1]  # the RR points the interpolation uses
        se_rr = max(x["auc_se"] or 0.0 for x in neighbours)
        margin = 2 * math.hypot(r["auc_se"] or 0.0, se_rr)
        out.append(
            {
                "pet": r["pet"],
                "parameter": r["parameter"],
                "additive_mean": r["additive_mean"],
                "auc": r["auc"],
                "rr_auc_same_advantage": rr_auc,
                "rr_at_least_as_good": None if rr_auc is None else bool(rr_auc >= r["auc"] - margin),
            }
        )
    return out


def plot(adult: dict[str, Any], skewed: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    for pet, style in (("RR", "o-"), ("LLP", "s-")):
        pts = [r for r in adult["rows"] if r["pet"] == pet]
        ax.plot([r["additive_mean"] for r in pts], [r["auc"] for r in pts], style, label=pet)
        for r in pts:
            ax.annotate(
                r["parameter"],
                (r["additive_mean"], r["auc"]),
                fontsize=7,
                xytext=(3, -9),
                textcoords="offset points",
            )
    geom = [r for r in adult["rows"] if r["pet"] == "LLP+Geom"]
    ax.plot([r["additive_mean"] for r in geom], [r["auc"] for r in geom], "^", label="LLP+Geom")
    ax.set_xscale("log")
    ax.set_xlabel("mean additive advantage (exact, per example)")
    ax.set_ylabel("test AUC")
    ax.set_title("UCI Adult: model quality vs what the attacker gains")
    ax.legend(loc="lower right")
    for ax, result, name in ((axes[1], adult, "Adult"), (axes[2], skewed, "Adult, skewed")):
        for label, values in result["mult_samples"].items():
            v = np.sort(np.where(np.isfinite(values), values, INF))
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label)
        ax.axvline(INF, color="0.6", ls=":", lw=1)
        ax.text(INF, 0.02, " ∞", color="0.3")
        ax.set_xlim(0, INF + 0.8)
        ax.set_xlabel("multiplicative advantage at the released output")
        ax.set_ylabel("share of examples at or below")
        ax.set_title(f"{name} ({result['positives']:.0%} positive)")
        ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any], with_auc: bool) -> str:
    head = "| PET | parameter | mean additive advantage | p99 | share with ∞ multiplicative "
    head += "| p99 multiplicative |" + (" test AUC |" if with_auc else "")
    lines = [head, "|" + "---|" * (7 if with_auc else 6)]
    for r in result["rows"]:
        line = (
            f"| {r['pet']} | {r['parameter']} | {r['additive_mean']:.4f} | {r['additive_p99']:.4f} | "
            f"{r['mult_infinite_share']:.2%} | {_number(r['mult_p99'])} |"
        )
        if with_auc:
            line += f" {r['auc']:.4f} ± {r['auc_se']:.4f} |"
        lines.append(line)
    return "\n".join(lines)


def _number(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.2f}"


def main() -> None:
    adult = run(skewed=False, train_models=True)
    skewed = run(skewed=True, train_models=False)
    plot(adult, skewed)
    dom = dominance(adult["rows"])
    compared = [d for d in dom if d["rr_at_least_as_good"] is not None]
    md = [
        f"UCI Adult, {adult['examples']:,} training examples ({adult['positives']:.1%} positive), "
        f"{RUNS} runs per setting; skewed: {skewed['examples']:,} ({skewed['positives']:.1%} positive).",
        "",
        table(adult, True),
        "",
        "Skewed labels (advantages only):",
        "",
        table(skewed, False),
        "",
        f"RR at the same mean additive advantage is at least as good (within 2 standard errors) for "
        f"{sum(d['rr_at_least_as_good'] for d in compared)} of {len(compared)} LLP / LLP+Geom settings "
        f"inside RR's range:",
        "",
        "| PET | parameter | additive | AUC | RR's AUC at that advantage |",
        "|---|---|---|---|---|",
        *(
            f"| {d['pet']} | {d['parameter']} | {d['additive_mean']:.4f} | {d['auc']:.4f} | "
            f"{'—' if d['rr_auc_same_advantage'] is None else format(d['rr_auc_same_advantage'], '.4f')} |"
            for d in dom
        ),
        "",
        f"Figure: {FIGURE.relative_to(FIGURE.parent.parent.parent)}",
    ]
    clean = {
        "adult": {k: v for k, v in adult.items() if k != "mult_samples"},
        "skewed": {k: v for k, v in skewed.items() if k != "mult_samples"},
        "dominance": dom,
    }
    write("audit", "\n".join(md), clean)


if __name__ == "__main__":
    RESULTS.mkdir(parents=True, exist_ok=True)
    main()
