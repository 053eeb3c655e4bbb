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
        """Write the buffer and the limiter's counts (with the settings they count under)
        to `path` (an .npz file)."""
        limiter = self.limiter.state_dict()
        self.buffer.save(
            path,
            limiter=np.array([limiter["inserted"], limiter["sampled"]]),
            limiter_settings=self._limiter_settings(),
        )

    def _limiter_settings(self) -> np.ndarray:
        return np.array([self.limiter.samples_per_insert or 0.0, self.limiter.min_size])

    def load(self, path: Path) -> None:
        """Refill from a file written by `save`, with the limiter's counts as they were: the
        refilled transitions grant no samples they had not granted before (restarting the
        counts would grant `samples_per_insert` x the buffer's size at once, a burst of
        updates on a frozen buffer). A file without counts, or saved under another
        samples-per-insert ratio or warm-up size (a resume with new settings), counts as
        balanced."""
        metadata = self.buffer.load(path)
        same_settings = np.array_equal(
            metadata.get("limiter_settings", np.zeros(0)), self._limiter_settings()
        )
        if "limiter" in metadata and same_settings:
            inserted, sampled = (int(v) for v in metadata["limiter"])
            self.limiter.load_state_dict({"inserted": inserted, "sampled": sampled})
        else:
            self.limiter.record_insert(len(self.buffer))
            self.limiter.settle()
