"""The futures dispatcher: every outstanding Ray call, and what to do when it resolves.

Supervisors `submit` an object reference with a handler for its value and one for its
error, and the call's `Life`: the life of the actor (or group of actors) it was made to.
When a supervisor replaces an actor it ends that life, and the dispatcher drops the results
of every call made during it unseen. This is the one incarnation guard of the Ray runtime:
no handler ever sees a late result from an actor that has been replaced.

An actor's death can surface in a call to another actor (a chunk whose worker died fails
the store's `add`); `Deaths` hands it to the supervisor that runs the dead actor. Each
supervisor knows its actors' ids from the actors themselves: it asks each new actor
`actor_id` (`rayrl.ray.identity`), whose answer (or whose failure, which names the dead
callee) gives it; an actor handle's own id is private to Ray.

Besides Ray's object references, it waits on `concurrent.futures.Future`s: the calls of an
evaluator on a thread of the driver's process (`rayrl.ray.driver_evaluator`). Ray's wait
cannot be woken by a thread, so while such a call is outstanding, a poll waits at most
`LOCAL_POLL_S` at a time.

`wait` and `get` default to Ray's; the supervisors' unit tests pass fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Protocol

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

logger = logging.getLogger(__name__)

LOCAL_POLL_S = 0.05
"""Longest a poll waits on Ray while a call on a thread of this process is outstanding: its
answer waits at most this long to be dispatched."""


class Life:
    """One life of an actor: calls made during it are dispatched only while it lasts."""

    __slots__ = ("alive",)

    def __init__(self) -> None:
        self.alive = True

    def end(self) -> None:
        self.alive = False


@dataclass
class _Pending:
    on_value: Callable[[Any], None]
    on_error: Callable[[BaseException], None]
    life: Life | None


def dead_actor(error: BaseException) -> str | None:
    """The id of the actor whose death caused `error`, if any. A task that failed because
    an actor it called died raises `RayTaskError(ActorDiedError)` carrying the *caller's*
    id; the dead actor is its cause's."""
    while isinstance(error, RayTaskError):
        cause = getattr(error, "cause", None)
        if cause is None or cause is error:
            break
        error = cause
    if isinstance(error, RayActorError):
        return error.actor_id
    return None


def callee_died(error: BaseException) -> str | None:
    """The id of the actor that a call without arguments (`Identified.actor_id`) was made
    to, when `error` says that actor died (in its constructor too); None for any other
    error. With no arguments, a death in the call's error can only be the callee's: the
    death of an actor whose result is an argument would surface there too."""
    return error.actor_id if isinstance(error, RayActorError) else None


class Dispatcher:
    def __init__(
        self,
        wait: Callable[..., tuple[list[Any], list[Any]]] = ray.wait,
        get: Callable[[Any], Any] = ray.get,
    ) -> None:
        self._wait = wait
        self._get = get
        self._pending: dict[Any, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def submit(
        self,
        ref: Any,
        on_value: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
        life: Life | None = None,
    ) -> None:
        """Call `on_value(value)` or `on_error(error)` once `ref` resolves, unless `life` has
        ended by then."""
        self._pending[ref] = _Pending(on_value, on_error, life)

    def poll(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for at least one call, then dispatch every resolved one;
        returns how many were dispatched or dropped."""
        if not self._pending:
            time.sleep(timeout_s)
            return 0
        local = [ref for ref in self._pending if isinstance(ref, futures.Future)]
        refs = [ref for ref in self._pending if not isinstance(ref, futures.Future)]
        if any(future.done() for future in local):
            timeout_s = 0.0
        ready: list[Any] = []
        if refs:
            wait_s = min(timeout_s, LOCAL_POLL_S) if local else timeout_s
            ready, _ = self._wait(refs, num_returns=1, timeout=wait_s)
            if ready:
                ready, _ = self._wait(refs, num_returns=len(refs), timeout=0)
        elif timeout_s > 0:  # futures only: a thread's answer wakes this wait
            futures.wait(local, timeout=timeout_s, return_when=futures.FIRST_COMPLETED)
        ready += [future for future in local if future.done()]
        for ref in ready:
            pending = self._pending.pop(ref)
            if pending.life is not None and not pending.life.alive:
                continue
            try:
                value = self._value(ref)
            except RayError as error:
                pending.on_error(error)
                continue
            except Exception as error:  # a local call's own error, as Ray would wrap it
                if not isinstance(ref, futures.Future):
                    raise
                pending.on_error(error)
                continue
            pending.on_value(value)
        return len(ready)

    def _value(self, ref: Any) -> Any:
        return ref.result() if isinstance(ref, futures.Future) else self._get(ref)

    def is_pending(self, ref: Any) -> bool:
        """Whether `ref`'s handlers may still run: it has not resolved (or not been
        dispatched: an interrupt can land between the two) and its life lasts."""
        pending = self._pending.get(ref)
        return pending is not None and (pending.life is None or pending.life.alive)

    def get(self, ref: Any) -> Any:
        """The value of a call known to have finished (such as published weights)."""
        return self._get(ref)

    def drain(self, busy: Callable[[], bool], timeout_s: float, poll_s: float = 0.2) -> bool:
        """Dispatch until `busy()` is False or `timeout_s` passed; returns whether it
        finished in time."""
        deadline = time.monotonic() + timeout_s
        while busy():
            if time.monotonic() >= deadline:
                return False
            self.poll(min(poll_s, max(0.0, deadline - time.monotonic())))
        return True


class Supervisor(Protocol):
    """What `Deaths` asks of each supervisor."""

    def owns(self, actor_id: str) -> bool:
        """Whether the actor is one this supervisor runs now (not a replaced one)."""
        ...

    def on_died(self, actor_id: str, error: BaseException) -> None:
        """Replace or restore the dead actor (`error` says how it died)."""
        ...


class Deaths:
    """Routes an actor's death to the supervisor that runs the actor: a call to one actor
    can fail because another died (a chunk's worker, the store a learner samples from).
    Every supervisor hands it errors; the driver, which makes the supervisors, says which
    ones it routes to (`route_to`)."""

    def __init__(self) -> None:
        self.supervisors: tuple[Supervisor, ...] = ()

    def route_to(self, *supervisors: Supervisor) -> None:
        self.supervisors = supervisors

    def handle(self, error: BaseException) -> bool:
        """True when `error` was an actor's death: its supervisor has dealt with it (or the
        actor had been replaced already). False for any other error."""
        dead = dead_actor(error)
        if dead is None:
            return False
        for supervisor in self.supervisors:
            if supervisor.owns(dead):
                supervisor.on_died(dead, error)
                return True
        logger.debug("actor %s died after it was replaced", dead)
        return True
