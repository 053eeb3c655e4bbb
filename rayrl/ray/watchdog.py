"""How long a watched actor has gone without progress while it could make progress: what the
supervisors' timeouts count.

A timeout read off the wall clock takes a starved actor for a hung one. Where three times
as many threads want the cores as there are cores (a load of 6 on 2 cores), a CPU-bound
actor gets a third of a core, and a chunk, an update, an evaluation or a start-up takes
three times as long; replaced, its successor would be as slow, and the run would end for
want of restarts on a machine that was only busy. So the timeouts count *fair seconds*:
each wall-clock second divided by the CPU contention of the actor's machine at the time
(threads that want a core, per core, at least 1: `rayrl.host.cpu_contention`), at most
`MAX_STRETCH` times fewer. An actor that is given its share of the CPU and makes no progress
with it (a loop that never ends, a deadlock, a call that never returns) is hung after its
timeout in fair seconds.

A process that the OS reports stopped (SIGSTOP, a debugger) gets no CPU however idle the
machine: once the wall clock is past a timeout, the watched process's state is read, and a
stopped one is hung then, within its configured time at any load.

The signals, by machine:
- the driver's machine (every actor of a local Ray, and the actors of a cluster's nodes
  that share the driver's address): the driver reads the contention at every round of its
  loop (at most every `SAMPLE_S`) and a process's state from the OS;
- another machine: a `MachineMonitor` actor there (it reserves no CPU and imports no torch)
  answers the same two readings, asked every `SAMPLE_S`; until its first answer, or while
  it does not answer, the last contention it answered counts (1 before any: the wall
  clock), and a process there is never taken for stopped.
Ray's cluster tools give the load of a node only through the dashboard (`ray[default]`,
optional here) and a process's state not at all, hence the monitor.
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
"""How often a machine's contention is read: a change in load counts this much late."""
MAX_STRETCH = 10.0
"""The most a timeout is stretched: an actor given less than a tenth of a core is hung past
ten times its timeout (a machine's count of runnable threads can also take in a container's
neighbours, which do not share its cores)."""
HISTORY_S = 7200.0
"""How far back fair seconds are kept: past it (longer than any default timeout), a second
counts as a wall-clock second."""


class FairClock:
    """One machine's fair seconds: the wall-clock seconds since the clock began, each divided
    by the contention read at the end of its `SAMPLE_S` interval. Kept as samples, so that
    the fair seconds since any past moment can be read (a learner reports how long it has
    made no progress in wall-clock seconds)."""

    def __init__(self, now: float) -> None:
        self.walls = [now]
        self.fairs = [0.0]
        self.stretch = 1.0
        """The last contention read (capped): the rate of the time since the last sample."""

    def advance(self, now: float, contention: float) -> None:
        """Count the wall-clock seconds since the last sample at `contention`."""
        self.stretch = min(max(contention, 1.0), MAX_STRETCH)
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


class MachineMonitor:
    """On another machine of the cluster: its contention, and which of the watched
    processes the OS there reports stopped."""

    def look(self, pids: list[int]) -> tuple[float, list[int]]:
        return host.cpu_contention(), [pid for pid in pids if host.process_stopped(pid)]


@dataclass
class _Machine:
    clock: FairClock
    monitor: Any = None
    """Another machine's `MachineMonitor` (None: the driver's machine)."""
    asked: Any = None
    """The monitor's answer under way."""
    pids: set[int] = field(default_factory=set)
    stopped: set[int] = field(default_factory=set)
    """What the monitor last answered."""


class Watchdog:
    """The fair seconds of every machine that runs a watched actor (see the module's
    docstring); `tick` keeps them, once per round of the driver's loop."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        here: str | None = None,
        contention: Callable[[], float] = host.cpu_contention,
        stopped: Callable[[int], bool | None] = host.process_stopped,
        start_monitor: Callable[[str], Any] = lambda address: None,
    ) -> None:
        """`here`: the driver's machine's address (Ray's, by default, once connected);
        `start_monitor(address)`: a `MachineMonitor` actor on that machine, or None (the
        default: on other machines than the driver's, the wall clock counts)."""
        self.clock = clock
        self.here = here
        self.contention = contention
        self.stopped = stopped
        self.start_monitor = start_monitor
        self.machines: dict[str, _Machine] = {}
        self.local = _Machine(FairClock(clock()))

    def watch(self, actor: ActorIdentity) -> None:
        """Read the state of `actor`'s process from now on (its supervisor has learned it)."""
        machine = self._machine(actor)
        if machine.monitor is None and machine is not self.local:
            machine.monitor = self.start_monitor(actor.node_ip)
        machine.pids.add(actor.pid)

    def tick(self) -> None:
        now = self.clock()
        if self.local.clock.due(now):
            self.local.clock.advance(now, self.contention())
        for machine in self.machines.values():
            self._ask(machine, now)

    def silent_s(
        self,
        since: float,
        timeout_s: float,
        actor: ActorIdentity | None,
        until: float | None = None,
    ) -> float:
        """The seconds from `since` to `until` (now by default; times on `clock`) that count
        against `timeout_s` for `actor` (None: not yet known, counted on the driver's
        machine): its machine's fair seconds, or the wall clock's when that is past
        `timeout_s` and its process is stopped (now)."""
        now = self.clock() if until is None else until
        machine = self.local if actor is None else self._machine(actor)
        fair = machine.clock.fair_at(now) - machine.clock.fair_at(since)
        wall = now - since
        if fair > timeout_s or wall <= timeout_s or actor is None:
            return fair
        if machine is self.local:
            stopped = bool(self.stopped(actor.pid))
        else:
            stopped = actor.pid in machine.stopped
        return wall if stopped else fair

    def close(self) -> None:
        """Kill the monitors."""
        for machine in self.machines.values():
            if machine.monitor is not None:
                ray.kill(machine.monitor, no_restart=True)
        self.machines.clear()

    def _machine(self, actor: ActorIdentity) -> _Machine:
        if self.here is None:
            self.here = ray.util.get_node_ip_address()
        if actor.node_ip == self.here:
            return self.local
        machine = self.machines.get(actor.node_ip)
        if machine is None:
            machine = self.machines[actor.node_ip] = _Machine(FairClock(self.clock()))
        return machine

    def _ask(self, machine: _Machine, now: float) -> None:
        """Take the monitor's answer if it has come; ask again when due."""
        if machine.asked is not None:
            ready, _ = ray.wait([machine.asked], timeout=0)
            if not ready:
                return
            try:
                contention, stopped = ray.get(machine.asked)
            except ray.exceptions.RayError as error:  # its machine is gone, or it died
                logger.debug("a machine monitor did not answer: %s", error)
                machine.monitor = None
            else:
                machine.clock.advance(now, contention)
                machine.stopped = set(stopped)
            machine.asked = None
        if machine.monitor is not None and machine.clock.due(now):
            machine.asked = machine.monitor.look.remote(sorted(machine.pids))
