"""SAC: the squashed Gaussian's log-probability, the critics', actor's and temperature's losses
and gradients against straightforward per-sample references, the target critics' Polyak
step, per-part learning rates through a checkpoint, the non-finite guard, and the checks."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rayrl.algorithms.sac import SquashedGaussianActor
from rayrl.core import TransitionBatch
from rayrl.envs import env_spec
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from tests.parts import all_starting, learner_for, policy_for

SMALL = ["algorithm.hidden_sizes=[32, 32]", "learner.batch_size=16"]


@pytest.fixture(scope="module")
def pendulum():
    config = load_config("pendulum_sac", SMALL)
    return config, env_spec(config.env)


UNEVEN = EnvSpec(
    observation_space=spaces.Box(-np.inf, np.inf, shape=(5,), dtype=np.float32),
    action_space=spaces.Box(
        np.array([-1.0, 0.0, -3.0], np.float32), np.array([1.0, 2.0, 5.0], np.float32)
    ),
    frame_stack=None,
)
"""Three action dimensions with uneven, off-centre bounds (Pendulum's one is symmetric)."""


@pytest.fixture(scope="module", params=["pendulum", "uneven"])
def case(request, pendulum):
    config, spec = pendulum
    return (config, spec) if request.param == "pendulum" else (config, UNEVEN)


def random_batch(spec, size=16, seed=0, discounts=None) -> TransitionBatch:
    rng = np.random.default_rng(seed)
    low, high = spec.action_space.low, spec.action_space.high
    obs_dim = spec.observation_space.shape[0]
    return TransitionBatch(
        obs=rng.normal(size=(size, obs_dim)).astype(np.float32),
        actions=rng.uniform(low, high, size=(size, len(low))).astype(np.float32),
        rewards=rng.normal(size=size).astype(np.float32),
        discounts=(
            np.where(rng.random(size) < 0.2, 0.0, 0.99).astype(np.float32)
            if discounts is None
            else discounts
        ),
        next_obs=rng.normal(size=(size, obs_dim)).astype(np.float32),
        weights=rng.uniform(0.5, 1.5, size=size).astype(np.float32),
        indices=np.arange(size),
    )


def tensors(learner, batch: TransitionBatch) -> dict[str, torch.Tensor]:
    names = ("obs", "next_obs", "actions", "rewards", "discounts", "weights")
    return {name: torch.from_numpy(getattr(batch, name)) for name in names}


def reference_sample(actor, obs: torch.Tensor, noise: torch.Tensor):
    """tanh(mean + std * noise) scaled to the bounds, and its log-density, one sample and
    one action dimension at a time, from the Gaussian density's formula and the change of
    variables a = scale * tanh(u) + bias."""
    mean, log_std = actor(obs)
    actions, logps = [], []
    for i in range(len(obs)):
        action_row, logp = [], torch.zeros(())
        for d in range(mean.shape[1]):
            std = log_std[i, d].exp()
            u = mean[i, d] + std * noise[i, d]
            density = -0.5 * noise[i, d] ** 2 - torch.log(std) - 0.5 * math.log(2 * math.pi)
            scale, bias = actor.action_scale[d], actor.action_bias[d]
            jacobian = torch.log(scale * (1 - torch.tanh(u) ** 2) + 1e-6)
            logp = logp + density - jacobian
            action_row.append(scale * torch.tanh(u) + bias)
        actions.append(torch.stack(action_row))
        logps.append(logp)
    return torch.stack(actions), torch.stack(logps)


def test_the_squashed_log_probability_is_the_transformed_gaussians(case):
    config, spec = case
    actor = learner_for(config, spec).actor
    obs = torch.randn(64, spec.observation_space.shape[0])
    actions, logp = actor.sample(obs, torch.Generator().manual_seed(0))
    mean, log_std = actor(obs)
    scale, bias = actor.action_scale, actor.action_bias
    squashed = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform(bias, scale),
        ],
    )
    # away from the bounds, where the epsilon inside the logarithm matters
    inside = ((actions - bias).abs() < 0.999 * scale).all(-1)
    expected = squashed.log_prob(actions).sum(-1)
    torch.testing.assert_close(logp[inside], expected[inside], rtol=1e-4, atol=1e-4)
    low, high = (torch.from_numpy(b) for b in (spec.action_space.low, spec.action_space.high))
    assert torch.all((actions >= low) & (actions <= high))


def perturbed(learner):
    """The learner with target critics that differ from the online ones (a fresh learner's
    are copies, which would hide a mix-up of the two)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in learner.target_critics.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return learner


def test_critic_loss_and_gradients_match_the_per_sample_reference(case):
    config, spec = case
    learner = perturbed(learner_for(config, spec))
    batch = tensors(learner, random_batch(spec))
    state = learner.generator.get_state()
    loss, td_errors = learner.critic_loss(batch)
    grads = torch.autograd.grad(loss, list(learner.critics.parameters()))

    dims = spec.action_space.shape[0]
    noise = torch.randn(16, dims, generator=torch.Generator().set_state(state))
    alpha = learner.log_alpha.exp().item()
    with torch.no_grad():
        next_actions, next_logp = reference_sample(learner.actor, batch["next_obs"], noise)
    total, errors = torch.zeros(()), []
    for i in range(16):
        obs, action = batch["obs"][i : i + 1], batch["actions"][i : i + 1]
        with torch.no_grad():
            t1, t2 = learner.target_critics(batch["next_obs"][i : i + 1], next_actions[i : i + 1])
            soft = min(t1.item(), t2.item()) - alpha * next_logp[i].item()
            target = batch["rewards"][i].item() + batch["discounts"][i].item() * soft
        q1, q2 = learner.critics(obs, action)
        total = total + batch["weights"][i] * 0.5 * ((q1 - target) ** 2 + (q2 - target) ** 2)
        errors.append(0.5 * (abs(q1.item() - target) + abs(q2.item() - target)))
    reference = (total / 16).squeeze()
    reference_grads = torch.autograd.grad(reference, list(learner.critics.parameters()))
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(td_errors, torch.tensor(errors), rtol=1e-5, atol=1e-6)
    for grad, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)


def test_actor_and_temperature_losses_and_gradients_match_the_reference(case):
    config, spec = case
    learner = perturbed(learner_for(config, spec))
    obs = torch.from_numpy(random_batch(spec).obs)
    state = learner.generator.get_state()
    loss, logp = learner.actor_loss(obs)
    grads = torch.autograd.grad(loss, list(learner.actor.parameters()))
    assert all(p.requires_grad for p in learner.critics.parameters())  # restored after

    dims = spec.action_space.shape[0]
    noise = torch.randn(16, dims, generator=torch.Generator().set_state(state))
    alpha = learner.log_alpha.exp().item()
    actions, reference_logp = reference_sample(learner.actor, obs, noise)
    terms = []
    for i in range(16):
        q1, q2 = learner.critics(obs[i : i + 1], actions[i : i + 1])
        terms.append(alpha * reference_logp[i] - torch.min(q1, q2).squeeze())
    reference = torch.stack(terms).mean()
    reference_grads = torch.autograd.grad(reference, list(learner.actor.parameters()))
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logp, reference_logp.detach(), rtol=1e-5, atol=1e-5)
    for grad, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)

    # the temperature's: -alpha * (log pi + target entropy), gradient wrt log alpha
    alpha_loss = learner.alpha_loss(logp)
    (alpha_grad,) = torch.autograd.grad(alpha_loss, [learner.log_alpha])
    per_sample = [-alpha * (lp.item() + learner.target_entropy) for lp in logp]
    assert alpha_loss.item() == pytest.approx(np.mean(per_sample), rel=1e-5)
    assert alpha_grad.item() == pytest.approx(np.mean(per_sample), rel=1e-5)  # d/dlog a of a
    assert learner.target_entropy == -dims  # minus the action dimension


def test_the_temperature_rises_when_the_policy_is_less_random_than_its_target(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    before = learner.alpha.item()
    learner.target_entropy = 50.0  # far above what the actor has
    for _ in range(5):
        learner.update(random_batch(spec))
    assert learner.alpha.item() > before
    fixed = replace(config, algorithm=replace(config.algorithm, autotune_alpha=False))
    frozen = learner_for(fixed, spec)
    for _ in range(3):
        metrics = frozen.update(random_batch(spec)).metrics
    assert metrics["learner/alpha"] == pytest.approx(config.algorithm.initial_alpha)


def test_every_optimized_part_reports_its_gradient_norm(pendulum):
    """The temperature's too: d/dlog(alpha) of -alpha * mean(log pi + target entropy) is
    alpha * (entropy - target entropy), with the entropy of the same fresh actions."""
    config, spec = pendulum
    learner = learner_for(config, spec)
    alpha = learner.alpha.item()
    metrics = learner.update(random_batch(spec)).metrics
    assert metrics["learner/critic_grad_norm"] > 0
    assert metrics["learner/actor_grad_norm"] > 0
    expected = alpha * abs(metrics["learner/entropy"] - learner.target_entropy)
    assert metrics["learner/alpha_grad_norm"] == pytest.approx(expected, rel=1e-4)


def test_target_critics_follow_by_polyak_averaging(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    target_before = [p.clone() for p in learner.target_critics.parameters()]
    learner.update(random_batch(spec))
    tau = config.algorithm.tau
    for target, online, old in zip(
        learner.target_critics.parameters(),
        learner.critics.parameters(),
        target_before,
        strict=True,
    ):
        torch.testing.assert_close(target, (1 - tau) * old + tau * online)


def test_delayed_actor_updates_take_as_many_steps_as_the_critics(pendulum):
    config, spec = pendulum
    delayed = replace(config, algorithm=replace(config.algorithm, actor_update_interval=2))
    learner = learner_for(delayed, spec)
    first = learner.update(random_batch(spec, seed=1)).metrics
    second = learner.update(random_batch(spec, seed=2)).metrics
    assert "learner/actor_loss" in first
    assert "learner/actor_loss" not in second
    assert learner.actor_optimizer.state_dict()["state"][0]["step"].item() == 2
    assert learner.critic_optimizer.state_dict()["state"][0]["step"].item() == 2


def test_each_part_trains_at_its_configured_rate_after_a_restore(pendulum):
    """Per-part rates come back from the config, not from the checkpoint's optimizers."""
    config, spec = pendulum
    learner = learner_for(config, spec)
    learner.update(random_batch(spec))
    changed = replace(
        config, algorithm=replace(config.algorithm, actor_lr=3e-4, critic_lr=2e-3, alpha_lr=1e-4)
    )
    restored = learner_for(changed, spec)
    restored.load_state_dict(learner.state_dict())
    assert restored.updates == 1
    assert restored.actor_optimizer.param_groups[0]["lr"] == 3e-4
    assert restored.critic_optimizer.param_groups[0]["lr"] == 2e-3
    assert restored.alpha_optimizer.param_groups[0]["lr"] == 1e-4
    assert restored.log_alpha.item() == learner.log_alpha.item()
    for name, value in learner.target_critics.state_dict().items():
        torch.testing.assert_close(restored.target_critics.state_dict()[name], value)
    assert restored.actor_optimizer.state_dict()["state"][0]["step"].item() == 1


def test_a_part_that_keeps_failing_after_good_steps_counts_in_a_row(pendulum):
    """The temperature is stepped last: its non-finite steps must add up over updates even
    though the critics' and the actor's steps of the same updates succeed."""
    config, spec = pendulum
    learner = learner_for(config, spec)
    learner.target_entropy = float("nan")
    for _ in range(3):
        learner.update(random_batch(spec))
    assert learner.nonfinite.skipped == 3
    assert learner.nonfinite.in_a_row == 3
    learner.target_entropy = -1.0
    learner.update(random_batch(spec))
    assert learner.nonfinite.in_a_row == 0


def test_a_nan_reward_skips_the_critic_step_and_counts_once(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    critics_before = {k: v.clone() for k, v in learner.critics.state_dict().items()}
    batch = random_batch(spec)
    batch.rewards[3] = np.nan
    learner.update(batch)
    for name, value in learner.critics.state_dict().items():
        torch.testing.assert_close(value, critics_before[name])
    assert learner.nonfinite.skipped == 1
    assert learner.nonfinite.in_a_row == 1
    learner.update(random_batch(spec))
    assert learner.nonfinite.in_a_row == 0


def test_workers_explore_at_random_first_and_evaluation_is_deterministic(pendulum):
    config, spec = pendulum
    policy = policy_for(config, spec, 0)
    obs = np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32)
    early = policy.act(obs, all_starting(obs), explore=True, env_steps=0).actions
    assert early.shape == (256, 1)
    assert early.dtype == np.float32
    assert early.min() < -1.5
    assert early.max() > 1.5
    later = policy.act(obs, all_starting(obs), explore=True, env_steps=10**6).actions
    assert np.all(np.abs(later) <= 2.0)
    evaluation = policy_for(config, spec, None)
    np.testing.assert_array_equal(
        evaluation.act(obs, all_starting(obs), explore=False).actions,
        evaluation.act(obs, all_starting(obs), explore=False).actions,
    )


def test_sac_refuses_discrete_actions_several_learners_and_cnn_torsos():
    config = load_config("pendulum_sac", ["env.id=CartPole-v1"])
    with pytest.raises(ConfigError, match="needs a 1-D Box action space"):
        policy_for(config, env_spec(config.env), None)
    with pytest.raises(ConfigError, match=r"learner\.num_learners=2"):
        load_config("pendulum_sac", ["learner.num_learners=2"])
    with pytest.raises(ConfigError, match=r"algorithm\.network='nature_cnn'"):
        load_config("pendulum_sac", ["algorithm.network=nature_cnn"])


def test_the_actor_copies_read_only_action_bounds_without_a_warning():
    """A space that came through Ray's object store holds read-only arrays: sharing them
    (`torch.as_tensor`) would warn in every process that builds the actor."""
    space = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
    space.low.setflags(write=False)
    space.high.setflags(write=False)
    observations = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actor = SquashedGaussianActor(observations, space, hidden=(8,))
    assert actor.action_scale.tolist() == [2.0]
    assert actor.action_bias.tolist() == [0.0]
