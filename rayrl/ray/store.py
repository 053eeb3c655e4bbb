"""The experience store's supervisor: the replay (or unroll queue) actor's life.

It creates the actor (refilled from the buffer saved with the last checkpoint, when there is
one), keeps its stats fresh for the metrics, re-creates it when it dies, does not start or
hangs, under its restart budget (`faults.store_restarts` within the window, with backoff),
logging what was lost (the learners' supervisor sees the new `handle` and points its
learners at it), and stops it at the end of a run, which releases every caller waiting on
it. An error in its constructor (a saved buffer that does not load) stops the run: it would
recur at every restart.

Hangs. Every call that does work waits for the store's lock, which a save of a large
replay holds for long, so the actor is probed (`rayrl.ray.probe`) with `ping`, which takes
no lock. It is hung when it leaves the probe unanswered for `faults.probe_timeout_s` (its
process is stopped or frozen; during a save too, whose end would never come), or when a
stats call waits `faults.stall_timeout_s` for the lock while no save holds it (a call hangs
holding it). Its start, which may refill a large buffer, counts against `faults.start_timeout_s`
instead: the probe and stall timeouts run only once it has started. The learners waiting on a hung
store are not hung themselves (`rayrl.ray.learners`): replacing the store releases them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rayrl.contract import StoreKind
from rayrl.core import StoreStats
from rayrl.errors import RunFailedError
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Life, callee_died
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.probe import Probe
from rayrl.ray.restarts import RestartBudget, constructor_error, one_line
from rayrl.run_writer import RunWriter

logger = logging.getLogger(__name__)


class StoreSupervisor:
    def __init__(
        self,
        context: SupervisorContext,
        kind: StoreKind,
        writer: RunWriter,
        restore_from: Callable[[], Path | None],
    ) -> None:
        """`writer` counts the saves of the store, which its actor writes, with the run
        directory's other writes; `restore_from()` names the saved buffer to refill a new
        actor from, or None."""
        self.factory = context.factory
        self.dispatcher = context.dispatcher
        self.deaths = context.deaths
        self.kind = kind
        self.metrics = context.metrics
        self.writer = writer
        self.restore_from = restore_from
        self.faults = faults = context.faults
        self.clock = context.clock
        self.watchdog = context.watchdog
        self.restarts = RestartBudget.of(
            f"the {kind.namespace} actor", faults.store_restarts, faults, self.clock
        )
        self.handle: Any = None
        """The running actor; None while its restart waits."""
        self.restart_at: float | None = None
        self.stopped = False
        self.life = Life()
        self.incarnation = 0
        """Numbers the actor's name; `life` guards its calls."""
        self.latest: StoreStats | None = None
        """The stats of the last stats call (None until one returns)."""
        self._stats_life: Life | None = None
        self._stats_asked_at = 0.0
        self._saves_pending = 0
        self._saved_at = -math.inf
        """When the last save ended (the lock it held is free since)."""
        self.created_at = 0.0
        self.ready_at: float | None = None
        """When the running actor finished its constructor; None before."""
        self.actor_id: str | None = None
        """The running actor's Ray id, once it has answered `identify` (or failed to)."""
        self.process: ActorIdentity | None = None
        """The running actor's process, once it has answered `identify`."""
        self.probe = Probe(self.dispatcher, self.clock)

    def start(self) -> None:
        self._use(self.factory.experience(self.restore_from()))

    def _use(self, handle: Any) -> None:
        """Run `handle`, a new actor: hear when it has started, probe it from then on."""
        self.handle = handle
        self.created_at = self.clock()
        self.ready_at = None
        self.actor_id = self.process = None
        self.probe = Probe(self.dispatcher, self.clock)
        self.dispatcher.submit(
            handle.identify.remote(), self._on_ready, self._on_ready_error, self.life
        )

    def _on_ready(self, identity: ActorIdentity) -> None:
        self.actor_id, self.process = identity.actor_id, identity
        self.watchdog.watch(identity)
        self.ready_at = self.clock()

    def _on_ready_error(self, error: BaseException) -> None:
        self.actor_id = callee_died(error)
        if not self.deaths.handle(error):  # a death (in its constructor too) is dealt with
            self._replace(f"did not start: {one_line(error)}")

    def owns(self, dead_id: str) -> bool:
        return self.handle is not None and dead_id == self.actor_id

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
        """Kill the actor and schedule a new one under the restart budget (which may stop
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
        self.metrics.count(f"{self.kind.namespace}/restarts")
        self.metrics.count(f"{self.kind.namespace}/lost_{items}", lost)
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
        self._use(self.factory.experience(restore, self.incarnation))
        if restore is not None:
            logger.warning("the new %s actor is refilled from %s", self.kind.namespace, restore)

    def watch(self) -> None:
        """Re-create the actor when due; probe it; replace it when it does not start or
        hangs (see the module's docstring)."""
        now = self.clock()
        if self.restart_at is not None:
            if now >= self.restart_at and not self.stopped:
                self._restart()
            return
        if self.handle is None or self.stopped:
            return
        if self.ready_at is None:
            timeout = self.faults.start_timeout_s
            waited = self.watchdog.silent_s(self.created_at, timeout, None)
            if waited > timeout:
                self._replace(f"did not start within {waited:.0f} s (faults.start_timeout_s)")
            return
        ping = self.handle.ping.options(concurrency_group="probe").remote
        self.probe.ask(ping, lambda _: None, self._on_probe_error, self.life)
        hang = self._hang(self.ready_at)
        if hang is not None:
            self.metrics.count(f"{self.kind.namespace}/hangs")
            self._replace(f"{hang}: hung")

    def _hang(self, ready_at: float) -> str | None:
        """Why the running actor, started at `ready_at`, is hung (its timeouts count the
        watchdog's seconds, `rayrl.ray.watchdog`), or None."""
        probe_timeout, stall_timeout = self.faults.probe_timeout_s, self.faults.stall_timeout_s
        if self.probe.asked_at is not None:
            silent = self.watchdog.silent_s(self.probe.asked_at, probe_timeout, self.process)
            if silent > probe_timeout:
                return (
                    f"did not answer its probe for {silent:.0f} s it could run "
                    f"(faults.probe_timeout_s={probe_timeout:g})"
                )
        asking = self._stats_life is not None and self._stats_life.alive
        if asking and not self.saving:  # a save holds the lock its stats call waits for
            since = max(self._stats_asked_at, ready_at, self._saved_at)
            waited = self.watchdog.silent_s(since, stall_timeout, self.process)
            if waited > stall_timeout:
                return (
                    f"did not answer a stats call for {waited:.0f} s it could run with no save "
                    f"under way (faults.stall_timeout_s={stall_timeout:g})"
                )
        return None

    def _on_probe_error(self, error: BaseException) -> None:
        if not self.deaths.handle(error):
            self._replace(f"failed its probe: {one_line(error)}")

    def refresh_stats(self) -> None:
        """Ask for fresh stats, unless a request is still out."""
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
            logger.warning("the %s actor's stats call failed: %s", self.kind.namespace, error)

    def save(self, path: Path, env_steps: int, done: Callable[[bool], None] | None = None) -> None:
        """Write the store beside the checkpoint at `env_steps`, stamped with that count
        (only the end of a run waits for it, on `saving`; the run writer counts a failure
        as a write error, and a success); `done(saved)` hears how this save ended."""
        if self.handle is None:
            logger.warning("the %s is not saved: its actor is restarting", self.kind.namespace)
            return
        self._saves_pending += 1

        def saved(_: int) -> None:
            self._saves_pending -= 1
            self._saved_at = self.clock()
            self.writer.succeeded(self.kind.namespace)
            if done is not None:
                done(True)

        def failed(error: BaseException) -> None:
            self._saves_pending -= 1
            self._saved_at = self.clock()
            if done is not None:
                done(False)
            if not self.deaths.handle(error):
                what = f"the {self.kind.namespace} to {path}"
                self.writer.failed(self.kind.namespace, what, error)

        self.dispatcher.submit(self.handle.save.remote(path, env_steps), saved, failed, self.life)

    @property
    def saving(self) -> bool:
        """A save is under way."""
        return self._saves_pending > 0

    def stop(self) -> None:
        """Stop taking chunks and serving batches; releases every waiting caller."""
        self.stopped = True
        if self.handle is not None:
            self.handle.stop.remote()
