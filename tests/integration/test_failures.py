"""Failures that must not lose a run: real faults in real runs (Ray runtime)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import rayrl
from rayrl.checkpoint import load_checkpoint, policy_of
from rayrl.cli import main
from rayrl.run_policy import StopReason
from rayrl.rundir import RunDirectory


def strict_json(line: str) -> dict:
    """A JSONL row, refusing NaN and Infinity (which are not JSON)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in a JSONL row")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.timeout(240)
def test_nan_rewards_stop_the_run_with_the_finite_checkpoints_kept(ray_cluster, tiny):
    """Rewards turn NaN after each env's 150th step: the updates whose batches hold one are
    skipped and counted, `learner.max_nonfinite_steps` of them in a row stop the run with a
    failure status, every checkpoint on disk holds finite weights, and the metrics files stay
    strict JSON (null where a value was not finite)."""
    budget = 50_000
    result = rayrl.train(
        "cartpole_dqn",
        overrides=[
            *tiny,
            "env.id=tests.fake_envs:NanRewardCartPole-v0",
            f"run.total_env_steps={budget}",
            "run.keep_checkpoints=2",
            "learner.max_nonfinite_steps=10",
        ],
    )
    assert result.stop_reason is StopReason.NON_FINITE
    assert result.stop_reason.exit_code == 1
    assert result.counters.env_steps < budget / 2
    assert "learner/nonfinite_skipped" in result.summary

    run = RunDirectory(result.run_dir)
    saved = [run.latest_checkpoint, run.best_checkpoint, *run.periodic_checkpoints()]
    assert len(run.periodic_checkpoints()) == 2
    for path in saved:
        weights = policy_of(load_checkpoint(path)).weights
        assert all(np.isfinite(w).all() for w in weights.values()), path

    rows = [strict_json(line) for line in run.metrics_path.read_text().splitlines()]
    assert rows[-1]["learner/nonfinite_skipped"] >= 10
    assert any(row.get("learner/loss", 0.0) is None for row in rows)
    for line in run.eval_path.read_text().splitlines():
        strict_json(line)


def test_the_cli_exits_with_status_1_when_losses_stay_non_finite(tmp_path):
    """The command line's view of the same failure (local runtime): exit status 1, the
    cause in one line."""
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "train",
            "--runtime=local",
            "--set=env.id=tests.fake_envs:NanRewardCartPole-v0",
            f"--set=run.runs_dir={tmp_path}",
            "--set=logging.console=false",
            "--set=run.total_env_steps=50000",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "stopped: non-finite losses" in result.output
