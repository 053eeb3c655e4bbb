"""Ray Tune's population-based training, its synchronous mode kept from waiting for ever.

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

Asynchronous PBT (the default) is Ray's, unchanged.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining


class SweepPBT(PopulationBasedTraining):
    """`PopulationBasedTraining` that never waits for a trial that cannot come (see the
    module docstring)."""

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

    def _stop_waiting_for_ended(self, tune_controller: Any) -> None:
        """Put the clock of every trial that ended (failed or done) at the next
        perturbation, which Ray's wait then counts as reached."""
        for trial in tune_controller.get_trials():
            state = self._trial_state.get(trial)
            if trial.is_finished() and state is not None:
                state.last_train_time = int(
                    max(state.last_train_time, self._next_perturbation_sync)
                )
