"""The learners' supervisor: keeps the learner actor(s) training and publishing, and
restores them when one dies.

Every learner has `CALLS_IN_FLIGHT` `train` calls queued, so that it never waits for the
next one; they update in lockstep (all-reduced gradients), and the first learner's report
and `ModelInfo` are what the run records and publishes. The `ModelInfo` is a return value,
so this process owns it and it outlives a learner crash.

A dead learner (any of them) is restored, with its peers, from the latest checkpoint (or
the state the run was resumed from, or afresh before the first checkpoint): peers of a dead
learner cannot go on alone, since they all-reduce with it. Restores follow the learner's
restart budget (`faults.learner_restarts` within the window, with backoff). An error in the
learner's constructor (a checkpoint whose state does not load) and a learner that Ray
cannot place within `faults.start_timeout_s` (no node has the GPU it asks for) stop the
run: they would recur at every restore.

Hung learners are restored too. Whether updates or experience arrive says little about
that. A hung learner samples nothing, yet experience keeps arriving: without a replay ratio
(`algorithm.replay.samples_per_insert=null`) for the rest of the run, and with one until
the limiter holds the workers back (after the warm-up, and a tolerance of one sample
request over the ratio: long at a low ratio). The other way round, a healthy learner
returns no update while the store it samples from holds its lock to save a large replay,
and no experience arrives then either. So each learner is probed (`rayrl.ray.probe`): its
`pulse` runs in a concurrency group of its own and answers, beside a `train` call in
progress, what its training thread does. The group is hung when

- a learner leaves its probe unanswered for `faults.probe_timeout_s`: its process is stopped
  or frozen (SIGSTOP, a machine out of memory, a deadlock that holds the GIL); or
- no learner waits for the store and one has worked for `faults.stall_timeout_s` without
  progress: an update stuck in a CUDA kernel or an all-reduce that never returns (a probe
  thread still answers then). A learner waiting for the store is never hung, and neither
  are its peers, which wait for it in their all-reduce: the store may be saving, or itself
  hung, and then its supervisor replaces the store (`rayrl.ray.store`), not the learner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from rayrl.errors import RunFailedError
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Life, callee_died
from rayrl.ray.factory import CAPACITY_NOTICE_S, learners_not_placed, learners_waiting
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.learner_service import LearnerPulse, LearnerReport, LearnerStart
from rayrl.ray.probe import Probe
from rayrl.ray.restarts import RestartBudget, constructor_error, one_line
from rayrl.ray.store import StoreSupervisor

logger = logging.getLogger(__name__)

CALLS_IN_FLIGHT = 2


class LearnerSupervisor:
    def __init__(
        self,
        context: SupervisorContext,
        store: StoreSupervisor,
        *,
        sync_interval: int,
        restore_point: Callable[[], tuple[LearnerStart, str]],
    ) -> None:
        """The learners sample from `store`'s actor (and from its replacement once it has
        one); they publish new weights into `context.weights` every `sync_interval`
        updates; `restore_point()` gives where restored learners start from and a
        description of it for the log."""
        self.factory = context.factory
        self.dispatcher = context.dispatcher
        self.deaths = context.deaths
        self.store = store
        self.counters = context.counters
        self.metrics = context.metrics
        self.weights_out = context.weights
        self.sync_interval = sync_interval
        self.restore_point = restore_point
        self.clock = context.clock
        self.watchdog = context.watchdog
        self.placed = context.placed
        self.faults = faults = context.faults
        self.restarts = RestartBudget.of("the learner", faults.learner_restarts, faults, self.clock)
        self.handles: list[Any] = []
        """The running learners (none while a restore waits)."""
        self.actor_ids: list[str | None] = []
        """Each running learner's Ray id, once it has answered `identify` (or failed to)."""
        self.processes: list[ActorIdentity | None] = []
        """Each running learner's process, once it has answered `identify`."""
        self.started = False
        """The first learner has answered (its constructor finished)."""
        self.created_at = 0.0
        self.waiting_said = False
        """That the learner waits for room on the cluster has been said (once per start)."""
        self.probes: list[Probe] = []
        self.pulses: list[tuple[LearnerPulse, float] | None] = []
        """Each running learner's probe, and its latest answer with when it came."""
        self.restore_at: float | None = None
        """When a restore is due (it backs off)."""
        self.life = Life()
        self.incarnation = 0
        """Numbers the actors' names; `life` guards their calls."""
        self.calls = 0
        """`train` calls of the first learner not yet returned."""
        self.stopped = False
        self.placement: dict[str, str] | None = None
        """Where the first learner runs (its node and torch device), once it has started."""
        self._store_in_use: Any = None
        """The store actor the running learners sample from."""

    @property
    def first(self) -> Any:
        """The first learner: it publishes weights and answers for the group's state."""
        return self.handles[0]

    def start(self, start: LearnerStart, rollback: bool = False) -> None:
        self._store_in_use = self.store.handle
        self.handles = self.factory.learners(self._store_in_use, start, self.incarnation)
        self.probes = [Probe(self.dispatcher, self.clock) for _ in self.handles]
        self.pulses = [None] * len(self.handles)
        self.actor_ids = [None] * len(self.handles)
        self.processes = [None] * len(self.handles)
        for rank, handle in enumerate(self.handles):
            self.dispatcher.submit(
                handle.identify.remote(),
                partial(self._on_identified, rank),
                partial(self._on_identify_error, rank),
                self.life,
            )
        self.started = False
        self.created_at = self.clock()
        self.waiting_said = False
        self.dispatcher.submit(
            self.first.placement.remote(), self._on_started, self._on_error, self.life
        )
        # publish the initial (or restored) weights once they exist, so that no worker
        # queues a call behind an object still being made (a new run's workers act with
        # their own initial weights until then, a resumed run's wait for these: an error
        # here is the learner's death, or one that stops the run)
        version = self.counters.updates
        weights = self.first.weights.remote()
        self.dispatcher.submit(
            weights,
            lambda _: self.weights_out.publish(weights, version, rollback=rollback),
            self._on_error,
            self.life,
        )

    def stop(self) -> None:
        """Ask for no more updates (calls out still return)."""
        self.stopped = True

    @property
    def busy(self) -> bool:
        """`train` calls are under way (calls queued on a learner that has not started, and
        may never, are not)."""
        return self.started and self.calls > 0

    def _on_identified(self, rank: int, identity: ActorIdentity) -> None:
        self.actor_ids[rank], self.processes[rank] = identity.actor_id, identity
        self.watchdog.watch(identity)

    def _on_identify_error(self, rank: int, error: BaseException) -> None:
        self.actor_ids[rank] = callee_died(error)
        self._on_error(error)

    def _on_started(self, placement: dict[str, str]) -> None:
        self.started = True
        self.placement = placement
        device = placement["device"]
        logger.info(
            "learner actor on node %s: torch device %s, %g GPU(s) requested from Ray%s",
            placement["node_id"][:12],
            device,
            self.factory.learner_gpus,
            "" if device.startswith("cuda") else " (torch sees no CUDA device: training on CPU)",
        )

    def request_updates(self) -> None:
        """Keep `CALLS_IN_FLIGHT` `train` calls queued on every learner (none while a restore
        or the store's restart waits)."""
        if not self.handles or self.store.handle is None:
            return
        self._follow_store()
        while not self.stopped and self.calls < CALLS_IN_FLIGHT:
            for rank, learner in enumerate(self.handles):
                report, info = learner.train.options(num_returns=2).remote(self.sync_interval)
                on_report = self._on_first_report(info) if rank == 0 else (lambda _: None)
                on_error = self._on_first_error if rank == 0 else self._on_error
                self.dispatcher.submit(report, on_report, on_error, self.life)
            self.calls += 1

    def _on_first_report(self, info: Any) -> Callable[[LearnerReport], None]:
        def on_report(report: LearnerReport) -> None:
            self.calls -= 1
            if report.updates:
                self.counters.updates = report.total_updates
                self.metrics.add_updates(
                    report.metrics,
                    report.updates,
                    report.update_s,
                    report.wall_s,
                    report.sampled,
                    report.nonfinite,
                )
                self.weights_out.publish(info, report.total_updates)

        return on_report

    def _on_first_error(self, error: BaseException) -> None:
        self.calls -= 1
        self._on_error(error)

    def _on_error(self, error: BaseException) -> None:
        """A learner or the store it samples from died (their supervisors deal with it), or
        the update itself raised: a bug that would only repeat, so the run stops."""
        if not self.deaths.handle(error):
            raise error

    def owns(self, dead_id: str) -> bool:
        return dead_id in self.actor_ids

    def on_died(self, dead_id: str, error: BaseException) -> None:
        in_constructor = constructor_error(error)
        if in_constructor is not None:
            self._kill()
            raise RunFailedError(f"the learner could not start: {in_constructor}")
        logger.warning("a learner died (%s); restoring the learner(s)", one_line(error))
        self._restore(one_line(error))

    def _restore(self, cause: str) -> None:
        """Kill every learner (peers of a dead learner cannot go on alone) and schedule their
        restore under the restart budget (which may stop the run)."""
        self._kill()
        if self.stopped:
            return
        delay = self.restarts.next_delay(cause, "faults.learner_restarts")
        self.metrics.count("learner/restarts")
        self.restore_at = self.clock() + delay
        if delay:
            logger.warning("the learner is restored in %.0f s (backoff)", delay)
        else:
            self._start_restored()

    def _start_restored(self) -> None:
        self.restore_at = None
        start, where = self.restore_point()
        logger.warning("restoring the learner(s) from %s", where)
        self.incarnation += 1
        self.counters.updates = int(start.state["updates"]) if start.state is not None else 0
        self.start(start, rollback=True)

    def _kill(self) -> None:
        for handle in self.handles:
            self.factory.kill(handle)
        self.handles, self.actor_ids, self.processes = [], [], []
        self.probes, self.pulses = [], []
        self.life.end()
        self.life = Life()
        self.calls = 0

    def watch(self) -> None:
        """Restore when due; probe the learners and restore a hung group; stop the run when
        the learner cannot be placed."""
        now = self.clock()
        if self.restore_at is not None:
            if now >= self.restore_at:
                self._start_restored()
            return
        if not self.handles or self.stopped:
            return
        self._follow_store()
        if not self.started:
            timeout = self.faults.start_timeout_s
            if self.watchdog.silent_s(self.created_at, timeout, None) > timeout:
                self._not_started(now)
            else:
                self._say_if_waiting(now)
            return
        self._probe()
        hang = self._hang()
        if hang is not None:
            logger.warning("%s: the learner is hung; restoring it", hang)
            self.metrics.count("learner/hangs")
            self._restore(f"it hung: {hang}")

    def _probe(self) -> None:
        for rank, (handle, probe) in enumerate(zip(self.handles, self.probes, strict=True)):
            probe.ask(
                handle.pulse.options(concurrency_group="probe").remote,
                partial(self._on_pulse, rank),
                self._on_error,
                self.life,
            )

    def _on_pulse(self, rank: int, pulse: LearnerPulse) -> None:
        self.pulses[rank] = (pulse, self.clock())

    def _hang(self) -> str | None:
        """Why the group is hung (see the module's docstring; its timeouts count the
        watchdog's seconds, `rayrl.ray.watchdog`), or None."""
        probe_timeout, stall_timeout = self.faults.probe_timeout_s, self.faults.stall_timeout_s
        silent = stalled = 0.0
        for probe, pulsed, process in zip(self.probes, self.pulses, self.processes, strict=True):
            if probe.asked_at is not None:
                silent = max(silent, self.watchdog.silent_s(probe.asked_at, probe_timeout, process))
            if pulsed is not None and pulsed[0].stalled_s > 0:  # as of its answer
                pulse, answered_at = pulsed
                since = answered_at - pulse.stalled_s
                silent_at_answer = self.watchdog.silent_s(
                    since, stall_timeout, process, until=answered_at
                )
                stalled = max(stalled, silent_at_answer)
        if silent > probe_timeout:
            return (
                f"a learner did not answer its probe for {silent:.0f} s it could run "
                f"(faults.probe_timeout_s={probe_timeout:g})"
            )
        if any(pulsed is not None and pulsed[0].waiting_for_store for pulsed in self.pulses):
            return None  # it waits on the store (and its peers on it): not hung
        if stalled > stall_timeout:
            return (
                f"a learner has worked for {stalled:.0f} s it could run without progress "
                f"(faults.stall_timeout_s={stall_timeout:g})"
            )
        return None

    def _say_if_waiting(self, now: float) -> None:
        """Say once when the learner has waited `CAPACITY_NOTICE_S` for Ray to place it:
        until `faults.start_timeout_s`, the run would be silent."""
        waited = now - self.created_at
        if self.waiting_said or waited < CAPACITY_NOTICE_S or self.placed(self.first) is not False:
            return
        self.waiting_said = True
        gpus, timeout = self.factory.learner_gpus, self.faults.start_timeout_s
        logger.warning(learners_waiting(1, gpus, waited, timeout))

    def _not_started(self, now: float) -> None:
        """The learner has not started within `faults.start_timeout_s`: the run stops when
        Ray has no node for it, or when that cannot be read (a restore would wait as long
        again, for ever); one placed but hung in its start is restored."""
        waited = now - self.created_at
        placed = self.placed(self.first)
        gpus, timeout = self.factory.learner_gpus, self.faults.start_timeout_s
        if placed is False:
            raise RunFailedError(learners_not_placed(1, gpus, waited, timeout))
        if placed is None:
            raise RunFailedError(
                f"the learner did not start within {waited:.0f} s (faults.start_timeout_s="
                f"{timeout:g}), and whether Ray has a node for it cannot be read: the "
                "checkpoints are kept; --resume the run when the cluster has room for it"
            )
        logger.warning("the learner did not start within %.0f s: restoring it", waited)
        self._restore("it did not start (faults.start_timeout_s)")

    def _follow_store(self) -> None:
        """Point the learners at the store's new actor once its supervisor has replaced it
        (they wait for batches until then)."""
        handle = self.store.handle
        if not self.handles or handle is None or handle is self._store_in_use:
            return
        self._store_in_use = handle
        for learner in self.handles:
            learner.set_store.remote(handle)

    # ---- for checkpoints and the end of a run --------------------------------------------

    def state(self) -> Any:
        """A reference to the first learner's full state (numpy)."""
        return self.first.state.remote()

    def weights(self) -> Any:
        return self.first.weights.remote()

    def digests(self) -> list[Any]:
        return [learner.parameters_digest.remote() for learner in self.handles]
