"""Acting leaves out what only the learner uses: the policy's forward is `forward`'s head
and recurrent states, without the value, and a separate critic's torso runs only when it
has an LSTM core whose state the worker must carry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rayrl.algorithms.actor_critic import ActorCritic, ActorCriticPolicy, make_actor_critic
from rayrl.envs import env_spec
from rayrl.presets import load_config

VARIANTS = {
    "shared torso": ("cartpole_ppo", ["algorithm.separate_critic=false"]),
    "separate critic": ("cartpole_ppo", ["algorithm.separate_critic=true"]),
    "shared torso, LSTM": ("cartpole_pomdp_ppo", ["algorithm.separate_critic=false"]),
    "separate critic, LSTM": ("cartpole_pomdp_ppo", ["algorithm.separate_critic=true"]),
    "separate critic, MinAtar CNN": ("minatar_ppo", []),
    "separate critic, Gaussian head": ("cartpole_ppo", ["env.id=Pendulum-v1"]),
}


def network_of(variant: str) -> tuple[ActorCritic, tuple[int, ...]]:
    preset, overrides = VARIANTS[variant]
    config = load_config(preset, overrides)
    spec = env_spec(config.env)
    torch.manual_seed(0)
    return make_actor_critic(config.algorithm, spec), spec.observation_space.shape


def observations(shape: tuple[int, ...], envs: int, steps: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.rand((envs, steps, *shape), generator=generator)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_policy_forward_is_the_forward_without_the_value(variant):
    """From a carried state, not zeros, where the network is recurrent: a separate critic's
    half of it must reach the critic's core, the policy's half the policy's."""
    network, shape = network_of(variant)
    obs = observations(shape, envs=3, steps=5)
    starts = torch.zeros(3, 5, dtype=torch.bool)
    starts[1, 3] = True
    state = None
    if network.recurrent:
        generator = torch.Generator().manual_seed(2)
        h, c = network.initial_state(3)
        state = (
            torch.randn(h.shape, generator=generator),
            torch.randn(c.shape, generator=generator),
        )
    with torch.no_grad():
        full = network(obs, starts, state)
        head, states = network.policy_forward(obs, starts, state)
    torch.testing.assert_close(head, full.head, rtol=0, atol=0)
    if full.states is None:
        assert states is None
    else:
        assert states is not None
        for mine, reference in zip(states, full.states, strict=True):
            torch.testing.assert_close(mine, reference, rtol=0, atol=0)


def forward_calls(module: nn.Module) -> list[int]:
    calls: list[int] = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize(
    ("variant", "critic_runs"),
    [
        ("separate critic", False),
        ("separate critic, MinAtar CNN", False),
        ("separate critic, LSTM", True),
    ],
)
def test_acting_runs_the_critic_torso_only_for_its_recurrent_state(variant, critic_runs):
    network, shape = network_of(variant)
    critic_torso, value_head = forward_calls(network.critic_torso), forward_calls(network.value)
    policy = ActorCriticPolicy(network, seed=0, greedy_evaluation=False)
    obs = observations(shape, envs=4, steps=1)[:, 0].numpy()
    for starts in (np.ones(4, bool), np.zeros(4, bool)):
        policy.act(obs, starts, explore=True)
    assert bool(critic_torso) is critic_runs
    assert not value_head


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_acting_samples_what_the_full_forward_would_have_sampled(variant):
    """The actions and log-probabilities of `act` are those drawn, with the same generator,
    from the full forward's policy head (the categorical's, or the Gaussian's)."""
    network, shape = network_of(variant)
    obs = observations(shape, envs=6, steps=1)[:, 0]
    starts = np.ones(6, bool)
    acted = ActorCriticPolicy(network, seed=3, greedy_evaluation=False).act(
        obs.numpy(), starts, explore=True
    )
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        head = network(obs.unsqueeze(1), torch.ones(6, 1, dtype=torch.bool)).head[:, 0]
        if network.continuous:
            noise = torch.randn(head.shape, generator=generator)
            actions = head + noise * network.log_std.exp()
        else:
            probs = torch.softmax(head, dim=-1)
            actions = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        logp = network.distribution(head).log_prob(actions)
    np.testing.assert_array_equal(acted.actions, actions.numpy())
    np.testing.assert_allclose(acted.extras["logp"], logp.numpy(), rtol=0, atol=0)
