"""Synchronous PBT when the last trial reaches a perturbation while the first one's pause is
still saving (see `rayrl.compat.tune_internals`): real Tune and real trial actors, class trainables
whose pause saves until the copy is made, so that the race is run every time. Ray's
scheduler ends the copied trial at its first result after the copy; `SweepPBT` lets it run
to the end."""

from __future__ import annotations

import time
from pathlib import Path

from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

from rayrl.compat.tune_internals import SweepPBT

INTERVAL = 200
END = 400


class Trainable(tune.Trainable):
    """Steps of 100 env steps scoring `config["score"]`. The trial that `config["waits"]`
    reaches the perturbation first: the other one reports there only once the first one's
    pause has begun to save (a marker file), and that save lasts until Tune has taken in
    the other one's report, and so made the copy (`Exploited`'s marker)."""

    def setup(self, config):
        self.env_steps = 0
        self.saving = Path(config["folder"]) / "saving"
        self.exploited = Path(config["folder"]) / "exploited"

    def step(self):
        self.env_steps += 100
        if not self.config["waits"] and self.env_steps == INTERVAL:
            wait_for_file(self.saving)
        return {"env_steps": self.env_steps, "score": self.config["score"]}

    def save_checkpoint(self, checkpoint_dir):
        if self.config["waits"] and self.env_steps == INTERVAL:
            self.saving.touch()
            wait_for_file(self.exploited)
        return {"env_steps": self.env_steps}

    def load_checkpoint(self, checkpoint):
        self.env_steps = checkpoint["env_steps"]


class Exploited(tune.Callback):
    """Marks the better trial's report at the perturbation once Tune has handed it to the
    scheduler, which made the copy then (Tune calls its callbacks after its scheduler)."""

    def __init__(self, folder: Path) -> None:
        self.marker = folder / "exploited"

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not trial.config["waits"] and result["env_steps"] == INTERVAL:
            self.marker.touch()


def wait_for_file(path: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s:.0f} s")
        time.sleep(0.05)


def run_population(kind: type[PopulationBasedTraining], folder: Path) -> list[int]:
    """Two trials, the worse one first at the perturbation; the env steps each ended at."""
    scheduler = kind(
        time_attr="env_steps",
        perturbation_interval=INTERVAL,
        hyperparam_mutations={"score": [0.0, 1.0]},
        quantile_fraction=0.5,
        resample_probability=0.0,
        synch=True,
    )
    folder.mkdir()
    worse = {"score": 0.0, "waits": True, "folder": str(folder)}
    better = {"score": 1.0, "waits": False, "folder": str(folder)}
    tuner = tune.Tuner(
        Trainable,
        param_space=tune.grid_search([worse, better]),  # (the whole config, per trial)
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler),
        run_config=tune.RunConfig(
            storage_path=str(folder),
            stop={"env_steps": END},
            verbose=0,
            callbacks=[Exploited(folder)],
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
        ),
    )
    return sorted(int(result.metrics["env_steps"]) for result in tuner.fit())


def test_a_trial_copied_into_while_it_saves_runs_to_the_end(ray_cluster, tmp_path):
    assert run_population(PopulationBasedTraining, tmp_path / "ray") == [INTERVAL + 100, END]
    assert run_population(SweepPBT, tmp_path / "rayrl") == [END, END]
