"""The algorithm contract: what an algorithm is made of, as Protocols the code annotates with.

An `Algorithm` names its config class, its experience family and two builders: the policy
(CPU, in every rollout worker and the evaluator) and the learner (in the learner process,
on the configured device). The family (`rayrl.families`: off-policy replay or on-policy
unrolls) builds the step processor that turns env steps into chunks and the experience
store that holds them for the learner, and makes the family's config checks, so an
algorithm module states only what is its own. Both runtimes use only what is written here::

    policy = algorithm.build_policy(config.algorithm, spec, Acting(seed, i, envs, workers))
    processor = algorithm.family.make_processor(config.algorithm, spec, num_envs)
    store = algorithm.family.make_store(algorithm.family.store_settings(config, spec))
    learner = algorithm.build_learner(config.algorithm, spec, config.learner, config.run)

    out = policy.act(env.obs, env.episode_starts, explore=True, env_steps=n)  # worker
    processor.process(env.step(out.actions, out.extras, out.state), policy.version)
    store.add(processor.flush())                           # a chunk per request
    (batch,) = store.sample(batch_size, 1, learner.updates)
    result = learner.update(batch)                         # one optimization step
    store.update_priorities(batch.indices, result.priorities)
    policy.set_weights(learner.get_weights())              # every sync_interval updates

An env with several agents (`EnvSpec.agents`) is a vector env with a slot per agent per
copy: `num_envs` above counts slots, the policy acts for every slot, and each step's
`extras["active"]` marks the slots whose agent acted. An algorithm that declares
`several_agents` leaves the others out of its loss; any other refuses such an env in
`build_policy`, before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from rayrl.config import AlgorithmConfig, Config, LearnerConfig, RunConfig
from rayrl.core import SamplingPace, StepBatch, StoreStats, TransitionBatch, Unrolls
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.normalization import NormalizingLearner, NormalizingPolicy
from rayrl.roles import Learner as Learner  # the two roles, part of the contract
from rayrl.roles import Policy as Policy
from rayrl.seeding import derive_seed

C = TypeVar("C", bound=AlgorithmConfig)
C_contra = TypeVar("C_contra", bound=AlgorithmConfig, contravariant=True)
S = TypeVar("S")
"""A family's store settings (`ReplaySettings`, `QueueSettings`)."""
K = TypeVar("K", bound="Chunk")
"""What a processor flushes and its store adds (`TransitionChunk`, `Unrolls`)."""
K_co = TypeVar("K_co", bound="Chunk", covariant=True)
K_contra = TypeVar("K_contra", bound="Chunk", contravariant=True)
B = TypeVar("B", bound="TransitionBatch | Unrolls")
"""What a store samples and its learner updates from."""
B_co = TypeVar("B_co", bound="TransitionBatch | Unrolls", covariant=True)


@dataclass(frozen=True)
class Acting:
    """Whom a policy acts for: a rollout worker's envs (with their share of the fleet's
    exploration), or the evaluation."""

    run_seed: int
    worker_index: int | None = None
    """The rollout worker; None for the evaluation policy."""
    envs_per_worker: int = 1
    num_workers: int = 1

    @classmethod
    def for_evaluation(cls, run_seed: int) -> Acting:
        return cls(run_seed)

    @property
    def evaluation(self) -> bool:
        return self.worker_index is None

    @property
    def env_slots(self) -> range:
        """This worker's envs among all the fleet's (`fleet_envs`) envs."""
        first = (self.worker_index or 0) * self.envs_per_worker
        return range(first, first + self.envs_per_worker)

    @property
    def fleet_envs(self) -> int:
        return self.num_workers * self.envs_per_worker

    @property
    def seed(self) -> int:
        """This policy's own random stream (exploration, sampling)."""
        index = -1 if self.worker_index is None else self.worker_index
        return derive_seed(self.run_seed, "policy", index + 1)


class Chunk(Protocol):
    """What a processor flushes and a store adds: a `TransitionChunk` or `Unrolls`."""

    def __len__(self) -> int: ...

    @property
    def policy_version(self) -> int: ...


class StepProcessor(Protocol[K_co]):
    """Turns env steps into what the store keeps (n-step transitions, unrolls)."""

    def process(self, step: StepBatch, policy_version: int) -> None: ...

    def flush(self) -> K_co:
        """Everything completed since the last flush, as one chunk."""
        ...


class ExperienceStore(Protocol[K_contra, B_co]):
    """Where chunks wait for the learner: a replay buffer with its samples-per-insert
    limit (off-policy), or a bounded queue of unrolls (on-policy). Never blocks: callers
    that must wait (the Ray experience actor) wait on `can_insert` / `can_sample`, dropping
    stale items first (`drop_stale`), which may make room for inserts."""

    items_per_chunk: int
    """Items (transitions or unrolls) a worker chunk adds, about."""

    def can_insert(self, count: int) -> bool: ...

    def add(self, chunk: K_contra) -> int:
        """Insert a chunk; returns the items inserted."""
        ...

    def drop_stale(self, learner_version: int) -> int:
        """Remove the items too old to learn from for a learner at `learner_version`
        (on-policy: unrolls past `algorithm.max_policy_lag`; a replay keeps all) and
        return how many; `sample` serves only what is left."""
        ...

    def can_sample(self, batch_size: int, num_batches: int, learner_version: int) -> bool:
        """Whether `sample` can serve the request now (a query: it changes nothing)."""
        ...

    def sample(self, batch_size: int, num_batches: int, learner_version: int) -> Sequence[B_co]: ...

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None: ...

    def stats(self) -> StoreStats: ...


@runtime_checkable
class PersistentStore(ExperienceStore[K_contra, B_co], Protocol[K_contra, B_co]):
    """A store that can be saved beside a checkpoint and refilled on resume (the optional
    capability: runtimes check for it with `isinstance`)."""

    def save(self, path: Path, env_steps: int) -> None:
        """Write the store to `path`, stamped with the env steps of the checkpoint it goes
        with."""
        ...

    def load(self, path: Path) -> None:
        """Refill from `path` (checked with `rayrl.replay.store.saved_replay_problem`)."""
        ...


def as_persistent(store: ExperienceStore[K, B]) -> PersistentStore[K, B]:
    """`store` as a store that can be saved, or a TypeError: a family that persists its
    store must build one that can (`Family.persists`)."""
    if not isinstance(store, PersistentStore):
        raise TypeError(f"{type(store).__name__} cannot be saved with a checkpoint")
    return store


@dataclass(frozen=True)
class StoreKind:
    """How a family's store is named in metrics, logs and actor names."""

    namespace: str
    """Metric namespace and actor role: "replay" or "queue"."""
    items: str
    """What it holds: "transitions" or "unrolls"."""
    drops_stale: bool
    """Whether it discards items too old to learn from (reported as `<namespace>/dropped_stale`)."""


class Family(Protocol[C_contra, S, K, B_co]):
    """How experience flows for a kind of algorithm: off-policy (n-step transitions into a
    rate-limited replay) or on-policy (unrolls into a queue with a policy-lag limit). Its
    config checks are the family config class's `check` (`rayrl.families`)."""

    store: StoreKind

    def chunk_steps(self, algo: C_contra) -> int:
        """Vector-env steps a worker takes per chunk."""
        ...

    def make_processor(self, algo: C_contra, spec: EnvSpec, num_envs: int) -> StepProcessor[K]: ...

    def store_settings(self, config: Config, spec: EnvSpec) -> S:
        """Everything the store reads, as plain, picklable values (no torch)."""
        ...

    def make_store(self, settings: S) -> ExperienceStore[K, B_co]: ...

    def store_memory(self, config: Config, spec: EnvSpec) -> int:
        """About how many bytes the store holds when full (what Ray is asked to reserve
        for it, and what pre-flight checks against the nodes' memory)."""
        ...

    def persists(self, algo: C_contra) -> bool:
        """Whether the store is saved with each checkpoint (then it is a `PersistentStore`)."""
        ...

    def times_learned_from(self, algo: C_contra) -> float:
        """How many batches an item is in, on average (replay's samples per insert; 1 for
        unrolls, which one update learns from)."""
        ...

    def sampling_pace(self, config: Config, spec: EnvSpec) -> SamplingPace | None:
        """How far the Ray runtime's workers may sample ahead of the learner; None: as far as
        the store's capacity or rate limit lets them."""
        ...


@dataclass(frozen=True)
class Algorithm(Generic[C, B]):
    """An algorithm: its config, its family and builders for its own parts."""

    config_class: type[C]
    family: Family[C, Any, Any, B]
    make_policy: Callable[[C, EnvSpec, Acting], Policy]
    """(algorithm config, env spec, whom it acts for) -> a CPU policy."""
    make_learner: Callable[[C, EnvSpec, LearnerConfig, RunConfig], Learner[B]]
    """(algorithm config, env spec, learner settings, run settings) -> the learner, on the
    configured device; it reads the run's seed and step budget (for schedules)."""
    several_agents: bool = False
    """Whether it trains one policy shared by several agents of an env (slots of the vector
    env, `EnvSpec.agents`): its learner leaves an idle agent's steps out."""

    @property
    def name(self) -> str:
        """Its `algorithm.name`, the key of `rayrl.algorithms.ALGORITHMS`: the default of its
        config class's `name`, the one place the name is written."""
        return self.config_class.name

    def build_policy(self, algo: C, spec: EnvSpec, acting: Acting) -> Policy:
        """The algorithm's policy, acting on normalized observations when the spec says so
        (`rayrl.normalization`): what workers and the evaluator run."""
        if spec.agents and not self.several_agents:
            raise ConfigError(
                f"algorithm.name={self.name!r} cannot train the {len(spec.agents)} agents of "
                f"this env ({', '.join(spec.agents)}) yet; use appo or ppo (one policy "
                "shared by all agents)"
            )
        policy = self.make_policy(algo, spec, acting)
        if spec.observation_clip is None:
            return policy
        return NormalizingPolicy(policy, spec)

    def build_learner(
        self, algo: C, spec: EnvSpec, settings: LearnerConfig, run: RunConfig
    ) -> Learner[B]:
        """The algorithm's learner, learning from normalized observations (publishing their
        statistics) or rewards when the spec says so: what the runtimes train."""
        learner = self.make_learner(algo, spec, settings, run)
        if spec.observation_clip is None and spec.reward_clip is None:
            return learner
        return NormalizingLearner(learner, spec, self.family.times_learned_from(algo))
