"""The evaluator's supervisor: evaluations run in their own actor on published weights,
never pausing training, one at a time. The driver starts the actor once the run has
started up (its first chunk is in), so that its process does not take the cores from the
workers and the learner while they start. An evaluation that fails, or takes longer than
`run.eval_timeout_s` (a hung env must not silently stop evaluation), replaces the actor,
under its restart policy (`faults.evaluator_restarts` within the window, with backoff); an
error in its constructor stops the run (it would recur at every restart)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rayrl.config import FaultsConfig
from rayrl.core import EvalResult
from rayrl.errors import RunFailedError
from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, actor_id
from rayrl.ray.factory import ActorFactory
from rayrl.ray.restarts import RestartPolicy, constructor_error, one_line
from rayrl.stats import RunStats

logger = logging.getLogger(__name__)


class EvaluatorSupervisor:
    def __init__(
        self,
        factory: ActorFactory,
        dispatcher: Dispatcher,
        deaths: Deaths,
        stats: RunStats,
        timeout_s: float,
        faults: FaultsConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factory = factory
        self.dispatcher = dispatcher
        self.deaths = deaths
        self.stats = stats
        self.timeout_s = timeout_s
        self.clock = clock
        self.restarts = RestartPolicy.of("the evaluator", faults.evaluator_restarts, faults, clock)
        self.handle: Any = None
        """The running actor; None while its replacement waits."""
        self.restart_at: float | None = None
        self.life = Life()
        self.incarnation = 0
        """Numbers the actor's name; `life` guards its calls."""
        self._running: Life | None = None
        self._started_at = 0.0
        self.started = False
        """`start` was called (the actor may since have been replaced)."""
        deaths.supervisors.append(self)

    def start(self) -> None:
        self.started = True
        self.handle = self.factory.evaluator()

    @property
    def available(self) -> bool:
        """An evaluator is running (not waiting for its replacement)."""
        return self.handle is not None

    @property
    def pending(self) -> bool:
        """An evaluation is running."""
        return self._running is not None and self._running.alive

    def request(
        self,
        weights: Any,
        episodes: int,
        record_video: bool,
        on_result: Callable[[EvalResult], None],
    ) -> None:
        """Evaluate `weights` (a reference to a `ModelInfo`); `on_result` gets the result."""
        self._running = life = self.life
        self._started_at = self.clock()

        def done(result: EvalResult) -> None:
            self._running = None
            on_result(result)

        self.dispatcher.submit(
            self.handle.evaluate.remote(weights, episodes, record_video), done, self._on_error, life
        )

    def _on_error(self, error: BaseException) -> None:
        self._running = None
        if not self.deaths.handle(error):
            logger.warning("evaluation failed (%s); replacing the evaluator", one_line(error))
            self._replace(one_line(error))

    def check_hung(self) -> None:
        """Start a replacement that is due; replace the evaluator when an evaluation hangs."""
        now = self.clock()
        if self.restart_at is not None and now >= self.restart_at:
            self._restart()
        if self.pending and now - self._started_at > self.timeout_s:
            logger.warning(
                "evaluation took longer than run.eval_timeout_s=%g s; replacing the evaluator",
                self.timeout_s,
            )
            self._replace("it hung (run.eval_timeout_s)")

    def owns(self, dead_id: str) -> bool:
        return self.handle is not None and dead_id == actor_id(self.handle)

    def on_died(self, dead_id: str, error: BaseException) -> None:
        in_constructor = constructor_error(error)
        if in_constructor is not None:
            raise RunFailedError(f"the evaluator could not start: {in_constructor}")
        logger.warning("the evaluator died; replacing it")
        self._replace(one_line(error))

    def _replace(self, cause: str) -> None:
        self.factory.kill(self.handle)
        self.handle = None
        self._running = None
        self.life.end()
        self.life = Life()
        self.stats.count("eval/failures")
        delay = self.restarts.next_delay(cause, "faults.evaluator_restarts")
        self.restart_at = self.clock() + delay
        if not delay:
            self._restart()

    def _restart(self) -> None:
        self.restart_at = None
        self.incarnation += 1
        self.handle = self.factory.evaluator(self.incarnation)
