"""Replay: frame-deduplicated uniform and prioritized buffers, the rate limiter, and both
as one `ExperienceStore` (assembled by the off-policy family, `rayrl.families.off_policy`)."""

from __future__ import annotations

from rayrl.replay.buffer import PrioritizedReplay, UniformReplay
from rayrl.replay.rate_limiter import RateLimiter
from rayrl.replay.store import ReplayStore

__all__ = ["PrioritizedReplay", "RateLimiter", "ReplayStore", "UniformReplay"]
