"""The factored categorical: MultiDiscrete actions as independent categoricals.

torch has no distribution over several categorical dimensions with sizes of their own
(`Categorical` takes one size, `Independent` needs equal ones), so this is one: the logits
of all the dimensions side by side, split by their sizes; log-probabilities and entropies
add over the dimensions, as for independent variables (SB3's `MultiCategoricalDistribution`,
RLlib's `MultiCategorical`).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch.distributions import Categorical, Distribution


class FactoredCategorical(Distribution):
    """Independent categoricals over (..., k) actions, with logits (..., sum(sizes))."""

    arg_constraints: ClassVar[dict[str, torch.distributions.constraints.Constraint]] = {}

    def __init__(self, logits: torch.Tensor, sizes: tuple[int, ...]) -> None:
        self.parts = [Categorical(logits=chunk) for chunk in logits.split(sizes, dim=-1)]
        super().__init__(logits.shape[:-1], torch.Size([len(sizes)]), validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [part.log_prob(value[..., i]) for i, part in enumerate(self.parts)], -1
        ).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([part.entropy() for part in self.parts], -1).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([part.mode for part in self.parts], -1)

    def sample(
        self,
        sample_shape: torch.Size | list[int] | tuple[int, ...] = torch.Size(),  # noqa: B008
    ) -> torch.Tensor:
        return torch.stack([part.sample(sample_shape) for part in self.parts], -1)
