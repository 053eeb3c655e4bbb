"""The on-policy family: fixed-length unrolls with behaviour log-probabilities into a bounded
queue, each given to a learner once (PPO's epochs and IMPALA's `epochs` pass over a batch
within one update), with unrolls too old for the learner dropped and counted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rayrl.config import AlgorithmConfig, Config, LearnerConfig, MLPActivation, RunConfig
from rayrl.contract import StoreKind
from rayrl.core import Unrolls
from rayrl.envs.spec import EnvSpec, observation_bytes
from rayrl.errors import ConfigError
from rayrl.processing import UnrollProcessor
from rayrl.strict import bounded
from rayrl.trajectory_queue import TrajectoryQueue


@dataclass(frozen=True)
class OnPolicyConfig(AlgorithmConfig):
    """Settings every on-policy algorithm has: the unroll length and the queue."""

    steps_per_chunk: int = bounded(80, ge=1)
    """Vector-env steps per worker chunk, which is one unroll per env: the unroll length
    (IMPALA's unroll length, CleanRL's num_steps)."""
    queue_capacity: int = bounded(64, ge=1)
    """Unrolls the queue between workers and learners holds; workers wait when it is full."""
    max_policy_lag: int = bounded(50, ge=0)
    """Unrolls acted by weights more than this many versions (updates) older than the
    learner's are dropped and counted instead of learned from."""
    lstm_size: int | None = bounded(None, ge=1)
    """Units of an LSTM core between the torso and the heads, which gives the policy memory
    of the episode so far (for partially observed tasks); None: feed-forward."""
    separate_critic: bool = False
    """Give the value head a torso (and LSTM core) of its own instead of sharing the
    policy's, so that the value loss shapes only the critic's features (as CleanRL's
    continuous-control PPO does; sb3-contrib's RecurrentPPO gives its critic an LSTM of its
    own). It costs a second forward pass in the workers and the learner."""
    mlp_activation: MLPActivation = "relu"
    """The nonlinearity between an MLP torso's layers: "relu", or "tanh" (the MLP policies of
    OpenAI baselines, Stable-Baselines3 and CleanRL's continuous-control PPO). The CNN
    torsos keep their papers' ReLU."""
    orthogonal_init: bool = False
    """Initialise the network as OpenAI baselines, Stable-Baselines3 and CleanRL do:
    orthogonal weights with gain sqrt(2) in the torsos, 0.01 on the policy head (a first
    policy close to uniform) and 1 on the value head, zero biases; an LSTM core keeps torch's
    default, as sb3-contrib's RecurrentPPO leaves it. False: torch's default for every
    layer."""
    eval_policy: Literal["sample", "greedy"] = "sample"
    """How evaluation acts: "sample" from the policy, as the IMPALA and PPO papers'
    evaluations do, or "greedy" (the most likely action, the mean for continuous ones)."""

    def check(self, config: Config) -> None:
        super().check(config)
        learner = config.learner
        needed = learner.num_learners * learner.batch_size * learner.batches_per_request
        if self.queue_capacity < needed:
            raise ConfigError(
                f"algorithm.queue_capacity={self.queue_capacity} cannot hold one request of every "
                f"learner: it must be at least learner.num_learners x learner.batch_size x "
                f"learner.batches_per_request = {needed}"
            )


def planned_updates(algo: OnPolicyConfig, learner: LearnerConfig, run: RunConfig) -> int:
    """Updates the run's env-step budget pays for (each learner update consumes
    `learner.batch_size` unrolls of `steps_per_chunk` steps, on each of the learners): the length
    of linear schedules."""
    steps_per_update = learner.batch_size * algo.steps_per_chunk * learner.num_learners
    return max(1, run.total_env_steps // steps_per_update)


def policy_lag(batch: Unrolls, learner_version: int) -> float:
    """How many updates behind the learner the weights that acted the batch's unrolls are,
    on average, when the learner learns from them (`learner_version`: its updates so far).
    The workers' own figure (`worker/policy_lag_p50`) is taken when a chunk is delivered;
    this one adds the time the unrolls waited in the queue, which is what the decoupled
    objective and V-trace correct for."""
    return float(learner_version - batch.policy_versions.mean())


@dataclass(frozen=True)
class QueueSettings:
    """What the unroll queue reads."""

    queue_capacity: int
    max_policy_lag: int
    items_per_chunk: int


class OnPolicy:
    store = StoreKind(namespace="queue", items="unrolls", drops_stale=True)

    def chunk_steps(self, algo: OnPolicyConfig) -> int:
        return algo.steps_per_chunk

    def make_processor(self, algo: OnPolicyConfig, spec: EnvSpec, num_envs: int) -> UnrollProcessor:
        return_discount = None if spec.reward_clip is None else algo.gamma
        return UnrollProcessor(num_envs, algo.steps_per_chunk, return_discount)

    def store_settings(self, config: Config, spec: EnvSpec) -> QueueSettings:
        algo = config.algorithm
        assert isinstance(algo, OnPolicyConfig)
        return QueueSettings(
            queue_capacity=algo.queue_capacity,
            max_policy_lag=algo.max_policy_lag,
            items_per_chunk=config.workers.envs_per_worker,
        )

    def make_store(self, settings: QueueSettings) -> TrajectoryQueue:
        return TrajectoryQueue(
            settings.queue_capacity, settings.max_policy_lag, settings.items_per_chunk
        )

    def persists(self, algo: OnPolicyConfig) -> bool:
        return False

    def times_learned_from(self, algo: OnPolicyConfig) -> float:
        return 1.0

    def store_memory(self, config: Config, spec: EnvSpec) -> int:
        """`algorithm.queue_capacity` unrolls of `steps_per_chunk` + 1 observations (the actions,
        rewards and behaviour outputs beside them are small against the observations)."""
        algo = config.algorithm
        assert isinstance(algo, OnPolicyConfig)
        return algo.queue_capacity * (algo.steps_per_chunk + 1) * (observation_bytes(spec) + 64)


ON_POLICY = OnPolicy()
