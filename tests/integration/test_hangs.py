"""Hung actors on the suite's test cluster: real actor processes stopped with SIGSTOP (what a
CUDA or NCCL hang, or a frozen machine, leaves of a process: it neither dies nor answers),
noticed by the supervisors' probes and replaced, while the run goes on. Each test stops its
run (as Ctrl-C does) once the replacement has done its work: waiting for that, not for a
budget, keeps the tests short on an idle machine and correct on a loaded one."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import ray

from rayrl import host
from rayrl.files import read_jsonl
from rayrl.run_lifecycle import StopReason
from tests.background_run import BackgroundRun
from tests.run_files import env_steps_logged

HANG_TIMEOUT_S = 5
"""Long enough that a loaded machine does not look hung: the file passed three times beside
two busy loops of normal priority, harsher neighbours than the suite's idle-priority pool.
Each test waits it out once."""
RECOVERY_S = 300
"""The longest a test waits for the hang to be noticed and the replacement to work."""


def hang_run(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return [
        "logging.console=false",
        f"run.runs_dir={tmp_path}",
        f"run.name={name}",
        "run.target_return=null",
        "run.total_env_steps=100000000",  # the test stops the run
        "run.time_budget_s=900",  # (a last resort)
        "run.eval_interval_env_steps=4096",
        "run.eval_episodes=2",
        "run.checkpoint_interval_env_steps=4096",
        "logging.log_interval_s=0.5",
        # plain CartPole: the tests wait for events, not budgets, so the env need not be slow
        "env.id=CartPole-v1",
        "workers.num_workers=1",
        "algorithm.replay.min_size=512",
        "algorithm.replay.samples_per_insert=4",
        "learner.batch_size=64",
        "learner.sync_interval=10",
        f"faults.probe_timeout_s={HANG_TIMEOUT_S}",
        f"faults.stall_timeout_s={HANG_TIMEOUT_S}",
        # Ray's kill does not end a stopped process at once (its raylet asks the process to
        # exit first), so a frozen actor keeps what it holds for a while: a restored learner
        # that needed the cluster's one GPU would wait for it. On CPU, there is room for it.
        "learner.num_gpus=0",
        *extra,
    ]


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/<pid>/stat): tells it from a later
    process that got its pid. None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def actor_pid(name: str) -> int | None:
    """The pid of the live actor `name`, when it has a process."""
    try:
        handle = ray.get_actor(name)
    except ValueError:  # not created yet, or gone
        return None
    from ray._private.state import actors

    return actors(handle._actor_id.hex()).get("Pid") or None


class Freezer:
    """From a background thread: once `ready()`, stop the actor `name`'s process with
    SIGSTOP. `release()` (in a `finally`) kills it if it is still there, so that no stopped
    process outlives its test."""

    def __init__(self, name: str, ready: Callable[[], bool], timeout_s: float = 240.0) -> None:
        self.name = name
        self.ready = ready
        self.stopped = threading.Event()
        self._process: tuple[int, str] | None = None
        self._lock = threading.Lock()
        self._released = False
        deadline = time.monotonic() + timeout_s
        threading.Thread(target=self._run, args=(deadline,), daemon=True).start()

    def _run(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.ready() and self._stop():
                return
            time.sleep(0.2)

    def _stop(self) -> bool:
        pid = actor_pid(self.name)
        start = _start_time(pid) if pid else None
        if pid is None or start is None:
            return False
        with self._lock:
            if self._released:
                return True
            os.kill(pid, signal.SIGSTOP)
            self._process = (pid, start)
        self.stopped.set()
        return True

    def release(self) -> None:
        with self._lock:
            self._released = True
            if self._process is None:
                return
            pid, start = self._process
            if _start_time(pid) == start:  # still the stopped process (Ray kills it)
                os.kill(pid, signal.SIGKILL)


def learner_rows(run_dir: Path) -> list[dict]:
    return [row for row in read_jsonl(run_dir / "metrics.jsonl") if "learner/loss" in row]


def updates_after(run_dir: Path, counter: str) -> float:
    """Learner updates from the first metrics row that counts `counter` to the last row:
    what the run learned after the fault was dealt with (0 before it was)."""
    after = [row for row in learner_rows(run_dir) if row.get(counter, 0) >= 1]
    return after[-1]["learner/updates"] - after[0]["learner/updates"] if after else 0.0


def train_through_a_freeze(
    overrides: list[str], freezer: Freezer, recovered: Callable[[], bool]
) -> StopReason:
    """Train in the background until the actor was frozen and `recovered()`, then stop the
    run; how it stopped."""
    run = BackgroundRun(None, overrides)
    try:
        run.wait_until(freezer.stopped.is_set, RECOVERY_S, "freeze")
        run.wait_until(recovered, RECOVERY_S, "recovery from the freeze", every_s=1)
    finally:
        freezer.release()  # before the end of the run, which would wait for a frozen actor
        run.stop()
    return run.result.stop_reason


@pytest.mark.parametrize("samples_per_insert", ["4", "null"])
def test_a_stopped_learner_is_noticed_and_restored(
    ray_cluster, tmp_path, caplog, samples_per_insert
):
    """Without a replay ratio experience keeps arriving through the hang: the learner's
    probe, not the lack of experience, tells that it hangs."""
    name = f"learner-stop-{samples_per_insert}"
    run_dir = tmp_path / name
    latest = run_dir / "checkpoints" / "latest.pt"
    freezer = Freezer(f"rayrl/{name}/learner", lambda: latest.is_file() and learner_rows(run_dir))
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        stopped = train_through_a_freeze(
            hang_run(tmp_path, name, f"algorithm.replay.samples_per_insert={samples_per_insert}"),
            freezer,
            lambda: updates_after(run_dir, "learner/hangs") > 0,  # the restored one trains
        )
    assert stopped is StopReason.INTERRUPTED  # by the test, once the run had recovered
    messages = [record.message for record in caplog.records]
    assert any("did not answer its probe" in m and "the learner is hung" in m for m in messages)
    assert any("restoring the learner(s) from" in m for m in messages)
    assert read_jsonl(run_dir / "metrics.jsonl")[-1]["learner/hangs"] >= 1


def test_a_stopped_store_is_replaced_and_the_learner_waiting_on_it_is_not(
    ray_cluster, tmp_path, caplog
):
    run_dir = tmp_path / "store-stop"
    freezer = Freezer(
        "rayrl/store-stop/replay",
        lambda: env_steps_logged(run_dir) >= 4096 and bool(learner_rows(run_dir)),
    )
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        stopped = train_through_a_freeze(
            hang_run(tmp_path, "store-stop"),
            freezer,
            lambda: updates_after(run_dir, "replay/hangs") > 0,  # from the new store
        )
    assert stopped is StopReason.INTERRUPTED
    # its probe, or a stats call asked a little earlier, went unanswered
    assert any("the replay actor did not answer" in r.message for r in caplog.records)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows[-1]["replay/hangs"] >= 1
    assert rows[-1]["replay/restarts"] >= 1
    # the learner waited for the store: it was not restored
    assert rows[-1].get("learner/hangs", 0) == 0
    assert rows[-1].get("learner/restarts", 0) == 0


def evaluated_after_replacement(run_dir: Path) -> bool:
    """Whether an evaluation asked for after the evaluator was replaced was answered (by the
    new evaluator)."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    replaced = [row["env_steps"] for row in rows if row.get("eval/failures", 0) >= 1]
    evaluations = read_jsonl(run_dir / "eval.jsonl")
    return bool(replaced) and any(row["env_steps"] >= replaced[0] for row in evaluations)


def test_a_stopped_evaluator_is_replaced(ray_cluster, tmp_path, caplog):
    run_dir = tmp_path / "eval-stop"
    freezer = Freezer("rayrl/eval-stop/evaluator", lambda: bool(read_jsonl(run_dir / "eval.jsonl")))
    overrides = hang_run(
        tmp_path,
        "eval-stop",
        "run.eval_interval_env_steps=2048",
        f"run.eval_timeout_s={HANG_TIMEOUT_S}",
        "run.evaluator=actor",  # a process to stop (a thread's hang: test_driver_evaluator)
    )
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        stopped = train_through_a_freeze(
            overrides, freezer, lambda: evaluated_after_replacement(run_dir)
        )
    assert stopped is StopReason.INTERRUPTED
    assert any("replacing the evaluator" in r.message for r in caplog.records)


@pytest.fixture
def busy_machine():
    """Two busy processes per core beside the test (four on 2 cores: with the run's own, a
    load of about 6): every process of the run gets a third of a core or less."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * host.usable_cores())
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_on_a_busy_machine_a_stopped_worker_is_replaced_in_its_time_and_nothing_else_is(
    ray_cluster, busy_machine, tmp_path, caplog
):
    """The timeouts count the seconds an actor could run (`rayrl.ray.watchdog`): beside the
    busy processes, at the hang tests' timeouts of a few seconds, no starved actor is taken
    for a hung one, while the worker stopped with SIGSTOP is replaced after its timeout on
    the wall clock (counted at the load, it would take about three times as long)."""
    run_dir = tmp_path / "busy-worker-stop"
    freezer = Freezer("rayrl/busy-worker-stop/worker-0", lambda: bool(learner_rows(run_dir)))
    overrides = hang_run(
        tmp_path,
        "busy-worker-stop",
        "workers.num_workers=2",
        f"workers.sample_timeout_s={HANG_TIMEOUT_S}",
        f"run.eval_timeout_s={HANG_TIMEOUT_S}",
    )
    with caplog.at_level(logging.WARNING, logger="rayrl.ray"):
        stopped = train_through_a_freeze(
            overrides, freezer, lambda: updates_after(run_dir, "worker/hangs") > 0
        )
    assert stopped is StopReason.INTERRUPTED
    replaced = [r.message for r in caplog.records if "delivered no chunk" in r.message]
    assert len(replaced) == 1
    wall_s = float(replaced[0].removeprefix("worker 0 delivered no chunk for ").split()[0])
    assert wall_s < 2 * HANG_TIMEOUT_S
    last = read_jsonl(run_dir / "metrics.jsonl")[-1]
    assert last["worker/hangs"] == 1
    for count in ("learner/hangs", "replay/hangs", "eval/failures", "learner/restarts"):
        assert last.get(count, 0) == 0, count
