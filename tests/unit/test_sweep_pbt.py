"""Synchronous PBT's two endless waits in Ray 2.60, and `SweepPBT`'s way out of each: Ray's
scheduler with a stand-in for Tune's controller (the two lists of trials it reads), so that
the scheduler's decisions are what is tested. The whole path, real trials and a real copy,
is in tests/integration/test_sweep.py."""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining

from rayrl.compat.tune_internals import SweepPBT

INTERVAL = 100


class Controller:
    """What PBT reads of Tune's controller: its trials, and those not stopped. Like Ray
    2.60's, it keeps a failed trial among the live ones."""

    search_alg = None

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials

    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> set[Trial]:
        return set(self.trials)


def population(kind: type[PopulationBasedTraining], count: int) -> tuple[Any, Controller]:
    scheduler = kind(
        time_attr="env_steps",
        metric="score",
        mode="max",
        perturbation_interval=INTERVAL,
        hyperparam_mutations={"lr": [0.1, 0.2]},
        synch=True,
    )
    trials = [Trial("__fake", stub=True, config={"lr": 0.1}) for _ in range(count)]
    controller = Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
        trial.set_status(Trial.RUNNING)
    return scheduler, controller


def report(scheduler: Any, controller: Controller, trial: Trial, env_steps: int) -> None:
    decision = scheduler.on_trial_result(controller, trial, {"env_steps": env_steps, "score": 1.0})
    assert decision == PopulationBasedTraining.PAUSE  # synchronous: it waits, or is perturbed
    trial.set_status(Trial.PAUSED)


def test_a_trial_that_fails_before_the_perturbation_is_not_waited_for():
    """One trial waits at the perturbation; the other fails before it. Ray would wait for
    the failed one for ever; here the one left is perturbed and runs on."""
    for kind, goes_on in ((PopulationBasedTraining, False), (SweepPBT, True)):
        scheduler, controller = population(kind, 2)
        waiting, failing = controller.trials
        report(scheduler, controller, waiting, INTERVAL)
        failing.set_status(Trial.ERROR)
        chosen = scheduler.choose_trial_to_run(controller)
        assert (chosen is waiting) is goes_on, kind.__name__
        assert (chosen is None) is not goes_on, kind.__name__


def test_a_resumed_population_at_the_next_perturbation_runs_on():
    """A resumed sweep's scheduler starts afresh; its trials report from far past the first
    perturbation (here, 3 intervals). Ray puts the next one where they are, and nothing is
    below it to run; here it moves an interval past them."""
    for kind, goes_on in ((PopulationBasedTraining, False), (SweepPBT, True)):
        scheduler, controller = population(kind, 1)
        (trial,) = controller.trials
        report(scheduler, controller, trial, 3 * INTERVAL)
        assert (scheduler.choose_trial_to_run(controller) is trial) is goes_on, kind.__name__
        if goes_on:
            assert scheduler._next_perturbation_sync == 4 * INTERVAL


def test_while_a_trial_runs_the_others_wait_for_it():
    """The way out is only for trials that cannot come: one still running is waited for,
    and nothing is perturbed before it reports."""
    scheduler, controller = population(SweepPBT, 2)
    waiting, still_running = controller.trials
    report(scheduler, controller, waiting, INTERVAL)
    assert still_running.status == Trial.RUNNING
    assert scheduler.choose_trial_to_run(controller) is None
    assert scheduler._next_perturbation_sync == INTERVAL
