"""The actor-critic network and policy that the on-policy algorithms (IMPALA, PPO, APPO) share,
and the one forward pass over a batch of unrolls that their updates start from.

The network has a policy head (logits for Discrete actions, one set per dimension for
MultiDiscrete ones, a Gaussian mean with a learned state-independent log-std for 1-D Box
actions; logits that the observation's action mask disallows set to the lowest float) and a
value head on one torso, with an optional LSTM core between them (`algorithm.lstm_size`): a
policy with memory, for partially observed tasks. The policy samples when exploring and
takes the distribution's mode otherwise, and reports the behaviour log-probabilities that
the on-policy processor keeps, and, when recurrent, the state it acted from, which each
unroll keeps for its first step so that the learner replays the unroll from where the worker
was. The learner does so with its own, possibly newer, weights (up to `max_policy_lag`
versions): the stored state is then an approximation of the one its weights would have
reached, the usual one (R2D2's "stored state"), which the acted log-probabilities'
correction covers.

Every forward runs over sequences, (B, T, ...) observations with (B, T) episode starts: a
recurrent core starts afresh from zeros where an episode starts, the same rule the acting
policy follows, so the learner recomputes exactly the states the worker acted with (given
the same weights). The core is an `LSTMCell` stepped over time rather than `nn.LSTM`,
because the state must be reset inside a sequence wherever an episode begins."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rayrl.algorithms.action_spaces import algorithms_for
from rayrl.algorithms.distributions import FactoredCategorical
from rayrl.algorithms.networks import Torso, load_numpy_state_dict, make_torso
from rayrl.contract import Acting
from rayrl.core import ModelInfo, PolicyOutput, Unrolls
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.families.on_policy import OnPolicyConfig

State = tuple[torch.Tensor, torch.Tensor]
"""A recurrent network's (h, c), each (B, lstm_size), or (B, 2 x lstm_size) with a separate
critic (the policy's core's, then the critic's)."""


@dataclass
class SequenceOutput:
    """The network's outputs over B sequences of T steps."""

    head: torch.Tensor
    """(B, T, ...): logits, or the Gaussian mean."""
    values: torch.Tensor
    """(B, T)."""
    states: State | None
    """A recurrent network's (h, c) after each step, each (B, T, state width); None without
    a core."""


class ActorCritic(nn.Module):
    """Policy head (logits, or a Gaussian mean with a learned log-std) and value head, on a
    torso and, with `lstm_size`, an LSTM core; with a `critic_torso` the value head has a
    torso (and core) of its own, and a recurrent state holds the policy's and the critic's
    side by side."""

    def __init__(
        self,
        torso: Torso,
        action_space: spaces.Space[Any],
        algorithm: str,
        lstm_size: int | None = None,
        critic_torso: Torso | None = None,
        action_mask: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.torso = torso
        self.core = None if lstm_size is None else nn.LSTMCell(torso.out_features, lstm_size)
        self.critic_torso = critic_torso
        self.critic_core: nn.LSTMCell | None = None
        if critic_torso is not None and lstm_size is not None:
            self.critic_core = nn.LSTMCell(critic_torso.out_features, lstm_size)
        features = torso.out_features if lstm_size is None else lstm_size
        value_features = features
        if critic_torso is not None and lstm_size is None:
            value_features = critic_torso.out_features
        self.value = nn.Linear(value_features, 1)
        self.action_mask = action_mask
        check_actions(action_space, algorithm)
        self.continuous = isinstance(action_space, spaces.Box)
        self.categorical_sizes: tuple[int, ...] = ()
        """The categoricals' sizes: one for Discrete actions, one per dimension for
        MultiDiscrete ones (a factored categorical, whatever its number of dimensions);
        none for Box actions."""
        if isinstance(action_space, spaces.Discrete):
            self.categorical_sizes = (int(action_space.n),)
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.categorical_sizes = tuple(int(n) for n in action_space.nvec)
        self.factored = isinstance(action_space, spaces.MultiDiscrete)
        if isinstance(action_space, spaces.Box):
            self.policy = nn.Linear(features, action_space.shape[0])
            self.log_std = nn.Parameter(torch.zeros(action_space.shape[0]))
        else:
            self.policy = nn.Linear(features, sum(self.categorical_sizes))
        if action_mask is not None and action_mask[1] - action_mask[0] != sum(
            self.categorical_sizes
        ):
            raise ConfigError(
                f"algorithm.name={algorithm!r}: the observations' action_mask has "
                f"{action_mask[1] - action_mask[0]} flags, and the actions are {action_space}; "
                "a mask has one flag per discrete action (per choice of each MultiDiscrete "
                "dimension, in order)"
            )

    @property
    def recurrent(self) -> bool:
        return self.core is not None

    def initial_state(self, batch: int, device: torch.device | None = None) -> State:
        """Zeros: the state at an episode's start."""
        assert self.core is not None
        cores = 1 if self.critic_core is None else 2
        zeros = torch.zeros(batch, cores * self.core.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(
        self,
        obs: torch.Tensor,
        episode_starts: torch.Tensor,
        state: State | None = None,
    ) -> SequenceOutput:
        """Outputs for `obs` (B, T, ...); a recurrent core starts from `state` (zeros when
        None) and from zeros again before each step where `episode_starts` (B, T) is set."""
        features, value_features, states = self._features(
            obs, episode_starts, state, with_critic=True
        )
        values = self.value(value_features).squeeze(-1)
        return SequenceOutput(self._head(features, obs), values, states)

    def policy_forward(
        self,
        obs: torch.Tensor,
        episode_starts: torch.Tensor,
        state: State | None = None,
    ) -> tuple[torch.Tensor, State | None]:
        """`forward`'s head and states without the value, which acting does not use: the
        learner computes every value it needs from the unrolls itself. A separate critic's
        torso is left out (on MinAtar it is half of an acting forward), unless it has an
        LSTM core, whose state the worker must carry for the learner to replay from."""
        with_critic = self.critic_core is not None
        features, _, states = self._features(obs, episode_starts, state, with_critic=with_critic)
        return self._head(features, obs), states

    def _head(self, features: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The policy head, with the logits of actions that `obs`'s action mask disallows
        at the lowest float: their probability is zero when acting, evaluating (the mode)
        and learning (log-probabilities, entropy), and no gradient reaches them."""
        head: torch.Tensor = self.policy(features)
        if self.action_mask is None:
            return head
        start, stop = self.action_mask
        allowed = obs[..., start:stop] > 0.5
        # a categorical whose every action is masked keeps them all (gymnasium's `sample`
        # with such a mask does the same): its logits at the lowest float would be a
        # distribution that puts probability 1 on each action
        allowed = torch.cat(
            [
                part | ~part.any(-1, keepdim=True)
                for part in allowed.split(self.categorical_sizes, dim=-1)
            ],
            dim=-1,
        )
        return head.masked_fill(~allowed, torch.finfo(head.dtype).min)

    def _features(
        self,
        obs: torch.Tensor,
        episode_starts: torch.Tensor,
        state: State | None,
        *,
        with_critic: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, State | None]:
        """The policy's features, the value's (the policy's when the critic shares the
        torso or `with_critic` is false) and the recurrent states after each step."""
        if self.core is not None and state is None:
            state = self.initial_state(len(obs), obs.device)
        actor_state = critic_state = state
        if self.critic_core is not None and state is not None:
            size = self.critic_core.hidden_size  # both cores have lstm_size units
            actor_state = (state[0][:, :size], state[1][:, :size])
            critic_state = (state[0][:, size:], state[1][:, size:])
        features, states = _trunk(self.torso, self.core, obs, episode_starts, actor_state)
        value_features = features
        if self.critic_torso is not None and with_critic:
            value_features, critic_states = _trunk(
                self.critic_torso, self.critic_core, obs, episode_starts, critic_state
            )
            if states is not None and critic_states is not None:
                states = (
                    torch.cat([states[0], critic_states[0]], dim=-1),
                    torch.cat([states[1], critic_states[1]], dim=-1),
                )
        return features, value_features, states

    def distribution(self, head: torch.Tensor) -> torch.distributions.Distribution:
        if self.continuous:
            std = self.log_std.exp().expand_as(head)
            return torch.distributions.Independent(torch.distributions.Normal(head, std), 1)
        if self.factored:
            return FactoredCategorical(head, self.categorical_sizes)
        return torch.distributions.Categorical(logits=head)


def check_actions(action_space: spaces.Space[Any], algorithm: str) -> None:
    """Raise a `ConfigError` naming `algorithm.name` for actions the policy cannot take."""
    takes = (
        isinstance(action_space, spaces.Discrete)
        or (isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1)
        or (isinstance(action_space, spaces.Box) and len(action_space.shape) == 1)
    )
    if not takes:
        raise ConfigError(
            f"algorithm.name={algorithm!r} takes Discrete, 1-D MultiDiscrete and 1-D Box "
            f"actions; this env's are {action_space}: {algorithms_for(action_space)}"
        )


def _trunk(
    torso: Torso,
    core: nn.LSTMCell | None,
    obs: torch.Tensor,
    episode_starts: torch.Tensor,
    state: State | None,
) -> tuple[torch.Tensor, State | None]:
    """A torso over (B, T, ...) observations, then a core stepped over time from `state`,
    its state zeroed before each step where an episode starts: the features (B, T, F) and
    the core's (h, c) after each step."""
    batch, steps = obs.shape[:2]
    features = torso(obs.flatten(0, 1)).unflatten(0, (batch, steps))
    if core is None or state is None:
        return features, None
    h, c = state
    continues = 1.0 - episode_starts.float().unsqueeze(-1)  # (B, T, 1)
    hs, cs = [], []
    for t in range(steps):
        h, c = core(features[:, t], (h * continues[:, t], c * continues[:, t]))
        hs.append(h)
        cs.append(c)
    hidden = torch.stack(hs, dim=1)
    return hidden, (hidden, torch.stack(cs, dim=1))


def make_actor_critic(algo: OnPolicyConfig, spec: EnvSpec) -> ActorCritic:
    def torso() -> Torso:
        return make_torso(
            algo.network, spec.observation_space, algo.hidden_sizes, algo.mlp_activation
        )

    actor_torso = torso()  # first: the same seed gives the same policy torso either way
    critic_torso = torso() if algo.separate_critic else None
    network = ActorCritic(
        actor_torso,
        spec.action_space,
        algo.name,
        algo.lstm_size,
        critic_torso,
        action_mask=spec.action_mask,
    )
    if algo.orthogonal_init:
        initialize_orthogonally(network)
    return network


TORSO_GAIN = math.sqrt(2.0)
"""The orthogonal init's gain in the torsos: ReLU's (and the references' for tanh too)."""
POLICY_GAIN = 0.01
"""The policy head's: near-zero logits (or means), so the first policy is near uniform."""
VALUE_GAIN = 1.0
"""The value head's."""


def initialize_orthogonally(network: ActorCritic) -> None:
    """The reference implementations' init (OpenAI baselines' `ortho_init`, SB3's
    `ortho_init=True`, CleanRL's `layer_init`): every linear and convolution layer of the
    torsos orthogonal with gain sqrt(2), the policy head with 0.01 and the value head with 1,
    biases zero. The LSTM cores and a continuous policy's log-std are left as they are."""
    torsos = (
        [network.torso] if network.critic_torso is None else [network.torso, network.critic_torso]
    )
    layers = [
        (layer, TORSO_GAIN)
        for torso in torsos
        for layer in torso.modules()
        if isinstance(layer, nn.Linear | nn.Conv2d)
    ]
    for layer, gain in [*layers, (network.policy, POLICY_GAIN), (network.value, VALUE_GAIN)]:
        nn.init.orthogonal_(layer.weight, gain=gain)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


class ActorCriticPolicy:
    """Samples from the policy; evaluation samples too, or takes the distribution's mode
    when `greedy_evaluation`. Reports the log-probabilities of what it did and, when
    recurrent, the state it acted from ("h", "c"), keeping each env's state between calls."""

    def __init__(self, network: ActorCritic, seed: int, greedy_evaluation: bool) -> None:
        self.network = network.eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.greedy_evaluation = greedy_evaluation
        self.version = 0
        self.state: State | None = None

    def act(
        self,
        obs: np.ndarray,
        episode_starts: np.ndarray,
        *,
        explore: bool,
        env_steps: int = 0,
    ) -> PolicyOutput:
        starts = torch.as_tensor(np.asarray(episode_starts, dtype=bool))
        with torch.inference_mode():
            state = self._state_before(starts)
            head, states = self.network.policy_forward(
                torch.from_numpy(obs).unsqueeze(1), starts[:, None], state
            )
            head = head[:, 0]
            distribution = self.network.distribution(head)
            if not explore and self.greedy_evaluation:
                actions = distribution.mode
            elif self.network.continuous:
                noise = torch.randn(head.shape, generator=self.generator)
                actions = head + noise * self.network.log_std.exp()
            else:  # each categorical's probabilities, sampled with our generator
                chunks = head.split(self.network.categorical_sizes, dim=-1)
                actions = torch.cat(
                    [
                        torch.multinomial(torch.softmax(chunk, -1), 1, generator=self.generator)
                        for chunk in chunks
                    ],
                    dim=-1,
                )
                if not self.network.factored:
                    actions = actions.squeeze(-1)
            logp = distribution.log_prob(actions)
        reported = {}
        if states is not None:
            self.state = (states[0][:, 0], states[1][:, 0])
            assert state is not None
            keep = (~starts).float().unsqueeze(-1)  # the state acted from, after resets
            reported = {"h": (state[0] * keep).numpy(), "c": (state[1] * keep).numpy()}
        return PolicyOutput(actions=actions.numpy(), extras={"logp": logp.numpy()}, state=reported)

    def _state_before(self, starts: torch.Tensor) -> State | None:
        """The state carried from the last call; zeros for a new set of envs (every env
        starting an episode, with a different number of envs than before)."""
        if not self.network.recurrent:
            return None
        if self.state is None or len(self.state[0]) != len(starts):
            if not bool(starts.all()):
                carried = "none" if self.state is None else len(self.state[0])
                raise ValueError(
                    f"a recurrent policy acting for {len(starts)} envs, with state for "
                    f"{carried}, needs every env to start an episode"
                )
            return self.network.initial_state(len(starts))
        return self.state

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
    """(B, T): V(x_{t+1}), the value of the true final observation after a truncation;
    without gradient (it is a target)."""


def unroll_state(batch: Unrolls, tensor: Callable[[np.ndarray], torch.Tensor]) -> State | None:
    """The recurrent state each unroll's first step was acted from, or None."""
    if not batch.initial_state:
        return None
    return tensor(batch.initial_state["h"]), tensor(batch.initial_state["c"])


def forward_unrolls(
    wrapped_network: Callable[..., SequenceOutput],
    network: ActorCritic,
    batch: Unrolls,
    tensor: Callable[[np.ndarray], torch.Tensor],
) -> UnrollForward:
    """One forward pass over every observation of `batch` (from each unroll's stored state,
    starting afresh where an episode starts), and the values of the final observations of
    its truncated steps, each from the state after its step. `wrapped_network` is `network`
    as wrapped for training (all-reduced, compiled), which the pass that needs gradients
    goes through."""
    num_steps = batch.rewards.shape[1]
    starts = tensor(batch.episode_starts)
    out = wrapped_network(tensor(batch.obs), starts, unroll_state(batch, tensor))
    next_values = out.values[:, 1:].detach().clone()
    if len(batch.final_obs):
        index = tensor(batch.final_index)
        unroll, step = index[:, 0], index[:, 1]
        state = None
        if out.states is not None:
            state = (out.states[0][unroll, step].detach(), out.states[1][unroll, step].detach())
        continuing = torch.zeros(len(unroll), 1, dtype=torch.bool, device=next_values.device)
        with torch.no_grad():
            final = network(tensor(batch.final_obs).unsqueeze(1), continuing, state)
        next_values[unroll, step] = final.values[:, 0]
    return UnrollForward(
        head=out.head[:, :num_steps], values=out.values[:, :num_steps], next_values=next_values
    )


def episode_flags(
    batch: Unrolls, tensor: Callable[[np.ndarray], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(terminated, ended) as float (B, T): `terminated` stops the bootstrap, `ended`
    (termination or truncation) stops any credit flowing from the next episode into this
    one."""
    terminated = tensor(batch.terminated).float()
    truncated = tensor(batch.truncated).float()
    return terminated, torch.maximum(terminated, truncated)
