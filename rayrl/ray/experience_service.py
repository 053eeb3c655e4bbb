"""The process shell around the experience store (replay buffer or unroll queue), for the
Ray runtime: it makes the store's limits *wait* instead of refuse, so that a learner that
asks too early simply gets its batch later and workers that run ahead are held back.

This module imports neither torch nor the algorithms: the store's process only holds numpy
arrays, and starting it without torch (whose import takes seconds of CPU) leaves the cores
to the workers and the learner while a run starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rayrl.contract import Family, as_persistent
from rayrl.core import StoreStats
from rayrl.ray.identity import Identified
from rayrl.replay.store import DAMAGED

logger = logging.getLogger(__name__)


class ExperienceService(Identified):
    """An `ExperienceStore` whose limits make callers wait (a threaded actor).

    `add` waits while the store refuses the chunk (the replay ratio, a full queue), `sample`
    while it cannot serve the request (warm-up, the ratio, too few fresh unrolls). `stop`
    releases every waiting caller: adds are dropped and samples return no batches. (A
    threaded actor rather than an asyncio one: on this path Ray's asyncio actors cost more
    CPU per call.)
    """

    def __init__(self, family: Family, settings: Any, restore: Path | None = None) -> None:
        """`restore`: a saved store to refill from, which the driver has checked goes with
        its checkpoint; one that fails to load all the same (damaged past what the check
        reads) leaves the store empty, with a warning, rather than failing every start."""
        self.store = family.make_store(settings)
        if restore is not None:
            try:
                as_persistent(self.store).load(restore)
            except DAMAGED as error:
                logger.warning(
                    "%s not used: it is damaged (%s: %s); the %s starts empty",
                    restore,
                    type(error).__name__,
                    error,
                    family.store.namespace,
                )
                self.store = family.make_store(settings)
        self._changed = threading.Condition()
        self._stopped = False

    def add(self, chunk: Any) -> int:
        """Insert a chunk once the store takes it; returns the items inserted."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopped or self.store.can_insert(len(chunk)))
            if self._stopped:
                return 0
            inserted = self.store.add(chunk)
            self._changed.notify_all()
        return inserted

    def sample(self, batch_size: int, num_batches: int, learner_version: int) -> Sequence[Any]:
        """`num_batches` batches once the store can serve them; [] after `stop`."""

        def ready() -> bool:
            if self._stopped:
                return True
            if self.store.drop_stale(learner_version):
                self._changed.notify_all()  # room for the adders that wait on a full store
            return self.store.can_sample(batch_size, num_batches, learner_version)

        with self._changed:
            self._changed.wait_for(ready)
            if self._stopped:
                return []
            batches = self.store.sample(batch_size, num_batches, learner_version)
            self._changed.notify_all()
        return batches

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        with self._changed:
            self.store.update_priorities(indices, priorities)

    def stats(self) -> StoreStats:
        with self._changed:
            return self.store.stats()

    def ping(self) -> None:
        """The supervisor's probe: answered without the store's lock, so at once even while
        a save holds it; a stopped or frozen process does not answer."""

    def save(self, path: Path, env_steps: int) -> int:
        """Write the store to `path` (on this actor's node, which is the driver's), stamped
        with the checkpoint's `env_steps`; returns its size."""
        with self._changed:
            as_persistent(self.store).save(path, env_steps)
            return self.store.stats().size

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
