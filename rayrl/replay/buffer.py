"""Replay buffers that store each observation frame once.

Transitions arrive as `TransitionChunk`s: unique frames plus index arrays. The buffer keeps
two preallocated rings, one of frames and one of transitions whose observations are frame
ids into the first; a stacked observation is rebuilt by a gather at sample time. One million
Atari transitions thus take about 7 GiB instead of the 56 GiB of storing both stacks.

A chunk is the unit of eviction: when either ring is about to overwrite part of the oldest
chunk, that whole chunk leaves the buffer. Sampling handles are absolute insertion counters,
so a priority update for a transition that has been overwritten since it was sampled is
recognized and ignored.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rayrl.core import TransitionBatch, TransitionChunk
from rayrl.files import atomic_path
from rayrl.replay.npz import write_npz
from rayrl.replay.sum_tree import SumTree


@dataclass(frozen=True)
class _ChunkRecord:
    first_transition: int
    num_transitions: int
    first_frame: int
    num_frames: int


@dataclass(frozen=True)
class _Rings:
    """The preallocated arrays, made when the first chunk tells their shapes and dtypes."""

    frames: np.ndarray
    obs_frames: np.ndarray
    """Per transition slot, the absolute frame ids of its observation's stack."""
    next_frames: np.ndarray
    actions: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.frames, self.obs_frames, self.next_frames, self.actions))


def frame_capacity_for(capacity: int, steps_per_chunk: int, n_step: int, stack: int) -> int:
    """Frame-ring size for `capacity` transitions arriving in self-contained chunks.

    Each env's slice of a chunk brings `steps_per_chunk` new frames plus the `n_step +
    stack - 1` older frames its first transitions refer to; 1% more covers the fresh frames
    of episode resets (an Atari episode lasts thousands of steps). Where resets are more
    frequent (short CartPole episodes) the frame ring fills first and holds slightly fewer
    transitions than `capacity`, which the buffer handles by evicting whole chunks.
    """
    per_transition = 1.01 + (n_step + stack - 1) / steps_per_chunk
    return math.ceil(capacity * per_transition) + 64


class UniformReplay:
    """Uniform sampling over the stored transitions."""

    def __init__(self, capacity: int, frame_capacity: int, seed: int, *, stacked: bool) -> None:
        if capacity < 1 or frame_capacity < 1:
            raise ValueError("capacity and frame_capacity must be positive")
        self.capacity = capacity
        self.frame_capacity = frame_capacity
        self.rng = np.random.default_rng(seed)
        self._rings: _Rings | None = None
        self._rewards = np.zeros(capacity, dtype=np.float32)
        self._discounts = np.zeros(capacity, dtype=np.float32)
        self._slot_owner = np.full(capacity, -1, dtype=np.int64)  # absolute index in each slot
        self._chunks: deque[_ChunkRecord] = deque()
        self.inserted = 0
        """Transitions ever inserted (absolute counter)."""
        self.frames_written = 0
        self.oldest = 0
        """Absolute index of the oldest transition still stored."""
        self.stacked = stacked
        """Observations are stacks of frames; otherwise each frame is a whole observation."""

    def __len__(self) -> int:
        return self.inserted - self.oldest

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated arrays."""
        fixed = self._rewards.nbytes + self._discounts.nbytes + self._slot_owner.nbytes
        return fixed + (self._rings.nbytes if self._rings is not None else 0)

    def add(self, chunk: TransitionChunk) -> None:
        count, num_frames = len(chunk), len(chunk.frames)
        if count == 0:
            return
        if count > self.capacity or num_frames > self.frame_capacity:
            raise ValueError(
                f"a chunk of {count} transitions / {num_frames} frames does not fit a buffer of "
                f"{self.capacity} transitions / {self.frame_capacity} frames"
            )
        rings = self._rings or self._allocate(chunk)
        self._evict_before(self.inserted + count, self.frames_written + num_frames)

        frame_slots = (self.frames_written + np.arange(num_frames)) % self.frame_capacity
        rings.frames[frame_slots] = chunk.frames
        slots = (self.inserted + np.arange(count)) % self.capacity
        rings.obs_frames[slots] = self.frames_written + chunk.obs_idx
        rings.next_frames[slots] = self.frames_written + chunk.next_obs_idx
        rings.actions[slots] = chunk.actions
        self._rewards[slots] = chunk.rewards
        self._discounts[slots] = chunk.discounts
        self._slot_owner[slots] = self.inserted + np.arange(count)
        self._chunks.append(_ChunkRecord(self.inserted, count, self.frames_written, num_frames))
        self._on_insert(slots)
        self.inserted += count
        self.frames_written += num_frames
        self.oldest = self._chunks[0].first_transition

    def sample(self, batch_size: int) -> TransitionBatch:
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        absolute = self.rng.integers(self.oldest, self.inserted, size=batch_size)
        return self._gather(absolute, np.ones(batch_size, dtype=np.float32))

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Uniform replay has no priorities; accepted so both buffers serve one learner."""

    def _allocate(self, chunk: TransitionChunk) -> _Rings:
        frame_shape, stack = chunk.frames.shape[1:], chunk.obs_idx.shape[1]
        self._rings = _Rings(
            frames=np.zeros((self.frame_capacity, *frame_shape), dtype=chunk.frames.dtype),
            obs_frames=np.zeros((self.capacity, stack), dtype=np.int64),
            next_frames=np.zeros((self.capacity, stack), dtype=np.int64),
            actions=np.zeros((self.capacity, *chunk.actions.shape[1:]), chunk.actions.dtype),
        )
        return self._rings

    def _evict_before(self, inserted_after: int, frames_after: int) -> None:
        """Drop whole chunks that the coming write would partly overwrite."""
        while self._chunks:
            oldest = self._chunks[0]
            if (
                oldest.first_transition >= inserted_after - self.capacity
                and oldest.first_frame >= frames_after - self.frame_capacity
            ):
                break
            self._chunks.popleft()
            slots = (oldest.first_transition + np.arange(oldest.num_transitions)) % self.capacity
            self._on_evict(slots)
        self.oldest = self._chunks[0].first_transition if self._chunks else inserted_after

    def _on_insert(self, slots: np.ndarray) -> None:
        """Hook for prioritized replay."""

    def _on_evict(self, slots: np.ndarray) -> None:
        """Hook for prioritized replay."""

    def _gather(self, absolute: np.ndarray, weights: np.ndarray) -> TransitionBatch:
        rings = self._rings
        assert rings is not None, "sample() refuses an empty buffer"
        slots = absolute % self.capacity
        obs = rings.frames[rings.obs_frames[slots] % self.frame_capacity]
        next_obs = rings.frames[rings.next_frames[slots] % self.frame_capacity]
        if not self.stacked:
            obs, next_obs = obs[:, 0], next_obs[:, 0]
        return TransitionBatch(
            obs=obs,
            actions=rings.actions[slots],
            rewards=self._rewards[slots],
            discounts=self._discounts[slots],
            next_obs=next_obs,
            weights=weights,
            indices=absolute.astype(np.int64),
        )

    # ---- persistence (optional, see replay.save_with_checkpoint) ---------------------------

    def save(self, path: Path, **metadata: np.ndarray) -> None:
        """Write the contents to `path` (an .npz file), atomically, with `metadata` arrays
        (what `load` returns). The frames are written straight from the ring (no copy of
        it: `rayrl.replay.npz`); the transitions' arrays, a few bytes each, are copied."""
        arrays: dict[str, np.ndarray | list[np.ndarray]] = {}
        if self._rings is not None:
            rings = self._rings
            slots = np.arange(self.oldest, self.inserted) % self.capacity
            first_frame = self._chunks[0].first_frame
            arrays = {
                "frames": self._frame_parts(rings.frames, first_frame, self.frames_written),
                "obs_frames": rings.obs_frames[slots] - first_frame,
                "next_frames": rings.next_frames[slots] - first_frame,
                "actions": rings.actions[slots],
                "rewards": self._rewards[slots],
                "discounts": self._discounts[slots],
                "chunk_sizes": np.array([[c.num_transitions, c.num_frames] for c in self._chunks]),
                "extra": self._extra_state(slots),
            }
        arrays.update({f"metadata_{name}": value for name, value in metadata.items()})
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            write_npz(f, arrays)

    def _frame_parts(self, frames: np.ndarray, first: int, end: int) -> list[np.ndarray]:
        """The frames with ids `first` to `end` (exclusive), oldest first, as views into
        the ring `frames`: one, or two where they wrap around its end."""
        start, count = first % self.frame_capacity, end - first
        if start + count <= self.frame_capacity:
            return [frames[start : start + count]]
        return [frames[start:], frames[: start + count - self.frame_capacity]]

    def load(self, path: Path) -> dict[str, np.ndarray]:
        """Refill from a file written by `save`, one recorded chunk at a time; returns the
        metadata saved with it."""
        with np.load(path) as data:
            prefix = "metadata_"
            metadata = {k[len(prefix) :]: data[k] for k in data.files if k.startswith(prefix)}
            if "frames" not in data.files:  # saved empty
                return metadata
            frames, actions = data["frames"], data["actions"]
            obs_frames, next_frames = data["obs_frames"], data["next_frames"]
            first_transition = first_frame = 0
            for num_transitions, num_frames in data["chunk_sizes"]:
                t = slice(first_transition, first_transition + num_transitions)
                self.add(
                    TransitionChunk(
                        frames=frames[first_frame : first_frame + num_frames],
                        obs_idx=obs_frames[t] - first_frame,
                        actions=actions[t],
                        rewards=data["rewards"][t],
                        discounts=data["discounts"][t],
                        next_obs_idx=next_frames[t] - first_frame,
                        policy_version=0,
                    )
                )
                first_transition += num_transitions
                first_frame += num_frames
            self._load_extra_state(data["extra"])
            return metadata

    def _extra_state(self, slots: np.ndarray) -> np.ndarray:
        return np.zeros(0)

    def _load_extra_state(self, extra: np.ndarray) -> None:
        """Hook for prioritized replay."""


class PrioritizedReplay(UniformReplay):
    """Proportional prioritized replay (Schaul et al. 2016) on a sum tree.

    New transitions get the largest priority seen so far; importance weights
    (N * P(i))**-beta are normalized by the batch's largest weight; beta moves linearly from
    `beta_start` to `beta_end` over `beta_anneal_samples` sampled batches.
    """

    def __init__(
        self,
        capacity: int,
        frame_capacity: int,
        seed: int,
        *,
        stacked: bool,
        alpha: float,
        beta_start: float,
        beta_end: float,
        beta_anneal_samples: int,
        epsilon: float,
    ) -> None:
        super().__init__(capacity, frame_capacity, seed, stacked=stacked)
        self.alpha = alpha
        self.beta_start = beta_start
        self.beta_end = beta_end
        self.beta_anneal_samples = beta_anneal_samples
        self.epsilon = epsilon
        self.tree = SumTree(capacity)
        self.max_priority = 1.0
        self.batches_sampled = 0

    @property
    def beta(self) -> float:
        fraction = min(1.0, self.batches_sampled / self.beta_anneal_samples)
        return self.beta_start + fraction * (self.beta_end - self.beta_start)

    def _on_insert(self, slots: np.ndarray) -> None:
        self.tree.set(slots, self.max_priority**self.alpha)

    def _on_evict(self, slots: np.ndarray) -> None:
        self.tree.set(slots, 0.0)

    def sample(self, batch_size: int) -> TransitionBatch:
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree.total
        segment = total / batch_size
        targets = (np.arange(batch_size) + self.rng.random(batch_size)) * segment
        slots = self.tree.find(np.minimum(targets, np.nextafter(total, 0.0)))
        priorities = self.tree.get(slots)
        empty = priorities <= 0.0  # only through float rounding at a boundary
        if empty.any():
            fallback = self.rng.integers(self.oldest, self.inserted, size=int(empty.sum()))
            slots[empty] = fallback % self.capacity
            priorities[empty] = self.tree.get(slots[empty])
        probabilities = priorities / total
        weights = (len(self) * probabilities) ** (-self.beta)
        weights = (weights / weights.max()).astype(np.float32)
        self.batches_sampled += 1
        return self._gather(self._slot_owner[slots], weights)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        indices = np.asarray(indices, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        slots = indices % self.capacity
        live = (indices >= self.oldest) & (indices < self.inserted)
        live &= self._slot_owner[slots] == indices
        live &= np.isfinite(priorities)  # a NaN TD error (a NaN reward) keeps the old priority
        if not live.any():
            return
        priorities = np.abs(priorities[live]) + self.epsilon
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(slots[live], priorities**self.alpha)

    def _extra_state(self, slots: np.ndarray) -> np.ndarray:
        return np.append(self.tree.get(slots), [self.max_priority, self.batches_sampled])

    def _load_extra_state(self, extra: np.ndarray) -> None:
        if len(extra) < 2:
            return
        stored, (self.max_priority, batches) = extra[:-2], extra[-2:]
        self.batches_sampled = int(batches)
        slots = np.arange(self.oldest, self.inserted) % self.capacity
        self.tree.set(slots, stored[: len(slots)])
