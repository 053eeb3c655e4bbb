"""The on-policy family: fixed-length unrolls with behaviour log-probabilities into a bounded
queue, each given to a learner once (PPO's epochs and IMPALA's `epochs` pass over a batch
within one update), with unrolls too old for the learner dropped and counted."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rayrl.config import AlgorithmConfig, Config, LearnerConfig, MLPActivation, RunConfig
from rayrl.contract import StoreKind
from rayrl.core import SamplingPace, Unrolls
from rayrl.envs.spec import EnvSpec, observation_bytes
from rayrl.errors import ConfigError
from rayrl.processing import UnrollProcessor
from rayrl.strict import bounded
from rayrl.trajectory_queue import TrajectoryQueue

DEFAULT_LR_BUDGET_EXPONENT = 0.25
"""`algorithm.lr_budget_exponent` unless set."""


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
    sample_ahead_updates: int | None = bounded(None, ge=0)
    """Ray runtime: how many updates ahead of the learner the workers may sample. A worker
    starts no chunk while the unrolls sampled and not yet learned from by the published
    weights would already make this many updates' worth beyond the one the learner works
    on: with 1 the workers act the next update's unrolls while the learner makes the current
    update (a policy lag of about 1), with 0 sampling and learning alternate (a lag of 0, no
    overlap). None: no bound but the queue's capacity, which the workers fill with unrolls
    acted while earlier ones wait. The local runtime alternates sampling and learning
    always."""
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
    lr_reference_env_steps: int | None = bounded(None, ge=1)
    """The budget (env steps) `learner.lr` was tuned at. A run of another budget
    (`run.total_env_steps`) starts at learner.lr x (lr_reference_env_steps /
    run.total_env_steps) ** lr_budget_exponent: a smaller rate for a longer budget, a larger
    one for a shorter budget. With the rate decayed over the budget, a run five times as long
    at the same rate takes five times the steps at every stage of the decay, and the rate
    that learns best falls as the budget grows (Bjorck et al. 2025, "Scaling Optimal LR
    Across Token Horizons", for language models; MinAtar in bench/reports/learning.md). None:
    learner.lr at every budget."""
    lr_budget_exponent: float = bounded(DEFAULT_LR_BUDGET_EXPONENT, gt=0.0, le=1.0)
    """The power of the budget ratio in `lr_reference_env_steps`' scaling. 0.25 joins the
    rates that learned best in minatar_impala's studies (64 unrolls per update): 3e-3 at 1M
    env steps and 2e-3 at 5M (bench/reports/learning.md). Checked at those two budgets only;
    far shorter ones get larger rates (5.3e-3 at 100k)."""
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
        self._check_sample_ahead(learner)
        if (
            self.lr_reference_env_steps is None
            and self.lr_budget_exponent != DEFAULT_LR_BUDGET_EXPONENT
        ):
            raise ConfigError(
                f"algorithm.lr_budget_exponent={self.lr_budget_exponent} scales nothing without "
                "algorithm.lr_reference_env_steps: set the budget learner.lr was tuned at, or "
                "leave the exponent out"
            )

    def _check_sample_ahead(self, learner: LearnerConfig) -> None:
        """The learner must be able to publish from what the workers may sample ahead, or the
        run would wait forever: one request's batches, and one publication's updates."""
        ahead = self.sample_ahead_updates
        if ahead is None:
            return
        for field, needed in (
            ("learner.batches_per_request", learner.batches_per_request),
            ("learner.sync_interval", learner.sync_interval),
        ):
            if ahead + 1 < needed:
                raise ConfigError(
                    f"algorithm.sample_ahead_updates={ahead} lets the workers sample {ahead + 1} "
                    f"update(s) ahead, and the learner needs {field}={needed} updates' unrolls "
                    f"before it publishes: set algorithm.sample_ahead_updates to at least "
                    f"{needed - 1}, or null"
                )
        if self.max_policy_lag <= ahead:
            raise ConfigError(
                f"algorithm.max_policy_lag={self.max_policy_lag} would drop unrolls that "
                f"algorithm.sample_ahead_updates={ahead} acts on purpose ({ahead + 1} "
                f"update(s) behind the learner, with the weights' delivery): set "
                f"algorithm.max_policy_lag to at least {ahead + 1}"
            )


def unroll_steps_per_update(algo: OnPolicyConfig, learner: LearnerConfig) -> int:
    """Unroll steps one update learns from: `learner.batch_size` unrolls of
    `steps_per_chunk` steps on each of the learners. An unroll is one agent's: with
    `EnvSpec.agents_per_env` agents, that many unroll steps make one env step."""
    return learner.batch_size * algo.steps_per_chunk * learner.num_learners


def planned_updates(
    algo: OnPolicyConfig, learner: LearnerConfig, run: RunConfig, spec: EnvSpec
) -> int:
    """Updates the run's env-step budget pays for: the length of linear schedules."""
    unroll_steps = run.total_env_steps * spec.agents_per_env
    return max(1, unroll_steps // unroll_steps_per_update(algo, learner))


def budget_lr(algo: OnPolicyConfig, learner: LearnerConfig, run: RunConfig) -> float:
    """The learning rate a run starts at: `learner.lr`, scaled for a budget other than the
    one it was tuned at (`algorithm.lr_reference_env_steps`)."""
    reference = algo.lr_reference_env_steps
    if reference is None:
        return learner.lr
    return learner.lr * math.pow(reference / run.total_env_steps, algo.lr_budget_exponent)


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
        items_per_chunk = config.workers.envs_per_worker * spec.agents_per_env
        if algo.queue_capacity < items_per_chunk:
            raise ConfigError(
                f"algorithm.queue_capacity={algo.queue_capacity} cannot hold one worker's chunk "
                f"of {items_per_chunk} unrolls (workers.envs_per_worker="
                f"{config.workers.envs_per_worker} x {spec.agents_per_env} agents): set it to "
                f"at least {items_per_chunk}"
            )
        return QueueSettings(
            queue_capacity=algo.queue_capacity,
            max_policy_lag=algo.max_policy_lag,
            items_per_chunk=items_per_chunk,
        )

    def make_store(self, settings: QueueSettings) -> TrajectoryQueue:
        return TrajectoryQueue(
            settings.queue_capacity, settings.max_policy_lag, settings.items_per_chunk
        )

    def persists(self, algo: OnPolicyConfig) -> bool:
        return False

    def sampling_pace(self, config: Config, spec: EnvSpec) -> SamplingPace | None:
        algo = config.algorithm
        assert isinstance(algo, OnPolicyConfig)
        if algo.sample_ahead_updates is None:
            return None
        steps = unroll_steps_per_update(algo, config.learner)
        return SamplingPace(
            steps, algo.sample_ahead_updates, spec.agents_per_env, algo.steps_per_chunk
        )

    def times_learned_from(self, algo: OnPolicyConfig) -> float:
        return 1.0

    def store_memory(self, config: Config, spec: EnvSpec) -> int:
        """`algorithm.queue_capacity` unrolls of `steps_per_chunk` + 1 observations (the actions,
        rewards and behaviour outputs beside them are small against the observations)."""
        algo = config.algorithm
        assert isinstance(algo, OnPolicyConfig)
        return algo.queue_capacity * (algo.steps_per_chunk + 1) * (observation_bytes(spec) + 64)


ON_POLICY = OnPolicy()
