"""What the supervisors of a run share, and the newest published weights, one owner each.

The driver builds one `SupervisorContext` and hands it to every supervisor, then tells its
`Deaths` which supervisors to route deaths to: no supervisor registers itself anywhere.
`PublishedWeights` owns the newest weights the learners published. The learners'
supervisor publishes into it; the workers' supervisor, the evaluations and the checkpoints
read it when they need weights, so no supervisor calls another to hand weights on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rayrl.config import FaultsConfig
from rayrl.ray.dispatcher import Deaths, Dispatcher
from rayrl.ray.factory import ActorFactory, is_placed
from rayrl.ray.watchdog import Watchdog
from rayrl.run_metrics import RunMetrics
from rayrl.session import Counters


class PublishedWeights:
    """A reference to the newest `ModelInfo` the learners published, and its version."""

    def __init__(self) -> None:
        self.info: Any = None
        """The object reference (None before the first publication)."""
        self.version = -1
        self.rollbacks = 0
        """Publications by a restored learner, whose weights may be older than the ones
        before: a reader that has seen fewer rollbacks takes the older version too."""

    def publish(self, info: Any, version: int, *, rollback: bool = False) -> None:
        self.info, self.version = info, version
        if rollback:
            self.rollbacks += 1

    @property
    def available(self) -> bool:
        return self.info is not None


@dataclass(frozen=True)
class SupervisorContext:
    """What every supervisor of a run uses; each supervisor adds only its own settings."""

    factory: ActorFactory
    dispatcher: Dispatcher
    deaths: Deaths
    """Where any supervisor hands an error that may be another actor's death."""
    faults: FaultsConfig
    counters: Counters
    metrics: RunMetrics
    weights: PublishedWeights = field(default_factory=PublishedWeights)
    clock: Callable[[], float] = time.monotonic
    placed: Callable[[Any], bool | None] = is_placed
    """Whether Ray has given an actor a process (one that it has not waits for capacity);
    None when that cannot be read (`rayrl.compat`)."""
    watchdog: Watchdog = field(default=None)  # type: ignore[assignment]  # __post_init__'s
    """What the supervisors' timeouts count: seconds an actor could run
    (`rayrl.ray.watchdog`); by default a `Watchdog` on `clock`."""

    def __post_init__(self) -> None:
        if self.watchdog is None:
            object.__setattr__(self, "watchdog", Watchdog(self.clock))
