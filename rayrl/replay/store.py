"""The replay buffer and its rate limiter as one `ExperienceStore`."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from rayrl.core import StoreStats, TransitionBatch, TransitionChunk
from rayrl.replay.buffer import UniformReplay
from rayrl.replay.rate_limiter import RateLimiter

STAMP = "env_steps"
"""The metadata entry that says which checkpoint a saved replay goes with."""
DAMAGED = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
"""What reading a damaged saved replay raises (numpy's and zipfile's errors)."""


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

    def drop_stale(self, learner_version: int) -> int:
        """Replay learns from old transitions by design: nothing is stale."""
        return 0

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

    def save(self, path: Path, env_steps: int) -> None:
        """Write the buffer and the limiter's counts (with the settings they count under)
        to `path` (an .npz file), stamped with the env steps of the checkpoint it goes with
        (`saved_replay_problem`)."""
        limiter = self.limiter.state_dict()
        self.buffer.save(
            path,
            limiter=np.array([limiter["inserted"], limiter["sampled"]]),
            limiter_settings=self._limiter_settings(),
            **{STAMP: np.array(env_steps)},
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


def saved_replay_problem(path: Path, env_steps: int) -> str | None:
    """Why the replay saved at `path` cannot refill a run that continues from the checkpoint
    at `env_steps`, or None when it can. A replay goes with one checkpoint: one saved with
    an older or newer checkpoint (a crash between the two writes, a save that failed) would
    refill the buffer with experience from another point of the run, and a damaged file
    (truncated by a full disk or a killed copy) would fail the store's start."""
    if not path.is_file():
        return "there is none"
    try:
        with np.load(path) as data:
            if f"metadata_{STAMP}" not in data.files:
                return "it carries no env-step stamp (saved by rayrl 0.1)"
            stamp = int(data[f"metadata_{STAMP}"])
    except DAMAGED as error:
        return f"it is damaged ({type(error).__name__}: {error})"
    if stamp != env_steps:
        return f"it was saved at {stamp:,} env steps and the checkpoint at {env_steps:,}"
    return None
