"""How a run goes on and how it ends, written once for both runtimes.

A runtime supplies one round of its own work (`step`) and what the end of a run needs from
it (`RunEnd`); the policy decides when to stop and in which order the end happens::

    reason = run_until_stopped(session, runtime.step)
    return finish_run(session, reason, runtime)

A run stops at the first of: `learner.max_nonfinite_steps` updates in a row with a step
skipped for a non-finite gradient (a failure), an evaluation reaching `run.target_return`,
`run.total_env_steps`, `run.time_budget_s`, or an interruption (Ctrl-C, SIGTERM). Then, in
this order: the final evaluation (none when interrupted; the one that reached the target
when it did), the final checkpoint (also the scheduled periodic one when the run ended on or
past it; never weights that are not finite), the last metrics record, and the result with
its summary.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rayrl.core import EvalResult, StoreStats
from rayrl.session import Counters, TrainingSession

logger = logging.getLogger(__name__)


class StopReason(str, enum.Enum):
    """Why a run stopped; its value is what the CLI prints."""

    TARGET_REACHED = "target_return reached"
    TOTAL_ENV_STEPS = "total_env_steps reached"
    TIME_BUDGET = "time_budget_s reached"
    INTERRUPTED = "interrupted"
    NON_FINITE = "non-finite losses"

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> int:
        """The CLI's exit status (also W&B's): 0, 130 when interrupted (the shell's
        convention for Ctrl-C), 1 when the run could not go on."""
        if self is StopReason.INTERRUPTED:
            return 130
        return 1 if self is StopReason.NON_FINITE else 0


@dataclass
class TrainResult:
    """How a run ended."""

    run_dir: Path
    stop_reason: StopReason
    counters: Counters
    final_eval: EvalResult | None
    wall_s: float
    """Wall time of this segment, from the start of the process (Ray's start included)."""
    target_reached_s: float | None = None
    """Seconds from the start until an evaluation first reached `run.target_return`."""
    summary: str = ""
    evaluations: list[dict[str, float]] = field(default_factory=list)
    placement: dict[str, dict[str, str]] = field(default_factory=dict)
    """Where actors ran (Ray runtime): {"learner": {"node_id", "device"}}."""
    figures: dict[str, float] = field(default_factory=dict)
    """Headline numbers of this segment (see `RunStats.figures`)."""
    learner_digests: list[str] = field(default_factory=list)
    """With several learners: a hash of each one's parameters at the end (they must agree)."""


def stop_reason(session: TrainingSession) -> StopReason | None:
    """Why the run must stop now, or None to go on."""
    run = session.config.run
    nonfinite = session.stats.nonfinite.in_a_row
    if nonfinite >= session.config.learner.max_nonfinite_steps:
        logger.error(
            "stopping: the last %d learner updates had a non-finite gradient and their steps "
            "were skipped (learner.max_nonfinite_steps=%d); the weights and checkpoints are the "
            "last finite ones. Look for NaN or infinite rewards or observations, or lower "
            "learner.lr",
            nonfinite,
            session.config.learner.max_nonfinite_steps,
        )
        return StopReason.NON_FINITE
    if session.target_reached_s is not None:
        return StopReason.TARGET_REACHED
    if session.counters.env_steps >= run.total_env_steps:
        return StopReason.TOTAL_ENV_STEPS
    run_wall_s = session.counters.elapsed_s + session.wall_s  # all segments of a resumed run
    if run.time_budget_s is not None and run_wall_s >= run.time_budget_s:
        return StopReason.TIME_BUDGET
    return None


def run_until_stopped(
    session: TrainingSession,
    step: Callable[[], None],
    start: Callable[[], None] = lambda: None,
) -> StopReason:
    """`start()`, then `step()` until a stop condition holds (perhaps at once: a resumed run
    that has reached its budget); Ctrl-C (or SIGTERM, which the CLI turns into it) stops the
    run too, also while it starts."""
    try:
        start()
        while (reason := stop_reason(session)) is None:
            step()
        return reason
    except KeyboardInterrupt:
        logger.warning("interrupted: stopping and writing a final checkpoint")
        return StopReason.INTERRUPTED


class RunEnd(Protocol):
    """What a runtime does at the end of a run, when `finish_run` asks."""

    def final_evaluation(self) -> EvalResult | None:
        """Evaluate the newest weights and record it (`session.record_eval`, which may save
        `best.pt`); None when no evaluation could be made."""
        ...

    def final_checkpoint(self, periodic: bool) -> None:
        """Save the learner to `latest.pt` (and as a periodic checkpoint when `periodic`)."""
        ...

    def store_stats(self) -> StoreStats | None:
        """The experience store's latest figures, for the last metrics record."""
        ...


def finish_run(session: TrainingSession, reason: StopReason, end: RunEnd) -> TrainResult:
    """End the run in the policy's order and return its result."""
    final_eval = None
    if reason is StopReason.TARGET_REACHED:
        final_eval = session.last_eval
    elif reason is not StopReason.INTERRUPTED:
        final_eval = end.final_evaluation()
    end.final_checkpoint(periodic=session.checkpoint_due())
    session.log_if_due(end.store_stats(), force=True)
    return TrainResult(
        run_dir=session.run_dir.root,
        stop_reason=reason,
        counters=session.counters,
        final_eval=final_eval,
        wall_s=session.wall_s,
        target_reached_s=session.target_reached_s,
        summary=session.stats.summary(),
        evaluations=session.evaluations,
        placement=session.placement,
        figures=session.stats.figures(),
        learner_digests=session.learner_digests,
    )
