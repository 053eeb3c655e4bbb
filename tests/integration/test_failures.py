"""Failures that must not lose a run: real faults in real runs (Ray runtime unless said),
with real processes, a real file-size limit and real Ray nodes removed."""

from __future__ import annotations

import json
import logging
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
from click.testing import CliRunner

import rayrl
from rayrl.checkpoint import load_checkpoint, policy_of, save_checkpoint
from rayrl.cli import main
from rayrl.ray import workers
from rayrl.run_lifecycle import StopReason
from rayrl.rundir import RunDirectory
from tests.background_run import BackgroundRun
from tests.run_files import env_steps_logged


def strict_json(line: str) -> dict:
    """A JSONL row, refusing NaN and Infinity (which are not JSON)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in a JSONL row")

    return json.loads(line, parse_constant=refuse)


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
            # several periodic checkpoints before the stop, however loaded the machine: a
            # checkpoint's state call waits behind the learner's train calls in flight
            "run.checkpoint_interval_env_steps=256",
            "learner.sync_interval=5",
            "learner.max_nonfinite_steps=10",
            # evaluations on finite rewards, so that best.pt is written: on this env, an
            # evaluation whose two episodes outlast 150 steps returns NaN, never a best
            "env.eval_id=CartPole-v1",
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


def test_a_learner_that_fails_at_every_start_ends_the_run_at_once(ray_cluster, tiny):
    """A checkpoint whose learner state no longer loads (from an incompatible version): the
    learner's constructor raises. It would at every restore, so the run stops at once with
    the constructor's own error, status 1, and the checkpoint it could not load untouched."""
    finished = rayrl.train("cartpole_dqn", overrides=tiny)
    run = RunDirectory(finished.run_dir)
    payload = load_checkpoint(run.latest_checkpoint)
    del payload["learner"]["optimizer"]
    save_checkpoint(run.latest_checkpoint, **{k: payload[k] for k in SAVED_FIELDS})
    saved = run.latest_checkpoint.read_bytes()

    started = time.monotonic()
    result = rayrl.train(resume=run.root, overrides=["run.total_env_steps=8192"])
    assert time.monotonic() - started < 120
    assert result.stop_reason is StopReason.FAILED
    assert result.stop_reason.exit_code == 1
    assert result.failure == "the learner could not start: KeyError: 'optimizer'"
    assert run.latest_checkpoint.read_bytes() == saved


SAVED_FIELDS = ("algorithm", "learner", "policy", "counters", "config")


def worker_alive_on(run_name: str, node) -> bool:
    """Whether one of the run's rollout workers is alive on the Ray node `node`."""
    from ray._private.state import actors

    return any(
        actor["Name"].startswith(f"rayrl/{run_name}/worker")
        and actor["State"] == "ALIVE"
        and actor["Address"]["NodeID"] == node.node_id
        for actor in actors().values()
    )


def test_training_goes_on_with_fewer_workers_when_a_node_is_lost(
    ray_cluster, tiny, tmp_path, caplog, monkeypatch
):
    """Three workers of 2 CPUs each need a third node's CPUs (the head has 4, the GPU node 1:
    its learner asks for the GPU alone). It is removed mid-run: its worker dies with it, and
    the replacement finds no room. Training goes on meanwhile, and once a node comes
    back the waiting worker starts on it. Each step waits for what the run says or does, never for
    a fixed time, so that a slow machine (a start-up of a minute under load) only makes the
    test longer; the run is then stopped as Ctrl-C stops it."""
    monkeypatch.setattr(workers, "CAPACITY_NOTICE_S", 3.0)  # said sooner
    cluster, _ = ray_cluster
    extra = cluster.add_node(num_cpus=2, object_store_memory=200 * 2**20)
    cluster.wait_for_nodes()
    name = "lose-a-node"
    overrides = [
        *tiny,
        f"run.name={name}",
        "workers.num_workers=3",
        "workers.cpus_per_worker=2",
        "workers.envs_per_worker=1",
        "run.total_env_steps=10000000",
        "run.time_budget_s=800",  # a last resort: the test stops the run
        "logging.log_interval_s=1",
    ]
    run_dir = tmp_path / "runs" / name  # under tiny's runs_dir

    def said(text: str, after: int) -> Callable[[], bool]:
        return lambda: any(text in record.getMessage() for record in caplog.records[after:])

    def sampled_past(count: int) -> Callable[[], bool]:
        return lambda: env_steps_logged(run_dir) > count

    removed, added = False, None
    with caplog.at_level(logging.INFO, logger="rayrl.ray"):
        # in a thread: Ray's nodes are added and removed from the main thread only
        run = BackgroundRun("cartpole_dqn", overrides)
        try:
            run.wait_until(sampled_past(511), 240, "sampling", every_s=1)
            at_loss, at_removal = env_steps_logged(run_dir), len(caplog.records)
            cluster.remove_node(extra)
            removed = True
            run.wait_until(said("waits for room on the cluster", at_removal), 120, "a wait")
            gone = env_steps_logged(run_dir)
            run.wait_until(sampled_past(gone + 256), 120, "training without the node", every_s=1)
            added = cluster.add_node(num_cpus=2, object_store_memory=200 * 2**20)
            run.wait_until(lambda: worker_alive_on(name, added), 180, "a worker on the new node")
            run.wait_until(sampled_past(at_loss + 2000), 120, "training", every_s=1)
        finally:
            run.stop()
            if not removed:
                cluster.remove_node(extra)
            if added is not None:
                cluster.remove_node(added)
    assert run.result.stop_reason is StopReason.INTERRUPTED
    assert run.result.counters.env_steps > at_loss + 2000
    assert any("died; replacing it" in record.getMessage() for record in caplog.records)


def test_a_run_directory_that_fills_up_stops_the_run_keeping_what_was_saved(tmp_path):
    """A real file-size limit (RLIMIT_FSIZE, as a full disk or a quota): checkpoints still
    fit, the saved replay outgrows it. Each failed save is retried and counted; three in a
    row stop the run with status 1 and the cause in one line; every checkpoint on disk
    loads, the last replay that fitted is intact, no temporary file is left, and the
    metrics files hold whole lines."""

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))

    command = [sys.executable, "-m", "rayrl", "train", "--runtime", "local"]
    for override in (
        "logging.console=false",
        f"run.runs_dir={tmp_path}",
        "run.name=full",
        "run.total_env_steps=100000",
        "run.target_return=null",
        "run.checkpoint_interval_env_steps=4000",
        "algorithm.replay.save_with_checkpoint=true",
        "algorithm.replay.samples_per_insert=1",  # the saves are tested, not the learning
    ):
        command += ["--set", override]
    done = subprocess.run(
        command, preexec_fn=limit_file_size, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 1, done.stderr
    assert "stopped: failed (3 writes of the replay failed in a row" in done.stdout
    assert "File too large" in done.stdout
    run = RunDirectory(tmp_path / "full")
    checkpoints = [run.latest_checkpoint, run.best_checkpoint, *run.periodic_checkpoints()]
    for path in checkpoints:
        load_checkpoint(path)
    last = load_checkpoint(run.latest_checkpoint)["counters"]["env_steps"]
    assert last > 20_000  # the final checkpoint was written after the failed replay
    np.load(run.replay_path)["frames"]  # the last one that fitted
    assert not list(tmp_path.rglob("*.tmp"))
    for path in (run.metrics_path, run.eval_path):
        for line in path.read_text().splitlines():
            strict_json(line)


def test_a_run_whose_checkpoints_no_longer_fit_stops_naming_the_file_and_why(tmp_path):
    """A real file-size limit (RLIMIT_FSIZE, as a disk that fills) lowered mid-run below a
    checkpoint's size (a bigger network: 5 MB checkpoints) and far above the metrics files:
    the checkpoint writes fail as the OS's error, not torch's ("unexpected pos"), and are
    retried and counted; three in a row stop the run with status 1 and one line naming the
    checkpoint and the cause, the final checkpoint is still tried, and the checkpoints
    written before the limit are intact."""
    command = [sys.executable, "-m", "rayrl", "train", "--runtime", "local"]
    for override in (
        "logging.console=false",
        f"run.runs_dir={tmp_path}",
        "run.name=full",
        "run.total_env_steps=1000000",
        "run.target_return=null",
        "run.checkpoint_interval_env_steps=4000",
        "algorithm.hidden_sizes=[512,512]",
        "algorithm.replay.samples_per_insert=1",  # the saves are tested, not the learning
    ):
        command += ["--set", override]
    run = RunDirectory(tmp_path / "full")
    stdout_path, stderr_path = tmp_path / "stdout", tmp_path / "stderr"
    with stdout_path.open("w") as stdout, stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            command,
            stdout=stdout,
            stderr=stderr,
            # a write past the limit then raises EFBIG (Python ignores SIGXFSZ anyway)
            preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
        )
        try:
            while not run.latest_checkpoint.is_file():  # written whole (atomically) or not
                assert process.poll() is None, stderr_path.read_text()
                time.sleep(0.2)
            limit = 1_000_000
            resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (limit, limit))
            returncode = process.wait(timeout=240)
        finally:
            process.kill()  # a no-op once it has ended
    output, errors = stdout_path.read_text(), stderr_path.read_text()
    assert returncode == 1, errors
    (stopped,) = [line for line in output.splitlines() if line.startswith("stopped:")]
    named = re.search(
        r"^stopped: failed \(3 writes of the checkpoints failed in a row .*; the last, the "
        r"checkpoint (\S+): File too large: (\S+) would pass the file-size limit",
        stopped,
    )
    assert named is not None, stopped
    assert named[2] == str(run.checkpoints / named[1])
    for internals in ("enforce fail", "unexpected pos", "Traceback"):
        assert internals not in output + errors
    rows = [strict_json(line) for line in run.metrics_path.read_text().splitlines()]
    assert rows[-1]["run/write_errors"] >= 3
    saved = [run.latest_checkpoint, run.best_checkpoint, *run.periodic_checkpoints()]
    for path in saved:
        assert path.stat().st_size > limit  # all written before the limit
        load_checkpoint(path)
    saved_at = load_checkpoint(run.latest_checkpoint)["counters"]["env_steps"]
    assert f"was not written; {run.latest_checkpoint} is from {saved_at:,} env steps" in output
    assert not list(tmp_path.rglob("*.tmp"))
