"""An algorithm's parts built from a whole config, as the runtimes build them, for tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.algorithms.actor_critic import ActorCritic, State
from rayrl.config import Config
from rayrl.contract import Acting, Learner, Policy
from rayrl.envs.spec import EnvSpec


def policy_for(config: Config, spec: EnvSpec, worker_index: int | None) -> Policy:
    """Worker `worker_index`'s policy (None: the evaluation policy)."""
    workers = config.workers
    acting = Acting(config.run.seed, worker_index, workers.envs_per_worker, workers.num_workers)
    return ALGORITHMS[config.algorithm.name].build_policy(config.algorithm, spec, acting)


def learner_for(config: Config, spec: EnvSpec) -> Any:
    learner: Learner = ALGORITHMS[config.algorithm.name].build_learner(
        config.algorithm, spec, config.learner, config.run
    )
    return learner


def heads_and_values(network: ActorCritic, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A feed-forward actor-critic's policy head and value for N single observations."""
    out = network(obs.unsqueeze(1), torch.zeros(len(obs), 1, dtype=torch.bool))
    return out.head[:, 0], out.values[:, 0]


def all_starting(obs: np.ndarray) -> np.ndarray:
    """Episode starts for a batch of observations that each begin an episode."""
    return np.ones(len(obs), dtype=bool)


def per_step_outputs(
    network: ActorCritic, obs: np.ndarray, resets: np.ndarray, state: State | None
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[State | None]]:
    """A straightforward reference for one unroll: the network one observation at a time,
    with its state set to zeros by hand after each step where `resets[t]` (the env began a
    new episode), from `state` (None: zeros, or a feed-forward network); a separate critic
    steps its own torso and core on its half of the state. Returns the policy heads and
    values at each of `obs`'s steps, and the state after each step."""
    heads, values, states = [], [], []
    size = 0 if network.core is None else network.core.hidden_size
    for t, observation in enumerate(torch.from_numpy(obs)):
        x = observation[None]
        if network.core is not None and (state is None or (t > 0 and resets[t - 1])):
            state = network.initial_state(1)
        actor_state = critic_state = state
        if network.critic_core is not None and state is not None:
            actor_state = (state[0][:, :size], state[1][:, :size])
            critic_state = (state[0][:, size:], state[1][:, size:])
        features, actor_state = _one_step(network.torso, network.core, x, actor_state)
        value_features, state = features, actor_state
        if network.critic_torso is not None:
            value_features, critic_state = _one_step(
                network.critic_torso, network.critic_core, x, critic_state
            )
            if actor_state is not None and critic_state is not None:
                state = (
                    torch.cat([actor_state[0], critic_state[0]], dim=1),
                    torch.cat([actor_state[1], critic_state[1]], dim=1),
                )
        heads.append(network.policy(features)[0])
        values.append(network.value(value_features)[0, 0])
        states.append(state)
    return heads, values, states


def _one_step(
    torso: torch.nn.Module, core: torch.nn.LSTMCell | None, x: torch.Tensor, state: State | None
) -> tuple[torch.Tensor, State | None]:
    features = torso(x)
    if core is None or state is None:
        return features, None
    state = core(features, state)
    return state[0], state
