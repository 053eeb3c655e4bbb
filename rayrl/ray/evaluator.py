"""The evaluator's supervisor: evaluations run in their own actor (or, on a small machine, on a
thread of the driver's process that answers as the actor does:
`rayrl.ray.driver_evaluator`) on published weights, never pausing training, one at a time.
The driver starts the actor once the run has started up (its first chunk is in), so that its process
does not take the cores from the workers and the learner while they start. An evaluation
that fails, or takes longer than `run.eval_timeout_s` (a hung env, or a stopped process,
must not silently stop evaluation), replaces the actor, under its restart budget
(`faults.evaluator_restarts` within the window, with backoff); an error in its constructor
stops the run (it would recur at every restart).

The timeout counts from when the evaluation was asked for or the actor started, whichever is
later: an evaluation asked of an actor still starting (its process, a cluster's runtime env,
the env's construction) waits for that start, which says nothing about the evaluation and
counts against `faults.start_timeout_s` instead. The evaluation waits on no other actor: the
weights it gets were published, so they exist already. Both timeouts count the watchdog's
seconds (`rayrl.ray.watchdog`): on a busy machine an evaluation may take longer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rayrl.core import EvalResult
from rayrl.errors import RunFailedError
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Life, callee_died
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.restarts import RestartBudget, constructor_error, one_line

logger = logging.getLogger(__name__)


class EvaluatorSupervisor:
    def __init__(self, context: SupervisorContext, timeout_s: float) -> None:
        """`timeout_s`: the longest one evaluation may take (`run.eval_timeout_s`)."""
        self.factory = context.factory
        self.dispatcher = context.dispatcher
        self.deaths = context.deaths
        self.metrics = context.metrics
        self.timeout_s = timeout_s
        faults = context.faults
        self.start_timeout_s = faults.start_timeout_s
        self.clock = context.clock
        self.watchdog = context.watchdog
        self.restarts = RestartBudget.of(
            "the evaluator", faults.evaluator_restarts, faults, self.clock
        )
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
        self.created_at = 0.0
        self.ready_at: float | None = None
        """When the running actor finished its constructor; None before."""
        self.actor_id: str | None = None
        """The running actor's Ray id, once it has answered `identify` (or failed to)."""
        self.process: ActorIdentity | None = None
        """The running actor's process, once it has answered `identify`."""

    def start(self) -> None:
        self.started = True
        self._use(self.factory.evaluator())

    def _use(self, handle: Any) -> None:
        """Run `handle`, a new actor, and hear when it has started."""
        self.handle = handle
        self.created_at = self.clock()
        self.ready_at = None
        self.actor_id = self.process = None
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
            self._stop_if_it_cannot_start(error)  # (an evaluator in the driver's process)
            self._replace(one_line(error))

    @staticmethod
    def _stop_if_it_cannot_start(error: BaseException) -> None:
        """Stop the run when `error` says the evaluator's constructor raised: a new one
        would fail the same way."""
        in_constructor = constructor_error(error)
        if in_constructor is not None:
            raise RunFailedError(f"the evaluator could not start: {in_constructor}")

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
            self._stop_if_it_cannot_start(error)
            logger.warning("evaluation failed (%s); replacing the evaluator", one_line(error))
            self._replace(one_line(error))

    def check_hung(self) -> None:
        """Start a replacement that is due; replace the evaluator when it does not start or
        an evaluation hangs."""
        now = self.clock()
        if self.restart_at is not None and now >= self.restart_at:
            self._restart()
        if self.handle is None:
            return
        if self.ready_at is None:
            start_timeout = self.start_timeout_s
            if self.watchdog.silent_s(self.created_at, start_timeout, None) > start_timeout:
                logger.warning(
                    "the evaluator did not start within faults.start_timeout_s=%g s; replacing it",
                    self.start_timeout_s,
                )
                self._replace("it did not start (faults.start_timeout_s)")
            return
        since = max(self._started_at, self.ready_at)
        took = self.watchdog.silent_s(since, self.timeout_s, self.process)
        if self.pending and took > self.timeout_s:
            logger.warning(
                "evaluation took %.0f s, %.0f s it could run, longer than run.eval_timeout_s=%g "
                "s; replacing the evaluator",
                now - since,
                took,
                self.timeout_s,
            )
            self._replace("it hung (run.eval_timeout_s)")

    def owns(self, dead_id: str) -> bool:
        return self.handle is not None and dead_id == self.actor_id

    def on_died(self, dead_id: str, error: BaseException) -> None:
        self._stop_if_it_cannot_start(error)
        logger.warning("the evaluator died; replacing it")
        self._replace(one_line(error))

    def _replace(self, cause: str) -> None:
        self.factory.kill(self.handle)
        self.handle = None
        self._running = None
        self.life.end()
        self.life = Life()
        self.metrics.count("eval/failures")
        delay = self.restarts.next_delay(cause, "faults.evaluator_restarts")
        self.restart_at = self.clock() + delay
        if not delay:
            self._restart()

    def _restart(self) -> None:
        self.restart_at = None
        self.incarnation += 1
        self._use(self.factory.evaluator(self.incarnation))
