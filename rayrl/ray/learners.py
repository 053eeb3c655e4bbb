"""The learners' supervisor: keeps the learner actor(s) training and publishing, and
restores them when one dies.

Every learner has `CALLS_IN_FLIGHT` `train` calls queued, so that it never waits for the
next one; they update in lockstep (all-reduced gradients), and the first learner's report
and `ModelInfo` are what the run records and publishes. The `ModelInfo` is a return value,
so this process owns it and it outlives a learner crash.

A dead learner (any of them) is restored, with its peers, from the latest checkpoint (or
the state the run was resumed from, or afresh before the first checkpoint): peers of a dead
learner cannot go on alone, since they all-reduce with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, actor_id
from rayrl.ray.factory import ActorFactory
from rayrl.ray.services import LearnerReport, LearnerStart
from rayrl.ray.store import StoreSupervisor
from rayrl.session import Counters
from rayrl.stats import RunStats

logger = logging.getLogger(__name__)

CALLS_IN_FLIGHT = 2


class LearnerSupervisor:
    def __init__(
        self,
        factory: ActorFactory,
        dispatcher: Dispatcher,
        deaths: Deaths,
        store: StoreSupervisor,
        counters: Counters,
        stats: RunStats,
        *,
        sync_interval: int,
        restore_point: Callable[[], tuple[LearnerStart, str]],
        publish: Callable[..., None],
        on_placement: Callable[[dict[str, str]], None],
    ) -> None:
        """`restore_point()` gives where restored learners start from and a description of it
        for the log; `publish(info, version, rollback=...)` hands new weights on (a reference
        to a `ModelInfo`; `rollback` after a restore); `on_placement` hears where the learner
        runs."""
        self.factory = factory
        self.dispatcher = dispatcher
        self.deaths = deaths
        self.store = store
        self.counters = counters
        self.stats = stats
        self.sync_interval = sync_interval
        self.restore_point = restore_point
        self.publish = publish
        self.on_placement = on_placement
        self.handles: list[Any] = []
        self.life = Life()
        self.incarnation = 0
        """Numbers the actors' names; `life` guards their calls."""
        self.calls = 0
        """`train` calls of the first learner not yet returned."""
        self.stopped = False
        deaths.supervisors.append(self)
        store.on_replaced.append(self._use_store)

    @property
    def first(self) -> Any:
        """The first learner: it publishes weights and answers for the group's state."""
        return self.handles[0]

    def start(self, start: LearnerStart, rollback: bool = False) -> None:
        self.handles = self.factory.learners(self.store.handle, start, self.incarnation)
        self.dispatcher.submit(
            self.first.placement.remote(), self.on_placement, lambda _: None, self.life
        )
        # publish the initial (or restored) weights once they exist, so that no worker
        # queues a call behind an object still being made (workers act with their own
        # initial weights until then)
        version = self.counters.updates
        weights = self.first.weights.remote()
        self.dispatcher.submit(
            weights,
            lambda _: self.publish(weights, version, rollback=rollback),
            lambda _: None,
            self.life,
        )

    def stop(self) -> None:
        """Ask for no more updates (calls out still return)."""
        self.stopped = True

    @property
    def busy(self) -> bool:
        return self.calls > 0

    def request_updates(self) -> None:
        """Keep `CALLS_IN_FLIGHT` `train` calls queued on every learner."""
        while not self.stopped and self.calls < CALLS_IN_FLIGHT:
            for rank, learner in enumerate(self.handles):
                report, info = learner.train.options(num_returns=2).remote(self.sync_interval)
                on_report = self._on_first_report(info) if rank == 0 else (lambda _: None)
                on_error = self._on_first_error if rank == 0 else self._on_error
                self.dispatcher.submit(report, on_report, on_error, self.life)
            self.calls += 1

    def _on_first_report(self, info: Any) -> Callable[[LearnerReport], None]:
        def on_report(report: LearnerReport) -> None:
            self.calls -= 1
            if report.updates:
                self.counters.updates = report.total_updates
                self.stats.add_updates(
                    report.metrics,
                    report.updates,
                    report.update_s,
                    report.wall_s,
                    report.sampled,
                    report.nonfinite,
                )
                self.publish(info, report.total_updates, rollback=False)

        return on_report

    def _on_first_error(self, error: BaseException) -> None:
        self.calls -= 1
        self._on_error(error)

    def _on_error(self, error: BaseException) -> None:
        """A learner or the store it samples from died (their supervisors deal with it), or
        the update itself raised: a bug that would only repeat, so the run stops."""
        if not self.deaths.handle(error):
            raise error

    def owns(self, dead_id: str) -> bool:
        return any(dead_id == actor_id(handle) for handle in self.handles)

    def on_died(self, dead_id: str) -> None:
        start, where = self.restore_point()
        logger.warning("a learner died; restoring the learner(s) from %s", where)
        for handle in self.handles:  # peers of a dead learner cannot go on alone
            self.factory.kill(handle)
        self.life.end()
        self.life = Life()
        self.incarnation += 1
        self.calls = 0
        self.stats.count("learner/restarts")
        self.counters.updates = int(start.state["updates"]) if start.state is not None else 0
        self.start(start, rollback=True)

    def _use_store(self, handle: Any) -> None:
        for learner in self.handles:
            learner.set_store.remote(handle)

    # ---- for checkpoints and the end of a run --------------------------------------------

    def state(self) -> Any:
        """A reference to the first learner's full state (numpy)."""
        return self.first.state.remote()

    def weights(self) -> Any:
        return self.first.weights.remote()

    def digests(self) -> list[Any]:
        return [learner.parameters_digest.remote() for learner in self.handles]
