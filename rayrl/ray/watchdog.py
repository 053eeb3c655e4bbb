"""How long a watched actor has gone without progress while it could make progress: what the
supervisors' timeouts count.

A timeout read off the wall clock takes a starved actor for a hung one. Where three times
as many threads want the cores as there are cores (a load of 6 on 2 cores), a CPU-bound
actor gets a third of a core, and a chunk, an update, an evaluation or a start-up takes
three times as long; replaced, its successor would be as slow, and the run would end for
want of restarts on a machine that was only busy. So the timeouts count *fair seconds*:
the seconds an actor's process could run. A second in which its busiest thread waited on a
run queue for a core (the time it wanted one while other processes had them: a busy
machine, a lower priority than its neighbours) counts only in part, at most `MAX_STRETCH`
times less. An actor that is given the CPU and makes no progress with it (a loop that never
ends), or that wants none (a deadlock, a call that never returns, a process stopped with
SIGSTOP or by a debugger: none of its threads waits on a run queue), is hung after its
timeout in fair seconds, which are then the wall clock's.

Where to read it, most exact first:
- Linux's scheduler statistics: each thread's time waiting on a run queue
  (`rayrl.host.thread_run_queue_waits`), read for every watched process every `SAMPLE_S`;
- elsewhere (macOS), or before a process is known (an actor starting): the machine's
  contention (threads that want a core, per core: `rayrl.host.cpu_contention`), and the
  wall clock's seconds for a process the OS reports stopped once they are past a timeout.

Which machine reads them: the driver reads its own machine (every actor of a local Ray, and
the actors of a cluster's nodes that share the driver's address). Another machine of a
cluster is read by a `MachineMonitor` actor there (it reserves no CPU and imports no
torch), asked every `SAMPLE_S`; while its answer is more than `MONITOR_LATE_S` late, or
after it failed (its node is gone or frozen), that machine's seconds count the wall clock's,
and a new monitor is tried every `MONITOR_RETRY_S`.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from rayrl import host
from rayrl.ray.identity import ActorIdentity

logger = logging.getLogger(__name__)

SAMPLE_S = 0.5
"""How often a machine and its watched processes are read: a change counts this much late."""
MAX_STRETCH = 10.0
"""The most a timeout is stretched: an actor given less than a tenth of the time it wanted
on a core is hung past ten times its timeout."""
HISTORY_S = 7200.0
"""How far back fair seconds are kept: past it (longer than any default timeout), a second
counts as a wall-clock second."""
MONITOR_LATE_S = 10.0
"""A `MachineMonitor` that has not answered for this long is taken as gone."""
MONITOR_RETRY_S = 30.0
"""How often a new monitor is tried on a machine whose monitor failed."""

ThreadWaits = dict[int, float]
"""Seconds each thread of a process has waited on a run queue since it started."""


class FairClock:
    """Fair seconds: wall-clock seconds since the clock began, each divided by the stretch
    read at the end of its interval. Kept as samples, so that the fair seconds between any
    two past moments can be read (a learner reports how long it has made no progress in
    wall-clock seconds)."""

    def __init__(self, now: float) -> None:
        self.walls = [now]
        self.fairs = [0.0]
        self.stretch = 1.0
        """The last stretch read (capped): the rate of the time since the last sample."""

    def copy(self) -> FairClock:
        clock = FairClock(0.0)
        clock.walls, clock.fairs, clock.stretch = list(self.walls), list(self.fairs), self.stretch
        return clock

    def advance(self, now: float, stretch: float) -> None:
        """Count the wall-clock seconds since the last sample at `stretch`."""
        self.stretch = min(max(stretch, 1.0), MAX_STRETCH)
        self.fairs.append(self.fair_at(now))
        self.walls.append(now)
        if now - self.walls[0] > 2 * HISTORY_S:  # forget the older half
            keep = bisect.bisect_left(self.walls, now - HISTORY_S)
            del self.walls[:keep], self.fairs[:keep]

    def due(self, now: float) -> bool:
        return now - self.walls[-1] >= SAMPLE_S

    def fair_at(self, wall: float) -> float:
        """The fair seconds at wall-clock time `wall`: between samples at the rate of the
        later one, after the last at the current stretch, before the first at 1."""
        walls, fairs = self.walls, self.fairs
        if wall >= walls[-1]:
            return fairs[-1] + (wall - walls[-1]) / self.stretch
        index = bisect.bisect_right(walls, wall)
        if index == 0:
            return fairs[0] - (walls[0] - wall)
        rate = (fairs[index] - fairs[index - 1]) / (walls[index] - walls[index - 1])
        return fairs[index - 1] + (wall - walls[index - 1]) * rate

    def between(self, since: float, until: float) -> float:
        return self.fair_at(until) - self.fair_at(since)


@dataclass
class _Process:
    """A watched process whose threads' run-queue waits can be read."""

    clock: FairClock
    waits: ThreadWaits
    read_at: float

    def advance(self, now: float, waits: ThreadWaits) -> None:
        """Count the seconds since the last reading: less the most that one thread waited
        on a run queue (a thread born since counts all its wait)."""
        elapsed = now - self.read_at
        waited = max((wait - self.waits.get(thread, 0.0) for thread, wait in waits.items()))
        could_run = max(elapsed - min(max(waited, 0.0), elapsed), elapsed / MAX_STRETCH)
        self.clock.advance(now, elapsed / could_run if could_run > 0 else 1.0)
        self.waits, self.read_at = waits, now


class MachineMonitor:
    """On another machine of the cluster: what the watchdog reads on the driver's."""

    def look(self, pids: list[int]) -> tuple[float, list[int], dict[int, ThreadWaits | None]]:
        """The machine's contention, which of `pids` the OS reports stopped, and each one's
        threads' run-queue waits."""
        return (
            host.cpu_contention(),
            [pid for pid in pids if host.process_stopped(pid)],
            {pid: host.thread_run_queue_waits(pid) for pid in pids},
        )


@dataclass
class _Machine:
    clock: FairClock
    """Its fair seconds by its contention: for a process not read on its own."""
    processes: dict[int, _Process] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    """The watched processes there."""
    stopped: set[int] = field(default_factory=set)
    """Those the OS reported stopped, at the last reading (another machine's)."""
    monitor: Any = None
    """Another machine's `MachineMonitor` (None on the driver's, or while there is none)."""
    asked: Any = None
    asked_at = 0.0
    retry_at = 0.0

    def read(self, now: float, pid: int, waits: ThreadWaits | None) -> None:
        """Count `pid`'s seconds since its last reading; a process whose threads cannot be
        read counts the machine's."""
        process = self.processes.get(pid)
        if waits is None:
            self.processes.pop(pid, None)
        elif process is None:  # from now on; before, as the machine's
            self.processes[pid] = _Process(self.clock.copy(), waits, now)
        else:
            process.advance(now, waits)

    def gone_quiet(self) -> None:
        """Its readings stopped coming: its seconds count the wall clock's from now on."""
        self.processes.clear()
        self.stopped.clear()
        self.clock.stretch = 1.0


class Watchdog:
    """The fair seconds of every watched actor (see the module's docstring); `tick` reads
    them, once per round of the driver's loop."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        here: str | None = None,
        contention: Callable[[], float] = host.cpu_contention,
        stopped: Callable[[int], bool | None] = host.process_stopped,
        thread_waits: Callable[[int], ThreadWaits | None] = host.thread_run_queue_waits,
        start_monitor: Callable[[str], Any] = lambda address: None,
    ) -> None:
        """`here`: the driver's machine's address (Ray's, by default, once connected);
        `start_monitor(address)`: a `MachineMonitor` actor on that machine, or None (the
        default: on other machines than the driver's, the wall clock counts)."""
        self.clock = clock
        self.here = here
        self.contention = contention
        self.stopped = stopped
        self.thread_waits = thread_waits
        self.start_monitor = start_monitor
        self.machines: dict[str, _Machine] = {}
        self.local = _Machine(FairClock(clock()))

    def watch(self, actor: ActorIdentity) -> None:
        """Read `actor`'s process from now on (its supervisor has learned it)."""
        machine = self._machine(actor)
        machine.pids.add(actor.pid)
        if machine is self.local:
            machine.read(self.clock(), actor.pid, self.thread_waits(actor.pid))
        elif machine.monitor is None:
            self._start_monitor(actor.node_ip, machine)

    def tick(self) -> None:
        now = self.clock()
        if self.local.clock.due(now):
            self.local.clock.advance(now, self.contention())
            for pid in self.local.pids:
                self.local.read(now, pid, self.thread_waits(pid))
        for address, machine in self.machines.items():
            self._ask(address, machine, now)

    def silent_s(
        self,
        since: float,
        timeout_s: float,
        actor: ActorIdentity | None,
        until: float | None = None,
    ) -> float:
        """The seconds from `since` to `until` (now by default; times on `clock`) that count
        against `timeout_s` for `actor` (None: not yet known, counted as the driver's
        machine's): its process's fair seconds where its threads are read; else its
        machine's, or the wall clock's when they are past `timeout_s` and the process is
        stopped now."""
        now = self.clock() if until is None else until
        machine = self.local if actor is None else self._machine(actor)
        process = None if actor is None else machine.processes.get(actor.pid)
        if process is not None:
            return process.clock.between(since, now)
        fair = machine.clock.between(since, now)
        if fair > timeout_s or now - since <= timeout_s or actor is None:
            return fair
        if machine is self.local:
            stopped = bool(self.stopped(actor.pid))
        else:
            stopped = actor.pid in machine.stopped
        return now - since if stopped else fair

    def close(self) -> None:
        """Kill the monitors (Ray may be gone already)."""
        machines, self.machines = list(self.machines.values()), {}
        for machine in machines:
            if machine.monitor is not None:
                try:
                    ray.kill(machine.monitor, no_restart=True)
                except Exception as error:
                    logger.debug("a machine monitor could not be killed: %s", error)

    def _machine(self, actor: ActorIdentity) -> _Machine:
        if self.here is None:
            self.here = ray.util.get_node_ip_address()
        if actor.node_ip == self.here:
            return self.local
        machine = self.machines.get(actor.node_ip)
        if machine is None:
            machine = self.machines[actor.node_ip] = _Machine(FairClock(self.clock()))
        return machine

    def _start_monitor(self, address: str, machine: _Machine) -> None:
        machine.retry_at = self.clock() + MONITOR_RETRY_S
        try:
            machine.monitor = self.start_monitor(address)
        except Exception as error:
            logger.info(
                "no machine monitor on %s (%s): its actors' timeouts count the wall clock's",
                address,
                error,
            )

    def _ask(self, address: str, machine: _Machine, now: float) -> None:
        """Take the monitor's answer if it has come; ask again when due; count the wall
        clock's seconds while it is late or gone."""
        if machine.asked is not None:
            ready, _ = ray.wait([machine.asked], timeout=0)
            if ready:
                self._take_answer(machine, now)
            elif now - machine.asked_at > MONITOR_LATE_S:
                machine.gone_quiet()
                if machine.clock.due(now):
                    machine.clock.advance(now, 1.0)
                return
        if machine.monitor is None:
            if machine.pids and now >= machine.retry_at:
                self._start_monitor(address, machine)
            if machine.clock.due(now):
                machine.clock.advance(now, 1.0)
            return
        if machine.clock.due(now):
            machine.asked = machine.monitor.look.remote(sorted(machine.pids))
            machine.asked_at = now

    def _take_answer(self, machine: _Machine, now: float) -> None:
        asked, machine.asked = machine.asked, None
        try:
            contention, stopped, waits = ray.get(asked)
        except ray.exceptions.RayError as error:  # its machine is gone, or it died
            logger.debug("a machine monitor did not answer: %s", error)
            machine.monitor = None
            machine.gone_quiet()
            return
        machine.clock.advance(now, contention)
        machine.stopped = set(stopped)
        for pid, thread_waits in waits.items():
            machine.read(now, pid, thread_waits)
