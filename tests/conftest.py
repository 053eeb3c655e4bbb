"""Shared fixtures: offline W&B, per-test run directories, tiny configs."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def tiny(tmp_path):
    """Overrides for a fast, small CartPole run in a temporary runs directory."""
    return [
        "logging.console=false",
        f"run.runs_dir={tmp_path / 'runs'}",
        "run.total_env_steps=2048",
        "run.eval_interval_env_steps=1024",
        "run.eval_episodes=2",
        "run.checkpoint_interval_env_steps=1024",
        "run.target_return=null",
        "replay.min_size=256",
        "replay.samples_per_insert=2",
        "learner.batch_size=32",
    ]
