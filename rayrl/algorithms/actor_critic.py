"""The actor-critic network and policy that the on-policy algorithms (IMPALA, PPO) share,
and the one forward pass over a batch of unrolls that both of their updates start from.

The network has a policy head (logits for discrete actions, a Gaussian mean with a learned
state-independent log-std for 1-D Box actions) and a value head on one torso. The policy
samples when exploring and takes the distribution's mode otherwise, and reports the
behaviour log-probabilities that the on-policy processor keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rayrl.algorithms.networks import load_numpy_state_dict, make_torso
from rayrl.config import AlgorithmConfig
from rayrl.contract import Acting
from rayrl.core import ModelInfo, PolicyOutput, Unrolls
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.families.on_policy import OnPolicyConfig


class ActorCritic(nn.Module):
    """Policy head (logits, or a Gaussian mean with a learned log-std) and value head."""

    def __init__(self, torso: nn.Module, action_space: spaces.Space, algorithm: str) -> None:
        super().__init__()
        self.torso = torso
        features = torso.out_features
        self.value = nn.Linear(features, 1)
        if isinstance(action_space, spaces.Discrete):
            self.continuous = False
            self.policy = nn.Linear(features, int(action_space.n))
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.continuous = True
            self.policy = nn.Linear(features, action_space.shape[0])
            self.log_std = nn.Parameter(torch.zeros(action_space.shape[0]))
        else:
            raise ConfigError(
                f"algorithm.name={algorithm!r} supports Discrete and 1-D Box action spaces; "
                f"this env has {action_space}"
            )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        return self.policy(features), self.value(features).squeeze(-1)

    def distribution(self, head: torch.Tensor) -> torch.distributions.Distribution:
        if not self.continuous:
            return torch.distributions.Categorical(logits=head)
        std = self.log_std.exp().expand_as(head)
        return torch.distributions.Independent(torch.distributions.Normal(head, std), 1)


def make_actor_critic(algo: AlgorithmConfig, spec: EnvSpec) -> ActorCritic:
    torso = make_torso(algo.network, spec.observation_space, algo.hidden_sizes)
    return ActorCritic(torso, spec.action_space, algo.name)


class ActorCriticPolicy:
    """Samples from the policy; evaluation samples too, or takes the distribution's mode
    when `greedy_evaluation`. Reports the log-probabilities of what it did."""

    def __init__(self, network: ActorCritic, seed: int, greedy_evaluation: bool) -> None:
        self.network = network.eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.greedy_evaluation = greedy_evaluation
        self.version = 0

    def act(self, obs: np.ndarray, *, explore: bool, env_steps: int = 0) -> PolicyOutput:
        with torch.inference_mode():
            head, _ = self.network(torch.from_numpy(obs))
            distribution = self.network.distribution(head)
            if not explore and self.greedy_evaluation:
                actions = distribution.mode
            elif self.network.continuous:
                noise = torch.randn(head.shape, generator=self.generator)
                actions = head + noise * self.network.log_std.exp()
            else:
                actions = torch.multinomial(
                    distribution.probs, 1, generator=self.generator
                ).squeeze(-1)
            logp = distribution.log_prob(actions)
        return PolicyOutput(actions=actions.numpy(), extras={"logp": logp.numpy()})

    def set_weights(self, info: ModelInfo) -> None:
        load_numpy_state_dict(self.network, info.weights)
        self.version = info.version


def make_actor_critic_policy(
    algo: OnPolicyConfig, spec: EnvSpec, acting: Acting
) -> ActorCriticPolicy:
    greedy = acting.evaluation and algo.eval_policy == "greedy"
    return ActorCriticPolicy(make_actor_critic(algo, spec), acting.seed, greedy)


@dataclass
class UnrollForward:
    """The network's outputs over a batch of B unrolls of T steps."""

    head: torch.Tensor
    """(B, T, ...): the policy head at every acted step."""
    values: torch.Tensor
    """(B, T): V(x_t)."""
    next_values: torch.Tensor
    """(B, T): V(x_{t+1}), the value of the true final observation after a truncation."""


def forward_unrolls(
    model: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    batch: Unrolls,
    tensor: Callable[[np.ndarray], torch.Tensor],
) -> UnrollForward:
    """One forward pass over every observation of `batch` and the final observations of its
    truncated steps; `model` may be the all-reduced wrapper of an `ActorCritic`."""
    num_unrolls, num_steps = batch.rewards.shape
    obs = tensor(batch.obs).flatten(0, 1)  # (B*(T+1), ...)
    head, values = model(torch.cat([obs, tensor(batch.final_obs)]))
    steps_total = num_unrolls * (num_steps + 1)
    head = head[:steps_total].unflatten(0, (num_unrolls, num_steps + 1))[:, :num_steps]
    values, final_values = values[:steps_total], values[steps_total:]
    values = values.view(num_unrolls, num_steps + 1)
    next_values = values[:, 1:].clone()
    if len(batch.final_obs):
        index = torch.from_numpy(batch.final_index).to(next_values.device)
        next_values[index[:, 0], index[:, 1]] = final_values
    return UnrollForward(head=head, values=values[:, :num_steps], next_values=next_values)


def episode_flags(
    batch: Unrolls, tensor: Callable[[np.ndarray], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(terminated, ended) as float (B, T): `terminated` stops the bootstrap, `ended`
    (termination or truncation) stops any credit flowing from the next episode into this
    one."""
    terminated = tensor(batch.terminated).float()
    truncated = tensor(batch.truncated).float()
    return terminated, torch.maximum(terminated, truncated)
