"""The sampling pace of a running Ray run, counted from an origin.

`SamplingPace` (`rayrl.core`) says how far ahead of the learner an on-policy run's workers
may sample; `PaceGate` applies it: a chunk may start while what was sampled since the origin
is short of what the published weights learned from since, plus what the store dropped as
stale (never to be learned from), plus the lead. The origin is the run's start (or resume),
then each rollback of the learner or loss of the store, after which what was sampled before
is learned from again, or never.
"""

from __future__ import annotations

from typing import Any

from rayrl.core import SamplingPace
from rayrl.ray.context import PublishedWeights
from rayrl.ray.store import StoreSupervisor


class PaceGate:
    def __init__(
        self, pace: SamplingPace, store: StoreSupervisor, weights: PublishedWeights
    ) -> None:
        self.pace = pace
        self.store = store
        self.weights = weights
        self._store_handle: Any = store.handle
        self._origin = (0, 0, 0)
        """The env steps sampled, the published version and the store's count of dropped
        items the pace counts from."""

    def rebase(self, sampled: int, updates: int) -> None:
        """Count from here: `sampled` env steps, the newer of the published version and the
        learner's `updates`."""
        self._origin = (sampled, max(self.weights.version, updates), self._dropped())

    def allows(self, sampled: int, updates: int) -> bool:
        """Whether a chunk may start with `sampled` env steps sampled (chunks being sampled
        included) and the learner at `updates`; a chunk may overshoot the lead, so that the
        learner always gets a whole batch."""
        if self.store.handle is not self._store_handle:  # the old store's unrolls are lost
            self._store_handle = self.store.handle
            self.rebase(sampled, updates)
        pace = self.pace
        origin_sampled, origin_version, origin_dropped = self._origin
        learned = pace.env_steps_of(max(self.weights.version - origin_version, 0))
        # unrolls the store dropped as stale will never be learned from: sampling them
        # again keeps the learner's batches whole (else the pace waits for a learner that
        # waits for them)
        dropped = pace.env_steps_of_unrolls(max(self._dropped() - origin_dropped, 0))
        return sampled - origin_sampled < learned + dropped + pace.lead_env_steps

    def _dropped(self) -> int:
        """Items the store has dropped unused, as of its latest stats (0 before any)."""
        latest = self.store.latest
        return 0 if latest is None else latest.dropped
