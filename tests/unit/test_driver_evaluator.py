"""The evaluator on a thread of the driver's process: what it answers is what the evaluator
actor answers, its start failure is the one Ray reports for an actor's constructor, a slow
evaluation is cancelled and replaced under the evaluator's supervisor, and a thread stuck in
an env step hands evaluation to actors."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from rayrl.config import FaultsConfig
from rayrl.contract import StoreKind
from rayrl.errors import RunFailedError
from rayrl.evaluation import Evaluator
from rayrl.presets import load_config
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Deaths, Dispatcher, dead_actor
from rayrl.ray.driver_evaluator import AbandonedError, DriverEvaluator, DriverEvaluators
from rayrl.ray.evaluator import EvaluatorSupervisor
from rayrl.ray.factory import ActorFactory
from rayrl.ray.restarts import ActorStartError, constructor_error
from rayrl.run_metrics import RunMetrics
from rayrl.session import Counters
from tests.fake_ray import FakeActor, FakeRay

WAIT_S = 120.0
"""Longest a test waits for an answer (a loaded machine); an idle one answers in a second."""
SLOW = "env.id=tests.fake_envs:HangingCartPole-v0"
"""Each step takes a millisecond; with the hang marker, the next step never returns."""


def evaluator_arguments(*overrides: str) -> tuple:
    config = load_config("cartpole_ppo", ["run.eval_episodes=4", *overrides])
    return config.env, config.algorithm, config.run.eval_episodes, config.run.seed


def wait_for(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_it_answers_as_the_evaluator_does_in_its_own_process():
    arguments = evaluator_arguments()
    torch.manual_seed(0)  # the same initial weights for both
    host = DriverEvaluator("rayrl/test/evaluator", *arguments)
    try:
        identity = host.identify.remote().result(WAIT_S)
        assert identity.actor_id == "driver-thread:rayrl/test/evaluator"
        hosted = host.evaluate.remote(None, 4, False).result(WAIT_S)
    finally:
        ActorFactory.kill(host)  # as the run's end does
    assert not host.stuck()  # its thread ended, its envs closed
    torch.manual_seed(0)
    direct = Evaluator(*arguments)
    try:
        expected = direct.evaluate(None, 4)
    finally:
        direct.close()
    np.testing.assert_array_equal(hosted.returns, expected.returns)
    np.testing.assert_array_equal(hosted.lengths, expected.lengths)
    with pytest.raises(AbandonedError):  # a killed host answers nothing more
        host.evaluate.remote(None, 4, False).result(0)


def test_a_failed_start_is_reported_as_an_actors_constructor_error():
    """So that the evaluator's supervisor stops the run, as it does for the actor (the same
    error would recur at every restart)."""
    host = DriverEvaluator("rayrl/test/evaluator", *evaluator_arguments("env.id=NoSuchEnv-v9"))
    try:
        with pytest.raises(ActorStartError) as raised:
            host.identify.remote().result(WAIT_S)
        assert dead_actor(raised.value) is None  # no Ray actor's death
        assert "NoSuchEnv" in (constructor_error(raised.value) or "")
        with pytest.raises(ActorStartError) as evaluation:  # an evaluation asked anyway fails
            host.evaluate.remote(None, 4, False).result(WAIT_S)
        assert evaluation.value is raised.value
    finally:
        host.kill()


class ThreadFactory:
    """`ActorFactory`'s evaluator part, with fake actors where it would start real ones."""

    def __init__(self, *overrides: str) -> None:
        self.arguments = evaluator_arguments(*overrides)
        self.hosts = DriverEvaluators()
        self.actors: list[FakeActor] = []

    def evaluator(self, incarnation: int = 0):
        host = self.hosts.make(f"evaluator.{incarnation}", *self.arguments)
        if host is None:
            self.actors.append(FakeActor(f"evaluator.{incarnation}"))
            return self.actors[-1]
        return host

    @staticmethod
    def kill(handle) -> None:
        if isinstance(handle, FakeActor):
            handle.killed = True
        else:
            ActorFactory.kill(handle)


def supervised(factory: ThreadFactory, timeout_s: float) -> tuple[EvaluatorSupervisor, Dispatcher]:
    dispatcher = Dispatcher(wait=FakeRay.wait, get=FakeRay.get)
    deaths = Deaths()
    context = SupervisorContext(
        factory,  # type: ignore[arg-type]
        dispatcher,
        deaths,
        FaultsConfig(),
        Counters(),
        RunMetrics(1, StoreKind(namespace="replay", items="transitions", drops_stale=False)),
    )
    supervisor = EvaluatorSupervisor(context, timeout_s)
    deaths.route_to(supervisor)
    supervisor.start()
    return supervisor, dispatcher


def evaluation(supervisor: EvaluatorSupervisor, dispatcher: Dispatcher, episodes: int) -> list:
    """Ask for an evaluation and dispatch until it is answered or replaced."""
    results: list = []
    supervisor.request(None, episodes, False, results.append)

    def busy() -> bool:
        supervisor.check_hung()
        return supervisor.pending

    assert dispatcher.drain(busy, WAIT_S, poll_s=0.05)
    return results


def test_a_failed_start_stops_the_run_as_an_actors_constructor_error_does():
    supervisor, dispatcher = supervised(ThreadFactory("env.id=NoSuchEnv-v9"), timeout_s=60.0)
    with pytest.raises(RunFailedError, match=r"the evaluator could not start: .*NoSuchEnv"):
        dispatcher.drain(lambda: True, WAIT_S, poll_s=0.05)
    assert supervisor.incarnation == 0  # not replaced: it would fail the same way


def test_a_slow_evaluation_is_cancelled_and_a_new_thread_evaluates():
    factory = ThreadFactory(SLOW)
    supervisor, dispatcher = supervised(factory, timeout_s=1.0)
    slow = supervisor.handle
    assert evaluation(supervisor, dispatcher, episodes=4)  # a few ms a step: in time
    # 16 envs of long episodes, a ms a step each: about 10 s, past the 1 s timeout
    assert evaluation(supervisor, dispatcher, episodes=400) == []
    assert supervisor.incarnation == 1
    assert not slow.stuck()  # cancelled at its next step: its thread ended
    assert evaluation(supervisor, dispatcher, episodes=4)  # by the new thread
    assert isinstance(supervisor.handle, DriverEvaluator)
    assert factory.actors == []
    ActorFactory.kill(supervisor.handle)


def test_a_thread_stuck_in_an_env_step_hands_evaluation_to_actors(tmp_path, monkeypatch, caplog):
    marker = tmp_path / "hang-now"
    monkeypatch.setenv("RAYRL_TEST_HANG_FILE", str(marker))
    factory = ThreadFactory(SLOW)
    supervisor, dispatcher = supervised(factory, timeout_s=1.0)
    stuck = supervisor.handle
    assert evaluation(supervisor, dispatcher, episodes=4)
    marker.touch()  # the next env step never returns
    results: list = []
    supervisor.request(None, 4, False, results.append)
    wait_for(lambda: not marker.exists())  # the hung step took it
    queued = stuck.evaluate.remote(None, 4, False)
    assert dispatcher.drain(lambda: (supervisor.check_hung(), supervisor.pending)[1], WAIT_S)
    assert results == []
    with pytest.raises(AbandonedError):
        queued.result(0)  # failed at once by the kill, not left waiting
    assert stuck.stuck()
    assert "evaluations go on in an actor" in caplog.text
    assert [actor.name for actor in factory.actors] == ["evaluator.1"]
    assert supervisor.handle is factory.actors[0]
