"""The on-policy store: a bounded FIFO of unrolls with stale-sample dropping.

`capacity` slots (`algorithm.queue_capacity`), each one unroll. A full queue refuses inserts (the
Ray service makes the workers wait), so it never grows without bound; unrolls acted by weights more
than `max_policy_lag` versions older than the learner's are dropped, and counted, instead of being
learned from (Sample Factory's rule).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from rayrl.core import StoreStats, Unrolls


class TrajectoryQueue:
    def __init__(self, capacity: int, max_policy_lag: int, items_per_chunk: int) -> None:
        self.capacity = capacity
        self.max_policy_lag = max_policy_lag
        self.items_per_chunk = items_per_chunk
        self._unrolls: deque[Unrolls] = deque()
        self.inserted = 0
        self.sampled = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._unrolls)

    def can_insert(self, count: int) -> bool:
        return len(self._unrolls) + count <= self.capacity

    def add(self, chunk: Unrolls) -> int:
        self._unrolls.extend(chunk.split())
        self.inserted += len(chunk)
        return len(chunk)

    def drop_stale(self, learner_version: int) -> int:
        oldest_allowed = learner_version - self.max_policy_lag
        fresh = [u for u in self._unrolls if u.policy_version >= oldest_allowed]
        dropped = len(self._unrolls) - len(fresh)
        self.dropped += dropped
        self._unrolls = deque(fresh)
        return dropped

    def can_sample(self, batch_size: int, num_batches: int, learner_version: int) -> bool:
        return len(self._unrolls) >= batch_size * num_batches

    def sample(self, batch_size: int, num_batches: int, learner_version: int) -> list[Unrolls]:
        """The oldest unrolls, `num_batches` batches of `batch_size`; they leave the queue."""
        batches = []
        for _ in range(num_batches):
            parts = [self._unrolls.popleft() for _ in range(batch_size)]
            batches.append(Unrolls.concatenate(parts))
        self.sampled += batch_size * num_batches
        return batches

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Unrolls are used once; there is nothing to reprioritize."""

    def stats(self) -> StoreStats:
        return StoreStats(len(self._unrolls), self.inserted, self.sampled, self.dropped)
