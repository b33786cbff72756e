"""Learning from randomized-response bins (docs/math.md §6): corrections derived from the mechanism.

A release's bins are randomized response over ``m`` outputs, so the transition between a label's true
bin and its output bin is ``T = a·I + b·11ᵀ`` with ``a = P(keep) − P(move)`` and ``b = P(move)``,
taken from the mechanism's exact integer thresholds (``KeepThreshold``), never re-derived here. Hence,
for an observed bin ``o`` of an example whose binned true label is ``Φ(y)``:

- ``E[ŷ_o | y] = a·Φ(y) + b·Σ_j ŷ_j``: a model fit to the noisy values estimates that affine image of
  ``E[Φ(y) | x]``, and ``f ↦ (f − b·Σ_j ŷ_j)/a`` undoes it (``affine``);
- ``ỹ_o = (ŷ_o − b·Σ_j ŷ_j)/a`` has ``E[ỹ_o | y] = Φ(y)`` (``unbiased`` targets);
- ``ℓ̃(f, o) = [ℓ(f, ŷ_o) − b·Σ_j ℓ(f, ŷ_j)]/a`` has ``E[ℓ̃ | y] = ℓ(f, Φ(y))`` for any loss: the
  unbiased estimate of the loss against the binned true labels used in evaluation.

RR-Top-k reports only ``k`` of the classes; a label outside them gets a uniform bin. With ``π`` the
probability that a label is unreported, ``P(bin j | x) = a·q_j(x) + b·(1 − π) + π/k`` where ``q_j`` is
the probability of the reported class ``j``; ``π`` is estimated by the unreported mass of the noisy
prior the release carries (``outside_mass``). A 0-1 loss estimate then adds ``π/k``: for an unreported
label the estimator above averages to ``(k − 1)/k`` while every prediction (a reported class) is wrong.

The corrections a trained model applies when it predicts (``affine_correct``, ``class_probabilities``)
are ``labeldp_model.BinsCorrection``'s: an exported model holds that object (``BinsNoise.correction``),
so loading it needs neither labeldp nor its mechanisms.

An unbiased release (``UnbiasedNoise``, docs/math.md §15) needs no correction: its outputs are
targets whose mean is the label. A least-squares fit to them estimates ``E[y | x]``; predictions are
clipped into the labels' public range (for the Poisson loss, above ``POISSON_FLOOR·(hi − lo)``, where the
loss is finite). Its validation loss against the true labels is estimated without bias too: the
Poisson loss is affine in its target, and for the squared loss ``f² − 2f·z + h(z)`` with ``h`` the
least-norm solution of ``Σ_z P(z | y)·h(z) = y²`` for every support point — where one exists: the
optimal randomizer's rows are often rank-deficient (41 points at ε = 1: rank 40), and then
``h(z) = z² − v̄``, ``v̄`` the prior-averaged ``Var(z | y)``, keeps the model's part ``f² − 2f·z``
unbiased for every label and the whole unbiased for labels drawn from the release's prior.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms.losses import Loss
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.randomized_response import KeepThreshold
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector
from labeldp_model import BinsCorrection

Array = npt.NDArray[np.float64]


def _zero_one(f: Array, y: Array) -> Array:
    return np.not_equal(f, y).astype(np.float64)


@dataclass(frozen=True)
class BinsNoise:
    """The noise model of a release's bins: ``m`` bin values and the exact keep/move probabilities."""

    bin_values: Array
    epsilon: float
    keep: float  # P(output = true bin)
    move: float  # P(output = one particular other bin)
    outside_mass: float = 0.0  # RR-Top-k: the noisy prior's mass of unreported classes (π)

    @classmethod
    def of(cls, bin_values: list[float] | tuple[float, ...] | Array, epsilon: float) -> BinsNoise:
        """RR over ``len(bin_values)`` bins at ``epsilon``, with the integer thresholds' probabilities."""
        values = finite_vector(bin_values, "bin_values")
        eps = check_epsilon(epsilon)
        threshold = KeepThreshold.for_epsilon(eps, int(values.size))
        return cls(values, eps, threshold.keep_probability, threshold.move_probability)

    @classmethod
    def of_published(cls, mechanism: PublishedMechanism) -> BinsNoise:
        if mechanism.kind == "unbiased":  # outputs, not bins: ``release_noise`` picks ``UnbiasedNoise``
            raise ParameterError(
                "the unbiased randomizer is not randomized response over bins: it has no keep and move "
                "probabilities (read it with release_noise or UnbiasedNoise.of_published)",
                "mechanism",
            )
        noise = cls.of(mechanism.bin_values, mechanism.epsilon_randomize)
        outside = float(sum(p for p, b in zip(mechanism.prior, mechanism.support_bins, strict=True) if b < 0))
        return cls(noise.bin_values, noise.epsilon, noise.keep, noise.move, outside)

    @property
    def m(self) -> int:
        return int(self.bin_values.size)

    @property
    def span(self) -> tuple[float, float]:
        """Where a model's estimate of the binned label's mean must lie: between the lowest and the
        highest bin value (what a corrected prediction is clipped into)."""
        return self.correction.span

    @property
    def a(self) -> float:
        return self.keep - self.move

    @property
    def b(self) -> float:
        return self.move

    def transition(self) -> Array:
        return self.a * np.eye(self.m) + self.b

    @property
    def correction(self) -> BinsCorrection:
        """What a trained model keeps to predict (its debiasing step's state): the bin values and the
        keep/move probabilities, as ``labeldp_model.BinsCorrection`` — an exported model then needs
        only that small package, never this one."""
        return BinsCorrection(self.bin_values, self.keep, self.move, self.outside_mass)

    def class_probabilities(self, noisy: Array) -> Array:
        """``P(reported class j | x)`` from a model of ``P(output bin j | x)`` (rows), clipped at 0 and
        scaled to the reported mass ``1 − π`` (``BinsCorrection.class_probabilities``)."""
        self._check_invertible()
        return self.correction.class_probabilities(noisy)

    def zero_one_error(self, predicted_bins: npt.NDArray[np.integer], bins: npt.NDArray[np.integer]) -> float:
        """An estimate of the 0-1 error against the true labels: unbiased for labels inside the
        reported classes, plus ``π/k`` for the unreported ones (see the module docstring)."""
        inside = self.unbiased_loss(self.bin_values[predicted_bins], bins, _zero_one)
        return float(np.mean(inside)) + (self.outside_mass / self.m if self.m > 1 else self.outside_mass)

    def _check_invertible(self) -> None:
        if self.m > 1 and not self.a > 0:
            raise ParameterError(
                "the release carries no information about the labels (ε too small)", "epsilon"
            )

    def affine_correct(self, predictions: Array) -> Array:
        """Map a model of ``E[ŷ | x]`` to an estimate of ``E[Φ(y) | x]``
        (``BinsCorrection.affine_correct``)."""
        self._check_invertible()
        return self.correction.affine_correct(predictions)

    def unbiased_targets(self, bins: npt.NDArray[np.integer]) -> Array:
        """``ỹ_o``: regression targets whose conditional mean is the binned true label."""
        if self.m == 1:
            return self.bin_values[np.asarray(bins)]
        self._check_invertible()
        values = (self.bin_values - self.b * self.bin_values.sum()) / self.a
        return values[np.asarray(bins)]

    def unbiased_loss(
        self, predictions: Array, bins: npt.NDArray[np.integer], loss: Callable[[Array, Array], Array]
    ) -> Array:
        """``ℓ̃(f, o)`` per example: unbiased for ``ℓ(f, Φ(y))``."""
        f = np.asarray(predictions, dtype=np.float64)
        observed = loss(f, self.bin_values[np.asarray(bins)])
        if self.m == 1:
            return observed
        self._check_invertible()
        every_bin = loss(f[:, None], self.bin_values[None, :]).sum(axis=1)
        return (observed - self.b * every_bin) / self.a


POISSON_FLOOR = 1e-3  # an unbiased Poisson model's predictions stay above this share of hi − lo


@dataclass(frozen=True)
class UnbiasedNoise:
    """The noise model of an unbiased release: its outputs, and the range its predictions stay in."""

    bin_values: Array  # the outputs, increasing (they reach beyond [lower, upper])
    epsilon: float
    lower: float
    upper: float
    square_estimator: Array  # h(z_j): E[h(z) | y] = y² at every support point, or under the prior
    outside_mass: float = 0.0  # no label is left unreported (the classifier interface's π)

    @classmethod
    def of_published(cls, mechanism: PublishedMechanism) -> UnbiasedNoise:
        support = np.asarray(mechanism.support, dtype=np.float64)
        lo, hi = float(support[0]), float(support[-1])
        if mechanism.loss == "poisson":
            lo = max(lo, POISSON_FLOOR * (hi - lo))
        transition = np.asarray(mechanism.transition_matrix(), dtype=np.float64)
        z = np.asarray(mechanism.bin_values, dtype=np.float64)
        square = np.asarray(np.linalg.lstsq(transition, support**2, rcond=None)[0], dtype=np.float64)
        solved = np.allclose(
            transition @ square, support**2, rtol=0.0, atol=1e-9 * max(1.0, hi * hi, lo * lo)
        )
        if not solved or np.abs(square).max() > 1e3 * max(1.0, float(np.max(z**2))):
            # y² is not a function the rows can estimate (they are rank-deficient, or nearly: the
            # least-norm solution then runs to 10¹⁶, or solves with entries of 10¹⁴ — a variance no
            # validation split averages away): estimate it under the release's prior instead
            prior = np.asarray(mechanism.prior, dtype=np.float64)
            variance = float(prior @ (transition @ z**2 - support**2)) / float(prior.sum())
            square = z**2 - variance
        return cls(z, mechanism.epsilon_randomize, lo, hi, square)

    @property
    def m(self) -> int:
        return int(self.bin_values.size)

    @property
    def span(self) -> tuple[float, float]:
        """Where a model's estimate of the label's mean must lie: the labels' public range."""
        return self.lower, self.upper

    def affine_correct(self, predictions: Array) -> Array:
        """Nothing to undo: the predictions, clipped into the labels' range."""
        return np.clip(np.asarray(predictions, dtype=np.float64), self.lower, self.upper)

    def unbiased_targets(self, bins: npt.NDArray[np.integer]) -> Array:
        """The outputs themselves: their mean is the label."""
        return self.bin_values[np.asarray(bins)]

    def unbiased_loss(
        self, predictions: Array, bins: npt.NDArray[np.integer], loss: Callable[[Array, Array], Array]
    ) -> Array:
        """Per example, an unbiased estimate of the loss against the true label (module docstring)."""
        f = np.asarray(predictions, dtype=np.float64)
        z = self.bin_values[np.asarray(bins)]
        name = loss.name if isinstance(loss, Loss) else getattr(loss, "__name__", "")
        if name == "poisson":  # affine in the target: the plain loss is unbiased
            return np.asarray(loss(f, z), dtype=np.float64)
        if name == "squared":
            return f * f - 2.0 * f * z + self.square_estimator[np.asarray(bins)]
        raise ParameterError(
            f"an unbiased release serves the squared and poisson losses, not {name!r}", "loss"
        )


ReleaseNoise = BinsNoise | UnbiasedNoise


def release_noise(mechanism: PublishedMechanism) -> ReleaseNoise:
    """The noise model a trainer reads off a published mechanism."""
    if mechanism.kind == "unbiased":
        return UnbiasedNoise.of_published(mechanism)
    return BinsNoise.of_published(mechanism)


def target_error(mechanism: PublishedMechanism) -> float:
    """``E[(ỹ_o − y)²]`` for a label ``y`` drawn from the mechanism's prior: how far, on average, a row's
    unbiased target (``BinsNoise.unbiased_targets``) lies from its true label — the randomization's
    variance plus the binning error. Exact, in O(k): a point of bin ``j`` keeps with ``keep`` and moves
    to each other bin with ``move``, an unreported point (RR-Top-k) lands uniformly. An unbiased
    release's: the prior-weighted variance of its outputs (its objective), from its rows."""
    s = np.asarray(mechanism.support, dtype=np.float64)
    p = np.asarray(mechanism.prior, dtype=np.float64)
    if mechanism.kind == "unbiased":  # its outputs are the targets: their variance around each label
        z = np.asarray(mechanism.bin_values, dtype=np.float64)
        rows = np.asarray(mechanism.transition_matrix(), dtype=np.float64)
        return float(np.dot(p / p.sum(), rows @ z**2 - 2 * s * (rows @ z) + s**2))
    noise = BinsNoise.of_published(mechanism)
    u = noise.unbiased_targets(np.arange(noise.m))
    bins = np.asarray(mechanism.support_bins, dtype=np.int64)
    every = (u**2).sum() - 2 * s * u.sum() + noise.m * s**2  # Σ_o (u_o − s)², per support point
    reported = bins >= 0
    own = np.where(reported, (u[np.maximum(bins, 0)] - s) ** 2, 0.0)
    per_point = np.where(reported, (noise.keep - noise.move) * own + noise.move * every, every / noise.m)
    return float(np.dot(p / p.sum(), per_point))


@dataclass(frozen=True)
class GroupedNoise:
    """The noise of a feature-aware release, row by row: each group's mechanism, and the release's own
    for the rows without a group (``-1``). A model cannot undo a mixture of transitions after the
    fact, so each row is debiased by its own mechanism before fitting: its target is its own unbiased
    target (mean: its binned true label) and its weight ``1 / target_error`` of its mechanism,
    normalized to mean 1 over the rows fitted — a noisier group counts less."""

    noises: tuple[ReleaseNoise, ...]  # the groups', then the release's own (index G)
    errors: Array  # each one's ``target_error``

    @classmethod
    def of_published(cls, own: PublishedMechanism, groups: tuple[PublishedMechanism, ...]) -> GroupedNoise:
        """``groups`` of a feature-aware release are RR-on-Bins (or RR-Top-k); a model trained on several
        releases lists theirs too, and an unbiased release among them is a mechanism like the others
        (its target: the output itself)."""
        mechanisms = (*groups, own)
        return cls(
            tuple(release_noise(m) for m in mechanisms),
            np.array([target_error(m) for m in mechanisms], dtype=np.float64),
        )

    @property
    def count(self) -> int:
        """The number of groups."""
        return len(self.noises) - 1

    @property
    def span(self) -> tuple[float, float]:
        """Where a row's estimate can lie, whichever mechanism it had: the widest of theirs."""
        spans = [n.span for n in self.noises]
        return min(lo for lo, _ in spans), max(hi for _, hi in spans)

    def _index(self, groups: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
        g = np.asarray(groups, dtype=np.int64)
        if g.size and (g.min() < -1 or g.max() >= self.count):
            raise ParameterError(f"groups must lie in -1..{self.count - 1}", "groups")
        return np.where(g < 0, self.count, g)

    def _per_row(
        self, bins: npt.NDArray[np.integer], groups: npt.NDArray[np.integer], value: Callable[..., Array]
    ) -> Array:
        at, b = self._index(groups), np.asarray(bins, dtype=np.int64)
        out = np.empty(b.size, dtype=np.float64)
        for j in np.unique(at):
            rows = at == j
            out[rows] = value(self.noises[j], b[rows], rows)
        return out

    def informative(
        self, bins: npt.NDArray[np.integer], groups: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]:
        """Rows with label information: every grouped row, and the others below the release's capped
        code (a user-level release's examples over the bound have no group)."""
        return (np.asarray(groups) >= 0) | (np.asarray(bins) < self.noises[-1].m)

    def noisy_values(self, bins: npt.NDArray[np.integer], groups: npt.NDArray[np.integer]) -> Array:
        return self._per_row(bins, groups, lambda n, b, _: n.bin_values[b])

    def unbiased_targets(self, bins: npt.NDArray[np.integer], groups: npt.NDArray[np.integer]) -> Array:
        """Each row's ``BinsNoise.unbiased_targets`` under its own mechanism."""
        return self._per_row(bins, groups, lambda n, b, _: n.unbiased_targets(b))

    def precision(self, groups: npt.NDArray[np.integer]) -> Array:
        """``1 / target_error`` of each row's mechanism, not normalized (every row 1 when no mechanism
        has any error); the errors are floored at 10⁻¹² of the largest."""
        errors = self.errors[self._index(groups)]
        top = float(self.errors.max()) if self.errors.size else 0.0
        if not top > 0:
            return np.ones(errors.size)
        return 1.0 / np.maximum(errors, 1e-12 * top)

    def relative_precision(self, groups: npt.NDArray[np.integer]) -> Array:
        """``precision`` relative to the release's own mechanism (its rows weigh 1): a weight that
        does not depend on which rows are at hand (an export's row groups)."""
        own = float(self.precision(np.array([-1]))[0])
        return self.precision(groups) / own

    def weights(self, groups: npt.NDArray[np.integer]) -> Array:
        """``precision`` normalized to mean 1 over these rows: the sample weights of a fit."""
        inverse = self.precision(groups)
        return inverse / inverse.mean() if inverse.size else inverse

    def unbiased_loss(
        self,
        predictions: Array,
        bins: npt.NDArray[np.integer],
        groups: npt.NDArray[np.integer],
        loss: Callable[[Array, Array], Array],
    ) -> Array:
        """Each row's ``BinsNoise.unbiased_loss`` under its own mechanism: unbiased for ``ℓ(f, Φ_g(y))``."""
        f = np.asarray(predictions, dtype=np.float64)
        return self._per_row(bins, groups, lambda n, b, rows: n.unbiased_loss(f[rows], b, loss))
