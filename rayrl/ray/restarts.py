"""Restart budgets: how often an actor may be restarted, how long a restart waits, and
which failures are not worth a restart at all.

Ray's own `max_restarts` re-runs a dead actor's constructor with the same arguments, at
once and with no window; rayrl's supervisors restart actors themselves (a learner from the
newest checkpoint, a store refilled from the saved buffer, a worker with the newest
weights), so the limit, the window and the backoff live here, one `RestartBudget` per actor
(or worker slot).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ray.exceptions import RayActorError, RayTaskError

from rayrl.config import FaultsConfig
from rayrl.errors import RunFailedError


class RestartBudget:
    """At most `limit` restarts within `window_s` seconds. The first restart in the window
    is immediate; each later one waits `backoff_s`, doubled every time, up to
    `max_backoff_s`."""

    def __init__(
        self,
        what: str,
        limit: int,
        window_s: float,
        backoff_s: float,
        max_backoff_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.limit = limit
        self.window_s = window_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self._restarts: deque[float] = deque()

    @classmethod
    def of(
        cls,
        what: str,
        limit: int,
        faults: FaultsConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> RestartBudget:
        """`limit` restarts of `what` within the run's window, with the run's backoff
        (`faults`)."""
        return cls(
            what,
            limit,
            faults.restart_window_s,
            faults.restart_backoff_s,
            faults.max_restart_backoff_s,
            clock,
        )

    def next_delay(self, cause: str, setting: str) -> float:
        """Count one more restart and return how long to wait before it; raise `RunFailedError`
        (naming `cause` and the `setting` that sets the limit) when it would exceed the
        limit."""
        now = self.clock()
        while self._restarts and now - self._restarts[0] > self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.limit:
            raise RunFailedError(
                f"{self.what} failed {len(self._restarts) + 1} times within "
                f"{self.window_s:g} s ({setting}={self.limit} restarts are allowed); "
                f"the last: {cause}"
            )
        self._restarts.append(now)
        earlier = len(self._restarts) - 1
        if earlier == 0:
            return 0.0
        return min(self.backoff_s * 2 ** (earlier - 1), self.max_backoff_s)


class ActorStartError(RuntimeError):
    """The constructor of an actor hosted in this process (an evaluator on a thread of the
    driver's) raised: what Ray reports of an actor as an `ActorDiedError` marked
    `actor_init_failed`."""


def constructor_error(error: BaseException) -> str | None:
    """The one-line error an actor's constructor raised, when that is why `error` happened
    (also when it surfaced in a call to another actor); None for any other failure. Such
    an actor would fail the same way at every restart."""
    if isinstance(error, ActorStartError):
        return one_line(error)
    while isinstance(error, RayTaskError) and not isinstance(error, RayActorError):
        cause = getattr(error, "cause", None)
        if cause is None or cause is error:
            return None
        error = cause
    if not isinstance(error, RayActorError) or not error.actor_init_failed:
        return None
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else "its constructor raised"


def one_line(error: BaseException) -> str:
    """The last non-empty line of an error's message (a Ray error's is a whole traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
