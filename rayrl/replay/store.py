"""The replay buffer and its rate limiter as one `ExperienceStore`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rayrl.core import StoreStats, TransitionBatch, TransitionChunk
from rayrl.replay.buffer import UniformReplay
from rayrl.replay.rate_limiter import RateLimiter


class ReplayStore:
    """Off-policy experience: a (prioritized) replay buffer sampled at a controlled ratio."""

    def __init__(self, buffer: UniformReplay, limiter: RateLimiter, items_per_chunk: int):
        self.buffer = buffer
        self.limiter = limiter
        self.items_per_chunk = items_per_chunk

    def __len__(self) -> int:
        return len(self.buffer)

    def can_insert(self, count: int) -> bool:
        return self.limiter.can_insert(count)

    def add(self, chunk: TransitionChunk) -> int:
        self.buffer.add(chunk)
        self.limiter.record_insert(len(chunk))
        return len(chunk)

    def can_sample(self, batch_size: int, num_batches: int, learner_version: int) -> bool:
        return self.limiter.can_sample(batch_size * num_batches, len(self.buffer))

    def sample(
        self, batch_size: int, num_batches: int, learner_version: int
    ) -> list[TransitionBatch]:
        batches = [self.buffer.sample(batch_size) for _ in range(num_batches)]
        self.limiter.record_sample(batch_size * num_batches)
        return batches

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(indices, priorities)

    def stats(self) -> StoreStats:
        return StoreStats(len(self.buffer), self.limiter.inserted, self.limiter.sampled)

    def save(self, path: Path) -> None:
        """Write the buffer (and the limiter's counts) to `path` (an .npz file)."""
        self.buffer.save(path)

    def load(self, path: Path) -> None:
        """Refill from a file written by `save`; a refilled buffer counts as warm."""
        self.buffer.load(path)
        self.limiter.record_insert(len(self.buffer))
