"""The rollout workers' supervisor: keeps every worker sampling, its chunks flowing into
the store and its weights current, and replaces workers that die or hang.

Backpressure: each worker has at most `workers.max_chunks_in_flight` chunks requested and
not yet in the store; with a sampling pace (on-policy `algorithm.sample_ahead_updates`) no
chunk is started while what was sampled and not yet learned from by the published weights
already fills the pace's lead, so unrolls are acted by weights at most that many updates
old instead of waiting in the queue (a paced worker starts its next chunk only once the
weights it was last handed are in use: an unroll counts as acted by its oldest step's
weights, so one begun a step before they arrived would count as a version older); and no
chunk is asked for that would take the run past `run.total_env_steps` (chunks being sampled
count as sampled), so a run samples its budget rounded up to whole chunks, never what
chunks in flight at the end would add. Chunks are
asked only of workers whose process has started, the moment the driver learns it: a chunk
queued on one that waits for a node would hold part of the budget for as long as the node
stays away, and the run would wait at its end for chunks that no running worker is asked
for (a dead worker's chunks are forgotten with it). A chunk goes
worker -> object store -> experience actor by reference (this process forwards the
`ObjectRef`, never the data). New weights go to a worker as one
reference, at most one update queued per worker, in its own concurrency group so that a
sample call in progress picks them up at its next env step.

Weights first: once the learner has published (from the start in a resumed or warm-started
run) a worker samples only after it has taken published weights, so that no chunk of an
untrained policy enters a trained run; before that, a new run's workers act with their own.

Failures: a dead worker is replaced (and handed the newest weights, which it waits for)
under its slot's restart budget (`faults.worker_restarts` within `faults.restart_window_s`,
with backoff); a worker that has started but delivers no chunk for
`workers.sample_timeout_s` while asked for one, or takes no weights it waits for, is killed
and replaced; an error in a worker's constructor stops the run with that
error (it would recur at every restart).

Capacity: a worker that waits for a CPU the cluster does not have free (its node was lost)
is not a failure: training goes on with the workers that run, which sample the rest of the
budget, and Ray starts the waiting ones when capacity returns (they are then asked for
chunks like any other). With no worker running for `faults.no_workers_timeout_s` the run
stops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rayrl.config import WorkersConfig
from rayrl.core import ChunkStats, SamplingPace
from rayrl.errors import RunFailedError
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Life, callee_died
from rayrl.ray.factory import CAPACITY_NOTICE_S
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.pace import PaceGate
from rayrl.ray.restarts import RestartBudget, constructor_error, one_line
from rayrl.ray.store import StoreSupervisor

logger = logging.getLogger(__name__)


@dataclass
class WorkerSlot:
    index: int
    handle: Any
    restarts: RestartBudget
    life: Life = field(default_factory=Life)
    incarnation: int = 0
    """Numbers the actor's name (`worker-<index>.<incarnation>`); `life` guards its calls."""
    in_flight: int = 0
    """Chunks requested and not yet in the store."""
    sampling: int = 0
    """Sample calls not yet returned (a subset of `in_flight`)."""
    ready: bool = False
    """Its process has started: it is asked for chunks, and the hang timeout runs, only from
    then on."""
    actor_id: str | None = None
    """Its actor's Ray id, once it has answered `identify` (or failed to)."""
    process: ActorIdentity | None = None
    """Its actor's process, once it has answered `identify`."""
    last_progress: float = 0.0
    """When it last returned a chunk, was asked for one or handed weights while idle, or was
    created."""
    restart_at: float | None = None
    """When its replacement is due (it backs off); None while it has an actor."""
    waiting_for_capacity: bool = False
    """It has not started and the cluster has no CPU free for it."""
    weights_version: int = -1
    weights_pending: bool = False
    acts_with_published: bool = False
    """Its actor has taken published weights (they are in use from its next env step);
    until then it acts with its own fresh ones."""


class WorkerSupervisor:
    def __init__(
        self,
        context: SupervisorContext,
        store: StoreSupervisor,
        settings: WorkersConfig,
        *,
        chunk_env_steps: int,
        total_env_steps: int,
        pace: SamplingPace | None = None,
        starts_trained: bool = False,
    ) -> None:
        """The workers' chunks go to `store`'s actor; they act with the newest weights of
        `context.weights`; `chunk_env_steps` is what one chunk adds to the run's env steps,
        which stop at `total_env_steps`; `pace` bounds how far they sample ahead of the
        learner (None: only the store holds them back). In a run that `starts_trained`
        (resumed, or warm-started from a checkpoint) no worker samples before it acts with
        published weights, nor, once weights are published, does any worker (a replacement,
        or one that started late) in any run: its own fresh ones would sample episodes of an
        untrained policy, counted in the budget and, off-policy, learned from. Before the
        first publication a new run's workers act with their own, as untrained as the
        learner's, rather than wait for the learner to start."""
        self.factory = context.factory
        self.dispatcher = context.dispatcher
        self.deaths = context.deaths
        self.store = store
        self.settings = settings
        self.faults = context.faults
        self.counters = context.counters
        self.metrics = context.metrics
        self.weights = context.weights
        self.chunk_env_steps = chunk_env_steps
        self.total_env_steps = total_env_steps
        self.clock = context.clock
        self.watchdog = context.watchdog
        self.placed = context.placed
        self.slots: list[WorkerSlot] = []
        self.stopped = False
        self._none_running_since: float | None = None
        self._rollbacks_seen = 0
        self.starts_trained = starts_trained
        self.pace = None if pace is None else PaceGate(pace, store, self.weights)
        self._rebase_pace()

    def start(self) -> None:
        """Create every worker at once: their processes start in parallel."""
        faults = self.faults
        for index in range(self.settings.num_workers):
            restarts = RestartBudget.of(
                f"worker {index}", faults.worker_restarts, faults, self.clock
            )
            handle = self.factory.worker(index, 0)
            slot = WorkerSlot(index, handle, restarts, last_progress=self.clock())
            self.slots.append(slot)
            self._watch_start(slot)

    def handles(self) -> list[Any]:
        return [slot.handle for slot in self.slots if slot.restart_at is None]

    def stop(self) -> None:
        """Ask for no more chunks, and replace no more workers."""
        self.stopped = True

    # ---- chunks ------------------------------------------------------------------------------

    def request_chunks(self) -> None:
        """Keep every running worker at `max_chunks_in_flight` chunks, within the env-step
        budget."""
        for slot in self.slots:
            self._fill(slot)

    def _fill(self, slot: WorkerSlot) -> None:
        """Ask one worker for chunks up to `max_chunks_in_flight`, within the budget, once
        its process has started; until then (being created or replaced, or waiting for a
        lost node's capacity) it is asked nothing, see the module's docstring."""
        if self.stopped or not slot.ready or self.store.handle is None:  # (a store restarts)
            return
        while (
            slot.in_flight < self.settings.max_chunks_in_flight
            and self._within_budget()
            and self._within_pace()
            and not self._awaits_weights(slot)
        ):
            self._request_chunk(slot)

    def _sampled(self) -> int:
        """Env steps sampled so far, the chunks being sampled included."""
        sampling = sum(slot.sampling for slot in self.slots)
        return self.counters.env_steps + sampling * self.chunk_env_steps

    def _within_pace(self) -> bool:
        """Whether a chunk may start under the sampling pace (`rayrl.ray.pace`)."""
        return self.pace is None or self.pace.allows(self._sampled(), self.counters.updates)

    def _awaits_weights(self, slot: WorkerSlot) -> bool:
        """Whether the worker's next chunk waits for weights (`_on_weights_applied` asks
        for it): under a pace, those it was handed; the first published ones, in a run that
        starts trained or once any are published (see `__init__`)."""
        if self.pace is not None and slot.weights_pending:
            return True
        return (self.starts_trained or self.weights.available) and not slot.acts_with_published

    def _rebase_pace(self) -> None:
        """The pace counts from here: the run's start (or resume), then each rollback."""
        if self.pace is not None:
            self.pace.rebase(self._sampled(), self.counters.updates)

    def _within_budget(self) -> bool:
        """Whether one more chunk keeps the run within `run.total_env_steps`. Only running
        workers are asked for chunks, and a replaced one's are forgotten (`_replace`), so
        the chunks being sampled are all on running workers."""
        return self._sampled() < self.total_env_steps

    def _request_chunk(self, slot: WorkerSlot) -> None:
        chunk_ref, stats_ref = slot.handle.sample.options(num_returns=2).remote(
            self.counters.env_steps
        )
        add_ref = self.store.handle.add.remote(chunk_ref)
        if slot.sampling == 0:
            slot.last_progress = self.clock()
        slot.sampling += 1
        slot.in_flight += 1
        life = slot.life
        self.dispatcher.submit(
            stats_ref,
            lambda stats: self._on_chunk_stats(slot, stats),
            lambda error: self._on_error(slot, error),
            life,
        )
        # no life guards the store's answer: the chunk went in (or failed) whichever actor
        # was replaced since, and the worker's slot is freed only if it is still this life
        self.dispatcher.submit(
            add_ref,
            lambda inserted: self._on_chunk_added(slot, life, inserted),
            lambda error: self._on_add_error(slot, life, error),
        )

    def _on_chunk_stats(self, slot: WorkerSlot, stats: ChunkStats) -> None:
        slot.sampling -= 1
        slot.last_progress = self.clock()
        if self.stopped:  # the stopped store drops the chunk: the run's count stays put,
            return  # so that the final checkpoint, its replay and the metrics agree on it
        self.counters.env_steps += stats.env_steps
        self.counters.episodes += len(stats.episode_returns)
        self.metrics.add_chunk(stats, max(self.weights.version, 0))

    def _on_chunk_added(self, slot: WorkerSlot, life: Life, inserted: int) -> None:
        self.metrics.add_inserted(inserted)
        if life.alive:
            slot.in_flight -= 1

    def _on_add_error(self, slot: WorkerSlot, life: Life, error: BaseException) -> None:
        if life.alive:
            slot.in_flight -= 1
        # the store died (its supervisor replaces it), or the chunk's worker did
        if not self.deaths.handle(error) and life.alive:
            self._on_error(slot, error)

    def _on_error(self, slot: WorkerSlot, error: BaseException) -> None:
        """A call to this worker failed without any actor dying: its own error."""
        if self.deaths.handle(error):
            return
        logger.error("worker %d failed: %s; replacing it", slot.index, error)
        self._replace(slot, one_line(error))

    # ---- lives -------------------------------------------------------------------------------

    def _watch_start(self, slot: WorkerSlot) -> None:
        self.dispatcher.submit(
            slot.handle.identify.remote(),
            lambda identity: self._on_ready(slot, identity),
            lambda error: self._on_start_error(slot, error),
            slot.life,
        )

    def _on_start_error(self, slot: WorkerSlot, error: BaseException) -> None:
        slot.actor_id = callee_died(error)
        self._on_error(slot, error)

    def _on_ready(self, slot: WorkerSlot, identity: ActorIdentity) -> None:
        """A worker's process has started: it is asked for chunks at once, not a loop round
        later."""
        self.metrics.phase_done("actors")
        slot.actor_id, slot.process = identity.actor_id, identity
        self.watchdog.watch(identity)
        slot.ready = True
        slot.last_progress = self.clock()
        if slot.waiting_for_capacity:
            slot.waiting_for_capacity = False
            running = sum(other.ready for other in self.slots)
            logger.info(
                "worker %d started: %d of %d workers running", slot.index, running, len(self.slots)
            )
        self._fill(slot)

    def owns(self, dead_id: str) -> bool:
        return any(dead_id == slot.actor_id and slot.restart_at is None for slot in self.slots)

    def on_died(self, dead_id: str, error: BaseException) -> None:
        slot = next(slot for slot in self.slots if dead_id == slot.actor_id)
        logger.warning("worker %d died; replacing it", slot.index)
        self._replace(slot, one_line(error), constructor_error(error))

    def _replace(self, slot: WorkerSlot, cause: str, in_constructor: str | None = None) -> None:
        """Kill the slot's actor and schedule its replacement under the slot's restart
        budget (which may stop the run)."""
        self.factory.kill(slot.handle)
        slot.life.end()
        slot.in_flight = slot.sampling = 0
        slot.ready = slot.weights_pending = False
        if self.stopped:  # the run is ending: no new worker
            return
        if in_constructor is not None:
            raise RunFailedError(f"worker {slot.index} could not start: {in_constructor}")
        delay = slot.restarts.next_delay(cause, "faults.worker_restarts")
        self.metrics.add_worker_restart(slot.index)
        slot.restart_at = self.clock() + delay
        if delay:
            logger.warning("worker %d restarts in %.0f s (backoff)", slot.index, delay)
        else:
            self._restart(slot)

    def _restart(self, slot: WorkerSlot) -> None:
        slot.restart_at = None
        slot.actor_id = slot.process = None
        slot.life = Life()
        slot.incarnation += 1
        slot.handle = self.factory.worker(slot.index, slot.incarnation)
        slot.weights_version = -1
        slot.acts_with_published = False
        slot.last_progress = self.clock()
        self._watch_start(slot)
        self._send_weights(slot)

    def check_hangs(self) -> None:
        """Start the replacements that are due; replace workers that did not start (unless
        they wait for capacity) or that deliver nothing while asked to (in the watchdog's
        seconds: `rayrl.ray.watchdog`); stop the run when no worker has run for
        `faults.no_workers_timeout_s`."""
        timeout, start_timeout = self.settings.sample_timeout_s, self.faults.start_timeout_s
        now = self.clock()
        for slot in self.slots:
            if self.stopped:
                return
            if slot.restart_at is not None:
                if now >= slot.restart_at:
                    self._restart(slot)
                continue
            if not slot.ready:
                if self._waits_for_capacity(slot, now):
                    continue  # not a failure
                if self.watchdog.silent_s(slot.last_progress, start_timeout, None) > start_timeout:
                    logger.warning("worker %d did not start; replacing it", slot.index)
                    self._replace(slot, "it did not start within faults.start_timeout_s")
                continue
            # waiting for the store's rate limit, or for the learner's first weights, is not
            # hanging: only sample calls count, and the weights handed to a worker whose
            # next chunk waits for them
            if not (slot.sampling or (slot.weights_pending and self._awaits_weights(slot))):
                continue
            silent = self.watchdog.silent_s(slot.last_progress, timeout, slot.process)
            if silent > timeout:
                logger.warning(
                    "worker %d %s for %.0f s, %.0f s it could run (workers.sample_timeout_s=%g): "
                    "killing and replacing it",
                    slot.index,
                    "delivered no chunk" if slot.sampling else "took no weights",
                    now - slot.last_progress,
                    silent,
                    timeout,
                )
                self.metrics.count("worker/hangs")
                self._replace(slot, "it hung (workers.sample_timeout_s)")
        self._check_capacity(now)

    def _check_capacity(self, now: float) -> None:
        """Stop the run when no worker has run for `faults.no_workers_timeout_s`."""
        if any(slot.ready for slot in self.slots):
            self._none_running_since = None
            return
        if self._none_running_since is None:
            self._none_running_since = now
        elif now - self._none_running_since > self.faults.no_workers_timeout_s:
            raise RunFailedError(
                f"no rollout worker has run for {now - self._none_running_since:.0f} s "
                f"(faults.no_workers_timeout_s={self.faults.no_workers_timeout_s:g}): the "
                f"cluster has no room for one (each asks Ray for "
                f"{self.settings.cpus_per_worker:g} CPU)"
            )

    def _waits_for_capacity(self, slot: WorkerSlot, now: float) -> bool:
        """Whether a worker that has not started waits for capacity (Ray has no process for
        it: its node was lost); said once per wait."""
        if now - slot.last_progress < CAPACITY_NOTICE_S or self.placed(slot.handle) is not False:
            return False
        if not slot.waiting_for_capacity:
            slot.waiting_for_capacity = True
            running = sum(other.ready for other in self.slots)
            logger.warning(
                "worker %d waits for room on the cluster: training goes on with %d of %d "
                "workers, and it starts when capacity returns",
                slot.index,
                running,
                len(self.slots),
            )
        return True

    # ---- weights -----------------------------------------------------------------------------

    def send_weights(self) -> None:
        """Hand the newest published weights (one reference) to every worker that lacks
        them; after a restored learner published (a rollback), workers take them even
        where they are older than their own."""
        if self.weights.rollbacks != self._rollbacks_seen:
            self._rollbacks_seen = self.weights.rollbacks
            self._rebase_pace()
            for slot in self.slots:
                slot.weights_version = -1
        for slot in self.slots:
            self._send_weights(slot)

    def _send_weights(self, slot: WorkerSlot) -> None:
        """Queue the newest weights behind the worker's chunks, one update at a time."""
        weights = self.weights
        if not weights.available or slot.weights_pending or slot.restart_at is not None:
            return
        if slot.weights_version >= weights.version:
            return
        slot.weights_pending = True
        slot.weights_version = weights.version
        if slot.sampling == 0:
            slot.last_progress = self.clock()
        # its own concurrency group: it runs beside a sample call in progress, which picks
        # the weights up at its next step
        ref = slot.handle.set_weights.options(concurrency_group="weights").remote(weights.info)
        self.dispatcher.submit(
            ref,
            lambda _: self._on_weights_applied(slot),
            lambda error: self._on_weights_error(slot, error),
            slot.life,
        )

    def _on_weights_applied(self, slot: WorkerSlot) -> None:
        slot.weights_pending = False
        slot.acts_with_published = True
        self._send_weights(slot)
        self._fill(slot)  # a paced chunk waited for these weights

    def _on_weights_error(self, slot: WorkerSlot, error: BaseException) -> None:
        slot.weights_pending = False
        self._on_error(slot, error)
