"""The paper's two-tower model: a non-sensitive tower, a semi-sensitive tower and a common head.

``F(x°, x•) = f(g(x°) ∘ h(x•))``. The *truncated* model ``f(g(x°) ∘ 0)`` shares ``g`` and ``f`` but
never reads ``x•``: phase 1 trains it on the features party's columns alone, and phase 2 starts the
full model from those weights (``h`` starts at its random initialisation).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from labeldp.mechanisms.validation import ParameterError

MAX_WIDTH = 4096
MAX_INPUTS = 1 << 16


class TwoTower(nn.Module):
    """A small MLP per tower and a one-hidden-layer head producing a logit (binary labels)."""

    def __init__(self, non_sensitive: int, semi_sensitive: int, width: int = 32) -> None:
        super().__init__()
        for name, value, top in (
            ("non_sensitive", non_sensitive, MAX_INPUTS),
            ("semi_sensitive", semi_sensitive, MAX_INPUTS),
            ("width", width, MAX_WIDTH),
        ):
            if not 1 <= value <= top:
                raise ParameterError(f"{name} must be in [1, {top}], got {value}", name)
        self.width = width
        self.non_sensitive = nn.Sequential(nn.Linear(non_sensitive, width), nn.ReLU())
        self.semi_sensitive = nn.Sequential(nn.Linear(semi_sensitive, width), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x_non: torch.Tensor, x_semi: torch.Tensor) -> torch.Tensor:
        """Logits of the full model."""
        joined = torch.cat([self.non_sensitive(x_non), self.semi_sensitive(x_semi)], dim=1)
        return self.head(joined).squeeze(-1)

    def arrays(self) -> dict[str, list[list[float]] | list[float]]:
        """The weights as plain nested lists (float32 values), for a signed JSON model message."""
        return {name: t.detach().cpu().tolist() for name, t in self.state_dict().items()}

    @classmethod
    def from_arrays(
        cls, non_sensitive: int, semi_sensitive: int, width: int, arrays: Mapping[str, object]
    ) -> TwoTower:
        """The model a message describes; shapes must match the declared architecture exactly."""
        model = cls(non_sensitive, semi_sensitive, width)
        expected = model.state_dict()
        if set(arrays) != set(expected):
            raise ParameterError("the weights do not name the model's parameters", "weights")
        state = {}
        for name, like in expected.items():
            tensor = torch.as_tensor(arrays[name], dtype=torch.float32)
            if tensor.shape != like.shape or not bool(torch.isfinite(tensor).all()):
                raise ParameterError(f"weight {name!r} has the wrong shape or a non-finite value", "weights")
            state[name] = tensor
        model.load_state_dict(state)
        return model

    def truncated(self, x_non: torch.Tensor) -> torch.Tensor:
        """Logits of the truncated model: the semi-sensitive tower's output replaced by zeros."""
        g = self.non_sensitive(x_non)
        return self.head(torch.cat([g, torch.zeros_like(g)], dim=1)).squeeze(-1)
