"""Tune's private names (see `rayrl.compat`): population-based training whose synchronous
mode is kept from waiting for ever and from ending a trial it has just copied into.

Synchronous PBT (`scheduler.synch`) pauses each trial at a perturbation until every live
trial has reached it, and then runs only the trials below the next one. In Ray 2.60 it
waits for ever in two cases, which `SweepPBT` ends (its state is Ray's own; it adds no
bookkeeping of its own):
- a trial fails before the perturbation: Tune keeps it among the controller's live trials
  with its clock below the perturbation (ray-project/ray#12122), so the others wait for it,
  paused, and nothing runs again. Here a trial that has ended is not waited for, and when
  every trial left is paused at the perturbation, they are perturbed there and then;
- `rayrl sweep --resume`: Tune rebuilds the scheduler from its settings, the trials report
  together from where they stopped, and Ray puts the next perturbation at the latest of
  those reports, where every trial already is, so none is below it to run. Here the next
  perturbation then moves an interval past the trials.

It also ends a trial at its first result after a copy. Tune pauses the first trial to reach
a perturbation with a save; when the last one's result comes while that save is still in
flight, PBT copies a better trial into the saving one and stops it, and Tune's stop, seeing
a save in flight, caches a STOP decision for when the save resolves, then discards the
save. The STOP stays, and the trial's next save (its first evaluation after the copy)
carries it out: the trial ends there, its run cut off. Here that stale decision is dropped
when the copy is made, and the trial is paused with the copied checkpoint, as Ray means it
to be.

Asynchronous PBT (the default) is Ray's, unchanged. `SweepPBT` reads and overrides Tune's
scheduler internals (`_synch`, `_trial_state`, `_exploit`, the controller's
`_cached_trial_decisions`), which no public hook reaches: `pbt_scheduler` uses it only on
the Ray versions it was written for (`rayrl.compat.RAY_WRITTEN_FOR`), and Tune's own
`PopulationBasedTraining` elsewhere, saying so when the sweep asked for the synchronous
mode.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

from rayrl.compat import fell_back, ray_written_for, refuse_if_public_only

logger = logging.getLogger(__name__)

SCHEDULER_INTERNALS = (
    "_synch",
    "_trial_state",
    "_next_perturbation_sync",
    "_perturbation_interval",
)
"""The attributes of Tune's `PopulationBasedTraining` that `SweepPBT` reads."""


def pbt_scheduler(**settings: Any) -> PopulationBasedTraining:
    """A `SweepPBT` with `settings` (`PopulationBasedTraining`'s arguments) where this Ray is
    one it was written for and has the internals it reads; Tune's own scheduler otherwise."""
    try:
        refuse_if_public_only("Tune's PopulationBasedTraining internals")
        if not ray_written_for():
            raise RuntimeError("a Ray version SweepPBT was not written for")
        scheduler = SweepPBT(**settings)
        missing = [name for name in SCHEDULER_INTERNALS if not hasattr(scheduler, name)]
        if missing or not hasattr(PopulationBasedTraining, "_exploit"):
            raise RuntimeError(f"Tune's PBT lacks {missing or ['_exploit']}")
        return scheduler
    except Exception as error:
        fell_back("rayrl's synchronous PBT", error, "Tune's own PopulationBasedTraining")
        if settings.get("synch"):
            logger.warning(
                "scheduler.synch=true runs on Tune's own synchronous PBT (%s): a trial that "
                "fails before a perturbation, or a resumed sweep, can leave the others "
                "paused for ever",
                error,
            )
        return PopulationBasedTraining(**settings)


class SweepPBT(PopulationBasedTraining):
    """`PopulationBasedTraining` that never waits for a trial that cannot come, nor ends one
    it copied into while it saved (see the module docstring)."""

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        if self._synch:
            self._stop_waiting_for_ended(tune_controller)
        return super().on_trial_result(tune_controller, trial, result)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        chosen = super().choose_trial_to_run(tune_controller)
        if chosen is not None or not self._synch:
            return chosen
        trials = tune_controller.get_trials()
        waiting = [t for t in trials if t.status == Trial.PAUSED]
        if not waiting or any(t.status in (Trial.RUNNING, Trial.PENDING) for t in trials):
            return None  # a result is still to come, or nothing is left to run
        # every trial left waits at the perturbation, for trials that ended: perturb them
        # now, as the last one's result would have
        self._stop_waiting_for_ended(tune_controller)
        last = max(waiting, key=lambda t: self._trial_state[t].last_train_time)
        result = self._trial_state[last].last_result
        if result is not None:  # (a paused trial has reported)
            super().on_trial_result(tune_controller, last, result)
        chosen = super().choose_trial_to_run(tune_controller)
        if chosen is None:  # perturbed already, all at the next point (a resumed sweep)
            latest = max(self._trial_state[t].last_train_time for t in waiting)
            self._next_perturbation_sync = int(latest + self._perturbation_interval)
            chosen = super().choose_trial_to_run(tune_controller)
        return chosen

    def _exploit(self, tune_controller: Any, trial: Trial, trial_to_clone: Trial) -> None:
        """Ray's copy, then the stale STOP of a trial it stopped while it saved dropped
        (Tune's `_cached_trial_decisions`, private in Ray 2.60: should a later Ray rename
        it, nothing is dropped)."""
        stopped_while_saving = trial.status == Trial.RUNNING and trial.is_saving
        super()._exploit(tune_controller, trial, trial_to_clone)
        if stopped_while_saving and trial.status == Trial.PAUSED:
            # (the scheduler is handed a wrapper of Tune's controller)
            controller = getattr(tune_controller, "_tune_controller", tune_controller)
            cached = getattr(controller, "_cached_trial_decisions", {})
            if cached.get(trial.trial_id) == TrialScheduler.STOP:
                del cached[trial.trial_id]

    def _stop_waiting_for_ended(self, tune_controller: Any) -> None:
        """Put the clock of every trial that ended (failed or done) at the next
        perturbation, which Ray's wait then counts as reached."""
        for trial in tune_controller.get_trials():
            state = self._trial_state.get(trial)
            if trial.is_finished() and state is not None:
                state.last_train_time = int(
                    max(state.last_train_time, self._next_perturbation_sync)
                )
