"""``labeldp_model``'s corrections for training outside the service, each checked against the exact
expectation over the mechanism's own transition matrix (``PublishedMechanism.bin_transition``, the
integer sampler's probabilities), and each check shown to fail for a correction one ε or one bin off.

Unbiased corrections (squared, Poisson, unbiased cross-entropy, sample rows for any loss): for every
true bin ``i`` and prediction ``f``, ``Σ_o T[i, o]·ℓ̃(f, v_o) = ℓ(f, v_i)`` and the same for the
gradient. The forward correction for two classes and for many: at the true class probabilities the
expected gradient is 0 and the expected squared gradient is the Fisher Hessian it reports. Then the
same numbers through PyTorch's autograd, LightGBM and XGBoost (both interfaces of each), and
scikit-learn's signed weights.
"""

from __future__ import annotations

from typing import Any

import lightgbm
import numpy as np
import pytest
import torch
import xgboost
from sklearn.ensemble import HistGradientBoostingRegressor

from features_party.exports.description import correction
from labeldp.mechanisms import (
    BinsNoise,
    PublishedMechanism,
    integer_grid,
    optimize_rr_on_bins,
    optimize_rr_top_k,
)
from labeldp_model import (
    KINDS,
    Objective,
    Release,
    ReleasedValuesError,
    ReleaseFormatError,
    UnknownMechanismError,
    gradient_hessian,
    initial_logits,
    initial_score,
    loss_values,
    sample_rows,
    unbiased_targets,
)
from labeldp_model.kinds import randomized_response
from labeldp_model.pytorch import ReleaseLoss
from labeldp_model.release import FORMAT, FORMAT_VERSION

F = np.linspace(-3.0, 6.0, 13)  # raw scores: predictions, log rates, logits


def regression(epsilon: float, loss: str = "squared") -> PublishedMechanism:
    support = integer_grid(0, 12)
    prior = np.exp(-0.5 * ((support.values - 4.0) / 3.0) ** 2)
    mech = optimize_rr_on_bins(support, prior, epsilon, loss)
    return mech.describe(prior=prior, epsilon_prior=0.1)


def two_classes(epsilon: float) -> PublishedMechanism:
    prior = np.array([0.55, 0.45])  # both classes reported from ε ≈ 0.2
    return optimize_rr_top_k(prior, epsilon).describe(prior=prior, epsilon_prior=0.1)


def description(mech: PublishedMechanism, **changes: Any) -> dict[str, Any]:
    """What an export carries for this mechanism (the server's own ``correction``)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "release_id": "r-1",
        "columns": {"released_value": "released_value"},
        "mechanism": mech.model_dump(mode="json"),
        "correction": correction(mech),
        **changes,
    }


def release_of(mech: PublishedMechanism) -> Release:
    return Release.from_description(description(mech))


def one_epsilon_off(mech: PublishedMechanism) -> Release:
    """The same bins, corrected as if randomized at ε + 1."""
    noise = BinsNoise.of(mech.bin_values, mech.epsilon_randomize + 1)
    numbers = {**correction(mech), "keep": noise.keep, "move": noise.move}
    return Release.from_description(description(mech, correction=numbers))


def true_loss(loss: str, f: np.ndarray, y: float) -> np.ndarray:
    if loss == "squared":
        return (f - y) ** 2
    if loss == "poisson":
        return np.exp(f) - y * f
    return np.logaddexp(0, f) - y * f  # cross-entropy of the logit f against a probability y


def true_gradient(loss: str, f: np.ndarray, y: float) -> np.ndarray:
    if loss == "squared":
        return f - y  # half the squared error, as the objectives report
    if loss == "poisson":
        return np.exp(f) - y
    return 1 / (1 + np.exp(-f)) - y


def expectation_gaps(release: Release, truth: PublishedMechanism, loss: str) -> tuple[float, float]:
    """Largest |E[ℓ̃ | bin i] − ℓ(f, v_i)| and the same for the gradient, over bins and predictions,
    the expectation taken over ``truth``'s transition."""
    T, v = truth.bin_transition(), np.asarray(truth.bin_values)
    worst_loss = worst_gradient = 0.0
    for i in range(v.size):
        expected_loss = sum(
            T[i, o] * loss_values(release, loss, F, np.full(F.size, v[o])) for o in range(v.size)
        )
        expected_gradient = sum(
            T[i, o] * gradient_hessian(release, loss, F, np.full(F.size, v[o]))[0] for o in range(v.size)
        )
        worst_loss = max(worst_loss, float(np.max(np.abs(expected_loss - true_loss(loss, F, v[i])))))
        worst_gradient = max(
            worst_gradient, float(np.max(np.abs(expected_gradient - true_gradient(loss, F, v[i]))))
        )
    return worst_loss, worst_gradient


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_regression_losses_are_unbiased_exactly_and_not_one_epsilon_off(epsilon: float, loss: str) -> None:
    mech = regression(epsilon, loss)
    assert mech.m >= 2
    assert max(expectation_gaps(release_of(mech), mech, loss)) < 1e-9
    # the same check with a correction made for ε + 1 (the bins kept), or with every released value
    # read one bin up, is far off: the test can fail
    assert max(expectation_gaps(one_epsilon_off(mech), mech, loss)) > 1e-2
    shifted = np.roll(np.asarray(mech.bin_values), 1)
    T, v = mech.bin_transition(), np.asarray(mech.bin_values)
    rel = release_of(mech)
    off = sum(T[0, o] * loss_values(rel, loss, F, np.full(F.size, shifted[o])) for o in range(v.size))
    assert np.max(np.abs(off - true_loss(loss, F, v[0]))) > 1e-2


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_unbiased_cross_entropy_is_unbiased_for_two_classes(epsilon: float) -> None:
    mech = two_classes(epsilon)
    assert mech.m == 2
    assert max(expectation_gaps(release_of(mech), mech, "bce_unbiased")) < 1e-9
    assert max(expectation_gaps(one_epsilon_off(mech), mech, "bce_unbiased")) > 1e-2


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 3.0])
def test_the_forward_correction_is_right_at_the_true_probability(epsilon: float) -> None:
    """For every true P(class 1) = p: the released class is 1 with q = P(keep)·p + P(move)·(1 − p)
    (the mechanism's transition); at logit(p) the expected gradient is 0, the expected squared gradient
    is the Hessian reported, and the constant start is logit(p) when the released mean is q."""
    mech = two_classes(epsilon)
    T, v = mech.bin_transition(), np.asarray(mech.bin_values)
    one = int(np.flatnonzero(v == 1)[0])  # the bin that reports class 1

    def moments(release: Release, p: float) -> tuple[float, float, float]:
        q = p * T[one, one] + (1 - p) * T[1 - one, one]
        z = np.array([np.log(p / (1 - p))])
        g1, h = gradient_hessian(release, "bce", z, [1.0])
        g0, _ = gradient_hessian(release, "bce", z, [0.0])
        return float(q * g1[0] + (1 - q) * g0[0]), float(q * g1[0] ** 2 + (1 - q) * g0[0] ** 2), float(h[0])

    rel, wrong = release_of(mech), one_epsilon_off(mech)
    for p in (0.05, 0.3, 0.5, 0.8, 0.97):
        mean, second, hessian = moments(rel, p)
        assert abs(mean) < 1e-12 and second == pytest.approx(hessian, rel=1e-9)
        if p != 0.5:  # (at 1/2 every symmetric correction is right)
            assert abs(moments(wrong, p)[0]) > 1e-3
        q = p * T[one, one] + (1 - p) * T[1 - one, one]
        released = np.r_[np.ones(round(q * 1e6)), np.zeros(round((1 - q) * 1e6))]
        assert initial_score(rel, "bce", released) == pytest.approx(np.log(p / (1 - p)), abs=1e-4)


def four_classes(epsilon: float) -> PublishedMechanism:
    """RR-Top-k over four classes whose prior order is not theirs (bin j reports the j-th most likely):
    all four reported at ε = 3, three of them at ε = 1."""
    prior = np.array([0.1, 0.4, 0.2, 0.3])
    return optimize_rr_top_k(prior, epsilon).describe(prior=prior, epsilon_prior=0.1)


def released_distribution(mech: PublishedMechanism, truth: np.ndarray) -> np.ndarray:
    """P(released bin o) for true classes drawn from ``truth``: the mechanism's own transition (an
    unreported class's row is uniform over the bins)."""
    return np.asarray(truth @ mech.transition_matrix())


def categorical_moments(
    release: Release, z: np.ndarray, released: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At logits ``z`` (one row): the gradient's mean and mean square when bin ``o`` is released with
    probability ``released[o]`` and reads as ``values[o]``, and the Hessian reported."""
    mean, second = np.zeros(values.size), np.zeros(values.size)
    for o in range(values.size):
        g, h = gradient_hessian(release, "cross_entropy", z, [values[o]])
        mean, second = mean + released[o] * g[0], second + released[o] * g[0] ** 2
    return mean, second, h[0]


@pytest.mark.parametrize(("epsilon", "reported"), [(3.0, 4), (1.0, 3)])
def test_the_categorical_forward_correction_is_right_at_the_true_probabilities(
    epsilon: float, reported: int
) -> None:
    """For true class probabilities P: at logits log p*, p* = P on the reported classes (in ascending
    order) plus the unreported mass spread evenly over them, the expected gradient over the mechanism's
    released classes is 0, the expected squared gradient is the reported Fisher Hessian, and the start
    from the released shares is p*. A correction made for ε + 1 is off; so is one read a class over."""
    mech = four_classes(epsilon)
    assert mech.m == reported
    rel, wrong = release_of(mech), one_epsilon_off(mech)
    v = np.asarray(mech.bin_values)
    order = np.argsort(v)  # column j ↔ the j-th class in ascending order
    rng = np.random.default_rng(3)
    for truth in (np.array([0.1, 0.4, 0.2, 0.3]), *rng.dirichlet(np.ones(4), 4)):
        r = released_distribution(mech, truth)
        unreported = 1 - truth[v.astype(int)].sum()
        p = truth[v[order].astype(int)] + unreported / mech.m
        z = np.log(p)[None, :]
        mean, second, hessian = categorical_moments(rel, z, r, v)
        assert np.max(np.abs(mean)) < 1e-12 and second == pytest.approx(hessian, rel=1e-9)
        assert np.max(np.abs(categorical_moments(wrong, z, r, v)[0])) > 1e-3
        assert np.max(np.abs(categorical_moments(rel, z, r, np.roll(v, 1))[0])) > 1e-3
        released = np.repeat(v, np.round(r * 1e6).astype(int))
        start = initial_logits(rel, released)
        assert np.allclose(np.exp(start) / np.exp(start).sum(), p, atol=1e-5)


def test_the_categorical_loss_of_two_classes_is_the_binary_one() -> None:
    """Two logits (0, z) are the binary logit z: ``cross_entropy`` gives ``bce``'s loss, and the
    gradient in the second logit is ``bce``'s (an independent formula for two classes)."""
    rel = release_of(two_classes(1.0))
    for y in (0.0, 1.0):
        z = np.c_[np.zeros_like(F), F]
        values = np.full(F.size, y)
        assert np.allclose(loss_values(rel, "cross_entropy", z, values), loss_values(rel, "bce", F, values))
        gradient, _ = gradient_hessian(rel, "cross_entropy", z, values)
        assert np.allclose(gradient[:, 1], gradient_hessian(rel, "bce", F, values)[0])
        assert np.allclose(gradient.sum(axis=1), 0)  # adding a constant to every logit changes nothing


def test_sample_rows_make_any_loss_unbiased() -> None:
    """Absolute error is not affine in the label: the expanded rows and signed weights still give
    E[Σ_j w_j·|f − v_j| | bin i] = |f − v_i|, and scikit-learn fits with them."""
    mech = regression(1.0, "absolute")
    T, v = mech.bin_transition(), np.asarray(mech.bin_values)
    rel = release_of(mech)
    for i in range(v.size):
        expected = np.zeros_like(F)
        for o in range(v.size):
            rows, targets, weights = sample_rows(rel, [v[o]])
            expected += T[i, o] * np.sum(weights[:, None] * np.abs(F[None, :] - targets[:, None]), axis=0)
        assert np.allclose(expected, np.abs(F - v[i]), atol=1e-9)
    X = np.linspace(0, 1, 400)[:, None]
    released = v[np.arange(400) % v.size]
    rows, targets, weights = sample_rows(rel, released)
    model = HistGradientBoostingRegressor(loss="absolute_error", max_iter=5).fit(
        X[rows], targets, sample_weight=weights
    )
    assert np.all(np.isfinite(model.predict(X)))


@pytest.mark.parametrize("loss", ["squared", "poisson", "bce", "bce_unbiased"])
def test_the_pytorch_module_computes_the_same_losses_and_gradients(loss: str) -> None:
    mech = two_classes(1.0) if loss.startswith("bce") else regression(2.0, loss)
    rel = release_of(mech)
    v = np.asarray(mech.bin_values)
    released = np.tile(v, F.size)
    raw = np.repeat(F, v.size)
    scores = torch.tensor(raw, dtype=torch.float64, requires_grad=True)
    rows = ReleaseLoss(rel, loss, reduction="none")(scores, torch.tensor(released))
    assert np.allclose(rows.detach().numpy(), loss_values(rel, loss, raw, released), rtol=1e-12, atol=1e-12)
    rows.sum().backward()
    assert scores.grad is not None
    gradient, _ = gradient_hessian(rel, loss, raw, released)
    scale = 2.0 if loss == "squared" else 1.0  # the objectives report half the squared error's gradient
    assert np.allclose(scores.grad.numpy(), scale * gradient, rtol=1e-10, atol=1e-12)
    mean = ReleaseLoss(rel, loss)(scores, torch.tensor(released))
    assert mean.item() == pytest.approx(rows.mean().item())


def test_the_pytorch_module_computes_the_categorical_loss_and_gradient() -> None:
    mech = four_classes(1.0)
    rel = release_of(mech)
    v = np.asarray(mech.bin_values)
    released = np.tile(v, 5)
    raw = np.random.default_rng(5).normal(0, 2, (released.size, mech.m))
    scores = torch.tensor(raw, requires_grad=True)
    rows = ReleaseLoss(rel, "cross_entropy", reduction="none")(scores, torch.tensor(released))
    assert np.allclose(rows.detach().numpy(), loss_values(rel, "cross_entropy", raw, released), atol=1e-12)
    rows.sum().backward()
    assert scores.grad is not None
    gradient, _ = gradient_hessian(rel, "cross_entropy", raw, released)
    assert np.allclose(scores.grad.numpy(), gradient, rtol=1e-10, atol=1e-12)
    with pytest.raises(ReleasedValuesError, match="rows of 3 logits"):
        ReleaseLoss(rel, "cross_entropy")(scores[:, :2], torch.tensor(released))


def _synthetic(mech: PublishedMechanism, n: int = 4_000) -> tuple[np.ndarray, np.ndarray]:
    """Features and released values of bins drawn by the mechanism's transition (test data, seeded)."""
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 1, (n, 3))
    true_bins = np.minimum((X[:, 0] * mech.m).astype(int), mech.m - 1)
    T = mech.bin_transition()
    released = np.array([rng.choice(mech.m, p=T[b]) for b in true_bins])
    return X, np.asarray(mech.bin_values)[released]


def test_lightgbm_boosts_with_the_objective_exactly_as_with_the_unbiased_targets() -> None:
    """The squared objective's gradient and Hessian are those of half the squared error on ỹ: both
    LightGBM interfaces grow the trees the built-in L2 objective grows on ỹ (from the same start)."""
    mech = regression(1.0)
    rel = release_of(mech)
    X, released = _synthetic(mech)
    params: dict[str, Any] = {"n_estimators": 20, "learning_rate": 0.1, "verbose": -1, "num_leaves": 7}
    start = initial_score(rel, "squared", released)
    custom = lightgbm.LGBMRegressor(objective=Objective(rel, "squared"), **params).fit(
        X, released, init_score=np.full(len(X), start)
    )
    builtin = lightgbm.LGBMRegressor(objective="l2", boost_from_average=False, **params).fit(
        X, unbiased_targets(rel, released), init_score=np.full(len(X), start)
    )
    assert np.allclose(custom.predict(X), builtin.predict(X), atol=1e-6)
    native = lightgbm.train(
        {"objective": Objective(rel, "squared"), "learning_rate": 0.1, "verbose": -1, "num_leaves": 7},
        lightgbm.Dataset(X, released, init_score=np.full(len(X), start)),
        num_boost_round=20,
    )
    assert np.allclose(native.predict(X), builtin.predict(X), atol=1e-6)  # (neither adds init_score)


def test_xgboost_boosts_with_the_objective_in_both_interfaces() -> None:
    mech = regression(1.0)
    rel = release_of(mech)
    X, released = _synthetic(mech)
    start = initial_score(rel, "squared", released)
    params: dict[str, Any] = {"max_depth": 3, "learning_rate": 0.1, "base_score": start}
    builtin = xgboost.XGBRegressor(objective="reg:squarederror", n_estimators=20, **params).fit(
        X, unbiased_targets(rel, released)
    )
    custom = xgboost.XGBRegressor(objective=Objective(rel, "squared"), n_estimators=20, **params).fit(
        X, released
    )
    assert np.allclose(custom.predict(X), builtin.predict(X), atol=1e-5)
    booster = xgboost.train(
        {"max_depth": 3, "learning_rate": 0.1, "base_score": start},
        xgboost.DMatrix(X, label=released),
        num_boost_round=20,
        obj=Objective(rel, "squared"),
    )
    assert np.allclose(booster.predict(xgboost.DMatrix(X)), builtin.predict(X), atol=1e-5)


def test_bad_descriptions_and_values_are_named() -> None:
    mech = regression(1.0)
    good = description(mech)
    with pytest.raises(UnknownMechanismError, match="'laplace' is not one labeldp_model knows"):
        Release.from_description({**good, "mechanism": {**good["mechanism"], "kind": "laplace"}})
    with pytest.raises(ReleaseFormatError, match="format version 3"):
        Release.from_description({**good, "format_version": 3})
    # version 2 is a feature-aware release's, and states its groups (and only it does)
    with pytest.raises(ReleaseFormatError, match="group_count"):
        Release.from_description({**good, "format_version": 2})
    with pytest.raises(ReleaseFormatError, match="group_count"):
        Release.from_description({**good, "group_count": 4})
    with pytest.raises(ReleaseFormatError, match="keep"):
        Release.from_description({**good, "correction": {**good["correction"], "keep": 0.2, "move": 0.9}})
    with pytest.raises(ReleaseFormatError, match="not JSON"):
        Release.from_json(b"{")
    with pytest.raises(ReleaseFormatError, match=r"no 'labeldp\.training_set'"):
        Release.from_metadata({b"pandas": b"{}"})
    rel = release_of(mech)
    with pytest.raises(ReleasedValuesError, match="not bin values"):
        unbiased_targets(rel, [0.123])
    with pytest.raises(ReleasedValuesError, match="capped rows"):
        unbiased_targets(rel, [float("nan")])
    with pytest.raises(ReleasedValuesError, match="two classes 0 and 1"):
        ReleaseLoss(rel, "bce")
    with pytest.raises(ReleasedValuesError, match="loss must be one of"):
        Objective(rel, "hinge")
    with pytest.raises(ReleasedValuesError, match="not bin values"):
        ReleaseLoss(rel, "squared")(torch.zeros(1), torch.tensor([0.123]))


def test_a_new_mechanism_kind_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A randomizer whose released values need no correction, added as one entry of ``KINDS``: every
    correction downstream becomes the identity."""
    mech = regression(1.0)
    monkeypatch.setitem(
        KINDS,
        "unbiased",
        lambda d: randomized_response({"correction": {**d["correction"], "keep": 1.0, "move": 0.0}}),
    )
    rel = Release.from_description(
        {**description(mech), "mechanism": {**description(mech)["mechanism"], "kind": "unbiased"}}
    )
    v = np.asarray(mech.bin_values)
    assert np.array_equal(unbiased_targets(rel, v), v)
    assert np.allclose(loss_values(rel, "squared", F[: v.size], v), (F[: v.size] - v) ** 2)


def _classes(mech: PublishedMechanism, n: int = 2_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, true classes (a quarter of the first feature's range each) and released values drawn
    by the mechanism's transition (test data, seeded)."""
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 1, (n, 3))
    truth = np.minimum((X[:, 0] * 4).astype(int), 3)
    T = mech.transition_matrix()
    released = np.array([rng.choice(mech.m, p=T[c]) for c in truth])
    return X, truth, np.asarray(mech.bin_values)[released]


def _p_true(raw: np.ndarray, truth: np.ndarray, mech: PublishedMechanism) -> float:
    """The mean probability the model gives each row's true class (rows of a reported class)."""
    classes = np.sort(np.asarray(mech.bin_values))
    p = np.exp(raw - raw.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    inside = np.isin(truth, classes)
    return float(p[inside][np.arange(int(inside.sum())), np.searchsorted(classes, truth[inside])].mean())


@pytest.mark.parametrize("epsilon", [3.0, 1.0])
def test_boosters_learn_the_true_classes_with_the_categorical_objective(epsilon: float) -> None:
    """Both native interfaces boost ``m`` logits per row in the package's column order: the corrected
    models put more probability on the true class than LightGBM's own multi-class objective on the
    released classes, which learns the released ones (about ``keep``). LightGBM's classifier works
    where the classes are 0…m−1 (all four reported) and is refused with a reason where they are not."""
    mech = four_classes(epsilon)
    rel = release_of(mech)
    X, truth, released = _classes(mech)
    start = np.tile(initial_logits(rel, released), (len(X), 1))
    common = {"num_class": mech.m, "num_leaves": 7, "learning_rate": 0.1, "verbose": -1}
    booster = lightgbm.train(
        {**common, "objective": Objective(rel, "cross_entropy")},
        lightgbm.Dataset(X, released, init_score=start),
        num_boost_round=30,
    )
    corrected = _p_true(booster.predict(X, raw_score=True) + start, truth, mech)
    plain = lightgbm.train(
        {**common, "objective": "multiclass"},
        lightgbm.Dataset(X, np.searchsorted(np.sort(np.asarray(mech.bin_values)), released)),
        num_boost_round=30,
    )
    uncorrected = _p_true(np.log(plain.predict(X)), truth, mech)
    assert uncorrected == pytest.approx(rel.correction.keep, abs=0.05)
    assert corrected > uncorrected + (1 - uncorrected) / 3  # a third of the way from keep to certainty
    xgb = xgboost.train(
        {"num_class": mech.m, "max_depth": 3, "learning_rate": 0.1, "disable_default_eval_metric": 1},
        xgboost.DMatrix(X, label=released, base_margin=start),
        num_boost_round=30,
        obj=Objective(rel, "cross_entropy"),
    )
    raw = xgb.predict(xgboost.DMatrix(X, base_margin=start), output_margin=True)
    assert _p_true(raw, truth, mech) > uncorrected + (1 - uncorrected) / 3
    classifier = lightgbm.LGBMClassifier(
        objective=Objective(rel, "cross_entropy"), n_estimators=30, num_leaves=7, verbose=-1
    )
    if mech.m == 4:  # classes 0…3: the classifier's ranks are the classes
        classifier.fit(X, released, init_score=start)
        assert _p_true(classifier.predict(X, raw_score=True) + start, truth, mech) == pytest.approx(corrected)
    else:
        with pytest.raises(ReleasedValuesError, match=r"lightgbm\.train or xgboost\.train"):
            classifier.fit(X, released, init_score=start)
