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


def watchdog(clock: Clock, contention: list[float], stopped: set[int], asked: list[int]):
    def is_stopped(pid: int) -> bool:
        asked.append(pid)
        return pid in stopped

    return Watchdog(clock, here=HERE, contention=lambda: contention[0], stopped=is_stopped)


def run_for(dog: Watchdog, clock: Clock, seconds: float) -> None:
    for _ in range(int(seconds / SAMPLE_S)):
        clock.now += SAMPLE_S
        dog.tick()


def test_a_starved_actor_has_its_timeout_stretched_and_a_stopped_one_does_not():
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


def test_a_machine_of_its_own_counts_its_monitors_contention_until_it_stops_answering():
    clock = Clock()
    dog = Watchdog(clock, here=HERE, contention=lambda: 1.0)  # starts no monitor
    far = ActorIdentity("c", "other-machine", 13)
    dog.watch(far)  # no monitor could be started: the wall clock counts there
    since = clock.now
    run_for(dog, clock, 4.0)
    assert dog.silent_s(since, 1.0, far) == pytest.approx(4.0)


def wait_until_stopped(pid: int) -> None:
    """SIGSTOP stops a process once it is next scheduled: on a busy machine, a while later."""
    deadline = time.monotonic() + 60
    while not host.process_stopped(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def busy_processes(count: int) -> list[subprocess.Popen]:
    loop = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="reads Linux's /proc")
def test_real_busy_processes_stretch_the_timeout_and_a_sigstopped_process_is_told_apart():
    """Three busy processes per core: a running process gets a third of a core or less,
    and fair seconds count at most about half the wall clock's; a process stopped with
    SIGSTOP is read as stopped and counts the wall clock's."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    loops = busy_processes(3 * host.usable_cores())
    try:
        os.kill(watched.pid, signal.SIGSTOP)
        wait_until_stopped(watched.pid)
        me = ray.util.get_node_ip_address()
        dog = Watchdog(here=me)
        since = time.monotonic()
        deadline = since + 4.0
        while time.monotonic() < deadline:
            dog.tick()
            time.sleep(0.1)
        wall = time.monotonic() - since
        timeout = wall / 2  # past on the wall clock, not in a third of a core's seconds
        frozen = ActorIdentity("d", me, watched.pid)
        assert dog.silent_s(since, timeout, frozen) == pytest.approx(wall, abs=0.5)
        os.kill(watched.pid, signal.SIGCONT)
        running = ActorIdentity("e", me, watched.pid)
        assert dog.silent_s(since, timeout, running) < 0.45 * wall
    finally:
        for process in [*loops, watched]:
            process.kill()
            process.wait()


def test_a_machine_monitor_actor_reports_a_stopped_process_on_its_machine(ray_cluster):
    """The driver's own machine seen as another one: its `MachineMonitor` (a real actor, as
    the run's factory makes it) tells the watchdog which process is stopped."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def start_monitor(address: str):
        return machine_monitor(ray.util.get_node_ip_address())  # the node that is there

    try:
        os.kill(watched.pid, signal.SIGSTOP)
        wait_until_stopped(watched.pid)
        dog = Watchdog(here="the-driver's-machine", start_monitor=start_monitor)
        far = ActorIdentity("f", "another-machine", watched.pid)
        dog.watch(far)
        since = time.monotonic()
        deadline = since + 120.0
        while time.monotonic() < deadline:
            dog.tick()
            if dog.machines["another-machine"].stopped:
                break
            time.sleep(0.1)
        assert dog.machines["another-machine"].stopped == {watched.pid}
        since = time.monotonic()
        time.sleep(1.1)  # past its timeout on the wall clock: hung, whatever the load there
        assert dog.silent_s(since, 1.0, far) > 1.0
        dog.close()
        assert not dog.machines
    finally:
        watched.kill()
        watched.wait()
