"""The real `rayrl` CLI: user errors are one line and exit status 2, and change nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from rayrl.cli import main
from rayrl.rundir import RunDirectory
from tests.old_layout import older_layout
from tests.ports import refusing_port


@pytest.fixture
def runner():
    return CliRunner()


def run_cli(runner, *args):
    return runner.invoke(main, list(args), catch_exceptions=False)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_bad_value_is_rejected_before_anything_starts(runner, tmp_path):
    runs = tmp_path / "runs"
    result = run_cli(runner, "train", "--set", "learner.lr=-1", "--set", f"run.runs_dir={runs}")
    assert_one_line_error(result, "learner.lr=-1.0", "> 0.0")
    assert not runs.exists()


def test_unknown_env_suggests_close_ids(runner, tmp_path):
    runs = tmp_path / "runs"
    result = run_cli(
        runner, "train", "--set", "env.id=CartPole-v9", "--set", f"run.runs_dir={runs}"
    )
    assert_one_line_error(result, "CartPole-v9", "CartPole-v1")
    assert not runs.exists()


def test_unknown_key_and_unknown_preset(runner):
    assert_one_line_error(
        run_cli(runner, "show-config", "--set", "algorithm.replay.capacty=5"),
        "algorithm.replay.capacty",
        "capacity",
    )
    assert_one_line_error(run_cli(runner, "train", "--config", "pong_dq"), "pong_dqn")


def test_dqn_on_continuous_actions_is_rejected(runner, tmp_path):
    result = run_cli(
        runner, "train", "--set", "env.id=Pendulum-v1", "--set", f"run.runs_dir={tmp_path}"
    )
    assert_one_line_error(result, "discrete action space")


def test_show_config_prints_resolved_yaml(runner):
    result = run_cli(runner, "show-config", "--config", "pong_dqn", "--set", "learner.lr=0.5")
    assert result.exit_code == 0
    data = yaml.safe_load(result.stdout)
    assert data["learner"]["lr"] == 0.5
    assert data["env"]["id"] == "ALE/Pong-v5"


def test_presets_are_listed(runner):
    result = run_cli(runner, "presets")
    assert "cartpole_dqn  (default)" in result.stdout
    assert "pong_dqn" in result.stdout


def test_evaluate_missing_and_corrupt_checkpoints(runner, tmp_path):
    assert_one_line_error(run_cli(runner, "evaluate", str(tmp_path / "nope.pt")), "does not exist")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    before = digest(corrupt)
    assert_one_line_error(run_cli(runner, "evaluate", str(corrupt)), "corrupt")
    assert digest(corrupt) == before
    assert_one_line_error(run_cli(runner, "evaluate", str(tmp_path)), "not a rayrl run directory")


@pytest.fixture
def finished_run(runner, tiny):
    args = ["train", "--runtime", "local"]
    for override in tiny:
        args += ["--set", override]
    result = run_cli(runner, *args)
    assert result.exit_code == 0, result.output
    assert "final evaluation: mean return" in result.stdout
    assert "learner:" in result.stdout
    assert "replay:" in result.stdout
    path = result.stdout.strip().splitlines()[-1].removeprefix("run directory: ")
    return RunDirectory.open(path)


def test_train_evaluate_and_resume_through_the_cli(runner, finished_run):
    result = run_cli(runner, "evaluate", str(finished_run.root), "--episodes", "2")
    assert result.exit_code == 0
    assert result.stdout.startswith("2 episodes: mean")
    resumed = run_cli(
        runner, "train", "--resume", str(finished_run.root), "--set", "run.total_env_steps=2304"
    )
    assert resumed.exit_code == 0, resumed.output
    assert "(2,304 env steps" in resumed.stdout


def test_incompatible_network_leaves_the_run_untouched(runner, finished_run):
    files = [
        finished_run.latest_checkpoint,
        finished_run.best_checkpoint,
        finished_run.metrics_path,
        finished_run.config_path,
    ]
    before = [digest(f) for f in files]
    result = run_cli(
        runner,
        "train",
        "--resume",
        str(finished_run.root),
        "--set",
        "algorithm.hidden_sizes=[7]",
    )
    assert_one_line_error(result, "does not fit the configured network")
    assert [digest(f) for f in files] == before


def test_checkpoint_from_another_algorithm_is_rejected(runner, finished_run):
    path = finished_run.latest_checkpoint
    payload = torch.load(path, weights_only=True)
    payload["algorithm"] = "impala"
    torch.save(payload, path)
    result = run_cli(runner, "train", "--resume", str(finished_run.root))
    assert_one_line_error(result, "written by algorithm 'impala'", "'dqn'")


def test_resume_of_a_directory_that_is_not_a_run(runner, tmp_path):
    """(A run directory without a checkpoint starts again from the beginning: see
    test_local_training.py.)"""
    result = run_cli(runner, "train", "--resume", str(tmp_path))
    assert_one_line_error(result, "is not a rayrl run directory")


def test_debug_shows_the_traceback(runner):
    result = runner.invoke(main, ["show-config", "--set", "learner.lr=-1", "--debug"])
    assert result.exit_code != 0
    assert result.exception is not None


def test_installed_console_script_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayrl.cli",
            "train",
            "--set",
            "learner.batch_size=0",
            "--set",
            f"run.runs_dir={tmp_path / 'runs'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: learner.batch_size=0 is out of range; valid: >= 1"
    ]


def test_an_address_where_nothing_listens_ends_the_run_at_once(tmp_path):
    """Ray 2.60 would retry such an address for about 14 minutes (`rayrl.ray.address`); in
    its own process, since this one's Ray (the suite's) would be used instead of joining."""
    runs = tmp_path / "runs"
    with refusing_port() as (_, port):
        address = f"127.0.0.1:{port}"
        train = [sys.executable, "-m", "rayrl.cli", "train", "--address", address]
        proc = subprocess.run(
            [*train, "--set", f"run.runs_dir={runs}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot connect to the Ray cluster at --address={address}")
    assert "Connection refused" in line
    assert not any(runs.glob("*"))  # no run directory is left behind


def test_auto_does_not_join_a_ray_that_another_program_started_for_itself(tmp_path, ray_cluster):
    """The suite's Ray is such a Ray: Ray's own `auto` would join it (any Ray it finds
    running), and a run there would end when the suite does. With no Ray recorded by `ray
    start` (an empty RAY_TMPDIR), `--address auto` is refused in one line."""
    from ray._private.services import get_ray_address_from_environment

    env = {**os.environ, "RAY_TMPDIR": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", str(tmp_path))
        patch.delenv("RAY_ADDRESS", raising=False)
        assert get_ray_address_from_environment("auto", None) is not None  # Ray's fallback
    runs = tmp_path / "runs"
    train = [sys.executable, "-m", "rayrl.cli", "train", "--address", "auto"]
    proc = subprocess.run(
        [*train, "--set", f"run.runs_dir={runs}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --address=auto: no `ray start` Ray is recorded in ")
    running = line.partition("(running here, not joined: ")[2].partition(")")[0]
    assert ray_cluster[0].address in running.split(", ")
    assert not any(runs.glob("*"))  # no run directory is left behind


def test_the_suites_ray_is_not_recorded_where_ray_start_records_its_head(ray_cluster):
    """A contributor's `ray start` head keeps its record while the suite runs (and after:
    `Cluster` deletes the record it wrote when it stops): `--address auto` and `ray.init()`
    in their other programs still join their head, not the suite's Ray."""
    from ray._common.utils import get_ray_address_file

    record = Path(get_ray_address_file(None))
    recorded = record.read_text().strip() if record.exists() else None
    assert recorded != ray_cluster[0].address


def test_a_run_saved_by_rayrl_0_1_evaluates_and_resumes(runner, finished_run):
    """Checkpoint format 1 and the 0.1 config layout (replay outside the algorithm)."""
    for path in (finished_run.latest_checkpoint, finished_run.best_checkpoint):
        payload = torch.load(path, weights_only=True)
        payload["format_version"] = 1
        payload["config"] = older_layout(payload["config"])
        torch.save(payload, path)
    old_config = older_layout(yaml.safe_load(finished_run.config_path.read_text()))
    finished_run.config_path.write_text(yaml.safe_dump(old_config))

    result = run_cli(runner, "evaluate", str(finished_run.root), "--episodes", "2")
    assert result.exit_code == 0, result.output
    resumed = run_cli(
        runner, "train", "--resume", str(finished_run.root), "--set", "run.total_env_steps=2304"
    )
    assert resumed.exit_code == 0, resumed.output
    assert "(2,304 env steps" in resumed.stdout
    saved = yaml.safe_load(finished_run.config_path.read_text())
    assert "replay" not in saved
    assert saved["algorithm"]["replay"]["min_size"] == 256  # the run's own value, kept
