"""Replay: frame-deduplicated uniform and prioritized buffers, the rate limiter, and both
as one `ExperienceStore`."""

from __future__ import annotations

from rayrl.config import Config
from rayrl.replay.buffer import PrioritizedReplay, UniformReplay, frame_capacity_for
from rayrl.replay.rate_limiter import RateLimiter
from rayrl.replay.store import ReplayStore
from rayrl.seeding import derive_seed

__all__ = [
    "PrioritizedReplay",
    "RateLimiter",
    "ReplayStore",
    "UniformReplay",
    "make_buffer",
    "make_limiter",
    "make_replay_store",
]


def make_buffer(config: Config, frame_stack: int | None, seed: int | None = None) -> UniformReplay:
    """The configured buffer, its frame ring sized for the configured chunks (whose
    transitions look `algorithm.n_step` steps ahead); `seed` defaults to the run's."""
    replay = config.replay
    n_step = getattr(config.algorithm, "n_step", 1)
    seed = derive_seed(config.run.seed, "replay") if seed is None else seed
    stacked = frame_stack is not None
    frame_capacity = frame_capacity_for(
        replay.capacity, config.workers.steps_per_chunk, n_step, frame_stack or 1
    )
    if not replay.prioritized:
        return UniformReplay(replay.capacity, frame_capacity, seed, stacked=stacked)
    return PrioritizedReplay(
        replay.capacity,
        frame_capacity,
        seed,
        stacked=stacked,
        alpha=replay.priority_alpha,
        beta_start=replay.priority_beta_start,
        beta_end=replay.priority_beta_end,
        beta_anneal_samples=replay.priority_beta_anneal_updates,
        epsilon=replay.priority_epsilon,
    )


def make_limiter(config: Config) -> RateLimiter:
    """The configured samples-per-insert limiter. Its tolerance covers one chunk and one
    sample request (the Ray learner asks for `learner.batches_per_request` batches at once),
    so that inserting and sampling can never both be waiting."""
    return RateLimiter.for_sizes(
        config.replay.samples_per_insert,
        config.replay.min_size,
        chunk_size=config.chunk_size,
        batch_size=config.learner.batch_size * config.learner.batches_per_request,
    )


def make_replay_store(config: Config, frame_stack: int | None) -> ReplayStore:
    """The configured buffer behind the configured rate limit."""
    return ReplayStore(make_buffer(config, frame_stack), make_limiter(config), config.chunk_size)
