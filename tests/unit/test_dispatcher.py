"""The futures dispatcher and the routing of actor deaths, with fake references."""

from __future__ import annotations

import threading
import time
from concurrent import futures

from ray.exceptions import RayActorError

from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, dead_actor
from tests.fake_ray import FakeRay, FakeRef, task_error


def dispatcher() -> Dispatcher:
    return Dispatcher(wait=FakeRay.wait, get=FakeRay.get)


def test_values_and_errors_reach_their_handlers_once():
    d = dispatcher()
    seen = []
    ok, bad, later = FakeRef("ok"), FakeRef("bad"), FakeRef("later")
    for ref in (ok, bad, later):
        d.submit(ref, lambda v, r=ref: seen.append((r.label, v)), lambda e: seen.append(("err", e)))
    ok.resolve(1)
    error = task_error("boom")
    bad.fail(error)
    assert d.poll(0.0) == 2
    assert seen == [("ok", 1), ("err", error)]
    assert len(d) == 1  # `later` is still out
    assert d.poll(0.0) == 0
    later.resolve(3)
    d.poll(0.0)
    assert seen[-1] == ("later", 3)
    assert len(d) == 0


def test_results_of_an_ended_life_are_dropped_unseen():
    d = dispatcher()
    life = Life()
    seen = []
    first, second = FakeRef("first"), FakeRef("second")
    d.submit(first, seen.append, seen.append, life)
    d.submit(second, seen.append, seen.append, life)
    first.resolve("before")
    d.poll(0.0)
    life.end()  # the actor was replaced
    second.fail(task_error("late"))
    d.poll(0.0)
    assert seen == ["before"]
    assert len(d) == 0


def test_drain_stops_when_done_or_when_time_is_up():
    d = dispatcher()
    ref = FakeRef("x")
    got = []
    d.submit(ref, got.append, got.append)
    assert not d.drain(lambda: not got, timeout_s=0.05, poll_s=0.01)
    ref.resolve("v")
    assert d.drain(lambda: not got, timeout_s=1.0)
    assert got == ["v"]


def test_the_dead_actor_is_the_cause_not_the_caller():
    dead = RayActorError(actor_id="store-id")
    assert dead_actor(dead) == "store-id"
    assert dead_actor(task_error("a bug")) is None


class Owner:
    def __init__(self, actor: str) -> None:
        self.actor, self.died = actor, []

    def owns(self, actor_id: str) -> bool:
        return actor_id == self.actor

    def on_died(self, actor_id: str, error: BaseException) -> None:
        self.died.append(actor_id)


def test_deaths_go_to_the_supervisor_of_the_dead_actor():
    deaths = Deaths()
    workers, store = Owner("worker"), Owner("store")
    deaths.route_to(workers, store)
    assert deaths.handle(RayActorError(actor_id="store"))
    assert store.died == ["store"]
    assert workers.died == []
    # an actor replaced already: handled, nobody acts again
    assert deaths.handle(RayActorError(actor_id="old-worker"))
    assert workers.died == []
    assert not deaths.handle(task_error("not a death"))


def test_futures_of_this_process_are_dispatched_beside_object_references():
    """A call on a thread of the driver's process (an evaluator there) answers with a
    `Future`: its value and its error reach their handlers, beside Ray's references."""
    d = dispatcher()
    seen = []
    ref, value, failing = FakeRef("ref"), futures.Future(), futures.Future()
    d.submit(ref, lambda v: seen.append(("ref", v)), seen.append)
    d.submit(value, lambda v: seen.append(("future", v)), seen.append)
    error = ValueError("env crashed")
    d.submit(failing, seen.append, lambda e: seen.append(("error", e)))
    assert d.poll(0.0) == 0
    value.set_result(2)
    failing.set_exception(error)
    assert d.poll(10.0) == 2  # answered futures: no wait
    assert seen == [("future", 2), ("error", error)]
    ref.resolve(1)
    d.poll(0.0)
    assert seen[-1] == ("ref", 1)
    assert len(d) == 0


def test_a_future_answered_from_a_thread_is_dispatched_without_waiting_out_the_poll():
    def wait(refs: list[FakeRef], num_returns: int, timeout: float) -> tuple[list, list]:
        time.sleep(timeout)  # as Ray's does when nothing resolves: no thread wakes it
        return FakeRay.wait(refs, num_returns, timeout)

    d = Dispatcher(wait=wait, get=FakeRay.get)
    future, got = futures.Future(), []
    d.submit(future, got.append, got.append)
    d.submit(FakeRef("never"), got.append, got.append)
    threading.Timer(0.01, future.set_result, ("v",)).start()
    started = time.monotonic()
    assert d.drain(lambda: not got, timeout_s=30.0, poll_s=30.0)
    assert got == ["v"]
    assert time.monotonic() - started < 10.0  # polls of LOCAL_POLL_S, not of poll_s
