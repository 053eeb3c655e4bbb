"""The driver: a thin event loop over futures that keeps every actor busy and no queue long.

It holds no experience and no tensors. Each worker has at most `max_chunks_in_flight`
chunks requested and not yet in the store; a chunk goes worker -> object store ->
experience actor (replay buffer or unroll queue) by reference (the driver forwards the
`ObjectRef`). Every learner has two `train` calls queued; the first learner's return its
report and a `ModelInfo` that the driver owns (so the weights outlive a learner crash) and
hands, as one reference, to every worker that has no weights update pending. Evaluation
runs in its own actor on the newest weights, never pausing training. Checkpoints ask the
learner for its state without waiting for it.

Failures: a dead worker is replaced (with the newest weights); a worker that delivers no
chunk for `workers.sample_timeout_s` is killed and replaced; a dead learner (any of them)
is restored, with its peers, from the latest checkpoint; a dead experience actor is
re-created (empty, or from the buffer saved with the last checkpoint) and training waits for
the warm-up size again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_checkpoint, load_policy, to_torch_tree
from rayrl.config import Config
from rayrl.core import ChunkStats, EvalResult, ModelInfo, StoreStats
from rayrl.runtime import ActorFactory
from rayrl.services import LearnerReport
from rayrl.session import TrainingSession, TrainResult

logger = logging.getLogger(__name__)

WAIT_S = 0.2
"""Longest the loop sleeps in `ray.wait` before checking timers (hangs, logs, stop)."""
SHUTDOWN_TIMEOUT_S = 60.0
WORKER_START_TIMEOUT_S = 300.0
"""A worker must finish starting (process, imports, env creation) within this time; the
hang timeout (`workers.sample_timeout_s`) only counts once it has."""
MAX_FAILURES_WITHOUT_PROGRESS = 5
"""A worker slot replaced this many times in a row without delivering a chunk stops the run
with an error (an env that crashes on start would otherwise be restarted forever)."""


def died_actor_id(error: BaseException) -> str | None:
    """The id of the actor whose death caused `error`, if any. A task that failed because
    an actor it called died raises `RayTaskError(ActorDiedError)` carrying the *caller's*
    id; the dead actor is its cause's."""
    while isinstance(error, RayTaskError):
        cause = getattr(error, "cause", None)
        if cause is None or cause is error:
            break
        error = cause
    if isinstance(error, RayActorError):
        return error.actor_id
    return None


def actor_id(handle: Any) -> str:
    return handle._actor_id.hex()


@dataclass
class WorkerSlot:
    index: int
    handle: Any
    incarnation: int = 0
    in_flight: int = 0
    """Chunks requested and not yet in the replay buffer."""
    sampling: int = 0
    """Sample calls not yet returned (a subset of `in_flight`)."""
    ready: bool = False
    """Its process has started (the hang timeout runs only from then on)."""
    last_progress: float = 0.0
    """When it last returned a chunk, was asked for one while idle, or was created."""
    failures: int = 0
    """Replacements since it last delivered a chunk."""
    weights_version: int = -1
    weights_pending: bool = False


class RayDriver:
    def __init__(
        self,
        config: Config,
        session: TrainingSession,
        resume: dict[str, Any] | None,
        factory: ActorFactory,
    ) -> None:
        self.config = config
        self.session = session
        self.counters = session.counters
        self.factory = factory
        self.resume = resume
        self.pending: dict[ray.ObjectRef, Callable[[ray.ObjectRef], None]] = {}
        self.workers: list[WorkerSlot] = []
        self.learners: list[Any] = []
        self.store: Any = None
        self.evaluator: Any = None
        self.stopping = False
        self.latest_info: ray.ObjectRef | None = None
        self.latest_version = -1
        self.learner_incarnation = 0
        self.learner_calls = 0
        self.store_incarnation = 0
        self.store_stats: StoreStats | None = None
        self.store_stats_pending = False
        self.evaluator_incarnation = 0
        self.eval_pending = False
        self.eval_started_at = 0.0
        self.checkpoint_pending = False
        self.final_eval: EvalResult | None = None
        self.namespace = ALGORITHMS[config.algorithm.name].store_metrics
        """Metric namespace of the experience store ("replay" or "queue")."""

    @property
    def learner(self) -> Any:
        """The first learner: it publishes weights and answers for the group's state."""
        return self.learners[0]

    # ---- set-up ------------------------------------------------------------------------------

    def _start(self) -> None:
        """Create every actor at once (their processes start in parallel) and hand the
        learner's initial weights to the workers; nothing here waits for an actor."""
        restore = self.session.run_dir.replay_path if self._replay_saved() else None
        self.store = self.factory.experience(restore)
        self.store_ids = {actor_id(self.store)}
        learner_state = None if self.resume is None else to_torch_tree(self.resume["learner"])
        self.learners = self.factory.learners(self.store, learner_state, self.warm_start())
        self.evaluator = self.factory.evaluator()
        self.workers = [
            WorkerSlot(i, self.factory.worker(i, 0), last_progress=time.monotonic())
            for i in range(self.config.workers.num_workers)
        ]
        for slot in self.workers:
            self._watch_start(slot)
        self._publish_when_ready(self.learner.weights.remote(), self.counters.updates)
        self.pending[self.learner.placement.remote()] = self._on_learner_placement

    def _on_learner_placement(self, ref: ray.ObjectRef) -> None:
        try:
            placement = ray.get(ref)
        except RayError:
            return  # a dead learner is reported by its train calls
        self.session.placement["learner"] = placement
        device = placement["device"]
        logger.info(
            "learner actor on node %s: torch device %s, %g GPU(s) requested from Ray%s",
            placement["node_id"][:12],
            device,
            self.factory.learner_gpus,
            "" if device.startswith("cuda") else " (torch sees no CUDA device: training on CPU)",
        )

    def warm_start(self) -> ModelInfo | None:
        """Weights to start a fresh run from (`run.init_checkpoint`), if any."""
        if self.resume is not None or self.config.run.init_checkpoint is None:
            return None
        return load_policy(Path(self.config.run.init_checkpoint), self.config.algorithm.name)

    def _replay_saved(self) -> bool:
        saved = self.session.run_dir.replay_path.is_file()
        return self.config.replay.save_with_checkpoint and saved

    # ---- the loop ------------------------------------------------------------------------

    def run(self) -> TrainResult:
        stop_reason = "interrupted"
        try:
            self._start()
            try:
                while (reason := self.session.stop_reason()) is None:
                    self._submit_work()
                    self._wait_and_dispatch()
                    self._check_hung_workers()
                    self._check_hung_evaluation()
                    if self.session.log_due():
                        self._refresh_store_stats()
                    self.session.log_if_due(self.store_stats)
                stop_reason = reason
            except KeyboardInterrupt:
                logger.warning("interrupted: stopping sampling and writing a final checkpoint")
            self._shutdown(final_eval=stop_reason != "interrupted", stop_reason=stop_reason)
        finally:
            self._kill_actors()  # also when the loop fails: no actor outlives its run
        return self.session.result(stop_reason, self.final_eval)

    def _submit_work(self) -> None:
        if self.stopping:
            return
        for slot in self.workers:
            while slot.in_flight < self.config.workers.max_chunks_in_flight:
                self._request_chunk(slot)
        while self.learner_calls < 2:
            self._request_updates()
        if self.session.eval_due() and not self.eval_pending and self.latest_info is not None:
            self._request_eval()
        if (
            self.session.checkpoint_due()
            and not self.checkpoint_pending
            and self.latest_info is not None  # the learner has published its first weights
        ):
            self._request_checkpoint(periodic=True)

    def _wait_and_dispatch(self, timeout: float = WAIT_S) -> None:
        if not self.pending:
            time.sleep(timeout)
            return
        refs = list(self.pending)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            handler = self.pending.pop(ref)
            handler(ref)

    # ---- workers -------------------------------------------------------------------------

    def _watch_start(self, slot: WorkerSlot) -> None:
        ref = slot.handle.__ray_ready__.remote()
        self.pending[ref] = partial(self._on_worker_ready, slot, slot.incarnation)

    def _on_worker_ready(self, slot: WorkerSlot, incarnation: int, ref: ray.ObjectRef) -> None:
        try:
            ray.get(ref)
        except RayError as error:
            self._on_worker_error(slot, incarnation, error)
            return
        if incarnation == slot.incarnation:
            slot.ready = True
            slot.last_progress = time.monotonic()

    def _request_chunk(self, slot: WorkerSlot) -> None:
        chunk_ref, stats_ref = slot.handle.sample.options(num_returns=2).remote(
            self.counters.env_steps
        )
        add_ref = self.store.add.remote(chunk_ref)
        if slot.sampling == 0:
            slot.last_progress = time.monotonic()
        slot.sampling += 1
        slot.in_flight += 1
        self.pending[stats_ref] = partial(self._on_chunk_stats, slot, slot.incarnation)
        self.pending[add_ref] = partial(self._on_chunk_added, slot, slot.incarnation)

    def _on_chunk_stats(self, slot: WorkerSlot, incarnation: int, ref: ray.ObjectRef) -> None:
        try:
            stats: ChunkStats = ray.get(ref)
        except RayError as error:
            self._on_worker_error(slot, incarnation, error)
            return
        if incarnation != slot.incarnation:
            return
        slot.sampling -= 1
        slot.failures = 0
        slot.last_progress = time.monotonic()
        self.counters.env_steps += stats.env_steps
        self.counters.episodes += len(stats.episode_returns)
        self.session.stats.add_chunk(stats, max(self.latest_version, 0))

    def _on_chunk_added(self, slot: WorkerSlot, incarnation: int, ref: ray.ObjectRef) -> None:
        try:
            inserted = ray.get(ref)
        except RayError as error:
            if died_actor_id(error) in self.store_ids:
                self._restart_store()  # a no-op if it was replaced already
            if incarnation == slot.incarnation:
                slot.in_flight -= 1
            self._on_worker_error(slot, incarnation, error)
            return
        self.session.stats.add_inserted(inserted)
        if incarnation == slot.incarnation:
            slot.in_flight -= 1
            self._send_weights(slot)

    def _on_worker_error(self, slot: WorkerSlot, incarnation: int, error: BaseException) -> None:
        dead = died_actor_id(error)
        if incarnation != slot.incarnation or (dead is not None and dead != actor_id(slot.handle)):
            return  # an old incarnation, or another actor's failure
        if dead is None:
            logger.error("worker %d failed: %s", slot.index, error)
        else:
            logger.warning("worker %d died; replacing it", slot.index)
        self._replace_worker(slot)

    def _replace_worker(self, slot: WorkerSlot) -> None:
        ray.kill(slot.handle, no_restart=True)
        slot.failures += 1
        if slot.failures >= MAX_FAILURES_WITHOUT_PROGRESS:
            raise RuntimeError(
                f"worker {slot.index} failed {slot.failures} times in a row without delivering "
                "a chunk; see the worker errors above (an env that cannot start or step?)"
            )
        slot.incarnation += 1
        slot.handle = self.factory.worker(slot.index, slot.incarnation)
        slot.in_flight = 0
        slot.sampling = 0
        slot.ready = False
        slot.weights_pending = False
        slot.weights_version = -1
        slot.last_progress = time.monotonic()
        self.session.stats.add_worker_restart(slot.index)
        self._watch_start(slot)
        self._send_weights(slot)

    def _check_hung_workers(self) -> None:
        timeout = self.config.workers.sample_timeout_s
        now = time.monotonic()
        for slot in self.workers:
            if self.stopping:
                return
            if not slot.ready:
                if now - slot.last_progress > WORKER_START_TIMEOUT_S + timeout:
                    logger.warning("worker %d did not start; replacing it", slot.index)
                    self._replace_worker(slot)
                continue
            # waiting for the replay's rate limit is not hanging: only sample calls count
            if slot.sampling and now - slot.last_progress > timeout:
                logger.warning(
                    "worker %d delivered no chunk for %.0f s (workers.sample_timeout_s): "
                    "killing and replacing it",
                    slot.index,
                    now - slot.last_progress,
                )
                self.session.stats.count("worker/hangs")
                self._replace_worker(slot)

    # ---- weights -------------------------------------------------------------------------

    def _publish_when_ready(self, info: ray.ObjectRef, version: int) -> None:
        """Publish weights once they exist, so that no worker queues a call behind an
        object that is still being made (workers sample with their own initial weights
        until then)."""
        self.pending[info] = partial(self._on_weights_ready, version)

    def _on_weights_ready(self, version: int, ref: ray.ObjectRef) -> None:
        try:
            ray.get(ref)  # initial or restored weights only: a one-off fetch
        except RayError:
            return  # the learner died making them; its train calls report that
        self._publish(ref, version)

    def _publish(self, info: ray.ObjectRef, version: int) -> None:
        """New, ready weights: hand the one reference to every worker that can take it."""
        self.latest_info, self.latest_version = info, version
        for slot in self.workers:
            self._send_weights(slot)

    def _send_weights(self, slot: WorkerSlot) -> None:
        """Queue the newest weights behind the worker's chunks, one update at a time."""
        if slot.weights_pending or slot.weights_version >= self.latest_version:
            return
        if self.latest_info is None:
            return
        slot.weights_pending = True
        slot.weights_version = self.latest_version
        # its own concurrency group: it runs beside a sample call in progress, which picks
        # the weights up at its next step
        ref = slot.handle.set_weights.options(concurrency_group="weights").remote(self.latest_info)
        self.pending[ref] = partial(self._on_weights_applied, slot, slot.incarnation)

    def _on_weights_applied(self, slot: WorkerSlot, incarnation: int, ref: ray.ObjectRef) -> None:
        try:
            ray.get(ref)
        except RayError as error:
            if incarnation == slot.incarnation:
                slot.weights_pending = False
            self._on_worker_error(slot, incarnation, error)
            return
        if incarnation == slot.incarnation:
            slot.weights_pending = False
            self._send_weights(slot)

    # ---- learner -------------------------------------------------------------------------

    def _request_updates(self) -> None:
        """One `train` call to every learner (they update in lockstep); the first one's
        report and weights are what the run records and publishes."""
        for rank, learner in enumerate(self.learners):
            report_ref, info_ref = learner.train.options(num_returns=2).remote(
                self.config.learner.sync_interval
            )
            self.pending[report_ref] = partial(
                self._on_learner_report, rank, info_ref, self.learner_incarnation
            )
        self.learner_calls += 1

    def _on_learner_report(
        self, rank: int, info_ref: ray.ObjectRef, incarnation: int, ref: ray.ObjectRef
    ) -> None:
        if incarnation != self.learner_incarnation:
            return
        if rank == 0:
            self.learner_calls -= 1
        try:
            report: LearnerReport = ray.get(ref)
        except RayError as error:
            dead = died_actor_id(error)
            if dead in {actor_id(learner) for learner in self.learners}:
                self._restore_learners()
            elif dead in self.store_ids:
                self._restart_store()  # a no-op if it was replaced already
            else:
                raise  # an error in the update itself: a bug that would only repeat
            return
        if rank == 0 and report.updates:
            self.counters.updates = report.total_updates
            self.session.stats.add_updates(
                report.metrics, report.updates, report.update_s, report.wall_s, report.sampled
            )
            self._publish(info_ref, report.total_updates)

    def _restore_learners(self) -> None:
        path = self.session.run_dir.latest_checkpoint
        state = None
        if path.is_file():
            payload = load_checkpoint(path, algorithm=self.config.algorithm.name)
            state = payload["learner"]
            logger.warning(
                "a learner died; restoring the learner(s) from %s (%d updates)",
                path,
                state["updates"],
            )
        elif self.resume is not None:
            state = to_torch_tree(self.resume["learner"])
        else:
            logger.warning("a learner died before the first checkpoint; restarting fresh")
        for learner in self.learners:  # peers of a dead learner cannot go on alone
            ray.kill(learner, no_restart=True)
        self.learner_incarnation += 1
        self.learner_calls = 0
        self.checkpoint_pending = False
        warm_start = self.warm_start() if state is None else None
        self.learners = self.factory.learners(
            self.store, state, warm_start, self.learner_incarnation
        )
        self.session.stats.count("learner/restarts")
        self.pending[self.learner.placement.remote()] = self._on_learner_placement
        restored_version = int(state["updates"]) if state is not None else 0
        self.counters.updates = restored_version
        for slot in self.workers:  # workers may hold newer versions than the restored one
            slot.weights_version = -1
        self._publish_when_ready(self.learner.weights.remote(), restored_version)

    # ---- the experience store ------------------------------------------------------------

    def _restart_store(self) -> None:
        try:
            ray.get(self.store.stats.remote(), timeout=5)
            return  # alive after all; the error was someone else's
        except (RayError, GetTimeoutError):
            pass
        ray.kill(self.store, no_restart=True)
        self.store_incarnation += 1
        restore = self.session.run_dir.replay_path if self._replay_saved() else None
        self.store = self.factory.experience(restore, self.store_incarnation)
        self.store_ids.add(actor_id(self.store))
        lost = self.store_stats.size if self.store_stats is not None else 0
        items = "transitions" if self.namespace == "replay" else "unrolls"
        logger.warning(
            "the %s actor died; %d %s were lost%s; training waits for new experience",
            self.namespace,
            lost,
            items,
            " (the buffer was refilled from the last checkpoint)" if restore else "",
        )
        self.session.stats.count(f"{self.namespace}/restarts")
        self.session.stats.count(f"{self.namespace}/lost_{items}", lost)
        self.store_stats = None
        for learner in self.learners:
            learner.set_store.remote(self.store)

    def _refresh_store_stats(self) -> None:
        if self.store_stats_pending:
            return
        self.store_stats_pending = True
        ref = self.store.stats.remote()
        self.pending[ref] = partial(self._on_store_stats, self.store_incarnation)

    def _on_store_stats(self, incarnation: int, ref: ray.ObjectRef) -> None:
        self.store_stats_pending = False
        try:
            stats = ray.get(ref)
        except RayError:
            if incarnation == self.store_incarnation:
                self._restart_store()
            return
        if incarnation == self.store_incarnation:
            self.store_stats = stats

    # ---- evaluation and checkpoints ------------------------------------------------------

    def _request_eval(self) -> None:
        self.session.eval_started()
        info = self.latest_info if self.latest_info is not None else self.learner.weights.remote()
        self.eval_pending = True
        self.eval_started_at = time.monotonic()
        ref = self.evaluator.evaluate.remote(
            info, self.config.run.eval_episodes, self.session.video_due()
        )
        self.pending[ref] = partial(
            self._on_eval, info, self.counters.env_steps, self.evaluator_incarnation
        )

    def _check_hung_evaluation(self) -> None:
        if self.eval_pending and (
            time.monotonic() - self.eval_started_at > self.config.run.eval_timeout_s
        ):
            logger.warning(
                "evaluation took longer than run.eval_timeout_s=%g s; replacing the evaluator",
                self.config.run.eval_timeout_s,
            )
            self._replace_evaluator()

    def _replace_evaluator(self) -> None:
        ray.kill(self.evaluator, no_restart=True)
        self.evaluator_incarnation += 1
        self.evaluator = self.factory.evaluator(self.evaluator_incarnation)
        self.eval_pending = False
        self.session.stats.count("eval/failures")

    def _on_eval(
        self, info: ray.ObjectRef, env_steps: int, incarnation: int, ref: ray.ObjectRef
    ) -> None:
        if incarnation != self.evaluator_incarnation:
            return
        self.eval_pending = False
        try:
            result: EvalResult = ray.get(ref)
        except RayError as error:
            logger.warning("evaluation failed (%s); replacing the evaluator", error)
            self._replace_evaluator()
            return
        if self.session.record_eval(result, env_steps):
            self._request_checkpoint(best=True, policy=info)

    def _request_checkpoint(
        self, *, periodic: bool = False, best: bool = False, policy: ray.ObjectRef | None = None
    ) -> None:
        policy = policy or self.latest_info
        if periodic:
            self.checkpoint_pending = True
            self.session.checkpoint_started()
        if periodic and self.config.replay.save_with_checkpoint:
            self.store.save.remote(self.session.run_dir.replay_path)
        ref = self.learner.state.remote()
        self.pending[ref] = partial(
            self._on_learner_state, policy, periodic, best, self.learner_incarnation
        )

    def _on_learner_state(
        self,
        policy: ray.ObjectRef,
        periodic: bool,
        best: bool,
        incarnation: int,
        ref: ray.ObjectRef,
    ) -> None:
        if periodic:
            self.checkpoint_pending = False
        try:
            state = ray.get(ref)
            info: ModelInfo = ray.get(policy)
        except RayError as error:
            logger.warning("checkpoint skipped: %s", error)
            return
        if incarnation != self.learner_incarnation:
            return
        self.session.save_checkpoint(to_torch_tree(state), info, best=best, periodic=periodic)

    # ---- the end -------------------------------------------------------------------------

    def _evaluating(self) -> bool:
        self._check_hung_evaluation()
        return self.eval_pending

    def _drain(self, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while condition() and time.monotonic() < deadline:
            self._wait_and_dispatch()

    def _shutdown(self, *, final_eval: bool, stop_reason: str) -> None:
        """Stop sampling, let the learner finish, evaluate and checkpoint one last time."""
        self.stopping = True
        self.store.stop.remote()
        self._drain(lambda: self.learner_calls > 0, SHUTDOWN_TIMEOUT_S)
        if stop_reason == "target_return reached":
            self.final_eval = self.session.last_eval
        elif final_eval:
            self._drain(self._evaluating, self.config.run.eval_timeout_s)
            self.session.last_eval = None
            self._request_eval()
            self._drain(self._evaluating, self.config.run.eval_timeout_s)
            self.final_eval = self.session.last_eval
        self._drain(lambda: self.checkpoint_pending, SHUTDOWN_TIMEOUT_S)
        if len(self.learners) > 1:
            self._check_learners_agree()
        state_ref = self.learner.state.remote()
        info_ref = self.learner.weights.remote() if self.latest_info is None else self.latest_info
        try:
            state = ray.get(state_ref, timeout=SHUTDOWN_TIMEOUT_S)
            info = ray.get(info_ref, timeout=SHUTDOWN_TIMEOUT_S)
        except (RayError, GetTimeoutError) as error:
            logger.error("could not write the final checkpoint: %s", error)
            return
        # also the scheduled step checkpoint when the run ended on or past one
        self.session.save_checkpoint(
            to_torch_tree(state), info, periodic=self.session.checkpoint_due()
        )
        self._drain(lambda: bool(self.pending), 5.0)
        self.session.log_if_due(self.store_stats, force=True)

    def _check_learners_agree(self) -> None:
        """All-reduced learners must hold identical parameters; record and report it."""
        try:
            digests = ray.get(
                [learner.parameters_digest.remote() for learner in self.learners],
                timeout=SHUTDOWN_TIMEOUT_S,
            )
        except (RayError, GetTimeoutError) as error:
            logger.warning("could not compare the learners' parameters: %s", error)
            return
        self.session.learner_digests = digests
        if len(set(digests)) == 1:
            logger.info("%d learners finished with identical parameters", len(digests))
        else:
            logger.error("the learners' parameters differ: %s", digests)

    def _kill_actors(self) -> None:
        handles = [slot.handle for slot in self.workers]
        handles += [*self.learners, self.store, self.evaluator]
        for handle in filter(None, handles):
            with contextlib.suppress(RayError, ValueError):
                ray.kill(handle, no_restart=True)
