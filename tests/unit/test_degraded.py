"""The rollout workers' supervisor in a degraded cluster, with fake actor handles: chunks
are asked only of workers whose process has started, so that a worker waiting for a lost
node's capacity holds none of the run's budget."""

from __future__ import annotations

from rayrl.ray.factory import CAPACITY_NOTICE_S
from rayrl.ray.workers import WorkerSupervisor
from tests.fake_ray import Call
from tests.unit.test_supervisors import World, chunk_stats

CHUNK = 64
"""Env steps per chunk (`World.workers`)."""


def start(world: World, workers: WorkerSupervisor, index: int) -> None:
    """Ray answers worker `index`'s readiness call: its process has started."""
    handle = workers.slots[index].handle
    handle.calls_to("identify")[0].ref.resolve(handle.identity)
    world.pump()


def deliver(world: World, worker: int, sample: Call) -> None:
    """The worker returns the chunk of `sample`, and the store takes it."""
    sample.refs[1].resolve(chunk_stats(worker, CHUNK))
    add = next(a for a in world.store.handle.calls_to("add") if a.args[0] is sample.refs[0])
    add.ref.resolve(CHUNK)
    world.pump()


def test_a_worker_is_asked_for_chunks_once_its_process_has_started_and_not_before():
    world = World(num_workers=2)
    workers = world.workers(max_chunks_in_flight=2)
    workers.request_chunks()
    for slot in workers.slots:
        assert slot.handle.calls_to("sample") == []
    assert world.store.handle.calls_to("add") == []
    # the dispatcher reports worker 0 ready: its first chunks are asked at once, not at the
    # driver's next round
    start(world, workers, 0)
    assert len(workers.slots[0].handle.calls_to("sample")) == 2
    assert len(world.store.handle.calls_to("add")) == 2
    workers.request_chunks()
    assert workers.slots[1].handle.calls_to("sample") == []


def test_a_worker_waiting_for_capacity_is_asked_nothing_until_it_starts():
    world = World(num_workers=2)
    workers = world.workers(max_chunks_in_flight=2)
    start(world, workers, 0)
    start(world, workers, 1)
    lost = workers.slots[1]
    world.unplaced.add("worker-1.1")  # its node is lost: no room for its replacement
    assert world.deaths.handle(lost.handle.died())
    world.clock.now = CAPACITY_NOTICE_S + 1
    workers.check_hangs()
    assert lost.waiting_for_capacity
    workers.request_chunks()
    assert lost.handle.calls_to("sample") == []
    world.unplaced.clear()  # capacity returns: it starts and is asked as usual
    start(world, workers, 1)
    assert len(lost.handle.calls_to("sample")) == 2


def test_the_budgets_last_chunks_are_asked_of_the_worker_that_runs():
    """One of two workers waits for capacity forever: the other samples the whole rest of
    the budget (a chunk asked of the waiting one would stay unsampled, holding the budget)."""
    chunks = 20
    world = World(num_workers=2)
    workers = world.workers(total_env_steps=chunks * CHUNK, max_chunks_in_flight=2)
    start(world, workers, 0)
    start(world, workers, 1)
    lost, running = workers.slots[1], workers.slots[0]
    world.unplaced.add("worker-1.1")
    assert world.deaths.handle(lost.handle.died())  # its chunks in flight die with it
    for _ in range(2 * chunks):  # the driver's rounds, bounded
        workers.request_chunks()
        asked = [c for c in running.handle.calls_to("sample") if not c.refs[1].done]
        if not asked:
            break
        deliver(world, 0, asked[0])
        world.clock.now += 1.0
        workers.check_hangs()
    assert world.counters.env_steps == chunks * CHUNK
    assert lost.handle.calls_to("sample") == []
    assert lost.handle.name == "worker-1.1"  # still waiting, never replaced again
