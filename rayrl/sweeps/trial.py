"""A sweep's trial: one real rayrl run (`rayrl.api.train`) inside Ray Tune.

The trial's run directory is `<sweep>/runs/<trial id>`. It reports each evaluation to Tune
at the run's env-step count (ASHA's and PBT's clock), with a copy of the run's `latest.pt`
as a Tune checkpoint whenever a newer one is on disk. When Tune starts the trial again:
- from its own checkpoint (the sweep resumed, the trial restarted), the run directory is
  resumed as `rayrl train --resume` would (its `latest.pt` is as new as the checkpoint or
  newer); on a node without the directory, it is made from the checkpoint;
- from another trial's checkpoint (PBT copies a better trial into a worse one), that
  checkpoint becomes the run's `latest.pt`, and the run resumes from it with this trial's
  settings: the perturbed values are the config the learner is built with, and the
  learner keeps its configured rates over the checkpoint's (`TorchLearner.load_state_dict`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray
from ray import tune

from rayrl.api import train
from rayrl.checkpoint import load_checkpoint
from rayrl.config import Config, config_to_dict
from rayrl.errors import RunFailedError
from rayrl.files import append_line, atomic_path
from rayrl.presets import with_overrides
from rayrl.rundir import RunDirectory, json_line
from rayrl.sweeps.spec import Sweep, override

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "latest.pt"
ORIGIN_FILE = "trial.json"
"""In a Tune checkpoint: `{"trial_id": ...}`, the trial whose run saved it."""

ENDED_FILE = "ended.json"
"""In the run directory of a trial whose run ended by itself (not stopped by the scheduler):
its stop reason, exit status and env steps."""

ADOPTED_FILE = "adopted.jsonl"
"""In a trial's run directory: a line each time it continued from a Tune checkpoint not its
own (PBT's copies): that trial's id, the checkpoint's env steps and config, and the config it
went on with."""

TRAINING_KEYS = ("learner/lr", "worker/episode_return", "worker/env_steps_per_s")
"""Training metrics that go with each report, the newest value of each."""


class TuneReporter:
    """A recorder that reports each evaluation to Ray Tune (see the module docstring)."""

    def __init__(self, run_dir: Path, trial_id: str) -> None:
        self.latest = RunDirectory(run_dir).latest_checkpoint
        self.trial_id = trial_id
        self._training: dict[str, float] = {}
        self._reported: tuple[int, int] | None = None
        """The (mtime, size) of the `latest.pt` last reported."""

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        self._training.update({k: float(metrics[k]) for k in TRAINING_KEYS if k in metrics})
        if "eval/return_mean" not in metrics:
            return
        evaluation = {k: float(v) for k, v in metrics.items() if k.startswith("eval/")}
        result = {"env_steps": env_steps, **evaluation, **self._training}
        with tempfile.TemporaryDirectory(prefix="rayrl-trial-") as folder:
            # Tune copies the checkpoint into the sweep's directory before report returns
            tune.report(result, checkpoint=self._checkpoint(Path(folder)))

    def _checkpoint(self, folder: Path) -> ray.train.Checkpoint | None:
        """A Tune checkpoint of `latest.pt`, when a newer one is on disk."""
        try:
            stat = self.latest.stat()
        except FileNotFoundError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._reported:
            return None
        shutil.copyfile(self.latest, folder / CHECKPOINT_FILE)
        (folder / ORIGIN_FILE).write_text(json.dumps({"trial_id": self.trial_id}))
        self._reported = stamp
        return tune.Checkpoint.from_directory(str(folder))

    def close(self, exit_code: int = 0) -> None:
        """Nothing to close: Tune ends the trial when its function returns."""


def run_trial(settings: dict[str, Any], sweep: Sweep, runs_dir: str) -> None:
    """Tune's function for a trial: `settings` are its space values and `run.seed`."""
    for name in ("rayrl", "ray.train", "ray.tune"):  # the sweep's table says the rest
        logging.getLogger(name).setLevel(logging.WARNING)
    trial_id = tune.get_context().get_trial_id()
    run_dir = Path(runs_dir) / trial_id
    overrides = [
        *(override(key, value) for key, value in settings.items()),
        override("run.runs_dir", runs_dir),
        override("run.name", trial_id),
        "logging.console=false",
    ]
    group = ray.util.get_current_placement_group()
    if group is not None and sweep.config_with(settings).run.runtime == "ray":
        # the learners' GPUs as the trial's bundles hold them (decided once, when the sweep
        # started: a GPU node that joins later must not make a learner ask for more)
        overrides.append(override("learner.num_gpus", group.bundle_specs[0].get("GPU", 0.0)))
    wandb = sweep.base.logging.wandb
    if wandb.enabled and wandb.group is None:
        overrides.append(override("logging.wandb.group", Path(runs_dir).parent.name))
    config = with_overrides(sweep.base, overrides)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            adopt(Path(folder), config, trial_id)
    result = train(
        config,
        overrides=overrides,  # also onto the saved config of a run directory it resumes
        resume_if_exists=True,
        recorders=[TuneReporter(run_dir, trial_id)],
    )
    ending = {"stop_reason": str(result.stop_reason), "exit_code": result.exit_code}
    with atomic_path(run_dir / ENDED_FILE) as partial:
        partial.write_text(json.dumps({**ending, "env_steps": result.counters.env_steps}))
    if result.exit_code != 0:
        why = result.failure or "; ".join(result.problems) or result.stop_reason
        raise RunFailedError(f"the run stopped with status {result.exit_code}: {why}")


def adopt(folder: Path, config: Config, trial_id: str) -> None:
    """Make the Tune checkpoint in `folder` the `latest.pt` of the trial's run directory
    (`config.run.name`), unless it is the trial's own and its run directory is here (see the
    module docstring)."""
    origin = json.loads((folder / ORIGIN_FILE).read_text())["trial_id"]
    here = RunDirectory(Path(config.run.runs_dir) / str(config.run.name))
    if origin == trial_id and here.config_path.is_file():
        return
    if not here.config_path.is_file():
        RunDirectory.create(config, "").release()
    here.latest_checkpoint.parent.mkdir(parents=True, exist_ok=True)
    partial = here.latest_checkpoint.with_suffix(".adopting")
    shutil.copyfile(folder / CHECKPOINT_FILE, partial)
    if origin != trial_id:  # its replay is this trial's own experience, whatever its stamp
        here.replay_path.unlink(missing_ok=True)
    os.replace(partial, here.latest_checkpoint)
    copied = load_checkpoint(here.latest_checkpoint, algorithm=config.algorithm.name)
    env_steps = int(copied["counters"]["env_steps"])
    source = "its own checkpoint" if origin == trial_id else f"trial {origin}'s checkpoint"
    logger.warning(
        "trial %s: continuing from %s at %d env steps with its own settings",
        trial_id,
        source,
        env_steps,
    )
    record = {
        "from_trial": origin,
        "env_steps": env_steps,
        "checkpoint_config": copied["config"],
        "config": config_to_dict(config),
    }
    append_line(here.root / ADOPTED_FILE, json_line(record))
