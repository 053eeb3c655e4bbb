"""The run lifecycle both runtimes share: when a run stops and in which order it ends."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from rayrl import run_lifecycle
from rayrl.contract import StoreKind
from rayrl.core import EvalResult, ModelInfo, NonFiniteSteps, StoreStats
from rayrl.errors import RunFailedError
from rayrl.presets import load_config
from rayrl.recorders import Recorders
from rayrl.run_lifecycle import (
    StopReason,
    finish_run,
    handle_interrupts,
    run_until_stopped,
    stop_reason,
)
from rayrl.rundir import RunDirectory
from rayrl.session import Counters, TrainingSession

KIND = StoreKind(namespace="replay", items="transitions", drops_stale=False)


def session(tmp_path, *overrides: str) -> TrainingSession:
    config = load_config(None, ["logging.console=false", *overrides])
    return TrainingSession(
        config, RunDirectory(tmp_path), Recorders([]), Counters(), time.time(), KIND
    )


class Runtime:
    """A runtime's end of the run, recording what the policy asked for."""

    def __init__(self, session: TrainingSession, eval_mean: float = 100.0) -> None:
        self.session = session
        self.eval_mean = eval_mean
        self.asked: list[str] = []

    def step(self) -> None:
        self.asked.append("step")
        self.session.counters.env_steps += 1000

    def final_evaluation(self) -> EvalResult:
        self.asked.append("evaluation")
        result = EvalResult(np.array([self.eval_mean]), np.array([10]))
        self.session.record_eval(result, self.session.counters.env_steps)
        return result

    def stop_sampling(self) -> None:
        self.asked.append("stop")

    def final_checkpoint(self, periodic: bool) -> None:
        self.asked.append(f"checkpoint(periodic={periodic})")
        self.session.saved_env_steps = self.session.counters.env_steps

    def store_stats(self) -> StoreStats:
        return StoreStats(size=1, inserted=1, sampled=0)


def test_stop_reasons_in_order_of_precedence(tmp_path):
    s = session(tmp_path, "run.total_env_steps=5000", "run.time_budget_s=3600")
    assert stop_reason(s) is None
    s.counters.env_steps = 5000
    assert stop_reason(s) is StopReason.TOTAL_ENV_STEPS
    s.started_at = time.time() - 3601
    assert stop_reason(s) is StopReason.TOTAL_ENV_STEPS
    s.counters.env_steps = 0
    assert stop_reason(s) is StopReason.TIME_BUDGET
    s.target_reached_s = 1.0
    assert stop_reason(s) is StopReason.TARGET_REACHED


def test_the_time_budget_counts_the_earlier_segments_of_a_resumed_run(tmp_path):
    s = session(tmp_path, "run.time_budget_s=3600")
    s.counters.elapsed_s = 3000.0  # before the resume
    assert stop_reason(s) is None
    s.started_at = time.time() - 601
    assert stop_reason(s) is StopReason.TIME_BUDGET


def test_non_finite_steps_in_a_row_stop_the_run_as_a_failure(tmp_path):
    s = session(tmp_path, "learner.max_nonfinite_steps=3")
    s.target_reached_s = 1.0
    s.metrics.nonfinite = NonFiniteSteps(skipped=7, in_a_row=2)
    assert stop_reason(s) is StopReason.TARGET_REACHED
    s.metrics.nonfinite = NonFiniteSteps(skipped=8, in_a_row=3)
    assert stop_reason(s) is StopReason.NON_FINITE  # before anything else
    assert StopReason.NON_FINITE.exit_code == 1
    assert StopReason.INTERRUPTED.exit_code == 130
    assert StopReason.TARGET_REACHED.exit_code == 0


def test_stop_reasons_read_as_their_text():
    assert StopReason.TARGET_REACHED == "target_return reached"
    assert f"stopped: {StopReason.INTERRUPTED}" == "stopped: interrupted"


def test_a_run_that_reaches_its_budget_is_evaluated_then_checkpointed(tmp_path):
    s = session(tmp_path, "run.total_env_steps=3000", "run.checkpoint_interval_env_steps=3000")
    runtime = Runtime(s)
    reason = run_until_stopped(s, runtime.step)
    result = finish_run(s, reason, runtime)
    assert reason is StopReason.TOTAL_ENV_STEPS
    # the scheduled checkpoint at 3,000 steps is the final one
    assert runtime.asked == ["step"] * 3 + ["stop", "evaluation", "checkpoint(periodic=True)"]
    assert result.final_eval.mean == 100.0
    assert result.stop_reason is StopReason.TOTAL_ENV_STEPS
    assert result.counters.env_steps == 3000


def test_a_run_that_reached_its_target_keeps_that_evaluation(tmp_path):
    s = session(tmp_path, "run.target_return=50")
    runtime = Runtime(s)
    s.record_eval(EvalResult(np.array([60.0]), np.array([5])), 1000)
    result = finish_run(s, stop_reason(s), runtime)
    assert result.stop_reason is StopReason.TARGET_REACHED
    assert runtime.asked == ["stop", "checkpoint(periodic=False)"]
    assert result.final_eval.mean == 60.0
    assert result.target_reached_s is not None


def test_an_interrupted_run_is_checkpointed_without_an_evaluation(tmp_path):
    s = session(tmp_path)
    runtime = Runtime(s)

    def interrupted() -> None:
        raise KeyboardInterrupt

    reason = run_until_stopped(s, interrupted)
    result = finish_run(s, reason, runtime)
    assert reason is StopReason.INTERRUPTED
    assert runtime.asked == ["stop", "checkpoint(periodic=False)"]
    assert result.final_eval is None


@pytest.mark.parametrize("mean", [10.0, 500.0])
def test_the_final_evaluation_can_reach_the_target(tmp_path, mean):
    s = session(tmp_path, "run.total_env_steps=1000", "run.target_return=475")
    runtime = Runtime(s, eval_mean=mean)
    result = finish_run(s, run_until_stopped(s, runtime.step), runtime)
    assert result.stop_reason is StopReason.TOTAL_ENV_STEPS
    assert (result.target_reached_s is not None) == (mean >= 475)


def raising(error: BaseException):
    def step(*args) -> None:
        raise error

    return step


def test_a_failure_ends_through_the_policy_with_a_checkpoint_and_status_1(tmp_path):
    s = session(tmp_path)
    runtime = Runtime(s)
    reason = run_until_stopped(s, raising(RunFailedError("the learner could not start: boom")))
    result = finish_run(s, reason, runtime)
    assert reason is StopReason.FAILED
    assert reason.exit_code == 1
    assert runtime.asked == ["stop", "checkpoint(periodic=False)"]  # no evaluation
    assert result.failure == "the learner could not start: boom"


def test_a_bug_ends_the_run_without_a_checkpoint_of_a_state_it_may_have_broken(tmp_path, caplog):
    s = session(tmp_path)
    runtime = Runtime(s)
    reason = run_until_stopped(s, raising(ValueError("shapes (2,) and (3,)\nmismatch")))
    result = finish_run(s, reason, runtime)
    assert reason is StopReason.FAILED
    assert runtime.asked == ["stop"]
    assert result.failure == "ValueError: mismatch"
    assert any(r.exc_info for r in caplog.records)  # a bug keeps its traceback, to report
    assert "no final checkpoint" in caplog.text


def test_a_step_of_the_end_that_fails_does_not_skip_the_next(tmp_path, caplog):
    s = session(tmp_path, "run.total_env_steps=1000")
    runtime = Runtime(s)
    runtime.final_evaluation = raising(RunFailedError("the evaluator failed 6 times"))
    result = finish_run(s, run_until_stopped(s, runtime.step), runtime)
    assert result.final_eval is None
    assert runtime.asked == ["step", "stop", "checkpoint(periodic=False)"]
    assert "no final evaluation: the evaluator failed 6 times" in caplog.text


def test_a_second_interrupt_while_the_run_ends_exits_at_once(tmp_path, caplog):
    s = session(tmp_path)
    runtime = Runtime(s)
    runtime.final_checkpoint = raising(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        finish_run(s, run_until_stopped(s, raising(KeyboardInterrupt())), runtime)
    assert "interrupted again: exiting now" in caplog.text


def test_an_interrupt_that_a_library_swallows_still_stops_the_run(tmp_path):
    """The CLI's handler raises KeyboardInterrupt and sets a flag the loop checks: a
    library that catches the exception (in a blocking call) cannot keep the run going."""
    s = session(tmp_path)
    runtime = Runtime(s)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def swallowing_step() -> None:
        runtime.step()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass

    handle_interrupts()
    try:
        reason = run_until_stopped(s, swallowing_step)
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        run_lifecycle._interrupted.clear()
    assert reason is StopReason.INTERRUPTED
    assert runtime.asked == ["step"]


def test_an_error_while_sampling_stops_fails_the_run_and_still_checkpoints(tmp_path, caplog):
    """A save that reaches the write error limit (or an actor past its restart limit)
    while the workers and learner stop: the run fails, and still ends through the policy."""
    s = session(tmp_path, "run.total_env_steps=1000")
    runtime = Runtime(s)
    runtime.stop_sampling = raising(RunFailedError("3 writes of the replay failed in a row"))
    result = finish_run(s, run_until_stopped(s, runtime.step), runtime)
    assert result.stop_reason is StopReason.FAILED
    assert result.exit_code == 1
    assert result.failure == "3 writes of the replay failed in a row"
    assert runtime.asked == ["step", "checkpoint(periodic=False)"]  # no evaluation
    assert "while stopping: 3 writes of the replay failed in a row" in caplog.text


def test_a_missing_final_checkpoint_makes_the_exit_status_say_so(tmp_path, caplog):
    s = session(tmp_path, "run.total_env_steps=2000")
    runtime = Runtime(s)
    saved_at = []

    def stale_checkpoint(periodic: bool) -> None:  # the write failed; an older one is there
        s.saved_env_steps = 1000
        saved_at.append(s.counters.env_steps)

    runtime.final_checkpoint = stale_checkpoint
    result = finish_run(s, run_until_stopped(s, runtime.step), runtime)
    assert saved_at == [2000]
    assert result.stop_reason is StopReason.TOTAL_ENV_STEPS
    assert result.exit_code == 1
    (problem,) = result.problems
    assert problem == (
        f"the final checkpoint (at 2,000 env steps) was not written; "
        f"{s.run_dir.latest_checkpoint} is from 1,000 env steps"
    )
    assert problem in caplog.text


def test_a_missing_final_replay_makes_the_exit_status_say_so(tmp_path):
    s = session(tmp_path, "run.total_env_steps=1000")
    runtime = Runtime(s)
    checkpoint = runtime.final_checkpoint

    def without_replay(periodic: bool) -> None:
        checkpoint(periodic)
        s.replay_not_saved("its save failed")

    runtime.final_checkpoint = without_replay
    result = finish_run(s, run_until_stopped(s, runtime.step), runtime)
    assert result.exit_code == 1
    assert result.problems == [
        "the replay was not saved with the final checkpoint (its save failed); none is on disk"
    ]


def test_an_interrupted_run_keeps_status_130_when_its_checkpoint_is_missing(tmp_path):
    s = session(tmp_path)
    runtime = Runtime(s)
    runtime.final_checkpoint = lambda periodic: None
    result = finish_run(s, run_until_stopped(s, raising(KeyboardInterrupt())), runtime)
    assert result.problems == [
        "the final checkpoint (at 0 env steps) was not written; no checkpoint is on disk"
    ]
    assert result.exit_code == 130


def test_weights_that_are_not_finite_never_reach_a_checkpoint(tmp_path, caplog):
    """The learner skips non-finite steps, so a real run rarely hands the session such
    weights: the guard is tested here, where they can be made. The checkpoints saved before
    stay as they were, latest.pt included, and the end says the final one is missing."""
    s = session(tmp_path)
    s.counters.env_steps = 1000
    finite = ModelInfo(1, {"w": np.ones(3, np.float32)})
    s.save_checkpoint({"updates": np.array(1)}, finite, periodic=True)
    saved = {path.name: path.read_bytes() for path in s.run_dir.checkpoints.iterdir()}
    s.counters.env_steps = 2000
    broken = ModelInfo(2, {"w": np.array([1.0, np.nan, 1.0], np.float32)})
    s.save_checkpoint({"updates": np.array(2)}, broken, periodic=True)
    s.save_checkpoint({"updates": np.array(2)}, broken, best=True)
    after = {path.name: path.read_bytes() for path in s.run_dir.checkpoints.iterdir()}
    assert after == saved
    assert "checkpoint at 2000 env steps not saved: the weights are not finite" in caplog.text
    assert s.saved_env_steps == 1000


@pytest.mark.parametrize(
    ("resumed_at", "evaluated", "next_eval"),
    [
        (2560, [(2560, 2560)], 2560),  # the evaluation due at 2,500, made at 2,560: cut back
        (3072, [(2560, 2560)], 5000),  # made before the checkpoint: kept, not made again
        (5000, [(2560, 2560), (5000, 5000)], 5000),  # due and made at the count: cut back
        (2048, [], 2500),  # none due yet
    ],
)
def test_a_resumed_run_makes_again_the_evaluation_its_resume_cut_back(
    tmp_path, resumed_at, evaluated, next_eval
):
    """A resume drops the rows recorded from the checkpoint's count on, an evaluation made
    at that count included (a sweep's trial paused inside its report never wrote it): the
    resumed run evaluates after its first round instead of an interval later."""
    run_dir = RunDirectory(tmp_path)
    for env_steps, recorded_at in evaluated:
        run_dir.append_eval({"env_steps": env_steps, "recorded_at_env_steps": recorded_at})
    resumed = TrainingSession(
        load_config(None, ["logging.console=false", "run.eval_interval_env_steps=2500"]),
        run_dir,
        Recorders([]),
        Counters(env_steps=resumed_at),
        time.time(),
        KIND,
    )
    resumed.begin()
    assert resumed.next_eval == next_eval
