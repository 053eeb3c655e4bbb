"""The value types that cross component (and process) boundaries.

Data flow, in one process (`rayrl.local_runtime`) or spread over Ray actors (`rayrl.ray`);
the interfaces are in `rayrl.contract`::

    env --StepBatch--> StepProcessor --TransitionChunk / Unrolls--> ExperienceStore
    --TransitionBatch / Unrolls--> Learner --ModelInfo--> Policy (in every worker) --> env

Everything here is plain data (numpy arrays, ints, floats) so that it pickles cheaply and
travels through Ray's object store without copies; torch tensors never cross a process.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias, cast

import numpy as np

_Column: TypeAlias = "np.ndarray | dict[str, np.ndarray]"
"""One field of `Unrolls` indexed by unroll first: an array, or a dict of them (`extras`)."""


@dataclass(frozen=True)
class ModelInfo:
    """Versioned policy weights, published by the learner and applied by every worker.

    `weights` is a CPU state dict of numpy arrays (several times faster through Ray's object
    store than torch tensors). `version` counts publications and grows by one each time.
    """

    version: int
    weights: dict[str, np.ndarray]
    published_at: float = 0.0
    """`time.time()` at publication, for the weight-sync latency metric."""


@dataclass
class StepBatch:
    """One step of a vector env: in `obs[i]`, `actions[i]` led to `next_obs[i]`.

    `next_obs` is always the true successor, also where an episode ended (the autoreset
    adapter takes it from the env's final observation); the next step's `obs` is the reset
    observation where `env_reset` is set.
    """

    obs: np.ndarray
    """Observations the actions were taken in, shape (num_envs, *obs_shape)."""
    actions: np.ndarray
    """Actions taken, shape (num_envs, ...)."""
    rewards: np.ndarray
    """Learning-signal rewards (sign-clipped where configured), float32 (num_envs,)."""
    terminated: np.ndarray
    """True where the successor is terminal for learning: no bootstrap. Includes a lost life
    when `env.terminal_on_life_loss` is set."""
    truncated: np.ndarray
    """True where the episode was cut (time limit): bootstrap from `next_obs`."""
    next_obs: np.ndarray
    """True successor observations, shape (num_envs, *obs_shape)."""
    env_reset: np.ndarray
    """True where the env restarted after this step, so the next `obs` begins a new episode."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Policy outputs the processor may keep, e.g. behaviour log-probs and values."""
    state: dict[str, np.ndarray] = field(default_factory=dict)
    """The recurrent state the policy acted from (see `PolicyOutput.state`)."""


@dataclass
class PolicyOutput:
    """What a policy returns for a batch of observations."""

    actions: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Algorithm-specific per-env outputs (IMPALA: behaviour log-probs)."""
    state: dict[str, np.ndarray] = field(default_factory=dict)
    """A recurrent policy's per-env state before this step (after the resets of the envs
    that began an episode), each (num_envs, ...); empty for feed-forward policies."""


@dataclass
class TransitionChunk:
    """N-step transitions from one worker, with each observation frame stored once.

    `frames` holds unique frames (an 84x84 Atari frame, or a whole observation where
    observations are not stacked); `obs_idx[t]` and `next_obs_idx[t]` index into it, one
    index per stacked frame. A stacked Atari transition thus costs about one frame instead
    of eight. A chunk is self-contained: every index points into its own `frames`.
    """

    frames: np.ndarray
    obs_idx: np.ndarray
    """int32 (T, stack) indices into `frames`; stack is 1 for unstacked observations."""
    actions: np.ndarray
    rewards: np.ndarray
    """float32 (T,): discounted n-step reward sum."""
    discounts: np.ndarray
    """float32 (T,): gamma**k to the bootstrap observation, 0 where the episode terminated."""
    next_obs_idx: np.ndarray
    """int32 (T, stack): the bootstrap observation (n steps later, or the episode's last)."""
    policy_version: int
    """Version of the weights that chose most of these actions (the oldest, conservatively)."""

    def __len__(self) -> int:
        return len(self.actions)


@dataclass
class Unrolls:
    """Fixed-length trajectories, time within each: E unrolls of T steps.

    A worker's chunk holds one unroll per env; a learner batch stacks B of them. `obs[e, t]`
    is the observation acted on at step t and `obs[e, T]` the one after the last step (the
    bootstrap observation). A step that ended in a truncation bootstraps from its true final
    observation, kept in `final_obs` at `final_index` (unroll, step).

    What the policy reported travels generically: `extras` per step (the behaviour
    log-probabilities, "logp"), `initial_state` per unroll (a recurrent policy's state before
    its first step), so that an algorithm can add its own without this class, the
    processor or the queue naming them.
    """

    obs: np.ndarray
    """(E, T+1, *obs_shape)."""
    actions: np.ndarray
    """(E, T, ...) as the policy produced them (before clipping to an action space)."""
    rewards: np.ndarray
    """float32 (E, T), the learning signal."""
    terminated: np.ndarray
    """bool (E, T): no bootstrap after this step."""
    truncated: np.ndarray
    """bool (E, T): the episode was cut after this step; bootstrap from its final obs."""
    env_reset: np.ndarray
    """bool (E, T): the env began a new episode after this step, so `obs[e, t + 1]` is a
    reset observation (differs from `terminated | truncated` where a lost life is terminal
    for learning but the game goes on)."""
    final_obs: np.ndarray
    """(K, *obs_shape): true final observations of the truncated steps."""
    final_index: np.ndarray
    """int64 (K, 2): (unroll, step) of each final observation."""
    policy_versions: np.ndarray
    """int64 (E,): the oldest weights version that acted in each unroll."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """The policy's per-step outputs, each (E, T, ...): "logp", the behaviour
    log-probability of each action."""
    initial_state: dict[str, np.ndarray] = field(default_factory=dict)
    """A recurrent policy's state before each unroll's first step, each (E, ...); empty for
    feed-forward policies."""

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def policy_version(self) -> int:
        return int(self.policy_versions.min()) if len(self.policy_versions) else 0

    @property
    def episode_starts(self) -> np.ndarray:
        """bool (E, T+1): where `obs[e, t]` begins an episode after a step of this unroll
        (False at t = 0, whose state `initial_state` already is)."""
        first = np.zeros((len(self), 1), dtype=bool)
        return np.concatenate([first, self.env_reset], axis=1)

    def split(self) -> list[Unrolls]:
        """One `Unrolls` per unroll."""
        parts = []
        for e in range(len(self)):
            mine = self.final_index[:, 0] == e
            index = self.final_index[mine].copy()
            index[:, 0] = 0
            columns = {name: _rows(value, e) for name, value in self._per_unroll().items()}
            parts.append(Unrolls._from_columns(columns, self.final_obs[mine], index))
        return parts

    @staticmethod
    def concatenate(parts: list[Unrolls]) -> Unrolls:
        """Stack unrolls into one batch."""
        offsets = np.cumsum([0] + [len(p) for p in parts[:-1]])
        indices = []
        for offset, part in zip(offsets, parts, strict=True):
            index = part.final_index.copy()
            index[:, 0] += offset
            indices.append(index)
        columns = [p._per_unroll() for p in parts]
        return Unrolls._from_columns(
            {name: _stack([c[name] for c in columns]) for name in columns[0]},
            final_obs=np.concatenate([p.final_obs for p in parts]),
            final_index=np.concatenate(indices).reshape(-1, 2),
        )

    @staticmethod
    def _from_columns(
        columns: dict[str, _Column], final_obs: np.ndarray, final_index: np.ndarray
    ) -> Unrolls:
        """Rebuild from `_per_unroll`'s columns: the cast says that they are this class's own
        fields by name, which a type checker cannot follow through `fields()`."""
        own_fields = cast(dict[str, Any], columns)
        return Unrolls(**own_fields, final_obs=final_obs, final_index=final_index)

    def _per_unroll(self) -> dict[str, _Column]:
        """Every field indexed by unroll first (all but the final observations)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("final_obs", "final_index")
        }


def _rows(value: _Column, e: int) -> _Column:
    if isinstance(value, dict):
        return {key: array[e : e + 1] for key, array in value.items()}
    return value[e : e + 1]


def _stack(values: list[_Column]) -> _Column:
    if isinstance(values[0], dict):
        dicts = cast(list[dict[str, np.ndarray]], values)
        return {key: np.concatenate([d[key] for d in dicts]) for key in dicts[0]}
    return np.concatenate(cast(list[np.ndarray], values))


@dataclass
class TransitionBatch:
    """A training batch sampled from replay."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray
    next_obs: np.ndarray
    weights: np.ndarray
    """Importance-sampling weights (all ones for uniform replay), float32 (B,)."""
    indices: np.ndarray
    """int64 (B,) handles for `update_priorities`; stale handles are ignored there."""


@dataclass
class NonFiniteSteps:
    """Learner updates in which an optimizer step was skipped because the gradient was not
    finite (NaN or infinite): in total, and how many of the latest updates in a row."""

    skipped: int = 0
    in_a_row: int = 0


@dataclass
class UpdateResult:
    """What one learner update returns."""

    metrics: dict[str, float]
    """Namespaced scalars (`learner/...`)."""
    priorities: np.ndarray | None = None
    """New priorities for the batch's `indices` (prioritized replay), or None."""


@dataclass
class ChunkStats:
    """What a worker reports with each chunk; small, so the driver fetches it."""

    worker_index: int
    env_steps: int
    episode_returns: list[float]
    """Undiscounted, unclipped returns of the episodes (whole games) that ended."""
    episode_lengths: list[int]
    policy_version: int
    agent_returns: dict[str, list[float]] = field(default_factory=dict)
    """With several agents per env: each agent's returns in those episodes (the episode's
    return is their mean)."""
    act_s: float = 0.0
    """Seconds spent in policy inference."""
    step_s: float = 0.0
    """Seconds spent stepping the env."""
    process_s: float = 0.0
    """Seconds spent in the step processor."""
    sync_latencies_s: list[float] = field(default_factory=list)
    """Weight versions a worker took up since its last chunk: publish-to-in-use delays."""


@dataclass
class EvalResult:
    """Returns and lengths of evaluation episodes."""

    returns: np.ndarray
    lengths: np.ndarray
    policy_version: int = 0
    video: bytes | None = None
    """An MP4 of one more greedy episode, when the evaluation was asked to record one."""
    agent_returns: dict[str, np.ndarray] = field(default_factory=dict)
    """With several agents per env: each agent's returns (`returns` holds their means)."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    def metrics(self) -> dict[str, float]:
        """Namespaced metrics of this evaluation."""
        return {
            "eval/return_mean": self.mean,
            "eval/return_std": float(np.std(self.returns)),
            "eval/return_min": float(np.min(self.returns)),
            "eval/return_max": float(np.max(self.returns)),
            "eval/length_mean": float(np.mean(self.lengths)),
            "eval/episodes": float(len(self.returns)),
            **{
                f"eval/agent_return/{agent}": float(np.mean(returns))
                for agent, returns in self.agent_returns.items()
            },
        }


@dataclass(frozen=True)
class SamplingPace:
    """How far the Ray runtime's workers may sample ahead of the learner (an on-policy run's
    `algorithm.sample_ahead_updates`): unrolls for at most `updates_ahead` updates beyond the
    one the learner works on, each update learning from `unroll_steps_per_update` unroll
    steps, which with several agents per env are `agents_per_env` times its env steps."""

    unroll_steps_per_update: int
    updates_ahead: int
    agents_per_env: int = 1
    steps_per_unroll: int = 1
    """Steps of one unroll: what a dropped unroll was worth in env steps (times the
    agents)."""

    def env_steps_of(self, updates: int) -> int:
        """Env steps `updates` updates learn from, rounded once (a rounding per update would
        let the pace fall a little further behind the learner at each update)."""
        return updates * self.unroll_steps_per_update // self.agents_per_env

    def env_steps_of_unrolls(self, unrolls: int) -> int:
        """Env steps `unrolls` unrolls hold."""
        return unrolls * self.steps_per_unroll // self.agents_per_env

    @property
    def lead_env_steps(self) -> int:
        """Env steps the workers may have sampled beyond what the published weights learned
        from: the update under way and the ones ahead of it."""
        return self.env_steps_of(self.updates_ahead + 1)


@dataclass
class StoreStats:
    """What an experience store reports: its size and what went in and out."""

    size: int
    inserted: int
    sampled: int
    dropped: int = 0
    """Items discarded unused (unrolls older than `max_policy_lag`)."""
