"""The futures dispatcher and the routing of actor deaths, with fake references."""

from __future__ import annotations

from ray.exceptions import RayActorError

from rayrl.ray.dispatcher import Deaths, Dispatcher, Life, died_actor_id
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
    assert died_actor_id(dead) == "store-id"
    assert died_actor_id(task_error("a bug")) is None


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
