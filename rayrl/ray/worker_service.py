"""The process shell around a rollout worker, for the Ray runtime.

The worker (`rayrl.worker.RolloutWorker`) is a plain class. Its actor runs `set_weights` in
a concurrency group of its own, beside a sample call in progress (`rayrl.ray.factory`), so
this shell keeps the two threads apart: weights that arrive while a chunk is being sampled
wait in an inbox (the newest wins), and the sampling thread applies them before its next
env step; between chunks (a worker held back by the replay ratio waits there) they apply
at once. A chunk in progress never waits for the learner, and a new version is in use from
the env step after it arrives, not a whole chunk later (the Acme VariableClient idea,
push-based); whether a chunk starts before the first weights is the driver's choice
(`rayrl.ray.workers`).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from rayrl.contract import Chunk
from rayrl.core import ChunkStats, ModelInfo
from rayrl.ray.identity import Identified
from rayrl.worker import RolloutWorker


class WorkerService(Identified):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """A `RolloutWorker(*args, **kwargs)` in this process."""
        self.worker = RolloutWorker(*args, **kwargs)
        self._inbox: deque[ModelInfo] = deque(maxlen=1)
        self._sampling = False
        self._lock = threading.Lock()
        """Guards `_sampling`: weights are applied by the sampling thread while it samples,
        by the caller of `set_weights` otherwise."""

    def set_weights(self, info: ModelInfo) -> None:
        """Act with these weights from the next env step on."""
        with self._lock:
            if self._sampling:
                self._inbox.append(info)
            else:
                self.worker.set_weights(info)

    def _apply_arrived(self) -> None:
        """On the sampling thread: the weights that arrived meanwhile, if any."""
        try:
            info = self._inbox.popleft()
        except IndexError:
            return
        self.worker.set_weights(info)

    def sample(self, run_env_steps: int = 0) -> tuple[Chunk, ChunkStats]:
        with self._lock:
            self._sampling = True
        try:
            return self.worker.sample(run_env_steps, before_each_step=self._apply_arrived)
        finally:
            with self._lock:
                self._sampling = False
                self._apply_arrived()  # arrived after the last step: reported with the next

    def close(self) -> None:
        self.worker.close()
