"""Training with semi-sensitive features: the budget split, the debiased loss, clipping, the noise and
the accountant, each against independent math (closed forms, exact expectations, a second accountant,
a Kolmogorov–Smirnov test at a fixed false-alarm rate)."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

torch = pytest.importorskip("torch")  # the optional `dpsgd` extra; `make test` installs it

from labeldp.mechanisms.debias import BinsNoise  # noqa: E402
from labeldp.mechanisms.rng import SecureRandom  # noqa: E402
from labeldp.mechanisms.validation import ParameterError  # noqa: E402
from labeldp.semi_sensitive import (  # noqa: E402
    DpSgdSchedule,
    HybridBudget,
    SecureNoiseOptimizer,
    TwoTower,
    calibrate_noise,
    debiased_bce,
    epsilon_spent,
    epsilon_spent_rdp_bound,
    group_privacy,
    plan_hybrid,
    predict,
    train_dpsgd,
    train_truncated,
)
from labeldp.semi_sensitive.plan import MAX_STEP_NOISE  # noqa: E402
from labeldp.semi_sensitive.training import Hyper  # noqa: E402

FALSE_ALARM = 1e-4
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook")


@pytest.mark.parametrize(("eps", "first", "second"), [(1.0, 0.6, 0.4), (5.0, 3.0, 2.0), (50.0, 3.0, 47.0)])
def test_split_matches_the_paper(eps: float, first: float, second: float) -> None:
    budget = HybridBudget.split(eps, 1e-9)
    assert (budget.epsilon_labels, budget.epsilon_dpsgd) == (first, second)


@given(st.floats(min_value=1e-3, max_value=100.0))
def test_split_never_exceeds_the_total(eps: float) -> None:
    budget = HybridBudget.split(eps, 1e-9)
    assert Fraction(budget.epsilon_labels) + Fraction(budget.epsilon_dpsgd) <= Fraction(eps)
    assert budget.epsilon_labels == pytest.approx(min(0.6 * eps, 3.0), rel=1e-15)
    assert budget.epsilon_dpsgd > 0


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-9, float("nan"), 2.0])
def test_bad_delta_is_refused(delta: float) -> None:
    with pytest.raises(ParameterError, match="delta"):
        HybridBudget.split(1.0, delta)


@pytest.mark.parametrize(("eps", "k"), [(0.5, 1), (0.5, 3), (1.0, 10), (0.01, 5)])
def test_group_privacy_closed_form(eps: float, k: int) -> None:
    eps_k, delta_k = group_privacy(eps, 1e-8, k)
    assert eps_k >= k * eps and eps_k == pytest.approx(k * eps, rel=1e-15)
    assert delta_k >= 1e-8 * math.expm1(k * eps) / math.expm1(eps) * (1 - 1e-12)
    assert delta_k == pytest.approx(1e-8 * math.expm1(k * eps) / math.expm1(eps), rel=1e-12)


def test_user_level_guarantee_composes_both_phases_by_group_privacy() -> None:
    budget = HybridBudget.split(5.0, 1e-10)  # (3, 0) + (2, 1e-10)
    eps, delta = budget.per_user(4)
    assert eps >= 4 * 3.0 + 4 * 2.0 and eps == pytest.approx(20.0, rel=1e-15)
    assert delta == pytest.approx(1e-10 * math.expm1(4 * 2.0) / math.expm1(2.0), rel=1e-12)
    assert budget.per_user(1) == (5.0, 1e-10)
    assert group_privacy(10.0, 1e-9, 200)[1] == 1.0  # a vacuous δ is capped, not an overflow


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_debiased_loss_is_unbiased_exactly(eps: float) -> None:
    """E over the randomization of the debiased loss = the loss on the true label (exact two-point sum)."""
    noise = BinsNoise.of([0.0, 1.0], eps)
    logits = torch.linspace(-8, 8, 101, dtype=torch.float64)
    for y in (0.0, 1.0):
        true = torch.full_like(logits, y)
        kept = debiased_bce(logits, true, noise)
        flipped = debiased_bce(logits, 1 - true, noise)
        expected = noise.keep * kept + noise.move * flipped
        clean = torch.nn.functional.binary_cross_entropy_with_logits(logits, true, reduction="none")
        assert torch.allclose(expected, clean, rtol=1e-12, atol=1e-12)


def test_debiased_loss_is_the_release_libraries_unbiased_loss() -> None:
    """One concept, two implementations (numpy for evaluation, torch for training) must agree."""
    noise = BinsNoise.of([0.0, 1.0], 1.5)
    logits = np.linspace(-5, 5, 41)
    bins = np.arange(41) % 2

    def log_loss(f: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.logaddexp(0, f) - y * f  # BCE with logits

    numpy_loss = noise.unbiased_loss(logits, bins, log_loss)
    torch_loss = debiased_bce(torch.tensor(logits), torch.tensor(bins, dtype=torch.float64), noise)
    np.testing.assert_allclose(torch_loss.numpy(), numpy_loss, rtol=1e-12)


def _optimizer(model: Any, noise_multiplier: float, clip: float) -> SecureNoiseOptimizer:
    return SecureNoiseOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        rng=SecureRandom(),
        noise_multiplier=noise_multiplier,
        max_grad_norm=clip,
        expected_batch_size=1,
        loss_reduction="sum",
    )


def test_per_example_gradients_never_exceed_the_clip() -> None:
    """Each example alone through the real optimizer (no noise): its clipped gradient has norm <= C,
    and one already inside the ball is left as it was."""
    from opacus import GradSampleModule

    rng = np.random.default_rng(5)
    scale = np.where(np.arange(40) < 10, 0.01, 100.0)[:, None]  # 10 small gradients, 30 huge ones
    x_non, x_semi = rng.normal(size=(40, 4)) * scale, rng.normal(size=(40, 3)) * scale
    labels = rng.integers(0, 2, 40).astype(np.float32)
    clip = 5.0
    model = GradSampleModule(TwoTower(4, 3, width=8), loss_reduction="sum")
    optimizer = _optimizer(model, 0.0, clip)
    norms_before, norms_after = [], []
    for i in range(40):
        optimizer.zero_grad(set_to_none=True)
        xn = torch.tensor(x_non[i : i + 1], dtype=torch.float32)
        xs = torch.tensor(x_semi[i : i + 1], dtype=torch.float32)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(xn, xs), torch.tensor(labels[i : i + 1]), reduction="sum"
        )
        loss.backward()
        raw = math.sqrt(sum(float(p.grad_sample.pow(2).sum()) for p in optimizer.params))
        optimizer.clip_and_accumulate()
        optimizer.add_noise()
        after = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in optimizer.params))
        norms_before.append(raw)
        norms_after.append(after)
        assert after <= clip * (1 + 1e-5)
        if raw < clip:
            assert after == pytest.approx(raw, rel=1e-4)
    assert max(norms_before) > 10 * clip  # the test did exercise clipping
    assert min(norms_before) < clip  # and the pass-through


def test_the_noise_is_gaussian_with_the_calibrated_scale_and_secure() -> None:
    """The optimizer's noise on a zero gradient is N(0, (σC)²) (KS test at a fixed false-alarm rate)
    and does not come from torch's generator: re-seeding torch does not repeat it."""
    model = torch.nn.Linear(50, 40)
    sigma, clip = 1.3, 0.7

    def noise_once() -> np.ndarray:
        torch.manual_seed(0)
        optimizer = _optimizer(model, sigma, clip)
        for p in optimizer.params:
            p.summed_grad = torch.zeros_like(p)
        optimizer.add_noise()
        return np.concatenate([p.grad.detach().numpy().ravel() for p in optimizer.params])

    first, second = noise_once(), noise_once()
    assert first.size == 50 * 40 + 40
    assert stats.kstest(first / (sigma * clip), "norm").pvalue > FALSE_ALARM
    assert not np.array_equal(first, second)


def test_secure_standard_normal() -> None:
    draws = SecureRandom().standard_normal(200_000)
    assert stats.kstest(draws, "norm").pvalue > FALSE_ALARM
    # fourth moment too (a sum of uniforms would pass a loose KS test at n small, not this)
    assert abs(stats.kurtosis(draws)) < 0.05


@pytest.mark.slow
@settings(deadline=None, max_examples=3)
@given(st.sampled_from([0.4, 1.2, 2.0]))
def test_calibrated_noise_spends_at_most_the_charge(eps: float) -> None:
    """The chosen σ spends <= ε₂ at δ by the deciding accountant, a second accountant (Rényi, converted
    to replace-one) gives a bound at least as large and of the same size, and σ is not wasteful: 2e-4
    less noise would overspend."""
    schedule = DpSgdSchedule.of(20_000, 500, 1.0)
    delta = 1 / 20_000**2
    sigma = calibrate_noise(schedule, eps, delta)
    spent = epsilon_spent(schedule, sigma, delta)
    assert spent <= eps
    assert epsilon_spent(schedule, sigma * 0.995, delta) > spent  # strictly less noise, more ε
    assert epsilon_spent(schedule, sigma * (1 - 2e-4), delta) > eps  # the least such σ, to 1e-4
    rdp_bound = epsilon_spent_rdp_bound(schedule, sigma, delta)
    assert spent <= rdp_bound <= 2.5 * eps


def test_calibration_never_overspends_by_any_amount() -> None:
    """One full-batch step at ε₂ = 3, δ = 10⁻⁶: Brent's root lands about 10⁻⁶ above ε₂ here, so without the
    final check the chosen σ would spend more than is charged. No tolerance: at most ε₂, exactly."""
    one_step = DpSgdSchedule.of(1200, 1200, 1)
    sigma = calibrate_noise(one_step, 3.0, 1e-6)
    assert epsilon_spent(one_step, sigma, 1e-6) <= 3.0
    assert epsilon_spent(one_step, sigma * (1 - 2e-4), 1e-6) > 3.0  # and still the least such σ, to 1e-4


@pytest.mark.slow  # the accountant at its least noise: ~7 s
def test_calibration_ends_at_the_accountants_range() -> None:
    """One full-batch step: where σ = 10⁴ is not enough no noise level reaches ε (a refusal that says
    so), and where even the least noise the accountant holds (σ = 0.3) spends less than ε, that is the
    answer."""
    one_step = DpSgdSchedule.of(1200, 1200, 1)
    with pytest.raises(ParameterError, match="no noise level reaches this ε"):
        calibrate_noise(one_step, 0.0005, 1e-7)
    assert calibrate_noise(one_step, 200.0, 1e-7) == 0.3
    assert epsilon_spent(one_step, 0.3, 1e-7) < 200.0


@pytest.mark.slow
def test_dpsgd_runs_its_steps_and_learns_from_the_semi_sensitive_features() -> None:
    """Phase 2 from a phase-1 model uses the semi-sensitive columns: on data whose label depends on
    them, the full model beats the truncated one (a large ε so the check is about the plumbing)."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(11)
    n = 4000
    x_non, x_semi = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    y = (0.5 * x_non[:, 0] + 2.0 * x_semi[:, 0] + rng.logistic(size=n) > 0).astype(np.int64)
    torch.manual_seed(0)
    noise = BinsNoise.of([0, 1], 3.0)
    from labeldp.mechanisms import randomized_response

    model = train_truncated(
        TwoTower(3, 3, 16), x_non, randomized_response(y, 2, 3.0), noise, Hyper(3, 128, 3e-3)
    )
    truncated_auc = roc_auc_score(y, predict(model, x_non))
    schedule = DpSgdSchedule.of(n, 400, 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = train_dpsgd(
            model,
            x_non,
            x_semi,
            y,
            schedule=schedule,
            noise_multiplier=calibrate_noise(schedule, 20.0, 1 / n**2),
            clip_norm=1.0,
            learning_rate=1e-2,
        )
    assert run.steps_with_examples == schedule.steps  # q·n = 400: an empty batch has chance e^-400
    full_auc = roc_auc_score(y, predict(model, x_non, x_semi))
    assert full_auc > truncated_auc + 0.1


def test_empty_poisson_batches_are_steps_too() -> None:
    rng = np.random.default_rng(2)
    x_non, x_semi, y = rng.normal(size=(50, 2)), rng.normal(size=(50, 2)), rng.integers(0, 2, 50)
    model = TwoTower(2, 2, 4)
    before = [p.detach().clone() for p in model.parameters()]
    run = train_dpsgd(
        model,
        x_non,
        x_semi,
        y,
        schedule=DpSgdSchedule(0.001, 30),
        noise_multiplier=1.0,
        clip_norm=1.0,
        learning_rate=1e-2,
    )
    assert run.steps_with_examples < 30  # most steps saw nobody (P = 0.95 each)
    assert any(
        not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
    )  # noise moved it


@pytest.mark.slow  # two accountant calibrations per case (~6 s of CPU each)
@pytest.mark.parametrize(("eps", "label_phase"), [(1.0, False), (3.0, False), (5.0, True), (50.0, True)])
def test_the_public_plan_skips_the_label_phase_where_it_does_not_pay_on_adult(
    eps: float, label_phase: bool
) -> None:
    """At Adult's size and the service's defaults (batch 1024, 3 epochs, δ = 1/n²) the rule gives all of
    ε to DP-SGD at ε = 1 and 3 and runs the paper's split at 5 and 50; the budget never exceeds ε and the
    decision is the documented threshold on the split's step noise, recomputed here."""
    n = 34_189
    plan = plan_hybrid(eps, 1 / n**2, n, 1024, 3.0)
    assert plan.label_phase is label_phase
    sigma = calibrate_noise(
        DpSgdSchedule.of(n, 1024, 3.0), HybridBudget.split(eps, 1 / n**2).epsilon_dpsgd, 1 / n**2
    )
    assert (
        math.isclose(plan.split_noise_multiplier, sigma) and (sigma / 1024 <= MAX_STEP_NOISE) is label_phase
    )
    budget = plan.budget
    assert Fraction(budget.epsilon_labels) + Fraction(budget.epsilon_dpsgd) <= Fraction(eps)
    if label_phase:
        assert budget == HybridBudget.split(eps, 1 / n**2)
    else:
        assert budget.epsilon_labels == 0 and budget.epsilon_dpsgd == eps


@pytest.mark.slow
def test_more_examples_bring_the_label_phase_back() -> None:
    """With many examples DP-SGD's noise per step is small even at ε₂ = 0.4ε, so the hybrid runs (the
    semi-sensitive paper finds it best from ε = 3 on Criteo's tens of millions of examples)."""
    assert not plan_hybrid(3.0, 1e-12, 34_189, 1024, 3.0).label_phase
    assert plan_hybrid(3.0, 1e-12, 1_000_000, 1024, 3.0).label_phase
