"""The learners' shared optimizer step (`TorchLearner.step`) against torch's own recipe:
`clip_grad_norm_` and the optimizer's reference (per-tensor) implementation."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from rayrl.config import LearnerConfig
from rayrl.envs import env_spec
from rayrl.presets import load_config, with_overrides
from tests.parts import learner_for


def reference_optimizer(parameters, settings: LearnerConfig) -> torch.optim.Optimizer:
    """The configured optimizer as torch's per-tensor loop, the implementation its other
    ones (fused, foreach) must agree with."""
    if settings.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            parameters,
            lr=settings.lr,
            alpha=settings.rmsprop_alpha,
            eps=settings.optimizer_eps,
            centered=settings.rmsprop_centered,
            foreach=False,
        )
    return torch.optim.Adam(parameters, lr=settings.lr, eps=settings.optimizer_eps, foreach=False)


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
@pytest.mark.parametrize("max_grad_norm", ["0.05", "1000000", "null"])
def test_a_step_is_torchs_clip_grad_norm_and_optimizer_step(optimizer, max_grad_norm):
    """The same weights and returned norm as `clip_grad_norm_` then the per-tensor optimizer
    step, over a few steps, whether the norm is clipped (0.05), is below the bound, or has
    none; the gradients the step leaves are the clipped ones."""
    config = with_overrides(
        load_config("cartpole_dqn"),
        [
            f"learner.optimizer={optimizer}",
            f"learner.max_grad_norm={max_grad_norm}",
            "learner.rmsprop_centered=true",
        ],
    )
    learner = learner_for(config, env_spec(config.env))
    network = learner.online
    reference = copy.deepcopy(network)
    reference_step = reference_optimizer(reference.parameters(), config.learner)
    bound = config.learner.max_grad_norm or math.inf
    inputs = torch.Generator().manual_seed(3)
    for _ in range(3):
        obs = torch.randn(16, 4, generator=inputs)

        norm = learner.step(network(obs).pow(2).mean(), learner.optimizer, network.parameters())

        reference_step.zero_grad()
        reference(obs).pow(2).mean().backward()
        expected = nn.utils.clip_grad_norm_(reference.parameters(), bound)
        reference_step.step()
        assert float(norm) == pytest.approx(float(expected), rel=1e-5)
        assert (float(expected) > bound) is (max_grad_norm == "0.05")  # clipped, or not
        for (name, mine), theirs in zip(
            network.named_parameters(), reference.parameters(), strict=True
        ):
            torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-7, msg=name)
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6, msg=name)
