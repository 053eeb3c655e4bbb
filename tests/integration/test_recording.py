"""Recorders with the real libraries: W&B (offline) and TensorBoard."""

from __future__ import annotations

import sys

import pytest

import rayrl
from rayrl.files import read_jsonl
from rayrl.recorders import wandb_mode
from rayrl.rundir import RunDirectory
from tests.wandb_offline import read_offline_run, records


def test_wandb_offline_run_has_config_metrics_and_env_step_axis(tiny):
    overrides = [
        *tiny,
        "run.runtime=local",
        "logging.wandb.enabled=true",
        "logging.wandb.group=sweep-1",
        "logging.wandb.tags=[smoke, cartpole]",
        "learner.lr=0.0042",
    ]
    result = rayrl.train(None, overrides=overrides)
    run = read_offline_run(result.run_dir)
    assert run["config"]["learner"]["lr"] == pytest.approx(0.0042)
    assert run["config"]["env"]["id"] == "CartPole-v1"
    assert run["tags"] == ["smoke", "cartpole"]
    assert run["group"] == "sweep-1"
    history = run["history"]
    assert all("env_steps" in row for row in history)
    logged = set().union(*history)
    assert {"eval/return_mean", "learner/loss", "worker/env_steps_per_s"} <= logged
    assert max(row["env_steps"] for row in history) == 2048


def test_the_offline_log_reader_skips_a_record_still_being_written(tiny, tmp_path):
    """wandb-core writes the log asynchronously, so a test can read it with its last record
    half written (a CI run failed on that once): the reader returns the complete records
    before it, and `read_offline_run` reads again until the exit record is there."""
    result = rayrl.train(None, overrides=[*tiny, "run.runtime=local", "logging.wandb.enabled=true"])
    read_offline_run(result.run_dir)  # waits for the whole log
    (log,) = result.run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = log.read_bytes()
    whole = [record.SerializeToString() for record in records(log)]
    cut = tmp_path / "cut.wandb"
    for length in range(8, len(data), 97):
        cut.write_bytes(data[:length])
        read = [record.SerializeToString() for record in records(cut)]
        assert read == whole[: len(read)]


def test_evaluation_videos_and_best_checkpoint_reach_wandb(ray_cluster, tiny):
    """Ray runtime: the evaluator actor records the episode and the driver stores it."""
    overrides = [
        *tiny,
        "run.evaluator=actor",
        "logging.wandb.enabled=true",
        "logging.wandb.log_best_checkpoint=true",
        "logging.video_interval_evals=1",
    ]
    result = rayrl.train(None, overrides=overrides)
    videos = sorted((result.run_dir / "videos").glob("eval-*.mp4"))
    steps = [int(video.stem.split("-")[1]) for video in videos]
    evaluated = [row["env_steps"] for row in read_jsonl(result.run_dir / "eval.jsonl")]
    assert len(steps) == 2  # one per evaluation: at 1024 and at the end
    assert steps == evaluated
    assert all(v.read_bytes()[4:8] == b"ftyp" for v in videos)  # MP4 files
    run = read_offline_run(result.run_dir)
    logged = [row for row in run["history"] if "eval/video/_type" in row]
    assert [row["env_steps"] for row in logged] == steps
    assert all(row["eval/video/_type"] == "video-file" for row in logged)
    (artifact,) = run["artifacts"]
    assert artifact["type"] == "model"
    assert "best" in artifact["aliases"]
    assert artifact["files"] == ["best.pt"]


def test_videos_without_their_dependencies_fail_before_training(tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "moviepy", None)  # as if it were not installed
    with pytest.raises(rayrl.UserError, match=r"video_interval_evals.*rayrl\[video\]"):
        rayrl.train(None, overrides=[*tiny, "run.runtime=local", "logging.video_interval_evals=1"])


def test_resumed_run_continues_the_same_wandb_run(tiny):
    overrides = [*tiny, "run.runtime=local", "logging.wandb.enabled=true"]
    first = rayrl.train(None, overrides=overrides)
    run_id = (first.run_dir / "wandb_run_id").read_text()
    rayrl.train(resume=first.run_dir, overrides=["run.total_env_steps=2304"])
    logs = sorted(first.run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(logs) == 2
    assert all(log.name == f"run-{run_id}.wandb" for log in logs)


def test_tensorboard_events_are_written(tiny):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = rayrl.train(None, overrides=[*tiny, "run.runtime=local", "logging.tensorboard=true"])
    events = EventAccumulator(str(RunDirectory(result.run_dir).root / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"eval/return_mean", "learner/loss"} <= tags
    assert events.Scalars("eval/return_mean")[-1].step == 2048


def test_wandb_mode_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode("online") == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert wandb_mode("auto") == "offline"
    assert wandb_mode("online") == "online"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    assert wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("auto") == "online"
