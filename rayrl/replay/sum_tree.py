"""A sum tree over a fixed number of leaves, with batched (numpy) updates and searches.

Written here because prioritized replay needs exactly two vectorized operations (set many
leaves, find many prefix sums) and the general-purpose segment-tree packages add per-item
Python calls on the hot path.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Leaves hold non-negative priorities; internal nodes hold the sums of their children."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._leaves = 1
        while self._leaves < capacity:
            self._leaves *= 2
        self._depth = self._leaves.bit_length() - 1
        self._nodes = np.zeros(2 * self._leaves, dtype=np.float64)  # node 1 is the root

    @property
    def total(self) -> float:
        return float(self._nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self._nodes[self._leaves + np.asarray(indices)]

    def set(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves `indices` to `values`, or all of them to one value (the last value
        wins for repeated indices)."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) == 0:
            return
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), indices.shape)
        if np.any(values < 0) or not np.all(np.isfinite(values)):
            raise ValueError("priorities must be finite and non-negative")
        nodes = self._leaves + indices
        self._nodes[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each value v, the leaf i with sum(leaves[:i]) <= v < sum(leaves[:i+1])."""
        values = np.asarray(prefix_sums, dtype=np.float64).copy()
        nodes = np.ones(len(values), dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._nodes[left]
            go_right = values >= left_sum
            values = np.where(go_right, values - left_sum, values)
            nodes = np.where(go_right, left + 1, left)
        return np.minimum(nodes - self._leaves, self.capacity - 1)
