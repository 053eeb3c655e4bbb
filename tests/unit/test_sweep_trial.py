"""A trial's record of the checkpoints PBT had it continue from (`rayrl.sweeps.trial`)."""

from __future__ import annotations

import json
from pathlib import Path

from rayrl.checkpoint import save_checkpoint
from rayrl.config import config_to_dict
from rayrl.files import read_jsonl
from rayrl.presets import load_config
from rayrl.sweeps.trial import ADOPTED_FILE, CHECKPOINT_FILE, ORIGIN_FILE, adopt


def tune_checkpoint(folder: Path, origin: str, env_steps: int) -> Path:
    """A Tune checkpoint as a trial reports it: its `latest.pt` and the trial it came from."""
    folder.mkdir()
    config = load_config("cartpole_ppo")
    save_checkpoint(
        folder / CHECKPOINT_FILE,
        algorithm="ppo",
        learner={},
        policy={},
        counters={"env_steps": float(env_steps)},
        config=config_to_dict(config),
    )
    (folder / ORIGIN_FILE).write_text(json.dumps({"trial_id": origin}))
    return folder


def test_each_copy_of_another_trials_checkpoint_is_one_row(tmp_path):
    """PBT may copy a better trial into a worse one several times: one row each (the rows
    once ran together into one unreadable line)."""
    config = load_config(
        "cartpole_ppo", [f"run.runs_dir={tmp_path / 'runs'}", "run.name=worse", "learner.lr=1e-4"]
    )
    adopt(tune_checkpoint(tmp_path / "first", "better", 6144), config, "worse")
    adopt(tune_checkpoint(tmp_path / "second", "better", 10240), config, "worse")
    rows = read_jsonl(tmp_path / "runs" / "worse" / ADOPTED_FILE)
    assert [(row["from_trial"], row["env_steps"]) for row in rows] == [
        ("better", 6144),
        ("better", 10240),
    ]
    assert all(row["config"]["learner"]["lr"] == 1e-4 for row in rows)
