"""The experience store's supervisor: the replay (or unroll queue) actor's life.

It creates the actor (refilled from the buffer saved with the last checkpoint, when there
is one), keeps its figures fresh for the metrics, re-creates it when it dies (logging what
was lost and telling the learners where the new one is), and stops it at the end of a run,
which releases every caller waiting on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rayrl.contract import StoreKind
from rayrl.core import StoreStats
from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, actor_id
from rayrl.ray.factory import ActorFactory
from rayrl.stats import RunStats

logger = logging.getLogger(__name__)


class StoreSupervisor:
    def __init__(
        self,
        factory: ActorFactory,
        dispatcher: Dispatcher,
        deaths: Deaths,
        kind: StoreKind,
        stats: RunStats,
        restore_from: Callable[[], Path | None],
    ) -> None:
        """`restore_from()` names the saved buffer to refill a new actor from, or None."""
        self.factory = factory
        self.dispatcher = dispatcher
        self.deaths = deaths
        self.kind = kind
        self.stats = stats
        self.restore_from = restore_from
        self.handle: Any = None
        self.life = Life()
        self.incarnation = 0
        """Numbers the actor's name; `life` guards its calls."""
        self.latest: StoreStats | None = None
        """The figures of the last stats call (None until one returns)."""
        self.on_replaced: list[Callable[[Any], None]] = []
        """Called with the new actor after a replacement (the learners sample from it)."""
        self._stats_life: Life | None = None
        self._saves_pending = 0
        deaths.supervisors.append(self)

    def start(self) -> None:
        self.handle = self.factory.experience(self.restore_from())

    def owns(self, dead_id: str) -> bool:
        return self.handle is not None and dead_id == actor_id(self.handle)

    def on_died(self, dead_id: str) -> None:
        self.factory.kill(self.handle)
        self.life.end()
        self.life = Life()
        self._saves_pending = 0  # the dead actor's saves will never answer
        self.incarnation += 1
        restore = self.restore_from()
        self.handle = self.factory.experience(restore, self.incarnation)
        lost = self.latest.size if self.latest is not None else 0
        items = self.kind.items
        logger.warning(
            "the %s actor died; %d %s were lost%s; training waits for new experience",
            self.kind.namespace,
            lost,
            items,
            " (the buffer was refilled from the last checkpoint)" if restore else "",
        )
        self.stats.count(f"{self.kind.namespace}/restarts")
        self.stats.count(f"{self.kind.namespace}/lost_{items}", lost)
        self.latest = None
        for listener in self.on_replaced:
            listener(self.handle)

    def refresh_stats(self) -> None:
        """Ask for fresh figures, unless a request is still out."""
        if self._stats_life is not None and self._stats_life.alive:
            return
        self._stats_life = life = self.life
        self.dispatcher.submit(
            self.handle.stats.remote(), self._on_stats, self._on_stats_error, life
        )

    def _on_stats(self, stats: StoreStats) -> None:
        self._stats_life = None
        self.latest = stats

    def _on_stats_error(self, error: BaseException) -> None:
        self._stats_life = None
        if not self.deaths.handle(error):
            logger.warning("the %s actor's figures failed: %s", self.kind.namespace, error)

    def save(self, path: Path) -> None:
        """Write the store beside the checkpoint (only the end of a run waits for it, on
        `saving`; a failure is logged with the path and its cause)."""
        self._saves_pending += 1

        def saved(_: int) -> None:
            self._saves_pending -= 1

        def failed(error: BaseException) -> None:
            self._saves_pending -= 1
            if not self.deaths.handle(error):
                logger.error("could not save the %s to %s: %s", self.kind.namespace, path, error)

        self.dispatcher.submit(self.handle.save.remote(path), saved, failed, self.life)

    @property
    def saving(self) -> bool:
        """A save is under way."""
        return self._saves_pending > 0

    def stop(self) -> None:
        """Stop taking chunks and serving batches; releases every waiting caller."""
        if self.handle is not None:
            self.handle.stop.remote()
