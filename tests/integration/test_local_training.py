"""The single-process trainer with real envs and real torch."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import rayrl
from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_checkpoint, load_policy
from rayrl.contract import as_persistent
from rayrl.envs import env_spec
from rayrl.errors import UserError
from rayrl.files import read_jsonl
from rayrl.presets import load_config
from rayrl.run_lifecycle import StopReason
from rayrl.rundir import RunDirectory
from tests.conftest import tiny_overrides
from tests.local_runs import local_run
from tests.run_files import assert_in_env_step_order


@pytest.mark.slow
@local_run("cartpole_dqn", "run.seed=1")
def test_cartpole_dqn_reaches_the_solved_threshold(local_run_result):
    result = local_run_result
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 475
    assert len(result.final_eval.returns) == 10
    assert result.target_reached_s is not None


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> rayrl.TrainResult:
    """One tiny local DQN run, for the tests that only read what a run leaves behind."""
    runs_dir = tmp_path_factory.mktemp("finished") / "runs"
    return rayrl.train(None, overrides=[*tiny_overrides(runs_dir), "run.runtime=local"])


def test_run_directory_holds_config_metrics_checkpoints_and_evals(finished):
    result = finished
    run = RunDirectory.open(result.run_dir)
    assert run.config_path.is_file()
    rows = read_jsonl(run.metrics_path)
    assert rows
    assert all("env_steps" in r for r in rows)
    keys = set().union(*rows)
    assert {"worker/env_steps_per_s", "learner/loss", "replay/size", "eval/return_mean"} <= keys
    assert all(
        k.split("/")[0] in {"worker", "learner", "replay", "eval", "run", "startup"}
        for k in keys - {"env_steps", "time_s"}
    )
    # start-up once, in the first row after the first chunk, its phases adding up
    (startup,) = [r for r in rows if "startup/total_s" in r]
    phases = ("setup", "ray", "actors", "first_chunk")
    assert sum(startup[f"startup/{p}_s"] for p in phases) == pytest.approx(
        startup["startup/total_s"]
    )
    assert startup["startup/ray_s"] == 0.0  # the local runtime starts no Ray
    assert result.headline["startup_s"] == startup["startup/total_s"]
    evals = read_jsonl(run.eval_path)
    assert [e["env_steps"] for e in evals][:2] == [1024, 2048]
    assert run.latest_checkpoint.is_file()
    assert run.best_checkpoint.is_file()
    payload = load_checkpoint(run.latest_checkpoint, algorithm="dqn")
    assert payload["counters"]["env_steps"] == result.counters.env_steps == 2048
    assert payload["counters"]["updates"] == result.counters.updates > 0
    assert {"online", "target", "optimizer", "updates"} <= set(payload["learner"])
    assert payload["config"]["run"]["total_env_steps"] == 2048


def test_resume_continues_counters_and_learner_state(tiny):
    """The resumed run goes on from the checkpoint's counters and learner. The evaluation
    at the checkpoint's count (2,048, the first run's last) was recorded at that count, so
    the resume cuts it back with the rows after the checkpoint: it is made again at once,
    and eval.jsonl has no interval without one."""
    first = rayrl.train(None, overrides=[*tiny, "run.runtime=local"])
    before = load_checkpoint(RunDirectory(first.run_dir).latest_checkpoint)
    resumed = rayrl.train(
        resume=first.run_dir,
        overrides=["run.total_env_steps=4096", "workers.num_workers=2"],
    )
    assert resumed.run_dir == first.run_dir
    assert resumed.counters.env_steps == 4096
    assert resumed.counters.updates > first.counters.updates
    rows = read_jsonl(RunDirectory(first.run_dir).metrics_path)
    assert rows[-1]["env_steps"] == 4096
    assert_in_env_step_order(first.run_dir)
    after = load_checkpoint(RunDirectory(first.run_dir).latest_checkpoint)
    assert after["counters"]["updates"] > before["counters"]["updates"]
    assert after["config"]["workers"]["num_workers"] == 2
    evaluated = [row["env_steps"] for row in read_jsonl(RunDirectory(first.run_dir).eval_path)]
    assert evaluated[0] == 1024
    assert [e for e in evaluated if 2048 <= e < 3072]  # again, right after the resume
    assert evaluated[-1] == 4096


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_the_start(tiny, tmp_path):
    """Killed before its first checkpoint (an evaluation had saved `best.pt`): --resume
    starts it again in its own directory, the rows the killed process had written are
    dropped, and `best.pt` is only replaced by a better evaluation."""
    overrides = [*tiny, "run.runtime=local", "run.name=early"]
    first = rayrl.train(None, overrides=overrides)
    run = RunDirectory(first.run_dir)
    for checkpoint in run.checkpoints.iterdir():  # as if killed before the first one
        if checkpoint != run.best_checkpoint:
            checkpoint.unlink()
    best_before = load_checkpoint(run.best_checkpoint)["counters"]["best_eval_return"]
    resumed = rayrl.train(resume=run.root)
    best_after = load_checkpoint(run.best_checkpoint)["counters"]["best_eval_return"]
    assert best_after >= best_before
    assert resumed.run_dir == run.root
    assert resumed.counters.env_steps == first.counters.env_steps
    assert_in_env_step_order(run.root)
    assert run.latest_checkpoint.is_file()


def test_resume_if_exists_starts_then_resumes_a_named_run(tiny):
    """What a retried cluster job runs: the first attempt starts the run, the retry resumes
    it (the same directory and counters going on), with the same command."""
    overrides = [*tiny, "run.runtime=local", "run.name=retried"]
    first = rayrl.train(None, overrides=overrides, resume_if_exists=True)
    again = rayrl.train(
        None, overrides=[*overrides, "run.total_env_steps=4096"], resume_if_exists=True
    )
    assert again.run_dir == first.run_dir
    assert again.counters.env_steps == 4096
    assert again.counters.updates > first.counters.updates
    with pytest.raises(UserError, match=r"needs run\.name"):
        rayrl.train(None, overrides=tiny, resume_if_exists=True)


def test_resume_with_saved_replay_needs_no_warm_up(tiny):
    overrides = [*tiny, "run.runtime=local", "algorithm.replay.save_with_checkpoint=true"]
    first = rayrl.train(None, overrides=overrides)
    assert (RunDirectory(first.run_dir).replay_path).is_file()
    resumed = rayrl.train(resume=first.run_dir, overrides=["run.total_env_steps=2304"])
    # 256 more env steps; with a refilled buffer the learner updates right away
    assert resumed.counters.updates > first.counters.updates
    with np.load(RunDirectory(first.run_dir).replay_path) as replay:
        assert int(replay["metadata_env_steps"]) == resumed.counters.env_steps


@pytest.mark.parametrize("damage", ["truncated", "from another checkpoint"])
def test_a_replay_that_does_not_go_with_the_checkpoint_is_skipped(tiny, caplog, damage):
    """A replay.npz cut short (a full disk, a killed copy) or saved with another checkpoint
    (a crash between the two writes): the resume warns in one line and goes on with an
    empty replay (its warm-up again), where it used to fail or refill the wrong experience."""
    overrides = [*tiny, "run.runtime=local", "algorithm.replay.save_with_checkpoint=true"]
    first = rayrl.train(None, overrides=overrides)
    run = RunDirectory(first.run_dir)
    if damage == "truncated":
        data = run.replay_path.read_bytes()
        run.replay_path.write_bytes(data[: len(data) // 2])
        why = "it is damaged (BadZipFile: File is not a zip file)"
    else:
        older = rayrl.train(None, overrides=[*overrides, "run.total_env_steps=1024"])
        RunDirectory(older.run_dir).replay_path.replace(run.replay_path)
        why = "it was saved at 1,024 env steps and the checkpoint at 2,048"
    with caplog.at_level(logging.WARNING, logger="rayrl"):
        resumed = rayrl.train(resume=run.root, overrides=["run.total_env_steps=2304"])
    assert resumed.stop_reason is StopReason.TOTAL_ENV_STEPS
    warnings = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert warnings == [f"{run.replay_path} not used: {why}; the replay starts empty"]
    # an empty replay warms up again (256 transitions) before the learner updates
    assert resumed.counters.updates == first.counters.updates


def test_evaluate_loads_best_checkpoint(finished):
    """By default the best checkpoint's policy plays, `which="latest"` the latest's: each
    evaluation reports the version of the weights it played."""
    result = finished
    run = RunDirectory(result.run_dir)
    evaluation = rayrl.evaluate(result.run_dir, episodes=3)
    assert len(evaluation.returns) == 3
    assert evaluation.policy_version == load_policy(run.best_checkpoint).version
    latest = rayrl.evaluate(result.run_dir, episodes=1, which="latest")
    assert (
        latest.policy_version
        == load_policy(run.latest_checkpoint).version
        == result.counters.updates
    )


def test_evaluate_refuses_an_env_that_imports_a_module_unless_trusted(tiny):
    """A checkpoint's "module:EnvId" would import (run) that module: refused with the key,
    the id and the way to allow it; allowed with trust_env."""
    env_id = "tests.fake_envs:ImportedCartPole-v0"
    result = rayrl.train(None, overrides=[*tiny, "run.runtime=local", f"env.id={env_id}"])
    with pytest.raises(UserError, match=rf"env.id='{env_id}', which imports .*--trust-env"):
        rayrl.evaluate(result.run_dir, episodes=1)
    assert len(rayrl.evaluate(result.run_dir, episodes=1, trust_env=True).returns) == 1


def test_resume_refuses_an_env_that_imports_a_module_unless_trusted(tiny):
    """A run directory's config.yaml may come from anyone, like a checkpoint: resuming a run
    whose env id imports a module needs trust_env (--trust-env), checked before the module
    is imported and before anything in the directory changes."""
    env_id = "tests.fake_envs:ImportedCartPole-v0"
    result = rayrl.train(None, overrides=[*tiny, "run.runtime=local", f"env.id={env_id}"])
    run = RunDirectory(result.run_dir)
    before = run.config_path.read_bytes(), run.metrics_path.read_bytes()
    with pytest.raises(UserError, match=rf"env.id='{env_id}', which imports .*--trust-env"):
        rayrl.train(resume=run.root, overrides=["run.total_env_steps=4096"])
    assert (run.config_path.read_bytes(), run.metrics_path.read_bytes()) == before
    resumed = rayrl.train(resume=run.root, overrides=["run.total_env_steps=4096"], trust_env=True)
    assert resumed.counters.env_steps == 4096


def test_prioritized_replay_takes_the_learners_td_errors_as_priorities(tiny):
    """The learner's |TD| errors flow back to the replay: in the replay saved with the final
    checkpoint the priorities differ from item to item (every item starts at the largest
    seen so far), and beta has moved on from its start with the batches sampled."""
    result = rayrl.train(
        None,
        overrides=[
            *tiny,
            "run.runtime=local",
            "algorithm.replay.prioritized=true",
            "algorithm.replay.save_with_checkpoint=true",
        ],
    )
    assert result.counters.updates > 0
    run = RunDirectory(result.run_dir)
    config = load_config(run.config_path)
    family = ALGORITHMS[config.algorithm.name].family
    store = family.make_store(family.store_settings(config, env_spec(config.env)))
    as_persistent(store).load(run.replay_path)
    replay = store.buffer
    live = np.arange(replay.oldest, replay.inserted) % replay.capacity
    priorities = replay.tree.get(live)
    assert len(np.unique(priorities)) > len(live) // 2
    assert replay.beta > config.algorithm.replay.priority_beta_start


def test_checkpoints_are_loadable_with_weights_only(finished):
    path = RunDirectory(finished.run_dir).latest_checkpoint
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "rayrl-checkpoint"


def pong_run(preset: str, env_steps: int, *overrides: str) -> pytest.MarkDecorator:
    return local_run(
        preset, f"run.total_env_steps={env_steps}", "run.eval_episodes=1", *overrides, seconds=25
    )


@pytest.mark.parametrize(
    "env_steps",
    [
        pytest.param(
            5000,  # the foundation issue's `--set run.total_env_steps=5000` run
            marks=pong_run(
                "pong_dqn",
                5000,
                "algorithm.replay.capacity=20000",
                "algorithm.replay.min_size=2048",
                "algorithm.replay.samples_per_insert=0.25",
                "learner.batch_size=32",
            ),
            id="dqn",
        ),
        pytest.param(
            2560,
            marks=pong_run("pong_impala", 2560, "learner.batch_size=4", "workers.num_workers=1"),
            id="impala",
        ),
        pytest.param(
            2048,
            marks=pong_run("pong_ppo", 2048, "workers.num_workers=1", "algorithm.epochs=1"),
            id="ppo",
        ),
    ],
)
def test_pong_end_to_end_on_cpu(local_run_result, env_steps):
    """Pong with the Nature CNN on CPU, no learning expected: it runs, updates, checkpoints,
    and `rayrl.evaluate` loads the checkpoint and plays a whole game."""
    result = local_run_result
    assert result.counters.env_steps >= env_steps
    assert result.counters.updates > 0
    evaluation = rayrl.evaluate(result.run_dir, episodes=1, which="latest")
    # a whole game: whole points, one side at 21, and each point takes the ball across the
    # court at least once (over 15 agent steps at the DeepMind frame skip of 4)
    (score,) = evaluation.returns
    assert score == round(score)
    assert -21 <= score <= 21
    assert evaluation.lengths[0] > (21 + (21 + score if score < 0 else 21 - score)) * 15


class TorchThreads:
    """A recorder that notes torch's threads in the process whenever the run records."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def record(self, metrics, env_steps: int) -> None:
        self.seen.add(torch.get_num_threads())

    def close(self, exit_code: int = 0) -> None:
        pass


def test_the_local_runtime_trains_with_the_learners_threads(tiny):
    """The rollout workers set one thread for their process (the Ray runtime's); in the
    local runtime's one process, `learner.num_threads` is the setting that counts."""
    threads, before = TorchThreads(), torch.get_num_threads()
    try:
        overrides = [*tiny, "run.runtime=local", "learner.num_threads=2"]
        rayrl.train(None, overrides=overrides, recorders=[threads])
    finally:
        torch.set_num_threads(before)
    assert threads.seen == {2}
