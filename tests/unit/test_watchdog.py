"""The watchdogs' seconds (`rayrl.ray.watchdog`): wall-clock seconds divided by the machine's
CPU contention, the wall clock's for a stopped process; first on a fake clock, then with
real busy processes and a real SIGSTOP, then through a real `MachineMonitor` actor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import ray

from rayrl import host
from rayrl.ray.factory import machine_monitor
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.watchdog import MAX_STRETCH, SAMPLE_S, FairClock, Watchdog

HERE = "driver-machine"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fair_seconds_are_wall_seconds_divided_by_the_contention_of_their_interval():
    clock = FairClock(0.0)
    clock.advance(10.0, 1.0)  # 10 s alone: 10
    clock.advance(40.0, 3.0)  # 30 s at a load three times the cores: 10
    clock.advance(50.0, 0.2)  # an idle machine counts as 1, never faster: 10
    assert clock.fair_at(10.0) == pytest.approx(10.0)
    assert clock.fair_at(25.0) == pytest.approx(15.0)  # within an interval, at its rate
    assert clock.fair_at(50.0) == pytest.approx(30.0)
    assert clock.fair_at(-5.0) == pytest.approx(-5.0)  # before the first sample: the wall's
    assert clock.fair_at(60.0) == pytest.approx(40.0)  # after the last: at its rate (1)
    clock.advance(70.0, 1000.0)  # capped
    assert clock.fair_at(70.0) - clock.fair_at(50.0) == pytest.approx(20.0 / MAX_STRETCH)


def watchdog(
    clock: Clock, contention: list[float], stopped: set[int], asked: list[int], waits=None
):
    """A watchdog on a fake machine: `waits` (pid -> its threads' run-queue waits, read when
    it asks) for the processes whose threads can be read, none by default (as on macOS)."""

    def is_stopped(pid: int) -> bool:
        asked.append(pid)
        return pid in stopped

    def thread_waits(pid: int):
        return None if waits is None or pid not in waits else dict(waits[pid])

    return Watchdog(
        clock,
        here=HERE,
        contention=lambda: contention[0],
        stopped=is_stopped,
        thread_waits=thread_waits,
    )


def run_for(dog: Watchdog, clock: Clock, seconds: float, waits=None, starved=None) -> None:
    """Tick every `SAMPLE_S` for `seconds`; each `starved` pid's first thread waits on a run
    queue for that share of each interval."""
    for _ in range(int(seconds / SAMPLE_S)):
        clock.now += SAMPLE_S
        for pid, share in (starved or {}).items():
            waits[pid][1] += share * SAMPLE_S
        dog.tick()


def test_unread_threads_count_the_machines_contention_and_a_stopped_process_the_wall():
    """As on macOS: the machine's load stretches the timeout; the OS's state of the process
    tells a stopped one, whose seconds count whole."""
    clock, contention, stopped, asked = Clock(), [3.0], set(), []
    dog = watchdog(clock, contention, stopped, asked)
    running, frozen = ActorIdentity("a", HERE, 11), ActorIdentity("b", HERE, 12)
    since = clock.now
    run_for(dog, clock, 9.0)
    # 9 s at a load of 6 on 2 cores: 3 s of the actor's share, not past a 5 s timeout
    assert dog.silent_s(since, 5.0, running) == pytest.approx(3.0)
    stopped.add(12)
    assert dog.silent_s(since, 5.0, frozen) == pytest.approx(9.0)  # the wall clock's
    assert dog.silent_s(since, 5.0, None) == pytest.approx(3.0)  # unknown: never "stopped"
    asked.clear()
    assert dog.silent_s(since, 10.0, frozen) == pytest.approx(3.0)  # the wall not past it
    assert asked == []  # the process's state is read only when it decides
    contention[0] = 1.0  # the load is gone: seconds count whole again
    run_for(dog, clock, 3.0)
    assert dog.silent_s(since, 100.0, running) == pytest.approx(6.0)


def test_a_process_whose_threads_are_read_counts_the_time_its_busiest_thread_could_run():
    """Linux: a thread that waits on a run queue two thirds of the time (a load of 6 on 2
    cores, or a lower priority than its neighbours) has a third of its seconds counted,
    whatever the machine's count of runnable threads says; one that waits on none (a
    deadlock, a process stopped with SIGSTOP) has all of them, as an idle thread does."""
    clock, contention, stopped, asked = Clock(), [1.0], set(), []
    waits = {21: {1: 0.0, 2: 0.0}, 22: {1: 0.0, 2: 0.0}}
    dog = watchdog(clock, contention, stopped, asked, waits)
    starved, stuck = ActorIdentity("s", HERE, 21), ActorIdentity("t", HERE, 22)
    dog.watch(starved)
    dog.watch(stuck)
    since = clock.now
    run_for(dog, clock, 9.0, waits, starved={21: 2 / 3})
    assert dog.silent_s(since, 5.0, starved) == pytest.approx(3.0)
    assert dog.silent_s(since, 5.0, stuck) == pytest.approx(9.0)
    assert asked == []  # read from its threads: its state is not needed
    waits[21][3] = 0.8 * SAMPLE_S  # a thread born since, waiting most of its life
    run_for(dog, clock, SAMPLE_S, waits)
    assert dog.silent_s(since, 5.0, starved) == pytest.approx(3.0 + 0.2 * SAMPLE_S)
    # a learner's stall, as of its answer: the seconds up to then, at the rates of then
    assert dog.silent_s(since, 5.0, starved, until=since + 9.0) == pytest.approx(3.0)


def test_a_machine_without_a_monitor_counts_the_wall_clock():
    clock = Clock()
    dog = Watchdog(clock, here=HERE, contention=lambda: 3.0)  # starts no monitor
    far = ActorIdentity("c", "other-machine", 13)
    dog.watch(far)
    since = clock.now
    run_for(dog, clock, 4.0)
    assert dog.silent_s(since, 1.0, far) == pytest.approx(4.0)


def wait_until_stopped(pid: int) -> None:
    """SIGSTOP stops a process once it is next scheduled: on a busy machine, a while later."""
    deadline = time.monotonic() + 60
    while not host.process_stopped(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def busy_processes(count: int, core: int) -> list[subprocess.Popen]:
    """`count` processes that spin on one core (Linux: its affinity)."""
    loop = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


@pytest.mark.skipif(
    host.thread_run_queue_waits(os.getpid()) is None, reason="reads Linux's scheduler statistics"
)
def test_real_busy_processes_stretch_the_timeout_and_a_sigstopped_process_counts_whole():
    """Three busy processes on one core beside a fourth, watched: it waits on a run queue
    about three quarters of the time, and about a quarter of its seconds count; a process
    stopped with SIGSTOP waits on none, and all of its seconds count."""
    core = min(os.sched_getaffinity(0))
    loops = busy_processes(3, core)
    busy = busy_processes(1, core)[0]
    frozen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dog = Watchdog(here="this-machine")
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        wait_until_stopped(frozen.pid)
        busy_actor = ActorIdentity("busy", "this-machine", busy.pid)
        frozen_actor = ActorIdentity("frozen", "this-machine", frozen.pid)
        dog.watch(busy_actor)
        dog.watch(frozen_actor)
        since = time.monotonic()
        tick_for(dog, 4.0)
        wall = time.monotonic() - since
        assert dog.silent_s(since, 1.0, frozen_actor) == pytest.approx(wall, abs=SAMPLE_S)
        assert dog.silent_s(since, 1.0, busy_actor) < 0.5 * wall
    finally:
        for process in [*loops, busy, frozen]:
            process.kill()
            process.wait()


def tick_for(dog: Watchdog, seconds: float, until=lambda: False) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        dog.tick()
        time.sleep(0.05)


def test_a_machine_monitor_actor_reads_its_machine_and_a_dead_one_leaves_the_wall_clock(
    ray_cluster,
):
    """The driver's own machine seen as another one: its `MachineMonitor` (a real actor, as
    the run's factory makes it) reads a stopped process there, whose seconds count whole;
    once the monitor is gone, that machine's seconds count the wall clock's."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dog = Watchdog(
        here="the-driver's-machine",
        start_monitor=lambda address: machine_monitor(ray.util.get_node_ip_address()),
    )
    try:
        os.kill(watched.pid, signal.SIGSTOP)
        wait_until_stopped(watched.pid)
        far = ActorIdentity("f", "another-machine", watched.pid)
        dog.watch(far)
        machine = dog.machines["another-machine"]
        tick_for(dog, 120.0, until=lambda: watched.pid in machine.processes)
        assert machine.stopped == {watched.pid}
        since = time.monotonic()
        tick_for(dog, 2.0)
        wall = time.monotonic() - since
        assert dog.silent_s(since, 1.0, far) == pytest.approx(wall, abs=SAMPLE_S)
        ray.kill(machine.monitor, no_restart=True)
        tick_for(dog, 120.0, until=lambda: machine.monitor is None)
        assert machine.monitor is None
        assert not machine.processes
        assert not machine.stopped
        since = time.monotonic()
        tick_for(dog, 1.0)
        assert dog.silent_s(since, 100.0, far) == pytest.approx(time.monotonic() - since, abs=0.1)
    finally:
        dog.close()
        watched.kill()
        watched.wait()
    assert not dog.machines
