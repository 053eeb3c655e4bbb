"""How a run goes on and how it ends, written once for both runtimes.

A runtime supplies one round of its own work (`step`) and what the end of a run needs from
it (`RunEnd`); this module decides when to stop and in which order the end happens::

    reason = run_until_stopped(session, runtime.step)
    return finish_run(session, reason, runtime)

A run stops at the first of: `learner.max_nonfinite_steps` updates in a row with a step
skipped for a non-finite gradient (a failure), an evaluation reaching `run.target_return`,
`run.total_env_steps`, `run.time_budget_s`, an interruption (Ctrl-C, SIGTERM), or any
error (a failure: `RunFailedError` from a restart limit, writes that keep failing, or a bug).
Then, in this order: the final evaluation (none when interrupted or failed; the one that
reached the target when it did), the final checkpoint (also the scheduled periodic one when
the run ended on or past it; never weights that are not finite, and none after an error
that may have left the learner's state inconsistent), the last metrics record, and the
result with its summary. Each step of the end that fails is logged in one line and the
next one still runs; a second interruption during the end exits at once (every file is
written atomically, so what was saved stays intact).
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from rayrl.core import EvalResult, StoreStats
from rayrl.errors import RunFailedError, failure_of
from rayrl.session import Counters, TrainingSession

logger = logging.getLogger(__name__)

T = TypeVar("T")


class StopReason(str, enum.Enum):
    """Why a run stopped; its value is what the CLI prints."""

    TARGET_REACHED = "target_return reached"
    TOTAL_ENV_STEPS = "total_env_steps reached"
    TIME_BUDGET = "time_budget_s reached"
    INTERRUPTED = "interrupted"
    NON_FINITE = "non-finite losses"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> int:
        """The CLI's exit status (also W&B's): 0, 130 when interrupted (the shell's
        convention for Ctrl-C), 1 when the run could not go on."""
        if self is StopReason.INTERRUPTED:
            return 130
        return 1 if self in (StopReason.NON_FINITE, StopReason.FAILED) else 0


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
    headline: dict[str, float] = field(default_factory=dict)
    """Headline numbers of this segment (see `RunMetrics.headline`)."""
    learner_digests: list[str] = field(default_factory=list)
    """With several learners: a hash of each one's parameters at the end (they must agree)."""
    failure: str | None = None
    """Why a failed run failed, in one line."""
    problems: list[str] = field(default_factory=list)
    """What the end of the run could not save (the final checkpoint, the final replay), each
    in one line saying what is on disk instead."""

    @property
    def exit_code(self) -> int:
        """The CLI's exit status (also W&B's): the stop reason's, but 1 instead of 0 when
        something the end of the run should have saved is missing (`problems`)."""
        code = self.stop_reason.exit_code
        return 1 if code == 0 and self.problems else code


def stop_reason(session: TrainingSession) -> StopReason | None:
    """Why the run must stop now, or None to go on."""
    if _interrupted.is_set():  # a signal whose KeyboardInterrupt was swallowed
        return StopReason.INTERRUPTED
    run = session.config.run
    nonfinite = session.metrics.nonfinite.in_a_row
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


_interrupted = threading.Event()


def handle_interrupts() -> None:
    """Make SIGINT and SIGTERM stop the run (the CLI's: `kill`, `ray job stop` and
    Kubernetes send SIGTERM). Each raises `KeyboardInterrupt`, which wakes the loop from
    any blocking call; the first also sets a flag that the loop checks every round, so an
    interrupt that a library swallows still stops the run. Installed explicitly, also over
    an inherited "ignore" (a process started in the background of a script)."""
    _interrupted.clear()
    signal.signal(signal.SIGINT, _on_interrupt)
    signal.signal(signal.SIGTERM, _on_interrupt)


def stop_if_interrupted() -> None:
    """Raise the `KeyboardInterrupt` of a signal that came while the run started and that a
    library swallowed (Ray's Cython modules ignore one raised while they are imported), so
    that the run stops before it goes on to its next step."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


def _on_interrupt(signum: int, frame: object) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def _log_interrupt() -> None:
    logger.warning(
        "interrupted: stopping and writing a final checkpoint (interrupt again to exit at "
        "once, keeping the checkpoints written before)"
    )


def run_until_stopped(
    session: TrainingSession,
    step: Callable[[], None],
    start: Callable[[], None] = lambda: None,
) -> StopReason:
    """`start()`, then `step()` until a stop condition holds (perhaps at once: a resumed run
    that has reached its budget); Ctrl-C (or SIGTERM, which the CLI turns into it) stops the
    run too, also while it starts, and so does any error (`session.failure` says which)."""
    try:
        start()
        while (reason := stop_reason(session)) is None:
            step()
        if reason is StopReason.INTERRUPTED:
            _log_interrupt()
        return reason
    except KeyboardInterrupt:
        _log_interrupt()
        return StopReason.INTERRUPTED
    except Exception as error:
        session.failure = failure_of(error)
        logger.error(
            "stopping: %s",
            session.failure.cause,
            exc_info=not isinstance(error, RunFailedError),  # a bug: its traceback, to report
        )
        return StopReason.FAILED


class RunEnd(Protocol):
    """What a runtime does at the end of a run, when `finish_run` asks."""

    def stop_sampling(self) -> None:
        """Ask for no more experience or updates, and let the calls in progress finish."""
        ...

    def final_evaluation(self) -> EvalResult | None:
        """Evaluate the newest weights and record it (`session.record_eval`, which may save
        `best.pt`); None when no evaluation could be made."""
        ...

    def final_checkpoint(self, periodic: bool) -> None:
        """Save the learner to `latest.pt` (and as a periodic checkpoint when `periodic`),
        with the replay beside it when the run keeps it; what could not be saved goes to
        `session.end_problems`."""
        ...

    def store_stats(self) -> StoreStats | None:
        """The experience store's latest stats, for the last metrics record."""
        ...


def finish_run(session: TrainingSession, reason: StopReason, end: RunEnd) -> TrainResult:
    """End the run in this module's order and return its result. Every error from here on
    goes through the same end: one that stops the sampling (a save that reaches the write
    error limit, an actor past its restart limit) makes the run a failure, and the final
    checkpoint is still written."""
    session.writer.end()
    try:
        reason = _stop_sampling(session, reason, end)
        final_eval = _end(session, reason, end)
    except KeyboardInterrupt:
        logger.warning(
            "interrupted again: exiting now; the checkpoints written before are intact "
            "(--resume goes on from %s)",
            session.run_dir.latest_checkpoint,
        )
        raise
    failure = session.failure
    return TrainResult(
        run_dir=session.run_dir.root,
        stop_reason=reason,
        counters=session.counters,
        final_eval=final_eval,
        wall_s=session.wall_s,
        target_reached_s=session.target_reached_s,
        summary=session.metrics.summary(),
        evaluations=session.evaluations,
        placement=session.placement,
        headline=session.metrics.headline(),
        learner_digests=session.learner_digests,
        failure=failure.cause if failure is not None else None,
        problems=[*session.end_problems, *_missing_checkpoint(session)],
    )


def _stop_sampling(session: TrainingSession, reason: StopReason, end: RunEnd) -> StopReason:
    """`end.stop_sampling()`; an error there is the run's failure (unless it failed or was
    interrupted already), said in one line."""
    try:
        end.stop_sampling()
    except Exception as error:
        failure = failure_of(error)
        logger.error("while stopping: %s", failure.cause)
        if reason not in (StopReason.FAILED, StopReason.INTERRUPTED):
            session.failure = failure
            return StopReason.FAILED
    return reason


def _missing_checkpoint(session: TrainingSession) -> list[str]:
    """One line when the final checkpoint should be on disk and is not, naming what is."""
    failure = session.failure
    if failure is not None and not failure.state_sound:
        return []  # not written on purpose (said when it was skipped)
    stopped_at = session.counters.env_steps
    if session.saved_env_steps == stopped_at:
        return []
    on_disk = "no checkpoint is on disk"
    if (saved := session.saved_env_steps) is not None:
        on_disk = f"{session.run_dir.latest_checkpoint} is from {saved:,} env steps"
    problem = f"the final checkpoint (at {stopped_at:,} env steps) was not written; {on_disk}"
    logger.error("%s", problem)
    return [problem]


def _end(session: TrainingSession, reason: StopReason, end: RunEnd) -> EvalResult | None:
    """The final evaluation, checkpoint and metrics record; a step that fails is logged in
    one line and the next one runs."""
    final_eval = None
    if reason is StopReason.TARGET_REACHED:
        final_eval = session.last_eval
    elif reason not in (StopReason.INTERRUPTED, StopReason.FAILED):
        final_eval = _logged("no final evaluation", end.final_evaluation)
    failure = session.failure
    if failure is not None and not failure.state_sound:
        logger.error(
            "no final checkpoint: the error may have left the learner's state inconsistent; "
            "the checkpoints written before are kept"
        )
    else:
        _logged("no final checkpoint", lambda: end.final_checkpoint(session.checkpoint_due()))
    _logged("no last metrics record", lambda: session.log_if_due(end.store_stats(), force=True))
    return final_eval


def _logged(what: str, action: Callable[[], T]) -> T | None:
    """`action()`, or None with `what` and the error logged in one line when it fails."""
    logger.info("ending the run: %s", what.removeprefix("no "))
    try:
        return action()
    except Exception as error:
        logger.error("%s: %s", what, failure_of(error).cause)
        return None
