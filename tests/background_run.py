"""A real `rayrl.train` run in a background thread of the test process, for tests that act
on the cluster while it trains (remove a node, freeze an actor) and that end the run once
they have seen what they wait for.

Waiting for events rather than for fixed times is what keeps such tests both fast on an
idle machine and correct on a loaded one, where a run's start-up alone can take a minute:
each wait has a generous bound, and the run is stopped as Ctrl-C stops it (the flag that
the CLI's signal handler sets), with a final checkpoint, once the test has what it needs.
The runs given to it carry a `run.time_budget_s` all the same, as a last resort.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import rayrl
from rayrl import run_lifecycle
from rayrl.run_lifecycle import TrainResult


class BackgroundRun:
    """`rayrl.train(config, overrides=...)` started in a daemon thread."""

    def __init__(self, config: str | None, overrides: Sequence[str]) -> None:
        self._results: list[TrainResult] = []
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._train, args=(config, list(overrides)), daemon=True
        )
        self._thread.start()

    def _train(self, config: str | None, overrides: list[str]) -> None:
        try:
            self._results.append(rayrl.train(config, overrides=overrides))
        except BaseException as error:  # re-raised in the test's thread by `result`
            self._errors.append(error)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_until(
        self, condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5
    ) -> None:
        """Poll `condition` every `every_s` while the run goes on; fail naming `what` if the
        run ends first (with its own error, if it raised one) or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if not self.running:
                self.result  # noqa: B018  (re-raises the run's error, if it raised one)
                raise AssertionError(f"the run ended before {what}")
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
            time.sleep(every_s)

    def join(self, timeout_s: float) -> bool:
        """Wait for the run to end on its own; whether it did within `timeout_s`."""
        self._thread.join(timeout=timeout_s)
        return not self.running

    def stop(self, timeout_s: float = 150.0) -> None:
        """Stop the run as Ctrl-C does (it ends with its final checkpoint) and wait for it;
        fail if it does not stop in time. (The flag is cleared either way, or every later run
        in this process would stop at once; such a run ends on its `run.time_budget_s`.)"""
        run_lifecycle._interrupted.set()
        try:
            self._thread.join(timeout=timeout_s)
        finally:
            run_lifecycle._interrupted.clear()
        assert not self.running, f"the run did not stop within {timeout_s:g} s of the interrupt"

    @property
    def result(self) -> TrainResult:
        """How the run ended (its exception, if it raised one)."""
        assert not self.running, "the run has not ended"
        if self._errors:
            raise self._errors[0]
        (result,) = self._results
        return result
