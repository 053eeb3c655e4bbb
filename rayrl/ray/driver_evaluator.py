"""An evaluator in the driver's process, on a thread of its own (`run.evaluator`).

On a small machine an evaluator actor costs a process of its own: Python's and Ray's start-up
and a cold torch import, seconds of CPU and a large share of a small run's (figures in
docs/performance.md), paid while the workers and the learner want the same cores. The
driver's process has imported torch already and spends its time waiting on Ray, so it can
evaluate on a thread.
Ray cannot put two actors in one process, so rayrl writes this small host itself.

`DriverEvaluator` answers the two calls that the evaluator's supervisor makes of an evaluator
actor (`identify` and `evaluate`, each with `.remote(...)`) with
`concurrent.futures.Future`s, which the dispatcher waits on beside Ray's object references;
the factory makes it in place of the actor and `kill`s it the same way, and a constructor
that raises fails its `identify` call with an `ActorStartError`, which the supervisor
treats as Ray's report of an actor whose constructor raised. So the supervisor, its
timeouts and its restart budget are the actor's.

A thread cannot be killed as a process can. `kill` fails the host's calls at once and cancels
the evaluation under way at its next env step; an env step that never returns keeps its
thread (a daemon: it does not keep the process alive), and `DriverEvaluators` then leaves
the evaluators that follow to actors, so that at most one thread is ever lost. A hang in
native code that holds Python's interpreter lock would stop the driver too: no thread helps
there, which is why `run.evaluator="actor"` exists.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

import ray

from rayrl.config import AlgorithmConfig, EnvConfig
from rayrl.core import EvalResult, ModelInfo
from rayrl.evaluation import Evaluator
from rayrl.ray.identity import ActorIdentity, this_process
from rayrl.ray.restarts import ActorStartError

logger = logging.getLogger(__name__)

STOP_WAIT_S = 1.0
"""How long `stuck` waits for a killed host's thread to end (its env step to return)."""


class AbandonedError(RuntimeError):
    """The call's evaluator was killed (replaced, or the run ended) before it answered."""


class _Method:
    """One of the host's calls, made as an actor's method is: `.remote(*args)`."""

    def __init__(self, submit: Callable[..., Future[Any]]) -> None:
        self.remote = submit


def _settle(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    """Give `future` its value or error unless it has one already (a killed host's call)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass


class DriverEvaluator:
    """An `Evaluator` on a daemon thread of the driver's process; its calls return futures."""

    def __init__(
        self, name: str, env: EnvConfig, algorithm: AlgorithmConfig, episodes: int, run_seed: int
    ) -> None:
        """`name`: what the actor would have been named (the thread's name; `identify`
        answers it as the actor's id, never a Ray actor's, with the driver's process). The
        evaluator (its envs, its policy) is built on the thread: the driver goes on."""
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._open: set[Future[Any]] = set()
        """Calls not yet answered: a killed host fails them at once."""
        self._killed = False
        self._evaluator: Evaluator | None = None
        self.identify = _Method(self._ready)
        self.evaluate = _Method(self._evaluate)
        self._started = self._submit(lambda: self._build(env, algorithm, episodes, run_seed))
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _build(
        self, env: EnvConfig, algorithm: AlgorithmConfig, episodes: int, run_seed: int
    ) -> ActorIdentity:
        try:
            # one torch thread, as the actor's: the process's setting, and the driver does
            # no heavy torch work of its own
            self._evaluator = Evaluator(env, algorithm, episodes, run_seed, torch_threads=1)
        except Exception as error:
            # the supervisor stops the run (it would fail the same way at every restart)
            message = "".join(traceback.format_exception_only(error)).strip()
            raise ActorStartError(f"The evaluator's constructor raised\n{message}") from error
        return this_process(f"driver-thread:{self.name}")

    def _ready(self) -> Future[Any]:
        return self._started if not self._killed else self._submit(lambda: None)

    def _evaluate(self, weights: Any, episodes: int, record_video: bool) -> Future[EvalResult]:
        """As the actor's `evaluate`: `weights` is a reference to a `ModelInfo` (or one)."""

        def run() -> EvalResult:
            start_error = self._started.exception()
            if start_error is not None:
                raise start_error
            info: ModelInfo | None = (
                ray.get(weights) if isinstance(weights, ray.ObjectRef) else weights
            )
            assert self._evaluator is not None
            return self._evaluator.evaluate(info, episodes, record_video)

        return self._submit(run)

    def _submit(self, job: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._killed:
                future.set_exception(AbandonedError(f"{self.name} was killed"))
                return future
            self._open.add(future)
        self._jobs.put((future, job))
        return future

    def _serve(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, job = item
            with self._lock:
                if self._killed:
                    break
            try:
                _settle(future, job())
            except Exception as error:  # the call's error is its caller's to handle
                _settle(future, error=error)
            except BaseException as error:  # (SystemExit in an env) ends this thread only
                _settle(future, error=RuntimeError(f"evaluation raised {error!r}"))
            with self._lock:
                self._open.discard(future)
        if self._evaluator is not None:
            try:
                self._evaluator.close()
            except Exception as error:
                logger.warning("%s could not close its envs: %s", self.name, error)

    def kill(self) -> None:
        """Fail every call not yet answered, and later ones, at once; cancel the evaluation
        under way at its next env step. The thread ends (closing the envs) when that step
        returns."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
            open_calls, self._open = self._open, set()
        if self._evaluator is not None:
            self._evaluator.cancel()
        for future in open_calls:
            _settle(future, error=AbandonedError(f"{self.name} was killed"))
        self._jobs.put(None)

    def stuck(self) -> bool:
        """Killed, and its thread still has not ended after `STOP_WAIT_S`: an env step that
        does not return."""
        if not self._killed:
            return False
        self._thread.join(STOP_WAIT_S)
        return self._thread.is_alive()


class DriverEvaluators:
    """Makes a run's evaluators in the driver's process, until one of them is stuck."""

    def __init__(self) -> None:
        self._last: DriverEvaluator | None = None
        self.usable = True
        """False once a killed host's thread did not end: the next evaluators are actors."""

    def make(
        self, name: str, env: EnvConfig, algorithm: AlgorithmConfig, episodes: int, run_seed: int
    ) -> DriverEvaluator | None:
        """A new host, or None once one was stuck (the caller makes an actor)."""
        if self.usable and self._last is not None and self._last.stuck():
            logger.warning(
                "the evaluator's thread in this process is stuck in an env step; "
                "evaluations go on in an actor"
            )
            self.usable = False
        if not self.usable:
            return None
        self._last = DriverEvaluator(name, env, algorithm, episodes, run_seed)
        return self._last
