"""Each supervisor of the Ray runtime with fake actor handles: what it asks its actors for,
and what it does when they answer, fail, die or hang."""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rayrl.config import FaultsConfig, WorkersConfig
from rayrl.contract import StoreKind
from rayrl.core import ChunkStats, EvalResult, SamplingPace, StoreStats
from rayrl.errors import RunFailedError
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Deaths, Dispatcher
from rayrl.ray.evaluator import EvaluatorSupervisor
from rayrl.ray.factory import CAPACITY_NOTICE_S, ActorFactory
from rayrl.ray.learner_service import LearnerPulse, LearnerReport, LearnerStart
from rayrl.ray.learners import CALLS_IN_FLIGHT, LearnerSupervisor
from rayrl.ray.probe import PROBE_INTERVAL_S
from rayrl.ray.store import StoreSupervisor
from rayrl.ray.workers import WorkerSupervisor
from rayrl.run_metrics import RunMetrics
from rayrl.run_writer import RunWriter
from rayrl.session import Counters
from tests.fake_ray import FakeFactory, FakeRay, fake_watchdog, task_error

KIND = StoreKind(namespace="replay", items="transitions", drops_stale=False)


class RecordingWriter(RunWriter):
    """The run writer, with the failed writes it was told of."""

    def __init__(self) -> None:
        super().__init__(max_errors=100)
        self.failures: list[str] = []

    def failed(self, kind: str, what: str, error: BaseException) -> None:
        self.failures.append(what)
        super().failed(kind, what, error)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """A dispatcher over fake references, a fake factory, and a started store supervisor."""

    num_workers: int = 2
    num_learners: int = 1
    restore: Path | None = None
    clock: Clock = field(default_factory=Clock)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    unplaced: set = field(default_factory=set)
    """Names of the fake actors Ray has no process for (they wait for capacity)."""
    placement_known: bool = True
    """Whether Ray's actor table can be read (`rayrl.compat`); else no actor's placement is
    known."""
    starved: bool = False
    """Every actor's process gets a third of the time it wants on a core (`fake_watchdog`)."""
    store_started: bool = True
    """The store's constructor has finished (its `identify` answered)."""

    def __post_init__(self) -> None:
        self.dispatcher = Dispatcher(wait=FakeRay.wait, get=FakeRay.get)
        self.deaths = Deaths()
        self.factory = FakeFactory(num_learners=self.num_learners)
        self.metrics = RunMetrics(self.num_workers, KIND)
        self.counters = Counters()
        self.context = SupervisorContext(
            self.factory,
            self.dispatcher,
            self.deaths,
            self.faults,
            self.counters,
            self.metrics,
            clock=self.clock,
            placed=self.placed,
            watchdog=fake_watchdog(self.clock, self.starved),
        )
        self.weights = self.context.weights
        self.writer = RecordingWriter()
        self.supervisors: list = []
        self.store = self.supervise(
            StoreSupervisor(self.context, KIND, self.writer, lambda: self.restore)
        )
        self.store.start()
        if self.store_started:
            self.ready(self.store.handle)

    def supervise(self, supervisor):
        """Route deaths to `supervisor` too, as the driver does for the four it makes."""
        self.supervisors.append(supervisor)
        self.deaths.route_to(*self.supervisors)
        return supervisor

    @property
    def save_failures(self) -> list[str]:
        return self.writer.failures

    def ready(self, actor) -> None:
        """The actor's constructor finishes."""
        actor.calls_to("identify")[0].ref.resolve(actor.identity)
        self.pump()

    def placed(self, handle) -> bool | None:
        if not self.placement_known:
            return None
        return handle.name not in self.unplaced

    def pump(self) -> None:
        """A round of the driver's loop: dispatch what has resolved, read the processes."""
        self.dispatcher.poll(0.0)
        self.context.watchdog.tick()

    def workers(
        self,
        total_env_steps: int = 10**9,
        pace: SamplingPace | None = None,
        starts_trained: bool = False,
        **settings,
    ) -> WorkerSupervisor:
        config = WorkersConfig(num_workers=self.num_workers, **settings)
        supervisor = WorkerSupervisor(
            self.context,
            self.store,
            config,
            chunk_env_steps=64,
            total_env_steps=total_env_steps,
            pace=pace,
            starts_trained=starts_trained,
        )
        self.supervise(supervisor).start()
        return supervisor

    def start(self, workers: WorkerSupervisor) -> None:
        """Ray answers every worker's readiness call: their processes have started (only
        then are they asked for chunks)."""
        for slot in workers.slots:
            slot.handle.calls_to("identify")[0].ref.resolve(slot.handle.identity)
        self.pump()


def chunk_stats(worker: int, steps: int = 64) -> ChunkStats:
    return ChunkStats(worker, steps, [10.0], [10], policy_version=0)


def answer(actor, method: str, value=None) -> int:
    """Answer every call to `method` the actor has not answered yet; returns how many."""
    calls = [call for call in actor.calls_to(method) if not call.ref.done]
    for call in calls:
        call.ref.resolve(value)
    return len(calls)


# ---- workers ---------------------------------------------------------------------------------


def test_chunks_that_return_after_the_stop_do_not_move_the_runs_count():
    """The stopped store drops them: counting them would put the run's count past the final
    checkpoint's and its replay's, and the end would say the checkpoint is missing."""
    world = World()
    workers = world.workers(max_chunks_in_flight=2)
    world.start(workers)
    workers.request_chunks()
    first, second = workers.slots[0].handle.calls_to("sample")
    first.refs[1].resolve(chunk_stats(0))
    world.pump()
    assert world.counters.env_steps == 64
    workers.stop()
    second.refs[1].resolve(chunk_stats(1))
    world.pump()
    assert world.counters.env_steps == 64


def test_each_worker_keeps_its_chunks_in_flight_and_sends_them_to_the_store():
    world = World()
    workers = world.workers(max_chunks_in_flight=2)
    world.start(workers)
    workers.request_chunks()
    for slot in workers.slots:
        assert len(slot.handle.calls_to("sample")) == 2
    adds = world.store.handle.calls_to("add")
    assert len(adds) == 4
    # the chunk goes to the store by reference, never through the driver
    chunk_refs = {call.refs[0] for slot in workers.slots for call in slot.handle.calls_to("sample")}
    assert {add.args[0] for add in adds} == chunk_refs

    workers.request_chunks()  # nothing more while both are in flight
    assert len(world.store.handle.calls_to("add")) == 4

    first = workers.slots[0].handle.calls_to("sample")[0]
    first.refs[1].resolve(chunk_stats(0))
    adds[0].ref.resolve(64 * 8)
    world.pump()
    assert world.counters.env_steps == 64
    assert world.metrics.inserted == 512
    workers.request_chunks()
    assert len(workers.slots[0].handle.calls_to("sample")) == 3


def test_no_chunk_is_asked_for_beyond_the_env_step_budget():
    world = World()
    workers = world.workers(total_env_steps=3 * 64, max_chunks_in_flight=2)
    world.start(workers)
    workers.request_chunks()
    samples = [call for slot in workers.slots for call in slot.handle.calls_to("sample")]
    assert len(samples) == 3  # 3 chunks of 64 steps make the budget: the fourth is not asked
    samples[0].refs[1].resolve(chunk_stats(0))
    world.pump()
    workers.request_chunks()  # 64 counted + 2 sampling: still the budget
    assert sum(len(slot.handle.calls_to("sample")) for slot in workers.slots) == 3
    # a chunk lost with its worker is asked for again
    dead = samples[1]
    owner = next(slot for slot in workers.slots if dead in slot.handle.calls_to("sample"))
    dead.refs[1].fail(owner.handle.died())
    world.pump()
    world.start(workers)  # the replacement
    assert len(owner.handle.calls_to("sample")) == 1


def sampled_chunks(workers: WorkerSupervisor) -> list:
    return [call for slot in workers.slots for call in slot.handle.calls_to("sample")]


def deliver(world: World, workers: WorkerSupervisor) -> None:
    """Every chunk being sampled is delivered to the store."""
    for slot in workers.slots:
        for call in slot.handle.calls_to("sample"):
            if not call.refs[1].done:
                call.refs[1].resolve(chunk_stats(slot.index))
    for add in world.store.handle.calls_to("add"):
        if not add.ref.done:
            add.ref.resolve(64)
    world.pump()


def publish_and_take(world: World, workers: WorkerSupervisor, info: str, version: int) -> None:
    """The learner publishes, and every worker takes the weights (once published, a worker
    samples only with published weights)."""
    world.weights.publish(info, version)
    workers.send_weights()
    for slot in workers.slots:
        answer(slot.handle, "set_weights")
    world.pump()


def paced_workers(num_workers: int, pace: SamplingPace, **settings) -> tuple:
    """Started workers under `pace`, asked for their first chunks."""
    world = World(num_workers=num_workers)
    workers = world.workers(pace=pace, **settings)
    world.start(workers)
    workers.request_chunks()
    return world, workers


def test_with_a_pace_workers_sample_the_next_update_only_once_weights_learned_the_last():
    """Two workers of one 64-step chunk each make one update (128 env steps); one update
    ahead, the workers sample two updates' worth, then one more per version published, and
    not further however many chunks they could have in flight."""
    world, workers = paced_workers(2, SamplingPace(128, updates_ahead=1), max_chunks_in_flight=2)
    assert len(sampled_chunks(workers)) == 4  # the first update's unrolls and the next's
    deliver(world, workers)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 4  # version 0 learned from nothing yet
    publish_and_take(world, workers, "v0", 0)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 4
    publish_and_take(world, workers, "v1", 1)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 6
    deliver(world, workers)
    publish_and_take(world, workers, "v3", 3)  # a publication may cover several updates
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 10


def test_a_paced_worker_samples_again_what_the_store_dropped_as_stale():
    """Unrolls the store drops as stale are never learned from: counted as sampled, they
    would hold the pace below a whole batch for good, the learner waiting for unrolls and
    the workers for the learner (an MPE run hung so, 95k env steps before its end, after a
    worker starved beside other runs sent a chunk 5 versions old). Once the store reports
    them dropped, that many env steps are sampled again."""
    pace = SamplingPace(128, updates_ahead=1, steps_per_unroll=16)  # 4 unrolls per chunk
    world, workers = paced_workers(2, pace, max_chunks_in_flight=2)
    assert len(sampled_chunks(workers)) == 4
    deliver(world, workers)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 4
    world.store.latest = StoreStats(size=12, inserted=16, sampled=0, dropped=4)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 5  # one more 64-step chunk


def test_a_paced_chunk_may_overshoot_the_lead_so_that_the_learner_gets_a_whole_batch():
    _, workers = paced_workers(1, SamplingPace(96, updates_ahead=0), max_chunks_in_flight=4)
    assert len(sampled_chunks(workers)) == 2  # 128 env steps sampled for a 96-step update


def test_a_paced_worker_starts_its_next_chunk_once_the_weights_it_was_handed_are_in_use():
    """An unroll counts as acted by its oldest step's weights: begun before the new weights
    arrive, it would count the version before them. Unpaced workers do not wait."""
    world, workers = paced_workers(2, SamplingPace(128, updates_ahead=0), max_chunks_in_flight=1)
    deliver(world, workers)
    world.weights.publish("v1", 1)
    workers.send_weights()
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 2  # the pace allows two more; the weights wait
    for index, expected in [(0, [2, 1]), (1, [2, 2])]:
        answer(workers.slots[index].handle, "set_weights")
        world.pump()
        assert [len(slot.handle.calls_to("sample")) for slot in workers.slots] == expected

    world = World(num_workers=1)
    unpaced = world.workers(max_chunks_in_flight=2)
    world.start(unpaced)
    publish_and_take(world, unpaced, "v1", 1)
    deliver(world, unpaced)
    world.weights.publish("v2", 2)
    unpaced.send_weights()
    unpaced.request_chunks()
    assert len(sampled_chunks(unpaced)) == 4


def test_a_resumed_runs_workers_sample_only_with_the_restored_weights():
    """Their own fresh weights would sample episodes of an untrained policy into the
    resumed run (counted in its budget, and in its first returns); waiting for a learner
    that has not published yet is not hanging."""
    world = World(num_workers=2)
    workers = world.workers(starts_trained=True, sample_timeout_s=10.0, max_chunks_in_flight=1)
    world.start(workers)
    workers.request_chunks()
    world.clock.now = 100.0
    workers.check_hangs()
    assert sampled_chunks(workers) == []
    assert [slot.incarnation for slot in workers.slots] == [0, 0]
    world.weights.publish("restored", 600)
    workers.send_weights()
    workers.request_chunks()
    assert sampled_chunks(workers) == []  # handed, not yet in use
    answer(workers.slots[0].handle, "set_weights")
    world.pump()
    assert [len(slot.handle.calls_to("sample")) for slot in workers.slots] == [1, 0]
    deliver(world, workers)
    world.clock.now = 111.0  # worker 1 never takes the weights it was handed at 100 s
    workers.check_hangs()
    assert [slot.incarnation for slot in workers.slots] == [0, 1]
    world.weights.publish("newer", 601)
    workers.send_weights()
    workers.request_chunks()  # later weights do not hold an unpaced worker back
    assert len(workers.slots[0].handle.calls_to("sample")) == 2


def test_once_weights_are_published_a_worker_samples_only_with_them():
    """In a new run too: the first workers act with their own fresh weights (as untrained
    as the learner's) until the learner publishes; after that a replacement's, or a late
    starter's, would be an untrained policy among trained ones."""
    world = World(num_workers=1)
    workers = world.workers(max_chunks_in_flight=1)
    world.start(workers)
    workers.request_chunks()
    slot = workers.slots[0]
    world.weights.publish("v5", 5)
    workers.send_weights()
    answer(slot.handle, "set_weights")
    world.pump()
    slot.handle.calls_to("sample")[0].refs[1].fail(slot.handle.died())
    world.pump()
    world.start(workers)  # the replacement's process starts, handed v5
    assert slot.incarnation == 1
    workers.request_chunks()
    assert slot.handle.calls_to("sample") == []
    answer(slot.handle, "set_weights")
    world.pump()
    assert len(slot.handle.calls_to("sample")) == 1

    world = World(num_workers=1)
    late = world.workers()
    world.weights.publish("v1", 1)
    late.send_weights()  # handed while its process starts
    world.start(late)
    assert sampled_chunks(late) == []
    answer(late.slots[0].handle, "set_weights")
    world.pump()
    assert len(sampled_chunks(late)) == 2


def test_a_paced_worker_that_takes_no_weights_is_replaced_as_hung():
    world, workers = paced_workers(1, SamplingPace(64, updates_ahead=0), sample_timeout_s=10.0)
    deliver(world, workers)
    world.clock.now = 100.0
    world.weights.publish("v1", 1)
    workers.send_weights()
    world.clock.now = 109.0
    workers.check_hangs()
    assert workers.slots[0].incarnation == 0
    world.clock.now = 111.0
    workers.check_hangs()
    assert workers.slots[0].incarnation == 1
    assert world.metrics.counters["worker/hangs"] == 1


def test_the_pace_counts_afresh_after_a_rollback_or_the_stores_loss():
    """Unrolls sampled before a restored learner's weights, or lost with the store, do not
    hold the workers back: without new ones the learner would never publish again."""
    world, workers = paced_workers(1, SamplingPace(64, updates_ahead=0), max_chunks_in_flight=2)
    deliver(world, workers)
    publish_and_take(world, workers, "v1", 1)
    workers.request_chunks()
    deliver(world, workers)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 2  # one update's worth per version
    world.weights.publish("v0-restored", 0, rollback=True)  # restored from scratch
    workers.send_weights()
    answer(workers.slots[0].handle, "set_weights")
    world.pump()
    assert len(sampled_chunks(workers)) == 3
    deliver(world, workers)
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 3
    old_store = world.store.handle
    assert world.deaths.handle(old_store.died())
    workers.request_chunks()
    assert len(sampled_chunks(workers)) == 4


def test_a_dead_worker_is_replaced_and_its_late_results_are_dropped():
    world = World()
    workers = world.workers(max_chunks_in_flight=2)
    world.start(workers)
    workers.request_chunks()
    world.weights.publish("weights-v3", 3)
    workers.send_weights()
    old = workers.slots[0].handle
    first, second = old.calls_to("sample")
    first.refs[1].fail(old.died())
    world.pump()
    slot = workers.slots[0]
    assert old.killed
    assert slot.handle is not old
    assert slot.incarnation == 1
    assert slot.handle.name == "worker-0.1"
    # the replacement gets the newest weights at once
    assert [c.args for c in slot.handle.calls_to("set_weights")] == [("weights-v3",)]
    # a late answer from the dead worker's other call is not counted
    second.refs[1].resolve(chunk_stats(0))
    world.pump()
    assert world.counters.env_steps == 0
    assert world.metrics.workers[0].restarts == 1
    world.start(workers)  # the replacement
    assert slot.handle.calls_to("sample") == []  # it samples with the weights it was handed
    answer(slot.handle, "set_weights")
    world.pump()
    assert len(slot.handle.calls_to("sample")) == 2


def test_a_worker_whose_sample_call_raises_is_replaced():
    world = World()
    workers = world.workers(max_chunks_in_flight=1)
    world.start(workers)
    workers.request_chunks()
    workers.slots[1].handle.calls_to("sample")[0].refs[1].fail(task_error("env crashed"))
    world.pump()
    assert workers.slots[1].incarnation == 1
    assert workers.slots[0].incarnation == 0


def test_a_dead_store_is_recreated_and_the_worker_goes_on():
    world = World()
    workers = world.workers(max_chunks_in_flight=1)
    world.start(workers)
    workers.request_chunks()
    old_store = world.store.handle
    world.store.latest = StoreStats(size=300, inserted=300, sampled=0)
    old_store.calls_to("add")[0].ref.fail(old_store.died())
    world.pump()
    assert old_store.killed
    assert world.store.handle is not old_store
    assert world.store.incarnation == 1
    assert workers.slots[0].incarnation == 0  # the worker was not at fault
    assert world.metrics.counters["replay/restarts"] == 1
    assert world.metrics.counters["replay/lost_transitions"] == 300
    workers.request_chunks()  # the freed slot sends its next chunk to the new store
    assert len(world.store.handle.calls_to("add")) == 1


def test_every_worker_sends_its_next_chunks_to_a_store_that_replaced_a_dead_one():
    """The store's death is often reported first by another call (the learner's): the adds
    still out to the dead store must free their workers' slots all the same."""
    world = World(num_workers=2)
    workers = world.workers(max_chunks_in_flight=2)
    world.start(workers)
    workers.request_chunks()
    old_store = world.store.handle
    assert world.deaths.handle(old_store.died())  # as the learner's train call reports it
    assert world.store.handle is not old_store
    for call in old_store.calls_to("add"):
        call.ref.fail(old_store.died())
    world.pump()
    assert [slot.in_flight for slot in workers.slots] == [0, 0]
    assert world.store.incarnation == 1  # one replacement, however many calls saw the death
    workers.request_chunks()
    assert len(world.store.handle.calls_to("add")) == 4


def test_a_hung_worker_is_killed_and_replaced_but_waiting_for_the_store_is_not_hanging():
    world = World()
    workers = world.workers(max_chunks_in_flight=1, sample_timeout_s=10.0)
    world.start(workers)
    # worker 1's sample returned, its chunk waits for the store's rate limit
    workers.slots[1].handle.calls_to("sample")[0].refs[1].resolve(chunk_stats(1))
    world.pump()
    world.clock.now = 11.0
    workers.check_hangs()
    assert workers.slots[0].incarnation == 1  # sampled for 11 s: hung
    assert workers.slots[1].incarnation == 0
    assert world.metrics.counters["worker/hangs"] == 1


def test_a_worker_restarts_with_backoff_until_its_limit_stops_the_run():
    world = World(num_workers=1, faults=FaultsConfig(worker_restarts=3, restart_backoff_s=2.0))
    workers = world.workers(max_chunks_in_flight=1)
    slot = workers.slots[0]

    def die() -> None:
        handle = slot.handle
        handle.calls_to("identify")[0].ref.fail(handle.died())
        world.pump()

    die()
    assert slot.incarnation == 1  # the first restart is immediate
    die()
    assert slot.incarnation == 1  # then 2 s, 4 s, ...
    assert slot.restart_at == 2.0
    workers.request_chunks()  # no chunk is asked of a slot waiting for its restart
    world.clock.now = 2.0
    workers.check_hangs()
    assert slot.incarnation == 2
    die()
    assert slot.restart_at == 2.0 + 4.0
    world.clock.now = 6.0
    workers.check_hangs()
    with pytest.raises(RunFailedError, match="worker 0 failed 4 times within 1800 s"):
        die()


def test_restarts_outside_the_window_do_not_count():
    faults = FaultsConfig(worker_restarts=1, restart_window_s=100.0)
    world = World(num_workers=1, faults=faults)
    workers = world.workers()
    slot = workers.slots[0]
    slot.handle.calls_to("identify")[0].ref.fail(slot.handle.died())
    world.pump()
    world.clock.now = 101.0
    slot.handle.calls_to("identify")[0].ref.fail(slot.handle.died())
    world.pump()
    assert slot.incarnation == 2


def test_an_error_in_a_workers_constructor_stops_the_run_with_it():
    world = World(num_workers=1)
    workers = world.workers()
    handle = workers.slots[0].handle
    handle.calls_to("identify")[0].ref.fail(handle.failed_to_start("gymnasium.error.Error: no ROM"))
    with pytest.raises(
        RunFailedError, match=r"worker 0 could not start: gymnasium\.error\.Error: no ROM"
    ):
        world.pump()


def test_training_goes_on_with_the_workers_that_remain_when_capacity_is_lost():
    faults = FaultsConfig(no_workers_timeout_s=600.0, start_timeout_s=100.0)
    world = World(num_workers=2, faults=faults)
    workers = world.workers(sample_timeout_s=2000.0)  # worker 0 samples from time 0
    world.start(workers)
    lost = workers.slots[1]
    world.unplaced.add("worker-1.1")  # its node goes away: no room for a replacement
    assert world.deaths.handle(lost.handle.died())
    assert lost.incarnation == 1
    world.clock.now = 1000.0  # far past the start timeout: it waits, it is not replaced
    workers.check_hangs()
    assert lost.incarnation == 1
    assert lost.waiting_for_capacity
    workers.request_chunks()
    assert len(workers.slots[0].handle.calls_to("sample")) == 2  # worker 0 goes on
    lost.handle.calls_to("identify")[0].ref.resolve(lost.handle.identity)  # capacity is back
    world.pump()
    assert lost.ready
    assert not lost.waiting_for_capacity


def test_the_run_stops_when_no_worker_has_run_for_the_configured_time():
    faults = FaultsConfig(no_workers_timeout_s=600.0)
    world = World(num_workers=1, faults=faults)
    workers = world.workers()
    world.unplaced.add("worker-0.0")
    world.clock.now = CAPACITY_NOTICE_S + 1
    workers.check_hangs()
    world.clock.now = 700.0
    with pytest.raises(RunFailedError, match="no rollout worker has run for"):
        workers.check_hangs()


def test_no_worker_is_replaced_once_the_run_is_ending():
    world = World(num_workers=1)
    workers = world.workers(max_chunks_in_flight=1)
    world.start(workers)
    workers.request_chunks()
    workers.stop()
    old = workers.slots[0].handle
    old.calls_to("sample")[0].refs[1].fail(old.died())
    world.pump()
    assert old.killed
    assert workers.slots[0].handle is old
    assert [a.name for a in world.factory.made if a.name.startswith("worker")] == ["worker-0.0"]


def test_weights_go_one_update_at_a_time_and_a_rollback_is_taken():
    world = World(num_workers=1)
    workers = world.workers()
    handle = workers.slots[0].handle
    world.weights.publish("v1", 1)
    workers.send_weights()
    world.weights.publish("v2", 2)
    workers.send_weights()  # v1 is still being applied: v2 waits
    assert [c.args for c in handle.calls_to("set_weights")] == [("v1",)]
    assert handle.calls_to("set_weights")[0].options == {"concurrency_group": "weights"}
    handle.calls_to("set_weights")[0].ref.resolve(None)
    world.pump()
    assert [c.args for c in handle.calls_to("set_weights")] == [("v1",), ("v2",)]
    handle.calls_to("set_weights")[1].ref.resolve(None)
    world.pump()
    world.weights.publish("v1-restored", 1)
    workers.send_weights()  # older than the worker's: ignored...
    assert len(handle.calls_to("set_weights")) == 2
    world.weights.publish("v1-restored", 1, rollback=True)
    workers.send_weights()  # ...unless the learner was restored
    assert handle.calls_to("set_weights")[-1].args == ("v1-restored",)


# ---- learners --------------------------------------------------------------------------------


@dataclass
class Learners:
    world: World
    restore_state: dict | None = None

    def __post_init__(self) -> None:
        world = self.world
        self.supervisor = world.supervise(
            LearnerSupervisor(
                world.context,
                world.store,
                sync_interval=20,
                restore_point=lambda: (LearnerStart(state=self.restore_state), "the checkpoint"),
            )
        )

    @property
    def published(self) -> tuple:
        """The newest published weights: the reference, its version, rollbacks so far."""
        weights = self.world.weights
        return weights.info, weights.version, weights.rollbacks


def report(total: int, updates: int = 20) -> LearnerReport:
    return LearnerReport(updates, total, update_s=0.5, wall_s=1.0, sampled=updates * 32)


def test_learners_start_publish_and_keep_their_train_calls_queued():
    world = World(num_learners=2)
    learners = Learners(world)
    supervisor = learners.supervisor
    supervisor.start(LearnerStart())
    first, second = supervisor.handles
    first.calls_to("placement")[0].ref.resolve({"node_id": "n", "device": "cpu"})
    weights = first.calls_to("weights")[0].ref.resolve("initial")
    world.pump()
    assert supervisor.placement == {"node_id": "n", "device": "cpu"}
    assert learners.published == (weights, 0, 0)

    supervisor.request_updates()
    assert len(first.calls_to("train")) == len(second.calls_to("train")) == CALLS_IN_FLIGHT
    assert first.calls_to("train")[0].args == (20,)
    report_ref, info_ref = first.calls_to("train")[0].refs
    report_ref.resolve(report(total=20))
    world.pump()
    assert world.counters.updates == 20
    assert learners.published == (info_ref, 20, 0)
    assert world.metrics.updates == 20
    supervisor.request_updates()
    assert len(first.calls_to("train")) == CALLS_IN_FLIGHT + 1


def test_a_dead_learner_is_restored_with_its_peers_from_the_restore_point():
    world = World(num_learners=2)
    learners = Learners(world, restore_state={"updates": 40})
    supervisor = learners.supervisor
    supervisor.start(LearnerStart())
    supervisor.request_updates()
    old = list(supervisor.handles)
    late = old[0].calls_to("train")[1].refs[0]
    old[1].calls_to("train")[0].refs[0].fail(old[1].died())
    world.pump()
    assert all(handle.killed for handle in old)
    assert [h.name for h in supervisor.handles] == ["learner-0.1", "learner-1.1"]
    assert supervisor.handles[0].start.state == {"updates": 40}
    assert world.counters.updates == 40
    assert world.metrics.counters["learner/restarts"] == 1
    late.resolve(report(total=80))  # the dead group's answer is not recorded
    world.pump()
    assert world.counters.updates == 40
    weights = supervisor.handles[0].calls_to("weights")[0].ref.resolve("restored")
    world.pump()
    assert learners.published == (weights, 40, 1)  # a rollback: workers may hold newer ones
    supervisor.request_updates()
    assert len(supervisor.handles[0].calls_to("train")) == CALLS_IN_FLIGHT


def test_learners_sample_from_a_recreated_store():
    world = World()
    learners = Learners(world)
    supervisor = learners.supervisor
    supervisor.start(LearnerStart())
    supervisor.request_updates()
    old_store = world.store.handle
    supervisor.handles[0].calls_to("train")[0].refs[0].fail(old_store.died())
    world.pump()
    assert world.store.handle is not old_store
    assert supervisor.handles[0].calls_to("set_store") == []  # told at its next round
    supervisor.watch()
    supervisor.request_updates()
    (call,) = supervisor.handles[0].calls_to("set_store")  # once
    assert call.args == (world.store.handle,)
    assert world.metrics.counters["learner/restarts"] == 0


def test_an_error_in_the_learners_constructor_stops_the_run_with_it():
    world = World()
    supervisor = Learners(world).supervisor
    supervisor.start(LearnerStart())
    learner = supervisor.first
    error = learner.failed_to_start("KeyError: 'optimizer'")
    learner.calls_to("placement")[0].ref.fail(error)
    with pytest.raises(RunFailedError, match="the learner could not start: KeyError: 'optimizer'"):
        world.pump()
    assert learner.killed
    assert not supervisor.handles


def test_a_learner_that_ray_cannot_place_is_said_once_and_stops_the_run_in_bounded_time(caplog):
    world = World(faults=FaultsConfig(start_timeout_s=300.0))
    supervisor = Learners(world).supervisor
    supervisor.start(LearnerStart())
    world.unplaced.add(supervisor.first.name)  # no node has the GPU it asks for
    with caplog.at_level(logging.WARNING, logger="rayrl.ray.learners"):
        for now in (CAPACITY_NOTICE_S - 1, CAPACITY_NOTICE_S + 1, 200.0, 299.0):
            world.clock.now = now
            supervisor.watch()
    (said,) = [record.getMessage() for record in caplog.records]
    assert said.startswith(f"the learner has waited {CAPACITY_NOTICE_S + 1:.0f} s for a node")
    assert "faults.start_timeout_s=300 s" in said
    world.clock.now = 301.0
    with pytest.raises(RunFailedError, match=r"learner\.num_gpus=0"):
        supervisor.watch()


def test_a_learner_not_started_where_placement_cannot_be_read_stops_the_run():
    """Without Ray's actor table (`rayrl.compat`), a learner that has not started is not
    restored: a restore would wait as long again, for ever, if no node has room for it."""
    world = World(faults=FaultsConfig(start_timeout_s=300.0), placement_known=False)
    supervisor = Learners(world).supervisor
    supervisor.start(LearnerStart())
    world.clock.now = 301.0
    with pytest.raises(RunFailedError, match="cannot be read: the checkpoints are kept"):
        supervisor.watch()
    assert supervisor.incarnation == 0


def test_the_waiting_notice_is_said_again_for_a_restored_learner_and_never_for_a_placed_one(
    caplog,
):
    """Said once per start: a restored group that Ray cannot place is said again; a learner
    placed but slow to start (a large replay refilling, a slow import) is not waiting for
    room, and is not said."""
    world = World(faults=FaultsConfig(start_timeout_s=300.0))
    supervisor = Learners(world, restore_state={"updates": 0}).supervisor

    def watch_until_notice_time() -> None:
        for after in (1.0, CAPACITY_NOTICE_S + 1, CAPACITY_NOTICE_S + 5):
            world.clock.now = supervisor.created_at + after
            supervisor.watch()

    def notices() -> int:
        return sum("has waited" in record.getMessage() for record in caplog.records)

    with caplog.at_level(logging.WARNING, logger="rayrl.ray.learners"):
        supervisor.start(LearnerStart())
        world.unplaced.add(supervisor.first.name)
        watch_until_notice_time()
        assert notices() == 1
        world.unplaced.clear()  # capacity comes: it starts
        supervisor.first.calls_to("placement")[0].ref.resolve({"node_id": "n", "device": "cpu"})
        world.pump()
        world.deaths.handle(supervisor.first.died())  # restored at once: placed, slow to start
        watch_until_notice_time()
        assert notices() == 1
        world.pump()  # (the restored learner has told its id)
        world.deaths.handle(supervisor.first.died())  # restored again, after a backoff...
        world.clock.now = supervisor.restore_at
        supervisor.watch()
        assert supervisor.incarnation == 2
        world.unplaced.add(supervisor.first.name)  # ...where Ray has no node for it
        watch_until_notice_time()
        assert notices() == 2


def training(world: World, num_learners: int = 1) -> Learners:
    """Learners that have started and have their train calls out."""
    learners = Learners(world)
    supervisor = learners.supervisor
    supervisor.start(LearnerStart())
    supervisor.first.calls_to("placement")[0].ref.resolve({"node_id": "n", "device": "cpu"})
    world.pump()
    supervisor.request_updates()
    return learners


WAITING = LearnerPulse(waiting_for_store=True, stalled_s=0.0)


@pytest.mark.parametrize("rate_limit", [False, True])
def test_a_learner_that_stops_answering_its_probe_is_restored_while_experience_arrives(
    rate_limit,
):
    """SIGSTOP (or a frozen machine) silences the learner's probe. Experience arrives all
    along without a replay ratio; with one, until the limiter holds the workers back (here
    at 80 s): neither must delay the restore past `faults.probe_timeout_s` (the stall
    timeout, for updates without progress, is not what judges a silent probe)."""
    world = World(faults=FaultsConfig(probe_timeout_s=100.0, stall_timeout_s=1000.0))
    workers = world.workers(max_chunks_in_flight=1)
    for slot in workers.slots:
        world.ready(slot.handle)
    supervisor = training(world).supervisor
    for second in range(0, 106):
        world.clock.now = float(second)
        if not rate_limit or second < 80:  # the store takes every chunk: experience arrives
            answer(world.store.handle, "add", 64)
            for slot in workers.slots:
                for call in slot.handle.calls_to("sample"):
                    if not call.refs[1].done:
                        call.refs[1].resolve(chunk_stats(slot.index))
        world.pump()
        workers.request_chunks()
        supervisor.watch()
        if second == 100:
            assert supervisor.incarnation == 0  # silent for exactly the timeout: not yet
    assert world.metrics.inserted > 0
    assert supervisor.incarnation == 1
    assert world.metrics.counters["learner/hangs"] == 1
    assert world.metrics.counters["learner/restarts"] == 1


def test_a_learner_waiting_on_a_saving_store_is_not_restored():
    """A save of a large replay holds the store's lock: the learner's train call waits for
    its batch, no update and no experience arrive, for longer than both hang timeouts. The
    learner answers its probe (waiting for the store) and the store its own: neither is
    replaced."""
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    supervisor = training(world).supervisor
    store = world.store.handle
    world.store.save(Path("replay.npz"), 1024)
    world.store.refresh_stats()  # waits behind the save
    for second in range(0, 600, 2):
        world.clock.now = float(second)
        supervisor.watch()
        world.store.watch()
        answer(supervisor.first, "pulse", WAITING)
        answer(store, "ping")
        world.pump()
    assert supervisor.incarnation == 0
    assert world.store.handle is store
    assert world.metrics.counters["learner/hangs"] == 0
    assert world.metrics.counters["replay/hangs"] == 0
    store.calls_to("save")[0].ref.resolve(5)  # the save ends: training goes on
    supervisor.first.calls_to("train")[0].refs[0].resolve(report(total=20))
    world.pump()
    assert world.counters.updates == 20


def test_a_learner_waiting_on_a_hung_store_is_not_restored_but_the_store_is_replaced():
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    supervisor = training(world).supervisor
    store = world.store.handle
    for second in range(0, 64):
        world.clock.now = float(second)
        supervisor.watch()
        world.store.watch()
        answer(supervisor.first, "pulse", WAITING)  # the store never answers its probe
        world.pump()
    assert store.killed
    assert world.metrics.counters["replay/hangs"] == 1
    assert supervisor.incarnation == 0
    assert world.metrics.counters["learner/hangs"] == 0
    # the learner samples from the new store
    assert supervisor.first.calls_to("set_store")[0].args == (world.store.handle,)


def test_a_learner_stuck_in_its_update_is_restored_though_it_answers_its_probe():
    """A CUDA kernel or an all-reduce that never returns: the process answers its probe
    (from another thread), but its training thread makes no progress: judged against
    `faults.stall_timeout_s`, which the probe timeout (far longer here) does not delay."""
    world = World(faults=FaultsConfig(probe_timeout_s=1000.0, stall_timeout_s=60.0))
    supervisor = training(world).supervisor
    learner = supervisor.first
    second = 0
    while supervisor.incarnation == 0 and second < 100:
        world.clock.now = float(second)
        supervisor.watch()
        answer(learner, "pulse", LearnerPulse(waiting_for_store=False, stalled_s=second))
        world.pump()
        second += 1
    # noticed once a pulse says more than the timeout, at most a probe interval late
    assert 60 < world.clock.now <= 61 + PROBE_INTERVAL_S
    assert learner.killed
    assert world.metrics.counters["learner/hangs"] == 1


def test_peers_waiting_in_their_all_reduce_for_a_learner_waiting_on_the_store_are_not_hung():
    world = World(num_learners=2, faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    supervisor = training(world).supervisor
    first, second = supervisor.handles
    for now in range(0, 300, 2):
        world.clock.now = float(now)
        supervisor.watch()
        answer(first, "pulse", LearnerPulse(False, stalled_s=float(now)))  # in all-reduce
        answer(second, "pulse", WAITING)
        world.pump()
    assert supervisor.incarnation == 0


def test_the_learners_probe_runs_beside_its_train_calls_and_a_probe_is_out_at_a_time():
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    supervisor = training(world).supervisor
    for now in (0.0, 1.0, 1.5):
        world.clock.now = now
        supervisor.watch()
    (probe,) = supervisor.first.calls_to("pulse")
    assert probe.options == {"concurrency_group": "probe"}
    probe.ref.resolve(WAITING)
    world.pump()
    world.clock.now = 1.5 + PROBE_INTERVAL_S
    supervisor.watch()
    assert len(supervisor.first.calls_to("pulse")) == 2


def test_an_error_in_the_update_itself_stops_the_run():
    world = World()
    supervisor = Learners(world).supervisor
    supervisor.start(LearnerStart())
    supervisor.request_updates()
    supervisor.handles[0].calls_to("train")[0].refs[0].fail(task_error("shape mismatch"))
    with pytest.raises(Exception, match="shape mismatch"):
        world.pump()


def test_an_error_in_the_first_publication_stops_the_run():
    """A resumed run's workers wait for the restored weights: an error getting them, ignored,
    would leave the run waiting for good."""
    world = World()
    supervisor = Learners(world).supervisor
    supervisor.start(LearnerStart())
    supervisor.handles[0].calls_to("weights")[0].ref.fail(task_error("cannot pickle"))
    with pytest.raises(Exception, match="cannot pickle"):
        world.pump()
    assert not world.weights.available


# ---- store -----------------------------------------------------------------------------------


def test_store_stats_are_asked_for_one_at_a_time():
    world = World()
    world.store.refresh_stats()
    world.store.refresh_stats()
    (call,) = world.store.handle.calls_to("stats")
    call.ref.resolve(StoreStats(size=5, inserted=5, sampled=0))
    world.pump()
    assert world.store.latest.size == 5
    world.store.refresh_stats()
    assert len(world.store.handle.calls_to("stats")) == 2


def test_a_recreated_store_is_refilled_from_the_saved_buffer(tmp_path):
    saved = tmp_path / "replay.npz"
    world = World(restore=saved)
    world.store.refresh_stats()
    old = world.store.handle
    old.calls_to("stats")[0].ref.fail(old.died())
    world.pump()
    assert world.factory.experience_restores == [saved, saved]
    assert world.store.incarnation == 1


def watch_store(world: World, until: float, answer_probes: bool = True) -> None:
    """Watch the store now and every second up to `until`, answering its probes as a
    running process would (unless told otherwise)."""
    while True:
        world.store.watch()
        if answer_probes and world.store.handle is not None:
            answer(world.store.handle, "ping")
        world.pump()
        if world.clock.now >= until:
            return
        world.clock.now = min(world.clock.now + 1.0, until)


def test_a_stats_call_kept_waiting_with_no_save_under_way_replaces_the_store():
    """The store answers its probe, but a call hangs holding its lock."""
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    world.store.refresh_stats()
    old = world.store.handle
    watch_store(world, 60.0)
    assert world.store.handle is old
    watch_store(world, 61.0)
    assert old.killed
    assert world.store.incarnation == 1
    assert world.metrics.counters["replay/hangs"] == 1


def test_a_store_writing_its_buffer_is_not_hung():
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    world.store.save(Path("replay.npz"), 1024)
    world.store.refresh_stats()  # waits behind the save, which holds the store's lock
    watch_store(world, 100.0)
    assert world.store.incarnation == 0
    world.store.handle.calls_to("save")[0].ref.resolve(5)
    world.pump()
    watch_store(world, 160.0)  # the stats call waits from the end of the save on
    assert world.store.incarnation == 0
    watch_store(world, 161.0)
    assert world.store.incarnation == 1


def test_a_store_that_stops_answering_its_probe_is_replaced_even_while_it_saves():
    """SIGSTOP, or a frozen machine, during a save: the save never ends, so it must not
    excuse the store."""
    world = World(faults=FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0))
    world.store.save(Path("replay.npz"), 1024)
    old = world.store.handle
    watch_store(world, 60.0, answer_probes=False)
    assert world.store.handle is old
    assert len(old.calls_to("ping")) == 1  # one probe out at a time
    watch_store(world, 61.0, answer_probes=False)
    assert old.killed
    assert world.metrics.counters["replay/hangs"] == 1
    assert not world.store.saving  # the killed actor's save will never answer


def test_a_starting_store_is_not_hung_its_calls_are_timed_from_its_start():
    """A new store refilled from a large saved buffer takes long to start: a stats call
    asked meanwhile waits for its constructor, which is not a hang."""
    faults = FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=60.0, start_timeout_s=900.0)
    world = World(faults=faults, store_started=False)
    world.store.refresh_stats()
    watch_store(world, 200.0)
    assert world.store.incarnation == 0
    assert world.store.handle.calls_to("ping") == []  # probed once it has started
    world.ready(world.store.handle)
    watch_store(world, 260.0)
    assert world.store.incarnation == 0
    watch_store(world, 261.0)
    assert world.store.incarnation == 1


def test_a_store_that_does_not_start_is_replaced():
    world = World(faults=FaultsConfig(start_timeout_s=300.0), store_started=False)
    old = world.store.handle
    watch_store(world, 300.0)
    assert world.store.handle is old
    watch_store(world, 301.0)
    assert old.killed
    assert world.metrics.counters["replay/restarts"] == 1


def test_an_error_in_the_stores_constructor_stops_the_run_with_it():
    world = World()
    world.store.refresh_stats()
    old = world.store.handle
    error = old.failed_to_start("ValueError: replay.npz holds 10 transitions of shape (4,)")
    old.calls_to("stats")[0].ref.fail(error)
    with pytest.raises(RunFailedError, match="the replay actor could not start: ValueError"):
        world.pump()


def test_a_store_death_that_surfaces_before_its_start_is_dealt_with_when_its_start_fails():
    """A worker's chunk fails to go into a store that died in its constructor before the
    store told its id: nobody owns that death yet, so it is left; the store's own start
    call then fails with it, which names the store, and the run stops with its error."""
    world = World(store_started=False)
    workers = world.workers()
    world.start(workers)
    store = world.store.handle
    error = store.failed_to_start("ValueError: replay.npz holds 10 transitions of shape (4,)")
    workers.slots[0].handle.calls_to("sample")[0].ref.resolve(("chunk", chunk_stats(0)))
    store.calls_to("add")[0].ref.fail(error)
    world.pump()  # not the workers' to deal with: nothing replaced
    assert workers.slots[0].incarnation == 0
    assert world.store.handle is store
    store.calls_to("identify")[0].ref.fail(error)
    with pytest.raises(RunFailedError, match="the replay actor could not start: ValueError"):
        world.pump()


def test_a_failed_save_is_a_write_error():
    world = World()
    world.store.save(Path("replay.npz"), 1024)
    world.store.handle.calls_to("save")[0].ref.fail(task_error("[Errno 28] No space left"))
    world.pump()
    assert world.save_failures == ["the replay to replay.npz"]
    assert not world.store.saving


# ---- evaluator -------------------------------------------------------------------------------


def evaluator(world: World, timeout_s: float = 30.0, started: bool = True) -> EvaluatorSupervisor:
    supervisor = world.supervise(EvaluatorSupervisor(world.context, timeout_s))
    supervisor.start()
    if started:
        world.ready(supervisor.handle)
    return supervisor


def test_an_evaluation_result_reaches_its_callback():
    world = World()
    supervisor = evaluator(world)
    results = []
    supervisor.request("weights", 10, False, results.append)
    assert supervisor.pending
    (call,) = supervisor.handle.calls_to("evaluate")
    assert call.args == ("weights", 10, False)
    result = EvalResult(returns=[1.0], lengths=[1])
    call.ref.resolve(result)
    world.pump()
    assert results == [result]
    assert not supervisor.pending


@pytest.mark.parametrize("failure", ["error", "death", "timeout"])
def test_a_failed_or_hung_evaluation_replaces_the_evaluator(failure):
    world = World()
    supervisor = evaluator(world, timeout_s=30.0)
    results = []
    supervisor.request("weights", 10, False, results.append)
    old = supervisor.handle
    call = old.calls_to("evaluate")[0]
    if failure == "error":
        call.ref.fail(task_error("env crashed"))
    elif failure == "death":
        call.ref.fail(old.died())
    else:
        world.clock.now = 31.0
        supervisor.check_hung()
    world.pump()
    assert old.killed
    assert supervisor.handle.name == "evaluator.1"
    assert not supervisor.pending
    assert world.metrics.counters["eval/failures"] == 1
    call.ref.resolve(EvalResult(returns=[1.0], lengths=[1]))  # too late: dropped
    world.pump()
    assert results == []


def test_an_evaluation_asked_of_a_starting_evaluator_is_timed_from_its_start():
    """The evaluator's process, a cluster's runtime env, the env's construction: an
    evaluation waits for its actor's start, which is not a hung evaluation."""
    world = World(faults=FaultsConfig(start_timeout_s=900.0))
    supervisor = evaluator(world, timeout_s=30.0, started=False)
    supervisor.request("weights", 10, False, lambda result: None)
    world.clock.now = 100.0
    supervisor.check_hung()
    assert supervisor.incarnation == 0
    world.ready(supervisor.handle)
    world.clock.now = 130.0
    supervisor.check_hung()
    assert supervisor.incarnation == 0
    world.clock.now = 131.0
    supervisor.check_hung()
    assert supervisor.incarnation == 1
    assert world.metrics.counters["eval/failures"] == 1


def test_an_evaluator_that_does_not_start_is_replaced():
    world = World(faults=FaultsConfig(start_timeout_s=300.0))
    supervisor = evaluator(world, started=False)
    old = supervisor.handle
    world.clock.now = 300.0
    supervisor.check_hung()
    assert supervisor.handle is old
    world.clock.now = 301.0
    supervisor.check_hung()
    assert old.killed
    assert supervisor.handle.name == "evaluator.1"


def test_an_error_in_the_evaluators_constructor_stops_the_run_with_it():
    world = World()
    supervisor = evaluator(world, started=False)
    error = supervisor.handle.failed_to_start("gymnasium.error.Error: no ROM")
    supervisor.handle.calls_to("identify")[0].ref.fail(error)
    with pytest.raises(RunFailedError, match="the evaluator could not start: gymnasium"):
        world.pump()


def test_the_fake_factory_makes_actors_the_way_the_real_one_does():
    """The supervisors' tests stand for the real runtime only while the fake keeps pace."""

    def parameters(function) -> list[str]:
        return [p for p in inspect.signature(function).parameters if p != "self"]

    for name in ("worker", "experience", "learners", "evaluator", "kill"):
        assert parameters(getattr(FakeFactory, name)) == parameters(getattr(ActorFactory, name))


def test_starved_actors_have_three_times_their_timeouts_where_a_third_of_their_seconds_count():
    """Each supervisor times its actor on the watchdog's seconds of that actor's process:
    starved to a third of a core (a load of 6 on 2 cores), every kind of actor is hung
    after three times its timeout, not before (on the wall clock it would be after one)."""
    faults = FaultsConfig(probe_timeout_s=60.0, stall_timeout_s=1000.0)
    world = World(num_workers=1, faults=faults, starved=True)
    workers = world.workers(max_chunks_in_flight=1, sample_timeout_s=10.0)
    world.start(workers)  # its sample call is out from time 0 and never returns
    learners = training(world).supervisor  # its probe is never answered
    evaluations = evaluator(world, timeout_s=30.0)
    evaluations.request("weights", 10, False, lambda result: None)  # never answered
    store = world.store.handle  # answers no probe
    hung_at = {}
    for second in range(0, 200):
        world.clock.now = float(second)
        world.pump()
        workers.check_hangs()
        learners.watch()
        world.store.watch()
        evaluations.check_hung()
        for name, replaced in [
            ("worker", workers.slots[0].incarnation > 0),
            ("learner", learners.incarnation > 0),
            ("store", world.store.handle is not store),
            ("evaluator", evaluations.incarnation > 0),
        ]:
            if replaced:
                hung_at.setdefault(name, second)
    # 3x the timeout, plus the probe's interval for the probed actors
    assert 30 < hung_at["worker"] <= 32
    assert 90 < hung_at["evaluator"] <= 92
    assert 180 < hung_at["learner"] <= 180 + 3 * PROBE_INTERVAL_S + 2
    assert 180 < hung_at["store"] <= 180 + 3 * PROBE_INTERVAL_S + 2
