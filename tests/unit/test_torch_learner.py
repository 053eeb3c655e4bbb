"""The learners' shared optimizer step (`TorchLearner.step`) against torch's own recipe:
`clip_grad_norm_` and the optimizer's reference (per-tensor) implementation."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from rayrl.algorithms.torch_learner import global_norm, linear_decay
from rayrl.config import LearnerConfig
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
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


@pytest.mark.parametrize("poison", [None, math.nan, math.inf])
def test_the_global_norm_is_torchs_total_norm(poison):
    """The step's norm is `nn.utils.get_total_norm`'s bit for bit, a NaN or an infinity in
    any gradient included (the non-finite guard reads it)."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(16, 4, 3, 3), (16,), (128, 1024), (6,)]
    gradients = [torch.randn(shape, generator=generator) for shape in shapes]
    if poison is not None:
        gradients[2][5, 7] = poison
    torch.testing.assert_close(
        global_norm(gradients), nn.utils.get_total_norm(gradients), rtol=0, atol=0, equal_nan=True
    )


def test_the_global_norm_of_no_gradients_or_of_mixed_dtypes_is_torchs():
    """No gradients give 0; gradients of two dtypes (which torch groups, so stacks in
    another order) give torch's value too."""
    assert global_norm([]).item() == 0.0
    gradients = [torch.ones(3), torch.full((2,), 2.0, dtype=torch.float64), torch.ones(4)]
    torch.testing.assert_close(
        global_norm(gradients), nn.utils.get_total_norm(gradients), rtol=0, atol=0
    )


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


def compiled_rmsprop(*overrides: str):
    """cartpole_dqn's learner with a compiled, centered RMSprop step at a rate of 0.01 (large
    enough that a step taken at a stale rate shows in the weights)."""
    config = with_overrides(
        load_config("cartpole_dqn"),
        [
            "learner.optimizer=rmsprop",
            "learner.rmsprop_centered=true",
            "learner.compile_optimizer=true",
            "learner.lr=0.01",
            *overrides,
        ],
    )
    return learner_for(config, env_spec(config.env)), config


def step_both(learner, reference, reference_step, steps: int, seed: int, schedules=()) -> None:
    """`steps` steps of `learner` and of the reference network and optimizer on the same
    random batches, each followed by a step of `schedules`; the weights must agree after
    each."""
    inputs = torch.Generator().manual_seed(seed)
    network = learner.online
    for _ in range(steps):
        obs = torch.randn(16, 4, generator=inputs)
        learner.step(network(obs).pow(2).mean(), learner.optimizer, network.parameters())
        reference_step.zero_grad()
        reference(obs).pow(2).mean().backward()
        nn.utils.clip_grad_norm_(reference.parameters(), learner.settings.max_grad_norm)
        reference_step.step()
        for schedule in schedules:
            schedule.step()
        # the compiled loop rounds differently (about 5e-6 here, not growing); a step at a
        # wrong rate moves weights by about the rate, 1e-3 or more
        for (name, mine), theirs in zip(
            network.named_parameters(), reference.parameters(), strict=True
        ):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=2e-5, msg=name)


def test_a_compiled_step_is_torchs_step_and_a_schedule_does_not_recompile_it():
    """The compiled RMSprop step makes the per-tensor step's weights while a linear decay
    moves its rate every step, and it is compiled once: the rate is a tensor the compiled
    step reads, not a constant baked into it."""
    from torch._dynamo.utils import counters

    learner, config = compiled_rmsprop()
    reference = copy.deepcopy(learner.online)
    reference_step = reference_optimizer(reference.parameters(), config.learner)
    schedules = (
        linear_decay(learner.optimizer, 8, enabled=True),
        linear_decay(reference_step, 8, enabled=True),
    )
    compiles_before = counters["stats"]["unique_graphs"]

    step_both(learner, reference, reference_step, steps=6, seed=3, schedules=schedules)

    assert counters["stats"]["unique_graphs"] - compiles_before == 1
    assert learner.optimizer._opt_called  # the schedule counted the compiled steps
    assert learner._optimizer_steps[id(learner.optimizer)].compiled
    assert float(learner.optimizer.param_groups[0]["lr"]) == pytest.approx(0.01 * 2 / 8)


def test_a_schedule_counts_the_steps_the_learner_takes():
    """A schedule built after its optimizer (IMPALA's and PPO's decay) counts the learner's
    steps (the compiled step: in the test above). torch warns that the schedule stepped
    before the optimizer when the step taken is not the `optimizer.step` it wrapped."""
    learner, _ = compiled_rmsprop("learner.compile_optimizer=false")
    schedule = linear_decay(learner.optimizer, 8, enabled=True)
    network = learner.online
    loss = network(torch.randn(16, 4)).pow(2).mean()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        learner.step(loss, learner.optimizer, network.parameters())
        schedule.step()
    assert learner.optimizer._opt_called


@pytest.mark.parametrize("saved_by", ["compiled", "eager"])
def test_a_restored_compiled_step_trains_at_the_configured_rate(saved_by):
    """A checkpoint restored with a new `learner.lr` (a resume's --set, a PBT perturbation)
    fills the compiled step's rate tensor with it, whether the run that saved it compiled its
    step (a tensor rate) or not (a float): the restored learner steps as the reference does
    at the new rate, not at the checkpoint's."""
    learner, _ = compiled_rmsprop(f"learner.compile_optimizer={saved_by == 'compiled'}")
    inputs = torch.randn(16, 4, generator=torch.Generator().manual_seed(5))
    network = learner.online
    learner.step(network(inputs).pow(2).mean(), learner.optimizer, network.parameters())
    restored, config = compiled_rmsprop("learner.lr=0.002")
    reference = copy.deepcopy(learner.online)
    reference_step = reference_optimizer(reference.parameters(), config.learner)
    # copies: a loaded optimizer state aliases the tensors it was given, as a checkpoint
    # read from disk does not
    reference_step.load_state_dict(copy.deepcopy(learner.optimizer.state_dict()))
    for group in reference_step.param_groups:
        group["lr"] = 0.002

    restored.load_state_dict(copy.deepcopy(learner.state_dict()))

    rate = restored.optimizer.param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor)
    assert float(rate) == pytest.approx(0.002)
    step_both(restored, reference, reference_step, steps=2, seed=7)


def test_a_compile_that_fails_says_so_and_steps_eagerly(caplog):
    """No C++ compiler (here: inductor pointed at one that does not exist, its cache off so
    that an earlier test's compile is not reused): one warning line, and the eager step's
    weights from the first step on."""
    learner, config = compiled_rmsprop("learner.max_grad_norm=0.5")
    reference = copy.deepcopy(learner.online)
    reference_step = reference_optimizer(reference.parameters(), config.learner)
    torch._dynamo.reset()
    with torch._inductor.config.patch(
        {"cpp.cxx": ("rayrl-no-such-compiler",), "fx_graph_cache": False}
    ):
        step_both(learner, reference, reference_step, steps=3, seed=11)
    torch._dynamo.reset()

    assert not learner._optimizer_steps[id(learner.optimizer)].compiled
    (warning,) = [r for r in caplog.records if "compiling the RMSprop step failed" in r.message]
    assert "stepping eagerly" in warning.message
    assert "\n" not in warning.message


def test_compiling_adams_step_is_refused_before_anything_runs():
    refusal = r"learner.compile_optimizer=true .* learner.optimizer='adam'"
    with pytest.raises(ConfigError, match=refusal):
        load_config("cartpole_ppo", ["learner.compile_optimizer=true"])
