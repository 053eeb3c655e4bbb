"""The experience store's supervisor: the replay (or unroll queue) actor's life.

It creates the actor (refilled from the buffer saved with the last checkpoint, when there
is one), keeps its figures fresh for the metrics, re-creates it when it dies or hangs (a
figures call unanswered for `faults.call_timeout_s`), under its restart policy
(`faults.store_restarts` within the window, with backoff), logging what was lost and
telling the learners where the new one is, and stops it at the end of a run, which
releases every caller waiting on it. An error in its constructor (a saved buffer that does
not load) stops the run: it would recur at every restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rayrl.config import FaultsConfig
from rayrl.contract import StoreKind
from rayrl.core import StoreStats
from rayrl.errors import RunFailedError
from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, actor_id
from rayrl.ray.factory import ActorFactory
from rayrl.ray.restarts import RestartPolicy, constructor_error, one_line
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
        faults: FaultsConfig,
        on_save_failed: Callable[[str, str, BaseException], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`restore_from()` names the saved buffer to refill a new actor from, or None;
        `on_save_failed(kind, what, error)` hears of a save that failed (a storage error)."""
        self.factory = factory
        self.dispatcher = dispatcher
        self.deaths = deaths
        self.kind = kind
        self.stats = stats
        self.restore_from = restore_from
        self.faults = faults
        self.on_save_failed = on_save_failed
        self.clock = clock
        self.restarts = RestartPolicy.of(
            f"the {kind.namespace} actor", faults.store_restarts, faults, clock
        )
        self.handle: Any = None
        """The running actor; None while its restart waits."""
        self.restart_at: float | None = None
        self.stopped = False
        self.life = Life()
        self.incarnation = 0
        """Numbers the actor's name; `life` guards its calls."""
        self.latest: StoreStats | None = None
        """The figures of the last stats call (None until one returns)."""
        self.on_replaced: list[Callable[[Any], None]] = []
        """Called with the new actor after a replacement (the learners sample from it)."""
        self._stats_life: Life | None = None
        self._stats_asked_at = 0.0
        self._saves_pending = 0
        deaths.supervisors.append(self)

    def start(self) -> None:
        self.handle = self.factory.experience(self.restore_from())

    def owns(self, dead_id: str) -> bool:
        return self.handle is not None and dead_id == actor_id(self.handle)

    def on_died(self, dead_id: str, error: BaseException) -> None:
        in_constructor = constructor_error(error)
        if in_constructor is not None:
            self._kill()
            raise RunFailedError(
                f"the {self.kind.namespace} actor could not start: {in_constructor}"
            )
        self._replace(f"died: {one_line(error)}")

    def _kill(self) -> None:
        self.factory.kill(self.handle)
        self.handle = None
        self.life.end()
        self.life = Life()
        self._saves_pending = 0  # the dead actor's saves will never answer

    def _replace(self, cause: str) -> None:
        """Kill the actor and schedule a new one under the restart policy (which may stop
        the run)."""
        self._kill()
        if self.stopped:
            return
        lost = self.latest.size if self.latest is not None else 0
        items = self.kind.items
        logger.warning(
            "the %s actor %s; %d %s were lost; training waits for new experience",
            self.kind.namespace,
            cause,
            lost,
            items,
        )
        self.stats.count(f"{self.kind.namespace}/restarts")
        self.stats.count(f"{self.kind.namespace}/lost_{items}", lost)
        self.latest = None
        delay = self.restarts.next_delay(cause, "faults.store_restarts")
        self.restart_at = self.clock() + delay
        if delay:
            logger.warning("the %s actor restarts in %.0f s (backoff)", self.kind.namespace, delay)
        else:
            self._restart()

    def _restart(self) -> None:
        self.restart_at = None
        self.incarnation += 1
        restore = self.restore_from()
        self.handle = self.factory.experience(restore, self.incarnation)
        if restore is not None:
            logger.warning("the new %s actor is refilled from %s", self.kind.namespace, restore)
        for listener in self.on_replaced:
            listener(self.handle)

    def watch(self) -> None:
        """Re-create the actor when due; replace it when a figures call hangs."""
        now = self.clock()
        if self.restart_at is not None:
            if now >= self.restart_at and not self.stopped:
                self._restart()
            return
        asking = self._stats_life is not None and self._stats_life.alive
        if self.saving:  # a save holds the store's lock: its figures wait, it is not hung
            self._stats_asked_at = now
        elif (
            asking and not self.stopped and now - self._stats_asked_at > self.faults.call_timeout_s
        ):
            self.stats.count(f"{self.kind.namespace}/hangs")
            self._replace(f"did not answer for {now - self._stats_asked_at:.0f} s (hung)")

    def refresh_stats(self) -> None:
        """Ask for fresh figures, unless a request is still out."""
        if self.handle is None or (self._stats_life is not None and self._stats_life.alive):
            return
        self._stats_asked_at = self.clock()
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
        `saving`; a failure is a storage error, reported to `on_save_failed`)."""
        if self.handle is None:
            logger.warning("the %s is not saved: its actor is restarting", self.kind.namespace)
            return
        self._saves_pending += 1

        def saved(_: int) -> None:
            self._saves_pending -= 1

        def failed(error: BaseException) -> None:
            self._saves_pending -= 1
            if not self.deaths.handle(error):
                what = f"the {self.kind.namespace} to {path}"
                self.on_save_failed(self.kind.namespace, what, error)

        self.dispatcher.submit(self.handle.save.remote(path), saved, failed, self.life)

    @property
    def saving(self) -> bool:
        """A save is under way."""
        return self._saves_pending > 0

    def stop(self) -> None:
        """Stop taking chunks and serving batches; releases every waiting caller."""
        self.stopped = True
        if self.handle is not None:
            self.handle.stop.remote()
