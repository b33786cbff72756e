"""The two phases of training with semi-sensitive features (and the non-private reference).

Phase 1 (label DP) is post-processing of a randomized-response release: ordinary training of the
truncated model on the noisy labels with the debiased loss, which needs no randomness beyond the
release. Phase 2 (DP-SGD) is the only step here that touches the semi-sensitive features and the true
labels; every random choice in it — which examples join a step (Poisson sampling) and the Gaussian
noise — comes from ``SecureRandom``. Opacus computes the per-example gradients and clips them; its
optimizer's noise is replaced by ours (its own generator is not a CSPRNG).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch.nn import functional

from labeldp.mechanisms.debias import BinsNoise
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.validation import ParameterError
from labeldp.semi_sensitive.accounting import DpSgdSchedule
from labeldp.semi_sensitive.model import TwoTower

FloatArray = npt.NDArray[np.float64]


def debiased_bce(logits: torch.Tensor, noisy: torch.Tensor, noise: BinsNoise) -> torch.Tensor:
    """The paper's debiased loss per example: ``[ℓ(f, ŷ) − p·Σ_y ℓ(f, y)] / (1 − 2p)``.

    With binary RR (``keep = 1 − p``, ``move = p``) this is ``BinsNoise``'s unbiased loss for the
    log loss; its expectation over the randomization equals the loss against the true label."""
    if noise.m != 2:
        raise ParameterError("the debiased log loss needs a binary release", "labels")
    observed = functional.binary_cross_entropy_with_logits(logits, noisy, reduction="none")
    both = functional.softplus(-logits) + functional.softplus(logits)  # ℓ(f, 1) + ℓ(f, 0)
    return (observed - noise.b * both) / noise.a


@dataclass(frozen=True)
class Hyper:
    """Optimiser settings of one phase (Adam; the paper's choices are in docs/semi-sensitive.md)."""

    epochs: float = 3.0
    batch_size: int = 256
    learning_rate: float = 1e-3

    def __post_init__(self) -> None:
        if not (0 < self.epochs <= 1000 and 1 <= self.batch_size <= 1 << 20 and 0 < self.learning_rate < 10):
            raise ParameterError("epochs, batch_size or learning_rate out of range", "training")


def _tensor(x: FloatArray) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32))


def _batches(n: int, batch_size: int, epochs: float) -> Iterator[torch.Tensor]:
    """Shuffled mini-batches for non-private training (torch's generator: no privacy depends on it)."""
    steps = max(1, round(epochs * n / batch_size))
    order = torch.randperm(n)
    at = 0
    for _ in range(steps):
        if at + batch_size > n:
            order, at = torch.randperm(n), 0
        yield order[at : at + batch_size]
        at += batch_size


def train_truncated(
    model: TwoTower, x_non: FloatArray, noisy_labels: npt.NDArray[np.integer], noise: BinsNoise, hyper: Hyper
) -> TwoTower:
    """Phase 1: the truncated model on the features party's columns and a binary RR release."""
    xs, ys = _tensor(x_non), _tensor(np.asarray(noisy_labels, dtype=np.float64))
    optimizer = torch.optim.Adam(model.parameters(), lr=hyper.learning_rate)
    model.train()
    for idx in _batches(len(ys), hyper.batch_size, hyper.epochs):
        optimizer.zero_grad()
        debiased_bce(model.truncated(xs[idx]), ys[idx], noise).mean().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return model


def train_full(
    model: TwoTower, x_non: FloatArray, x_semi: FloatArray, labels: npt.NDArray[np.integer], hyper: Hyper
) -> TwoTower:
    """The non-private reference: the full model on true labels (never part of a release)."""
    xn, xs, ys = _tensor(x_non), _tensor(x_semi), _tensor(np.asarray(labels, dtype=np.float64))
    optimizer = torch.optim.Adam(model.parameters(), lr=hyper.learning_rate)
    model.train()
    for idx in _batches(len(ys), hyper.batch_size, hyper.epochs):
        optimizer.zero_grad()
        functional.binary_cross_entropy_with_logits(model(xn[idx], xs[idx]), ys[idx]).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return model


class SecureNoiseOptimizer(DPOptimizer):  # type: ignore[misc]  # opacus is untyped
    """Opacus's DP optimizer with its Gaussian noise drawn from ``SecureRandom``."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, rng: SecureRandom, **kwargs: object) -> None:
        super().__init__(optimizer, **kwargs)
        self._rng = rng

    def add_noise(self) -> None:
        std = float(self.noise_multiplier * self.max_grad_norm)
        for p in self.params:
            summed = p.summed_grad
            noise = self._rng.standard_normal(summed.numel()) * std
            p.grad = (summed + torch.as_tensor(noise, dtype=summed.dtype).view_as(summed)).view_as(p)


@dataclass(frozen=True)
class DpSgdRun:
    """What phase 2 did, for the guarantee the model message carries."""

    schedule: DpSgdSchedule
    noise_multiplier: float
    clip_norm: float
    steps_with_examples: int


def train_dpsgd(
    model: TwoTower,
    x_non: FloatArray,
    x_semi: FloatArray,
    labels: npt.NDArray[np.integer],
    *,
    schedule: DpSgdSchedule,
    noise_multiplier: float,
    clip_norm: float,
    learning_rate: float,
    rng: SecureRandom | None = None,
) -> DpSgdRun:
    """Phase 2: DP-SGD on every feature and the true labels, exactly ``schedule.steps`` steps.

    The caller calibrates ``noise_multiplier`` to the charged (ε₂, δ) *before* this runs and charges
    the budget; nothing random happens before this function's first draw."""
    if not (clip_norm > 0 and np.isfinite(clip_norm)):
        raise ParameterError("clip_norm must be a finite number > 0", "clip_norm")
    if not noise_multiplier >= 0:
        raise ParameterError("noise_multiplier must be >= 0", "noise_multiplier")
    source = rng or SecureRandom()
    xn, xs = _tensor(x_non), _tensor(x_semi)
    ys = _tensor(np.asarray(labels, dtype=np.float64))
    n = len(ys)
    expected = max(1, round(schedule.sampling_rate * n))
    private = GradSampleModule(model, loss_reduction="mean")
    optimizer = SecureNoiseOptimizer(
        torch.optim.Adam(private.parameters(), lr=learning_rate),
        rng=source,
        noise_multiplier=noise_multiplier,
        max_grad_norm=clip_norm,
        expected_batch_size=expected,
        loss_reduction="mean",
    )
    private.train()
    nonempty = 0
    for _ in range(schedule.steps):
        chosen = torch.as_tensor(np.flatnonzero(source.uniform01(n) < schedule.sampling_rate))
        optimizer.zero_grad(set_to_none=True)
        if chosen.numel():
            nonempty += 1
            loss = functional.binary_cross_entropy_with_logits(private(xn[chosen], xs[chosen]), ys[chosen])
        else:  # an empty Poisson batch is still a step: it releases pure noise
            loss = private(xn[:0], xs[:0]).sum()
        with warnings.catch_warnings():  # Opacus's hooks on inputs that need no gradient: expected
            warnings.filterwarnings("ignore", message="Full backward hook", category=UserWarning)
            loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    private.to_standard_module()
    return DpSgdRun(schedule, noise_multiplier, clip_norm, nonempty)


def predict(model: TwoTower, x_non: FloatArray, x_semi: FloatArray | None = None) -> FloatArray:
    """Probabilities from the full model, or from the truncated one when ``x_semi`` is None."""
    model.eval()
    with torch.no_grad():
        xn = _tensor(x_non)
        logits = model.truncated(xn) if x_semi is None else model(xn, _tensor(x_semi))
        return torch.sigmoid(logits).double().numpy()
