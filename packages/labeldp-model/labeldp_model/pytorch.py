"""The corrected losses of ``labeldp_model.losses`` as a PyTorch module (``pip install
labeldp-model[torch]``): train a network on a release's released values as if on the true labels.

    criterion = ReleaseLoss(release, "squared")       # or "poisson" (log rate), "bce" (logit)
    loss = criterion(model(x).squeeze(-1), released_value)
    loss.backward()

    criterion = ReleaseLoss(release, "cross_entropy")  # m classes: model(x) gives n × m logits
    loss = criterion(model(x), released_value)        # column j: the j-th class in ascending order

The same formulas as ``losses`` (one definition of each correction, tested against each other), in
torch operations so that autograd differentiates them: for ``squared``, ``poisson`` and
``bce_unbiased`` each row's loss is an unbiased estimate of the loss on its true bin value; ``bce`` and
``cross_entropy`` are the forward correction, smallest where the network's probabilities are the true
class probabilities.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleasedValuesError
from labeldp_model.losses import _in_unit_interval, binary, classes, corrected_loss
from labeldp_model.release import Release
from labeldp_model.targets import FLOAT32_ROUNDING, correction_of


class ReleaseLoss(nn.Module):
    """``loss``: ``squared`` (raw = the prediction), ``poisson`` (raw = the log rate), ``bce`` (forward
    correction; raw = the logit of class 1), ``bce_unbiased`` or ``cross_entropy`` (forward correction
    for ``m`` classes; raw = ``n × m`` logits, one column per class in ascending order); ``reduction``:
    ``mean``, ``sum`` or
    ``none``. Released values are checked against the release's bin values (a ``ReleasedValuesError``
    names a stray one)."""

    def __init__(self, release: Release | BinsCorrection, loss: str, reduction: str = "mean") -> None:
        super().__init__()
        self.correction = correction_of(release)
        self.loss = corrected_loss(loss).name
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")
        self.reduction = reduction
        c = self.correction
        if c.m > 1:
            c._check_invertible()
        if self.loss == "bce":
            binary(c)
        elif self.loss == "bce_unbiased":
            _in_unit_interval(c)
        elif self.loss == "cross_entropy":
            classes(c)
        values = np.unique(np.asarray(c.bin_values, dtype=np.float64))
        self.register_buffer("bin_values", torch.as_tensor(values))
        self.a, self.b = (1.0, 0.0) if c.m == 1 else (c.a, c.b)
        self.total, self.total_squares = float(values.sum()), float(np.square(values).sum())

    def _checked(self, released: torch.Tensor) -> torch.Tensor:
        """Each released value snapped to its bin value (float32 keeps ~7 digits), or refused."""
        values = self.get_buffer("bin_values")
        y = released.detach().to(torch.float64).reshape(-1)
        right = torch.clamp(torch.searchsorted(values, y), 1, max(values.numel() - 1, 1))
        left = right - 1 if values.numel() > 1 else torch.zeros_like(right)
        use_left = (y - values[left]).abs() <= (y - values[right]).abs()
        nearest = torch.where(use_left, values[left], values[right])
        stray = (y - nearest).abs() > FLOAT32_ROUNDING * torch.clamp(nearest.abs(), min=1.0)
        if bool(stray.any()):
            first = y[stray][0].item()
            raise ReleasedValuesError(
                f"{int(stray.sum())} values are not bin values of the release (first: {first!r}); "
                "pass the released_value column (without capped rows)"
            )
        return nearest.reshape(released.shape)

    def forward(self, raw: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        if self.loss == "cross_entropy":
            return self._reduce(self._cross_entropy(raw, self._checked(released)))
        y = self._checked(released).to(raw.dtype)
        a, b = self.a, self.b
        target = (y - b * self.total) / a  # ỹ
        if self.loss == "squared":
            rows = (raw - target) ** 2 + (y**2 - b * self.total_squares) / a - target**2
        elif self.loss == "poisson":
            rows = torch.exp(raw) - target * raw
        elif self.loss == "bce_unbiased":
            rows = nn.functional.softplus(raw) - target * raw
        else:  # bce: q = b + a·σ(z), 1 − q = b + a·σ(−z)
            log_a = torch.log(torch.as_tensor(a, dtype=raw.dtype))
            log_b = torch.log(torch.as_tensor(b, dtype=raw.dtype))
            log_q = torch.logaddexp(log_b, log_a + nn.functional.logsigmoid(raw))
            log_not_q = torch.logaddexp(log_b, log_a + nn.functional.logsigmoid(-raw))
            rows = -(y * log_q + (1 - y) * log_not_q)
        return self._reduce(rows)

    def _cross_entropy(self, raw: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``−log(a·p_o + b)`` with ``p`` the softmax of the row's logits and ``o`` its released class
        (``y``: the released values, each exactly a bin value)."""
        values = self.get_buffer("bin_values")
        if raw.dim() != 2 or raw.shape[1] != values.numel() or raw.shape[0] != y.numel():
            raise ReleasedValuesError(
                f"cross_entropy takes {y.numel()} rows of {values.numel()} logits (one per class, in "
                f"ascending order of the class), got a tensor of shape {tuple(raw.shape)}"
            )
        column = torch.searchsorted(values, y.reshape(-1))
        log_p = nn.functional.log_softmax(raw, dim=1).gather(1, column[:, None]).squeeze(1)
        log_a = torch.log(torch.as_tensor(self.a, dtype=raw.dtype))
        log_b = torch.log(torch.as_tensor(self.b, dtype=raw.dtype))
        return -torch.logaddexp(log_a + log_p, log_b)

    def _reduce(self, rows: torch.Tensor) -> torch.Tensor:
        if self.reduction == "mean":
            return rows.mean()
        if self.reduction == "sum":
            return rows.sum()
        return rows


__all__ = ["ReleaseLoss", "ReleasedValuesError"]
