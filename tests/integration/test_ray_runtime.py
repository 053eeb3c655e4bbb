"""The Ray runtime with real actors on the suite's two-node test cluster (one node declares a
GPU): learning, placement, and faults injected by killing real actor processes."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import rayrl
from rayrl.checkpoint import load_checkpoint
from rayrl.files import read_jsonl
from rayrl.host import usable_cores
from rayrl.ray.capacity import SMALL_MACHINE_CPUS, cores_if_alone
from rayrl.rundir import RunDirectory
from tests.blocker import Blocker
from tests.run_files import assert_in_env_step_order, env_steps_logged


def kill_actor_when(name: str, ready: Callable[[], bool], timeout_s: float = 120.0):
    """From a background thread: once `ready()`, kill the actor `name` (SIGKILL, through
    Ray) and record that it was killed."""
    killed = threading.Event()

    def run():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                try:
                    ray.kill(ray.get_actor(name), no_restart=True)
                except ValueError:  # not created yet
                    pass
                else:
                    killed.set()
                    return
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return killed


FAULT_RUN_STEPS = 16384


def fault_run(tmp_path: Path, name: str, *extra: str) -> list[str]:
    """A short run whose faults land mid-run: its budget leaves several seconds of training
    after the kills below (at 2-3k env steps), however fast the machine, so that each
    replacement happens, and is counted, before the run ends. One rollout worker, as in
    `tiny_run_overrides`: a killed or hung one stops the sampling until it is replaced."""
    return [
        "logging.console=false",
        f"run.runs_dir={tmp_path}",
        f"run.name={name}",
        "run.target_return=null",
        f"run.total_env_steps={FAULT_RUN_STEPS}",
        "run.eval_interval_env_steps=4096",
        "run.eval_episodes=2",
        "run.checkpoint_interval_env_steps=2048",
        "logging.log_interval_s=0.5",
        "algorithm.replay.min_size=512",
        "algorithm.replay.samples_per_insert=4",
        "learner.batch_size=64",
        "learner.sync_interval=10",
        "workers.num_workers=1",
        *extra,
    ]


def assert_updates_never_go_backwards(rows: list[dict]) -> None:
    updates = [r["learner/updates"] for r in rows if "learner/updates" in r]
    assert updates, "no learner metrics recorded"
    assert updates == sorted(updates)


def test_a_gpu_learner_starts_on_a_node_whose_cpus_are_all_taken(ray_cluster, tiny, caplog):
    """A worker that Ray SPREAD onto the GPU node may take its only CPU before the learner
    asks for it (how a resumed run in CI waited 900 s for its learner): the learner, which
    asks Ray for the GPU alone (`rayrl.ray.capacity.learner_cpus`), starts there anyway. (The
    run also shows where `run.evaluator=auto` evaluates on the suite's cluster: its two
    nodes are this machine, so on a small one a thread of the driver.)"""
    _, gpu_node = ray_cluster
    strategy = NodeAffinitySchedulingStrategy(gpu_node.node_id, soft=False)
    blocker = ray.remote(num_cpus=1)(Blocker).options(scheduling_strategy=strategy).remote()
    ray.get(blocker.__ray_ready__.remote())
    try:  # a learner kept from the node fails the run after the start timeout
        with caplog.at_level(logging.INFO, logger="rayrl.ray.runtime"):
            result = rayrl.train(None, overrides=[*tiny, "faults.start_timeout_s=60"])
    finally:
        ray.kill(blocker)
    assert result.stop_reason == "total_env_steps reached"
    assert result.placement["learner"]["node_id"] == gpu_node.node_id
    cores = usable_cores()
    assert cores_if_alone() == cores  # two simulated nodes, one machine
    in_driver = "evaluations run on a thread of this process (run.evaluator=auto)" in caplog.text
    assert in_driver == (cores <= SMALL_MACHINE_CPUS)
    assert len(read_jsonl(result.run_dir / "eval.jsonl")) == 2  # at 1024 and at the end


@pytest.mark.slow
def test_async_dqn_reaches_the_threshold_with_the_learner_on_the_gpu_node(ray_cluster, tmp_path):
    _, gpu_node = ray_cluster
    result = rayrl.train(
        "cartpole_dqn",
        overrides=["logging.console=false", f"run.runs_dir={tmp_path}", "run.seed=1"],
    )
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 475
    assert len(result.final_eval.returns) == 10
    # placement: the cluster has a GPU, so the learner asked for one and landed on its node;
    # torch sees no CUDA device there and trained on the CPU
    assert result.placement["learner"]["node_id"] == gpu_node.node_id
    assert result.placement["learner"]["device"] == "cpu"
    assert "policy lag" in result.summary
    assert "weight sync" in result.summary
    assert result.summary.startswith("start-up: ")
    assert result.headline["startup_actors_s"] > 0  # the actors' processes started
    # each update's wall time, and the part of it its thread computed
    timed = [
        row for row in read_jsonl(result.run_dir / "metrics.jsonl") if "learner/update_ms" in row
    ]
    assert timed
    for row in timed:
        assert 0 < row["learner/update_cpu_ms"] <= row["learner/update_ms"] * 1.05 + 0.05, row


def test_killed_learner_is_restored_from_its_checkpoint(ray_cluster, tmp_path, caplog):
    run_dir = tmp_path / "learner-kill"
    latest = run_dir / "checkpoints" / "latest.pt"
    killed = kill_actor_when("rayrl/learner-kill/learner", latest.is_file)
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        result = rayrl.train(None, overrides=fault_run(tmp_path, "learner-kill"))
    assert killed.is_set()
    assert result.stop_reason == "total_env_steps reached"
    # from the checkpoint, not from scratch (which would also say "restoring the learner(s)")
    restores = [
        re.fullmatch(r"restoring the learner\(s\) from (.*latest\.pt) \((\d+) updates\)", m)
        for m in (r.getMessage() for r in caplog.records)
        if m.startswith("restoring the learner(s)")
    ]
    assert restores
    assert all(restores), [r.getMessage() for r in caplog.records]
    restored_updates = int(restores[0].group(2))
    assert restored_updates > 0
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows[-1]["learner/restarts"] >= 1
    after = [r["learner/updates"] for r in rows if r.get("learner/restarts", 0) >= 1]
    assert min(after) >= restored_updates  # the restored learner went on from there
    final = load_checkpoint(latest)
    assert final["counters"]["env_steps"] >= FAULT_RUN_STEPS
    assert final["counters"]["updates"] > 0


def test_a_killed_worker_is_replaced_and_a_killed_replay_recreated_and_refilled(
    ray_cluster, tmp_path, caplog
):
    """One run loses its rollout worker, then (once the new worker has sampled) its replay
    actor, and trains to its budget through both."""
    run_dir = tmp_path / "kills"
    worker_killed = kill_actor_when(
        "rayrl/kills/worker-0", lambda: env_steps_logged(run_dir) >= 2048
    )
    replay_killed = kill_actor_when(
        "rayrl/kills/replay",
        lambda: worker_killed.is_set() and env_steps_logged(run_dir) >= 4096,
    )
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        result = rayrl.train(None, overrides=fault_run(tmp_path, "kills"))
    assert worker_killed.is_set()
    assert replay_killed.is_set()
    assert result.stop_reason == "total_env_steps reached"
    assert result.counters.env_steps >= FAULT_RUN_STEPS
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows[-1]["worker/restarts"] >= 1
    assert rows[-1]["replay/restarts"] >= 1
    assert rows[-1]["replay/lost_transitions"] > 0
    assert any("transitions were lost" in r.message for r in caplog.records)
    assert_updates_never_go_backwards(rows)
    assert "restarts" in result.summary


def test_a_replay_refilled_from_its_checkpoint_grants_no_burst_of_updates(ray_cluster, tmp_path):
    """With `algorithm.replay.save_with_checkpoint`, a killed replay actor comes back refilled
    from the buffer saved with the last checkpoint, and with the rate limiter's counts of that
    moment: over the whole run the learner samples no more than samples_per_insert x the
    inserted transitions allow (plus the limiter's tolerance, once for each actor, and the
    learner's prefetched requests), where fresh counts would grant samples_per_insert x the
    refilled buffer at once."""
    run_dir = tmp_path / "replay-refill"
    killed = kill_actor_when(
        "rayrl/replay-refill/replay", lambda: env_steps_logged(run_dir) >= 3072
    )
    result = rayrl.train(
        None,
        overrides=fault_run(
            tmp_path, "replay-refill", "algorithm.replay.save_with_checkpoint=true"
        ),
    )
    assert killed.is_set()
    assert result.stop_reason == "total_env_steps reached"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows[-1]["replay/restarts"] >= 1
    spi, min_size, batch, per_request, chunk = 4, 512, 64, 8, 8 * 32
    tolerance = spi * chunk + batch * per_request
    allowed = spi * (result.counters.env_steps - min_size) + 2 * tolerance + 2 * batch * per_request
    assert result.counters.updates * batch <= allowed


def test_the_final_checkpoint_saves_the_replay_when_asked(ray_cluster, tmp_path):
    result = rayrl.train(
        None,
        overrides=fault_run(
            tmp_path,
            "replay-final",
            "algorithm.replay.save_with_checkpoint=true",
            "run.total_env_steps=3072",
            "run.checkpoint_interval_env_steps=100000",  # only the final checkpoint
        ),
    )
    with np.load(RunDirectory(result.run_dir).replay_path) as replay:
        inserted, sampled = replay["metadata_limiter"]
        assert len(replay["rewards"]) == inserted > 512
    assert sampled >= result.counters.updates * 64  # and the learner's prefetched batches


def test_hung_worker_is_killed_and_replaced(ray_cluster, tmp_path, hang_marker):
    run_dir = tmp_path / "hang"

    def hang_soon():
        if env_steps_logged(run_dir) >= 1024:
            hang_marker.touch()
            return True
        return False

    threading.Thread(
        target=lambda: [time.sleep(0.2) for _ in iter(hang_soon, True)], daemon=True
    ).start()
    result = rayrl.train(
        None,
        overrides=fault_run(
            tmp_path,
            "hang",
            "env.id=tests.fake_envs:HangingCartPole-v0",
            "workers.sample_timeout_s=3",
            # the run's one worker hangs: nothing is sampled until it is replaced. Its env
            # steps at most 1,000 times a second, and the hang comes by about 2k env steps
            # (a metrics row at 1,024 or more, a poll, the env's next step): the run cannot
            # reach its budget before the hang
            "run.total_env_steps=6144",
            "run.eval_interval_env_steps=100000",  # the evaluator steps this env too
        ),
    )
    assert not hang_marker.exists()  # a worker's env found it and hung
    assert result.stop_reason == "total_env_steps reached"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows[-1]["worker/hangs"] >= 1
    assert rows[-1]["worker/restarts"] >= 1


def test_a_cuda_learner_without_a_gpu_from_ray_is_refused_before_it_starts(ray_cluster, tiny):
    """Ray hides the GPUs from an actor that asked for none: such a learner would fail at
    every start, so the run is refused up front, naming the key."""
    with pytest.raises(rayrl.UserError, match=r"learner.device='cuda' but the learner gets no"):
        rayrl.train(None, overrides=[*tiny, "learner.device=cuda", "learner.num_gpus=0"])


def test_a_refused_resume_changes_nothing_and_one_with_more_workers_goes_on(ray_cluster, tmp_path):
    """The replay asked for does not fit any node: refused once Ray is up, and the run's
    config and metrics are untouched, so that a later --resume with the old settings (or a
    retried job with --resume-if-exists) still works. The resume that follows asks for a
    second worker: it goes on from the checkpoint with two."""
    first = rayrl.train(None, overrides=fault_run(tmp_path, "resume", "run.total_env_steps=4096"))
    run = RunDirectory(first.run_dir)
    before = [path.read_bytes() for path in (run.config_path, run.metrics_path, run.eval_path)]
    files_before = sorted(run.root.rglob("*"))
    with pytest.raises(rayrl.UserError, match=r"lower algorithm.replay.capacity"):
        rayrl.train(
            resume=run.root,
            overrides=["algorithm.replay.capacity=2000000000", "logging.tensorboard=true"],
        )
    after = [path.read_bytes() for path in (run.config_path, run.metrics_path, run.eval_path)]
    assert after == before
    assert sorted(run.root.rglob("*")) == files_before  # no recorder opened (TensorBoard)

    counters = load_checkpoint(run.latest_checkpoint)["counters"]
    resumed = rayrl.train(
        resume=run.root, overrides=["workers.num_workers=2", "run.total_env_steps=6144"]
    )
    assert resumed.counters.env_steps >= 6144
    assert load_checkpoint(run.latest_checkpoint)["config"]["workers"]["num_workers"] == 2
    assert resumed.counters.updates > counters["updates"]
    assert_in_env_step_order(run.root)
    assert_updates_never_go_backwards(read_jsonl(run.metrics_path))


def test_a_replay_saved_with_checkpoints_must_fit_the_drivers_node(ray_cluster, tiny):
    """Saved with checkpoints, the replay lives on the driver's node (where the run
    directory is): that node, not the largest, must hold it."""
    with pytest.raises(rayrl.UserError, match=r"keeps it on the driver's node, which has"):
        rayrl.train(
            None,
            overrides=[
                *tiny,
                "algorithm.replay.save_with_checkpoint=true",
                "algorithm.replay.capacity=2000000000",
            ],
        )


def test_a_new_run_refused_by_the_pre_flight_leaves_no_directory(ray_cluster, tiny, tmp_path):
    with pytest.raises(rayrl.UserError, match=r"lower algorithm.replay.capacity"):
        rayrl.train(
            None,
            overrides=[*tiny, "algorithm.replay.capacity=2000000000", "logging.tensorboard=true"],
        )
    assert list((tmp_path / "runs").iterdir()) == []


def test_cluster_too_small_is_a_clear_error(ray_cluster, tiny):
    # the learner asks for the GPU only (rayrl.ray.capacity.learner_cpus)
    with pytest.raises(rayrl.UserError, match=r"has 5 CPUs but the run asks for 20 \("):
        rayrl.train(None, overrides=[*tiny, "workers.num_workers=20"])


def test_two_dqn_learners_all_reduce_and_end_identical(ray_cluster, tiny):
    """`learner.num_learners` is the learner's setting, for every algorithm."""
    result = rayrl.train(None, overrides=[*tiny, "learner.num_learners=2"])
    assert result.counters.updates > 0
    assert len(result.learner_digests) == 2
    assert len(set(result.learner_digests)) == 1
