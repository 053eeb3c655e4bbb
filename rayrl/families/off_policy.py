"""The off-policy family: n-step transitions into a frame-deduplicated replay buffer,
sampled at a controlled samples-per-insert ratio, optionally saved with checkpoints."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rayrl.config import AlgorithmConfig, Config
from rayrl.contract import StoreKind
from rayrl.core import SamplingPace
from rayrl.envs.spec import EnvSpec, observation_bytes
from rayrl.errors import ConfigError
from rayrl.processing import NStepProcessor
from rayrl.replay import PrioritizedReplay, RateLimiter, ReplayStore, UniformReplay
from rayrl.replay.buffer import frame_capacity_for
from rayrl.seeding import derive_seed
from rayrl.strict import bounded


@dataclass(frozen=True)
class ReplayConfig:
    """The replay buffer and the rate at which it is sampled."""

    capacity: int = bounded(100_000, ge=1)
    """Most transitions held; the oldest are dropped first."""
    min_size: int = bounded(1_000, ge=1)
    """Transitions stored before the first sample (warm-up)."""
    samples_per_insert: float | None = bounded(8.0, gt=0.0)
    """Replay ratio: transitions sampled for training per transition inserted, enforced both
    ways (learning waits for data, sampling waits for learning). Training every N env steps
    with K updates of batch B is samples_per_insert = K*B/N. None lets both run free."""
    prioritized: bool = False
    """Prioritized replay (proportional, sum tree) instead of uniform."""
    priority_alpha: float = bounded(0.6, ge=0.0, le=1.0)
    """How strongly priorities skew sampling (0 is uniform)."""
    priority_beta_start: float = bounded(0.4, ge=0.0, le=1.0)
    """Importance-sampling exponent at the first update."""
    priority_beta_end: float = bounded(1.0, ge=0.0, le=1.0)
    """Importance-sampling exponent reached after `priority_beta_anneal_updates`."""
    priority_beta_anneal_updates: int = bounded(100_000, ge=1)
    """Sampled batches over which beta moves linearly from start to end."""
    priority_epsilon: float = bounded(1e-6, gt=0.0)
    """Added to |TD error| so that no transition gets zero priority."""
    save_with_checkpoint: bool = False
    """Write the buffer's contents beside each checkpoint so a resumed run need not refill it
    (large for Atari: about 7 KB per transition)."""


@dataclass(frozen=True)
class OffPolicyConfig(AlgorithmConfig):
    """Settings every off-policy algorithm has: n-step processing and replay."""

    n_step: int = bounded(3, ge=1)
    """Steps summed before bootstrapping."""
    steps_per_chunk: int = bounded(32, ge=1)
    """Vector-env steps per worker chunk; a chunk holds about workers.envs_per_worker x
    steps_per_chunk transitions."""
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """The replay buffer and its sampling ratio."""

    def check(self, config: Config) -> None:
        super().check(config)
        if config.env.normalize.rewards:
            raise ConfigError(
                f"env.normalize.rewards=true is for on-policy algorithms (ppo, impala); "
                f"algorithm.name={self.name!r} learns from replayed n-step sums, which it "
                "does not rescale: set env.normalize.rewards=false"
            )
        replay, learner = self.replay, config.learner
        if replay.min_size > replay.capacity:
            raise ConfigError(
                f"algorithm.replay.min_size={replay.min_size} is larger than "
                f"algorithm.replay.capacity={replay.capacity}; it must be at most the capacity"
            )
        if learner.batch_size > replay.min_size:
            raise ConfigError(
                f"learner.batch_size={learner.batch_size} is larger than "
                f"algorithm.replay.min_size={replay.min_size}; it must be at most the warm-up "
                "size"
            )
        if config.run.runtime == "local" and replay.samples_per_insert is None:
            raise ConfigError(
                "algorithm.replay.samples_per_insert=None lets sampling run free, which the "
                "local runtime cannot do (it takes turns); set a ratio, e.g. "
                "algorithm.replay.samples_per_insert=8"
            )


@dataclass(frozen=True)
class ReplaySettings:
    """What the replay store reads (plain values: it is built in its own actor)."""

    replay: ReplayConfig
    n_step: int
    steps_per_chunk: int
    chunk_size: int
    """Transitions in a worker chunk."""
    sample_request: int
    """Transitions the learner asks for at once (batch size x batches per request)."""
    frame_stack: int | None
    seed: int


def make_buffer(settings: ReplaySettings) -> UniformReplay:
    """The configured buffer, its frame ring sized for the configured chunks (whose
    transitions look `n_step` steps ahead)."""
    replay = settings.replay
    frame_capacity = frame_capacity_for(
        replay.capacity, settings.steps_per_chunk, settings.n_step, settings.frame_stack or 1
    )
    stacked = settings.frame_stack is not None
    if not replay.prioritized:
        return UniformReplay(replay.capacity, frame_capacity, settings.seed, stacked=stacked)
    return PrioritizedReplay(
        replay.capacity,
        frame_capacity,
        settings.seed,
        stacked=stacked,
        alpha=replay.priority_alpha,
        beta_start=replay.priority_beta_start,
        beta_end=replay.priority_beta_end,
        beta_anneal_samples=replay.priority_beta_anneal_updates,
        epsilon=replay.priority_epsilon,
    )


def make_limiter(settings: ReplaySettings) -> RateLimiter:
    """The samples-per-insert limiter. Its tolerance covers one chunk and one sample request,
    so that inserting and sampling can never both be waiting."""
    return RateLimiter.for_sizes(
        settings.replay.samples_per_insert,
        settings.replay.min_size,
        chunk_size=settings.chunk_size,
        batch_size=settings.sample_request,
    )


class OffPolicy:
    store = StoreKind(namespace="replay", items="transitions", drops_stale=False)

    def chunk_steps(self, algo: OffPolicyConfig) -> int:
        return algo.steps_per_chunk

    def make_processor(self, algo: OffPolicyConfig, spec: EnvSpec, num_envs: int) -> NStepProcessor:
        return NStepProcessor(
            num_envs, n_step=algo.n_step, gamma=algo.gamma, frame_stack=spec.frame_stack
        )

    def store_settings(self, config: Config, spec: EnvSpec) -> ReplaySettings:
        algo = config.algorithm
        assert isinstance(algo, OffPolicyConfig)
        return ReplaySettings(
            replay=algo.replay,
            n_step=algo.n_step,
            steps_per_chunk=algo.steps_per_chunk,
            chunk_size=config.workers.envs_per_worker * algo.steps_per_chunk,
            sample_request=config.learner.batch_size * config.learner.batches_per_request,
            frame_stack=spec.frame_stack,
            seed=derive_seed(config.run.seed, "replay"),
        )

    def make_store(self, settings: ReplaySettings) -> ReplayStore:
        return ReplayStore(make_buffer(settings), make_limiter(settings), settings.chunk_size)

    def persists(self, algo: OffPolicyConfig) -> bool:
        return algo.replay.save_with_checkpoint

    def sampling_pace(self, config: Config, spec: EnvSpec) -> SamplingPace | None:
        """None: the rate limiter paces the workers (`algorithm.replay.samples_per_insert`)."""
        return None

    def times_learned_from(self, algo: OffPolicyConfig) -> float:
        """Samples per insert (1 when sampling runs free: no rate is known)."""
        return algo.replay.samples_per_insert or 1.0

    def store_memory(self, config: Config, spec: EnvSpec) -> int:
        """The buffer's preallocated arrays: the frame ring (each frame stored once, however
        many stacks and n-step targets refer to it), two frame-index stacks, the action,
        reward, discount and owner per transition, and the priority tree."""
        settings = self.store_settings(config, spec)
        replay, stack = settings.replay, settings.frame_stack or 1
        frames = frame_capacity_for(
            replay.capacity, settings.steps_per_chunk, settings.n_step, stack
        )
        frame_bytes = observation_bytes(spec) // stack
        action_bytes = math.prod(spec.action_space.shape or (1,)) * 8
        per_transition = 2 * stack * 8 + action_bytes + 4 + 4 + 8
        priorities = 4 * 8 * replay.capacity if replay.prioritized else 0  # a tree: < 4 n
        return frames * frame_bytes + replay.capacity * per_transition + priorities


OFF_POLICY = OffPolicy()
