"""The process shells around the replay buffer and the learner, for the Ray runtime.

The algorithm objects (`UniformReplay`, `DQNLearner`) do not know about processes; these
shells give them what a long-lived actor needs (Sample Factory's learner vs learner_worker
split): the replay service makes rate limiting *wait* instead of refuse, so a learner that
asks too early simply gets its batch later and workers that run ahead are held back; the
learner service pulls batches from the replay actor itself, keeping requests in flight so
that it does not wait on the buffer, and sends priorities back without waiting.

`rayrl.runtime` turns both into Ray actors.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import to_numpy_tree
from rayrl.config import Config
from rayrl.core import ModelInfo, TransitionBatch, TransitionChunk
from rayrl.envs import EnvSpec
from rayrl.replay import make_buffer, make_limiter


@dataclass
class ReplayStats:
    size: int
    inserted: int
    sampled: int


class ReplayService:
    """A replay buffer whose rate limit makes callers wait (a threaded actor).

    `add` waits while inserting would run too far ahead of sampling, `sample` while
    sampling would run ahead of inserting or the buffer is below its warm-up size. `stop`
    releases every waiting caller: adds are dropped and samples return no batches. (A
    threaded actor rather than an asyncio one: on this path Ray's asyncio actors cost about
    twice the CPU per call.)
    """

    def __init__(self, config: Config, frame_stack: int | None, restore: Path | None = None):
        self.buffer = make_buffer(config, frame_stack)
        self.limiter = make_limiter(config)
        if restore is not None and restore.is_file():
            self.buffer.load(restore)
            # a refilled buffer counts as warm: sampling may start at once
            self.limiter.record_insert(len(self.buffer))
        self._changed = threading.Condition()
        self._stopped = False

    def add(self, chunk: TransitionChunk) -> int:
        """Insert a chunk once the rate limit allows; returns the transitions inserted."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopped or self.limiter.can_insert(len(chunk)))
            if self._stopped:
                return 0
            self.buffer.add(chunk)
            self.limiter.record_insert(len(chunk))
            self._changed.notify_all()
        return len(chunk)

    def sample(self, batch_size: int, num_batches: int) -> list[TransitionBatch]:
        """`num_batches` batches once the rate limit allows; [] after `stop`."""
        total = batch_size * num_batches
        with self._changed:
            self._changed.wait_for(
                lambda: self._stopped or self.limiter.can_sample(total, len(self.buffer))
            )
            if self._stopped:
                return []
            batches = [self.buffer.sample(batch_size) for _ in range(num_batches)]
            self.limiter.record_sample(total)
            self._changed.notify_all()
        return batches

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        with self._changed:
            self.buffer.update_priorities(indices, priorities)

    def stats(self) -> ReplayStats:
        with self._changed:
            return ReplayStats(len(self.buffer), self.limiter.inserted, self.limiter.sampled)

    def save(self, path: Path) -> int:
        """Write the buffer to `path` (on this actor's node); returns its size."""
        with self._changed:
            self.buffer.save(path)
            return len(self.buffer)

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()


@dataclass
class LearnerReport:
    """What one `LearnerService.train` call did."""

    updates: int
    """Updates done in this call."""
    total_updates: int
    """The learner's update count after this call (the version of the returned weights)."""
    update_s: float
    wall_s: float
    sampled: int
    metrics: dict[str, list[float]] = field(default_factory=dict)
    replay_stopped: bool = False


class LearnerService:
    """The learner, pulling its own batches from the replay actor."""

    def __init__(
        self,
        config: Config,
        spec: EnvSpec,
        replay: Any,
        state: dict[str, Any] | None = None,
    ) -> None:
        torch.set_num_threads(config.learner.num_threads)
        self.learner = ALGORITHMS[config.algorithm.name].make_learner(config, spec)
        if state is not None:
            self.learner.load_state_dict(state)
        self.replay = replay
        self.batch_size = config.learner.batch_size
        self.prioritized = config.replay.prioritized
        self.batches_per_request = config.learner.batches_per_request
        self.prefetch = config.learner.prefetch_requests
        self._requests: deque = deque()
        self._batches: deque[TransitionBatch] = deque()

    def placement(self) -> dict[str, str]:
        """Where this learner runs: Ray node id and torch device."""
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": str(self.learner.device),
        }

    def set_replay(self, replay: Any) -> None:
        """Use a new replay actor (after the old one died)."""
        self.replay = replay
        self._requests.clear()
        self._batches.clear()

    def _next_batch(self) -> TransitionBatch | None:
        while not self._batches:
            while len(self._requests) < self.prefetch:
                self._requests.append(
                    self.replay.sample.remote(self.batch_size, self.batches_per_request)
                )
            batches = ray.get(self._requests.popleft())
            if not batches:  # the replay service was stopped
                return None
            self._batches.extend(batches)
        return self._batches.popleft()

    def train(self, num_updates: int) -> tuple[LearnerReport, ModelInfo]:
        """Run up to `num_updates` updates; returns a report and the new weights."""
        start = time.perf_counter()
        update_s = 0.0
        metrics: dict[str, list[float]] = defaultdict(list)
        indices, priorities = [], []
        done = 0
        stopped = False
        while done < num_updates:
            batch = self._next_batch()
            if batch is None:
                stopped = True
                break
            t0 = time.perf_counter()
            result = self.learner.update(batch)
            update_s += time.perf_counter() - t0
            done += 1
            for key, value in result.metrics.items():
                metrics[key].append(value)
            if self.prioritized and result.priorities is not None:
                indices.append(batch.indices)
                priorities.append(result.priorities)
        if indices:  # one message per call, not per update; nobody waits for it
            self.replay.update_priorities.remote(
                np.concatenate(indices), np.concatenate(priorities)
            )
        if done:
            metrics["learner/update_ms"] = [1000 * update_s / done]
        report = LearnerReport(
            updates=done,
            total_updates=self.learner.updates,
            update_s=update_s,
            wall_s=time.perf_counter() - start,
            sampled=done * self.batch_size,
            metrics=dict(metrics),
            replay_stopped=stopped,
        )
        return report, self.learner.get_weights()

    def weights(self) -> ModelInfo:
        return self.learner.get_weights()

    def state(self) -> dict[str, Any]:
        """The full learner state as numpy (faster through the object store than tensors)."""
        return to_numpy_tree(self.learner.state_dict())
