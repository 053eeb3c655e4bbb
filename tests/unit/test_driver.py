"""The Ray driver's loop with fake actors that answer at once: the schedules (evaluations,
periodic and best checkpoints), the end of a run in the order of `rayrl.run_lifecycle`, and
runs that stop before or while they start."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from rayrl.checkpoint import load_checkpoint
from rayrl.core import ChunkStats, EvalResult, ModelInfo, StoreStats
from rayrl.families import OFF_POLICY
from rayrl.presets import load_config
from rayrl.ray.dispatcher import Dispatcher
from rayrl.ray.driver import RayDriver
from rayrl.ray.learner_service import LearnerPulse, LearnerReport
from rayrl.recorders import Recorders
from rayrl.run_lifecycle import StopReason
from rayrl.rundir import RunDirectory
from rayrl.session import Counters, TrainingSession
from tests.fake_ray import OWN_IDENTITY, FakeFactory, FakeRay, fake_watchdog

CHUNK_STEPS = 128


@dataclass
class Learner:
    """A fake learner that makes `updates` updates per train call; evaluations return
    `eval_means` in turn."""

    updates: int = 0
    eval_means: tuple[float, ...] = (10.0, 30.0, 20.0, 25.0)
    evaluations: int = 0

    def info(self) -> ModelInfo:
        return ModelInfo(self.updates, {"w": np.full(2, float(self.updates), np.float32)})

    def train(self, num_updates: int):
        self.updates += num_updates
        report = LearnerReport(num_updates, self.updates, 0.1, 0.2, num_updates * 32)
        return report, self.info()

    def evaluate(self, info: ModelInfo, episodes: int, video: bool) -> EvalResult:
        mean = self.eval_means[min(self.evaluations, len(self.eval_means) - 1)]
        self.evaluations += 1
        return EvalResult(np.full(episodes, mean), np.full(episodes, 5), info.version)


def factory(learner: Learner) -> FakeFactory:
    return FakeFactory(
        behaviours={
            "worker": {
                "identify": OWN_IDENTITY,
                "sample": lambda steps: ("chunk", ChunkStats(0, CHUNK_STEPS, [1.0], [1], 0)),
                "set_weights": lambda info: None,
            },
            # every actor answers its start and its probe: the end of a run waits for no call
            "replay": {
                "identify": OWN_IDENTITY,
                "ping": lambda: None,
                "add": lambda chunk: CHUNK_STEPS,
                "stats": lambda: StoreStats(size=5, inserted=5, sampled=0),
                "save": lambda path, env_steps: 5,
                "stop": lambda: None,
            },
            "learner": {
                "placement": lambda: {"node_id": "node", "device": "cpu"},
                "pulse": lambda: LearnerPulse(waiting_for_store=False, stalled_s=0.0),
                "weights": learner.info,
                "train": learner.train,
                "state": lambda: {"updates": np.array(learner.updates)},
                "parameters_digest": lambda: "same",
                "set_store": lambda store: None,
            },
            "evaluator": {"identify": OWN_IDENTITY, "evaluate": learner.evaluate},
        }
    )


def driver(tmp_path, *overrides: str, counters: Counters | None = None, learner=None):
    config = load_config(
        None,
        [
            "logging.console=false",
            "run.total_env_steps=4096",
            "run.eval_interval_env_steps=1024",
            "run.checkpoint_interval_env_steps=2048",
            "run.eval_episodes=2",
            "run.target_return=null",
            "learner.sync_interval=10",
            *overrides,
        ],
    )
    session = TrainingSession(
        config,
        RunDirectory(tmp_path),
        Recorders([]),
        counters or Counters(),
        time.time(),
        OFF_POLICY.store,
    )
    fakes = factory(learner or Learner())
    dispatcher = Dispatcher(wait=FakeRay.wait, get=FakeRay.get)
    watchdog = fake_watchdog(time.monotonic)
    return RayDriver(config, session, None, fakes, dispatcher, watchdog), fakes


def test_a_run_evaluates_checkpoints_and_ends_in_the_policys_order(tmp_path):
    learner = Learner()
    ray_driver, fakes = driver(tmp_path, learner=learner)
    result = ray_driver.run()
    assert result.stop_reason is StopReason.TOTAL_ENV_STEPS
    assert result.counters.env_steps >= 4096
    run = RunDirectory(tmp_path)
    evaluations = [e["env_steps"] for e in result.evaluations]
    assert evaluations[:2] == [1024, 2048]  # on schedule, then the final one
    assert len(evaluations) == learner.evaluations >= 4
    periodic = [int(p.stem.removeprefix("step_")) for p in run.periodic_checkpoints()]
    assert periodic  # named by the env steps when it was written, at or after 2,048
    assert 2048 <= periodic[0] < 4096
    latest = load_checkpoint(run.latest_checkpoint)
    assert latest["counters"]["env_steps"] == result.counters.env_steps
    assert int(latest["learner"]["updates"]) == result.counters.updates > 0
    assert all(actor.killed for actor in fakes.made)  # no actor outlives its run
    assert len(ray_driver.dispatcher) == 0  # every call was answered: the end waited for none
    assert result.placement["learner"]["device"] == "cpu"


def test_the_evaluator_starts_once_the_first_chunk_is_in(tmp_path):
    """Its process does not take the cores from the workers and the learner while they
    start: it is created after the first chunk has arrived, before any evaluation."""
    ray_driver, fakes = driver(tmp_path)
    ray_driver._start()
    assert not any(actor.name.startswith("evaluator") for actor in fakes.made)
    while not ray_driver.session.metrics.started_up:
        ray_driver.step()
    ray_driver.step()
    evaluators = [actor for actor in fakes.made if actor.name.startswith("evaluator")]
    assert len(evaluators) == 1
    assert ray_driver.session.counters.evaluations == 0
    ray_driver._kill_actors()


def test_best_checkpoint_holds_the_weights_that_were_evaluated(tmp_path):
    learner = Learner(eval_means=(10.0, 30.0, 20.0, 5.0, 5.0, 5.0))
    ray_driver, _ = driver(tmp_path, learner=learner)
    result = ray_driver.run()
    best = load_checkpoint(RunDirectory(tmp_path).best_checkpoint)
    second = result.evaluations[1]  # the best one (30)
    assert second["eval/return_mean"] == 30.0
    assert best["policy"]["version"] == second["eval/policy_version"]
    assert torch.all(best["policy"]["weights"]["w"] == second["eval/policy_version"])


def test_a_run_that_must_stop_before_its_first_step_still_ends_properly(tmp_path):
    """A resumed run that had already reached its budget."""
    ray_driver, fakes = driver(tmp_path, counters=Counters(env_steps=4096))
    result = ray_driver.run()
    assert result.stop_reason is StopReason.TOTAL_ENV_STEPS
    assert result.final_eval is not None
    assert RunDirectory(tmp_path).latest_checkpoint.is_file()
    assert all(actor.killed for actor in fakes.made)


def test_a_run_interrupted_while_it_starts_stops_cleanly(tmp_path):
    ray_driver, fakes = driver(tmp_path)

    def interrupted(index: int, incarnation: int):
        raise KeyboardInterrupt

    fakes.worker = interrupted  # Ctrl-C while the workers are being created
    result = ray_driver.run()
    assert result.stop_reason is StopReason.INTERRUPTED
    assert result.final_eval is None
    assert all(actor.killed for actor in fakes.made)


def test_a_learner_restore_clears_a_checkpoint_it_left_pending(tmp_path):
    ray_driver, _ = driver(tmp_path)
    ray_driver._start()
    first = ray_driver.learners.first
    first.behaviour.pop("state")  # the state request never answers: the learner hangs
    ray_driver.dispatcher.poll(0.0)  # initial weights published
    ray_driver._request_checkpoint(periodic=True)
    assert ray_driver._checkpoint_pending
    ray_driver.deaths.handle(first.died())
    assert ray_driver.learners.first is not first
    assert not ray_driver._checkpoint_pending  # the next periodic checkpoint can go out


@pytest.mark.parametrize("learners", [1, 2])
def test_several_learners_are_compared_at_the_end(tmp_path, learners):
    ray_driver, fakes = driver(tmp_path, f"learner.num_learners={learners}")
    fakes.num_learners = learners
    result = ray_driver.run()
    assert result.learner_digests == (["same", "same"] if learners == 2 else [])


def test_an_interrupt_between_a_result_and_its_handler_leaves_no_checkpoint_pending(tmp_path):
    """Ctrl-C lands after the dispatcher took the learner's state off its list and before
    the checkpoint's handler ran: the final checkpoint must not wait for it (it would spend
    its whole budget waiting, and not be written)."""
    ray_driver, _ = driver(tmp_path)
    ray_driver._start()
    ray_driver.dispatcher.poll(0.0)  # initial weights published
    ray_driver._request_checkpoint(periodic=True)
    assert ray_driver._checkpoint_pending
    get = ray_driver.dispatcher._get
    state_ref = ray_driver._checkpoint_ref

    def interrupted_at_the_state(ref):
        if ref is state_ref:
            raise KeyboardInterrupt
        return get(ref)

    def poll_until_interrupted() -> None:
        for _ in range(100):
            ray_driver.dispatcher.poll(0.0)

    ray_driver.dispatcher._get = interrupted_at_the_state
    with pytest.raises(KeyboardInterrupt):
        poll_until_interrupted()
    ray_driver.dispatcher._get = get
    assert not ray_driver._checkpoint_pending
    ray_driver.session.counters.env_steps = 512
    ray_driver.final_checkpoint(periodic=False)
    saved = load_checkpoint(RunDirectory(tmp_path).latest_checkpoint)
    assert saved["counters"]["env_steps"] == 512
