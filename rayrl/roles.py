"""The two roles every algorithm fills: a `Policy` acts, a `Learner` learns.

They are part of the algorithm contract (`rayrl.contract`, which re-exports them), written
here, below the parts, so that the parts that wrap a policy or a learner (observation
normalisation, `rayrl.normalization`) can name them: the contract module builds those
wrappers, so they cannot import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from rayrl.core import (
    ModelInfo,
    NonFiniteSteps,
    PolicyOutput,
    TransitionBatch,
    Unrolls,
    UpdateResult,
)

if TYPE_CHECKING:
    import torch

B_contra = TypeVar("B_contra", bound="TransitionBatch | Unrolls", contravariant=True)
"""What a learner learns from: `TransitionBatch` (off-policy) or `Unrolls` (on-policy)."""


class Policy(Protocol):
    """Acts in the workers and the evaluator (CPU, no optimizer).

    A policy acts for the same envs, one step at a time, so it may carry per-env state
    between calls (a recurrent core's); it starts that state afresh for the envs whose
    observation begins an episode, and reports the state it acted from in
    `PolicyOutput.state`. Feed-forward policies ignore `episode_starts`."""

    @property
    def version(self) -> int:
        """The version of the weights it acts with (0 before any arrive)."""
        ...

    def act(
        self,
        obs: np.ndarray,
        episode_starts: np.ndarray,
        *,
        explore: bool,
        env_steps: int = 0,
    ) -> PolicyOutput:
        """Actions for a batch of observations, one per env; `episode_starts` (bool, one per
        env) is True where `obs` begins an episode (all True on the first call after a
        reset); `explore` is False for evaluation; `env_steps` (the run's) drives
        exploration schedules."""
        ...

    def set_weights(self, info: ModelInfo) -> None: ...


class Learner(Protocol[B_contra]):
    """Owns the trainable networks and their optimizer; learns from batches of `B_contra`."""

    @property
    def updates(self) -> int:
        """Optimization steps so far; the version of the weights it publishes."""
        ...

    @property
    def device(self) -> torch.device: ...

    @property
    def nonfinite(self) -> NonFiniteSteps:
        """Optimizer steps skipped for a non-finite loss or gradient (see `TorchLearner.step`)."""
        ...

    def update(self, batch: B_contra) -> UpdateResult:
        """One optimization step on a batch from the store."""
        ...

    def get_weights(self) -> ModelInfo:
        """The acting network's weights as numpy arrays, versioned by `updates`."""
        ...

    def set_policy_weights(self, info: ModelInfo) -> None:
        """Start from these acting weights (a warm start; the optimizer starts fresh)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run continues from: networks, optimizer, schedules, count."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
