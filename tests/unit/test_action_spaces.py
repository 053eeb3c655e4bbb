"""The policy-gradient policies' actions: MultiDiscrete as a factored categorical (against
a reference of independent categoricals, values and gradients), action masks honoured in
acting, evaluation and the loss, and the action spaces each algorithm refuses, in one line
before anything starts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayrl.algorithms.actor_critic import ActorCriticPolicy, make_actor_critic
from rayrl.algorithms.distributions import FactoredCategorical
from rayrl.algorithms.dqn import make_q_network
from rayrl.api import validate
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from tests import space_envs

SIZES = (3, 2, 4)


def test_the_factored_categorical_is_independent_categoricals():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, sum(SIZES), generator=generator, requires_grad=True)
    actions = torch.stack([torch.randint(n, (5,), generator=generator) for n in SIZES], -1)
    distribution = FactoredCategorical(logits, SIZES)

    # the reference: each dimension's log-softmax, indexed, summed
    log_probs = [chunk.log_softmax(-1) for chunk in logits.split(SIZES, -1)]
    expected_logp = sum(lp.gather(-1, actions[:, [i]])[:, 0] for i, lp in enumerate(log_probs))
    expected_entropy = sum(-(lp.exp() * lp).sum(-1) for lp in log_probs)
    expected_mode = torch.stack([lp.argmax(-1) for lp in log_probs], -1)

    logp, entropy = distribution.log_prob(actions), distribution.entropy()
    torch.testing.assert_close(logp, expected_logp)
    torch.testing.assert_close(entropy, expected_entropy)
    assert torch.equal(distribution.mode, expected_mode)
    assert distribution.sample().shape == (5, len(SIZES))
    gradient = torch.autograd.grad((logp + 0.1 * entropy).sum(), logits)[0]
    expected_gradient = torch.autograd.grad((expected_logp + 0.1 * expected_entropy).sum(), logits)[
        0
    ]
    torch.testing.assert_close(gradient, expected_gradient)


def masked_network(action: str):
    config = load_config("cartpole_ppo", [f"env.id={space_envs.env_id('masked', action)}"])
    spec = env_spec(config.env)
    torch.manual_seed(0)
    return make_actor_critic(config.algorithm, spec), spec


@pytest.mark.parametrize("action", ["discrete", "multi_discrete"])
def test_masked_actions_are_never_taken_and_have_no_probability(action):
    network, spec = masked_network(action)
    start, stop = spec.action_mask
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 2, (256, *spec.observation_space.shape)).astype(np.float32)
    masks = obs[:, start:stop].astype(bool)
    sizes = network.categorical_sizes
    offsets = np.cumsum([0, *sizes[:-1]])
    for offset, size in zip(offsets, sizes, strict=True):
        masks[:, offset + rng.integers(size, size=256)] = True  # one choice left at least
    obs[:, start:stop] = masks

    def violations(actions: np.ndarray) -> int:
        chosen = actions.reshape(len(actions), -1) + offsets
        return int((~np.take_along_axis(masks, chosen, 1)).sum())

    for explore in (True, False):  # sampling, and the greedy mode of evaluation
        policy = ActorCriticPolicy(network, seed=1, greedy_evaluation=True)
        for _ in range(20):
            actions = policy.act(obs, np.ones(256, bool), explore=explore).actions
            assert violations(actions) == 0

    # the loss: allowed actions' probabilities sum to 1 in each dimension, the entropy is
    # finite, and no gradient reaches a disallowed action's logit
    out = network(torch.from_numpy(obs)[:, None], torch.ones(256, 1, dtype=torch.bool))
    head = out.head[:, 0]
    head.retain_grad()
    distribution = network.distribution(head)
    loss = distribution.entropy().sum()
    for dimension, (offset, size) in enumerate(zip(offsets, sizes, strict=True)):
        probs = head[:, offset : offset + size].softmax(-1)
        allowed = torch.from_numpy(masks[:, offset : offset + size])
        torch.testing.assert_close(
            (probs * allowed).sum(-1), torch.ones(256), msg=f"dimension {dimension}"
        )
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.all(head.grad[torch.from_numpy(~masks)] == 0)


def test_a_multidiscrete_action_of_one_dimension_stays_an_array_of_one():
    network, spec = masked_network("multi_discrete_one")
    obs = np.ones((4, *spec.observation_space.shape), np.float32)
    for explore in (True, False):
        policy = ActorCriticPolicy(network, seed=1, greedy_evaluation=True)
        actions = policy.act(obs, np.ones(4, bool), explore=explore).actions
        assert actions.shape == (4, 1)
    head = network(torch.from_numpy(obs)[:, None], torch.ones(4, 1, dtype=torch.bool)).head
    assert isinstance(network.distribution(head), FactoredCategorical)


def test_a_categorical_whose_every_action_is_masked_keeps_them_all():
    """As gymnasium's `sample` does with such a mask: a distribution over all of them, not
    one of probability 1 on each."""
    network, spec = masked_network("discrete")
    start, stop = spec.action_mask
    obs = np.ones((2, *spec.observation_space.shape), np.float32)
    obs[:, start:stop] = 0.0
    head = network(torch.from_numpy(obs)[:, None], torch.ones(2, 1, dtype=torch.bool)).head
    assert bool((head > torch.finfo(head.dtype).min).all())  # no logit masked
    probs = network.distribution(head).probs
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 1))
    assert bool((probs < 1).all())


@pytest.mark.parametrize(
    ("preset", "observation", "action", "refusal"),
    [
        ("cartpole_dqn", "box", "multi_discrete", "algorithm.name='dqn' needs a discrete"),
        ("cartpole_dqn", "masked", "discrete", "algorithm.name='dqn' does not honour"),
        ("pendulum_sac", "box", "discrete", "algorithm.name='sac' needs a 1-D Box"),
        ("pendulum_sac", "masked", "box", "algorithm.name='sac' does not honour"),
        ("cartpole_ppo", "masked", "box", "the observations' action_mask has 2 flags"),
    ],
)
def test_what_an_algorithm_cannot_take_is_refused_before_start(
    preset, observation, action, refusal
):
    config = load_config(preset, [f"env.id={space_envs.env_id(observation, action)}"])
    with pytest.raises(ConfigError, match=refusal):
        validate(config)


def test_an_action_space_no_policy_gradient_takes_is_refused_naming_the_algorithm():
    config = load_config("cartpole_ppo", ["env.id=MultiBinaryActions-v0"])
    with pytest.raises(ConfigError, match=r"algorithm.name='ppo' takes Discrete, 1-D Multi"):
        validate(config)


class _MultiBinaryActions(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (2,))
    action_space = gym.spaces.MultiBinary(3)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


gym.register("MultiBinaryActions-v0", entry_point=_MultiBinaryActions)


def test_a_q_network_takes_flattened_observations():
    config = load_config("cartpole_dqn", [f"env.id={space_envs.env_id('dict', 'discrete')}"])
    spec = env_spec(config.env)
    network = make_q_network(config.algorithm, spec)
    assert network(torch.zeros(2, *spec.observation_space.shape)).shape == (2, 3)
