"""Liveness probes: how a supervisor tells an actor that stopped answering (its process
stopped, frozen or cut off) from one that is only waiting on another actor.

A call that does real work (a learner's `train`, a store's `stats`) may wait for a long
time on something else (a batch from the store, the store's lock held by a save), so its
silence says nothing about the actor that runs it. A probe is a call that waits on nothing
(the actor answers it from a concurrency group of its own, or without any lock): an actor
that leaves it unanswered for `faults.probe_timeout_s` (in the watchdog's seconds,
`rayrl.ray.watchdog`) is hung, whatever its other calls wait for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rayrl.ray.dispatcher import Dispatcher, Life

PROBE_INTERVAL_S = 2.0
"""How long after an answer the next probe goes out: a hang is noticed at most this much
later than `faults.probe_timeout_s` after it began, for one small call per actor this often."""


class Probe:
    """One actor's probe: one call out at a time, asked again `PROBE_INTERVAL_S` after the
    last answer."""

    def __init__(self, dispatcher: Dispatcher, clock: Callable[[], float]) -> None:
        self.dispatcher = dispatcher
        self.clock = clock
        self.asked_at: float | None = None
        """When the call out was made; None when none is out."""
        self.answered_at = -math.inf

    def ask(
        self,
        call: Callable[[], Any],
        on_answer: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
        life: Life,
    ) -> None:
        """Make the probe `call()` (it returns an object reference), unless one is out or
        the last answer is recent; `on_answer` gets its value, `on_error` its failure."""
        now = self.clock()
        if self.asked_at is not None or now - self.answered_at < PROBE_INTERVAL_S:
            return
        self.asked_at = now

        def answered(value: Any) -> None:
            self.asked_at = None
            self.answered_at = self.clock()
            on_answer(value)

        def failed(error: BaseException) -> None:
            self.asked_at = None
            on_error(error)

        self.dispatcher.submit(call(), answered, failed, life)
