"""The driver: a small event loop over the futures dispatcher and one supervisor per kind of
actor (rollout workers, learners, the experience store, the evaluator).

It holds no experience and no tensors. It makes the supervisors and wires them, in one
place: each gets the run's `SupervisorContext` (`rayrl.ray.context`) and the supervisors it
asks (workers and learners ask the store's for its actor), and its `Deaths` routes to all
four. Each round it lets every supervisor submit its work (weights, chunks, updates), asks
for an evaluation or a checkpoint when the session says one is due, and dispatches whatever
calls finished; the supervisors own their actors' lives, restart budgets and timeouts. New
weights flow learner -> `PublishedWeights` (a reference the driver owns) -> every worker, the
evaluator and the checkpoints. How the run stops and ends is `rayrl.run_lifecycle`'s; this
module supplies the Ray side of it (`RunEnd`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.exceptions import RayError

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_checkpoint, to_torch_tree, warm_start
from rayrl.config import Config
from rayrl.core import EvalResult, ModelInfo, StoreStats
from rayrl.ray.context import SupervisorContext
from rayrl.ray.dispatcher import Deaths, Dispatcher
from rayrl.ray.evaluator import EvaluatorSupervisor
from rayrl.ray.factory import ActorFactory, machine_monitor
from rayrl.ray.learner_service import LearnerStart
from rayrl.ray.learners import LearnerSupervisor
from rayrl.ray.store import StoreSupervisor
from rayrl.ray.watchdog import Watchdog
from rayrl.ray.workers import WorkerSupervisor
from rayrl.run_lifecycle import TrainResult, finish_run, run_until_stopped
from rayrl.session import TrainingSession

logger = logging.getLogger(__name__)

WAIT_S = 0.2
"""Longest the loop waits for a call before checking timers (hangs, logs, stop)."""
SHUTDOWN_TIMEOUT_S = 60.0
"""Longest the end of a run waits for the learner's final state and the replay saved beside
it, all their calls together."""
LEARNER_DRAIN_S = 20.0
"""Longest the end of a run waits for the learner's `train` calls in flight; the final
state is asked for after them in any case."""
FINAL_DRAIN_S = 5.0
"""Longest the end of a run waits for the calls still outstanding after the checkpoint."""
END_TIMEOUT_S = LEARNER_DRAIN_S + SHUTDOWN_TIMEOUT_S + FINAL_DRAIN_S
"""The most the end of an interrupted run waits for its actors (an interrupted run is not
evaluated); the grace periods that the cluster files give a stopped job leave room for it
plus Ray's shutdown and W&B's (tests/integration/test_cluster_files.py checks them)."""


class RayDriver:
    def __init__(
        self,
        config: Config,
        session: TrainingSession,
        resume: dict[str, Any] | None,
        factory: ActorFactory,
        dispatcher: Dispatcher | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        """`dispatcher` and `watchdog`: Ray's and the machines' by default (unit tests pass
        fakes)."""
        self.config = config
        self.session = session
        self.resume = resume
        self.factory = factory
        self.dispatcher = dispatcher if dispatcher is not None else Dispatcher()
        family = ALGORITHMS[config.algorithm.name].family
        self.persist = family.persists(config.algorithm)
        self.deaths = Deaths()
        context = SupervisorContext(
            factory,
            self.dispatcher,
            self.deaths,
            config.faults,
            session.counters,
            session.metrics,
            watchdog=watchdog if watchdog is not None else Watchdog(start_monitor=machine_monitor),
        )
        self.weights = context.weights
        self.watchdog = context.watchdog
        self.store = StoreSupervisor(context, family.store, session.writer, self._saved_buffer)
        self.workers = WorkerSupervisor(
            context,
            self.store,
            config.workers,
            chunk_env_steps=family.chunk_steps(config.algorithm) * config.workers.envs_per_worker,
            total_env_steps=config.run.total_env_steps,
            pace=family.sampling_pace(config, factory.spec),
            starts_trained=resume is not None or config.run.init_checkpoint is not None,
        )
        self.learners = LearnerSupervisor(
            context,
            self.store,
            sync_interval=config.learner.sync_interval,
            restore_point=self._restore_point,
        )
        self.evaluator = EvaluatorSupervisor(context, config.run.eval_timeout_s)
        self.deaths.route_to(self.store, self.workers, self.learners, self.evaluator)
        self._checkpoint_ref: Any = None
        """The learner state asked for the periodic checkpoint under way, if any."""

    # ---- set-up ------------------------------------------------------------------------------

    def _start(self) -> None:
        """Create the actors that training needs at once (their processes start in
        parallel); nothing here waits for an actor. The evaluator starts later (`step`)."""
        self.store.start()
        if self.resume is not None:
            start = LearnerStart(state=self.resume["learner"])
        else:
            start = LearnerStart(warm_start=self._warm_start())
        self.learners.start(start)
        self.workers.start()

    def _warm_start(self) -> ModelInfo | None:
        return warm_start(self.config.run.init_checkpoint, self.config.algorithm.name)

    def _saved_buffer(self) -> Path | None:
        """The buffer saved with the checkpoint on disk, to refill a new store from (none
        before the first checkpoint, or when the replay on disk does not go with it)."""
        path = self.session.run_dir.replay_path
        return path if self.persist and self.session.refill_from(path) else None

    def _restore_point(self) -> tuple[LearnerStart, str]:
        """Where learners that replace a dead one start from, and how to say it."""
        path = self.session.run_dir.latest_checkpoint
        if path.is_file():
            state = load_checkpoint(path, algorithm=self.config.algorithm.name)["learner"]
            return LearnerStart(state=state), f"{path} ({int(state['updates'])} updates)"
        if self.resume is not None:
            return LearnerStart(state=self.resume["learner"]), "the state the run resumed from"
        return LearnerStart(warm_start=self._warm_start()), "scratch (no checkpoint yet)"

    # ---- the loop ----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        try:
            reason = run_until_stopped(self.session, self.step, start=self._start)
            return finish_run(self.session, reason, self)
        finally:
            self._kill_actors()  # also when the loop fails: no actor outlives its run

    def step(self) -> None:
        self.workers.send_weights()
        self.workers.request_chunks()
        self.learners.request_updates()
        session = self.session
        if not self.evaluator.started and session.metrics.started_up:
            self.evaluator.start()
        if self.weights.available:  # the learner has published its first weights
            if session.eval_due() and self.evaluator.available and not self.evaluator.pending:
                self._request_eval()
            if session.checkpoint_due() and not self._checkpoint_pending:
                self._request_checkpoint(periodic=True)
        self.dispatcher.poll(WAIT_S)
        self.watchdog.tick()
        self.workers.check_hangs()
        self.learners.watch()
        self.store.watch()
        self.evaluator.check_hung()
        if session.log_due():
            self.store.refresh_stats()
        session.log_if_due(self.store.latest)

    # ---- evaluation and checkpoints ----------------------------------------------------------

    def _request_eval(self) -> None:
        self.session.eval_started()
        info = self.weights.info if self.weights.available else self.learners.weights()
        env_steps = self.session.counters.env_steps

        def on_result(result: EvalResult) -> None:
            if self.session.record_eval(result, env_steps):
                self._request_checkpoint(best=True, policy=info)

        self.evaluator.request(
            info, self.config.run.eval_episodes, self.session.video_due(), on_result
        )

    @property
    def _checkpoint_pending(self) -> bool:
        """A periodic checkpoint waits for the learner's state (none when its call was
        dropped: its learner was replaced, or an interrupt landed before its handler)."""
        ref = self._checkpoint_ref
        return ref is not None and self.dispatcher.is_pending(ref)

    def _request_checkpoint(
        self, *, periodic: bool = False, best: bool = False, policy: Any = None
    ) -> None:
        """Ask the learner for its state without waiting; save when it arrives. `policy` is
        the weights to store as the acting policy (the evaluated ones for `best.pt`). None
        while the learner is being restored: a periodic checkpoint stays due, a best one is
        skipped (said)."""
        if not self.learners.handles:
            if best:
                logger.warning("best checkpoint skipped: the learner is being restored")
            return
        policy = policy if policy is not None else self.weights.info
        state_ref = self.learners.state()
        env_steps = self.session.counters.env_steps  # the checkpoint's, and its replay's
        if periodic:
            self._checkpoint_ref = state_ref
            self.session.checkpoint_started()
            if self.persist:
                self.store.save(self.session.run_dir.replay_path, env_steps)

        def save(state: dict[str, Any]) -> None:
            try:
                info: ModelInfo = self.dispatcher.get(policy)
            except RayError as error:
                logger.warning("checkpoint skipped: its weights are lost (%s)", error)
                return
            self.session.save_checkpoint(
                to_torch_tree(state), info, best=best, periodic=periodic, env_steps=env_steps
            )

        def failed(error: BaseException) -> None:
            logger.warning("checkpoint skipped: %s", error)
            self.deaths.handle(error)

        self.dispatcher.submit(state_ref, save, failed, self.learners.life)

    # ---- the end (rayrl.run_lifecycle.RunEnd) ---------------------------------------------------

    def stop_sampling(self) -> None:
        """No more chunks or updates; the learner finishes the calls it has."""
        if self.learners.placement is not None:  # for the run's result
            self.session.placement["learner"] = self.learners.placement
        self.workers.stop()
        self.learners.stop()
        self.store.stop()
        self.dispatcher.drain(lambda: self.learners.busy, LEARNER_DRAIN_S)

    def _evaluating(self) -> bool:
        """An evaluation runs, or the evaluator's replacement is due soon."""
        self.evaluator.check_hung()
        return self.evaluator.pending or not self.evaluator.available

    def final_evaluation(self) -> EvalResult | None:
        if not self.learners.handles:
            logger.warning("no final evaluation: no learner is running")
            return None
        timeout = self.config.run.eval_timeout_s
        if not self.evaluator.started:  # the run ended before it started up
            self.evaluator.start()
        self.dispatcher.drain(self._evaluating, timeout)
        if not self.evaluator.available:
            logger.warning("no final evaluation: the evaluator is being replaced")
            return None
        if self.session.evaluated_now():
            logger.info("the weights at these env steps are evaluated already")
            return self.session.last_eval
        self.session.last_eval = None
        self._request_eval()
        self.dispatcher.drain(self._evaluating, timeout)
        return self.session.last_eval

    def final_checkpoint(self, periodic: bool) -> None:
        if not self.learners.handles or not self.learners.started:
            logger.warning(
                "no final checkpoint: no learner is running (it is being restored, or waits "
                "for a node); the checkpoints written before are kept"
            )
            return
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S  # for all of the learner's calls
        self.dispatcher.drain(
            lambda: self._checkpoint_pending, max(0.0, deadline - time.monotonic())
        )
        env_steps = self.session.counters.env_steps  # sampling has stopped: the final count
        replay_saved: list[bool] = []
        if self.persist and self.store.handle is not None:
            # stamped with the checkpoint's count, waited for below
            self.store.save(self.session.run_dir.replay_path, env_steps, replay_saved.append)
        if len(self.learners.handles) > 1:
            self._check_learners_agree(deadline)
        info = self.weights.info if self.weights.available else self.learners.weights()
        fetched = self._fetch([self.learners.state(), info], deadline)
        if isinstance(fetched, str):
            logger.error("could not write the final checkpoint: %s", fetched)
        else:
            state, weights = fetched
            self.session.save_checkpoint(
                to_torch_tree(state), weights, periodic=periodic, env_steps=env_steps
            )
        if self.persist:
            self._wait_for_replay(replay_saved, deadline)
        self.dispatcher.drain(lambda: len(self.dispatcher) > 0, FINAL_DRAIN_S)

    def _wait_for_replay(self, saved: list[bool], deadline: float) -> None:
        """Wait until `deadline` for the replay saved beside the final checkpoint (`saved`
        gets its outcome); say in `end_problems` when it was not saved."""
        if self.store.handle is None and not saved:
            self.session.replay_not_saved("its actor was being restarted")
            return
        remaining_s = max(0.0, deadline - time.monotonic())
        self.dispatcher.drain(lambda: not saved and self.store.handle is not None, remaining_s)
        if not saved:
            self.session.replay_not_saved(
                f"its save did not finish within the end's {SHUTDOWN_TIMEOUT_S:.0f} s for "
                "the learner's state and the replay"
            )
        elif not saved[0]:
            self.session.replay_not_saved("its save failed")

    def store_stats(self) -> StoreStats | None:
        return self.store.latest

    def _fetch(self, refs: list[Any], deadline: float) -> list[Any] | str:
        """The values of `refs` by `deadline` (`time.monotonic()`), or what went wrong."""
        values: dict[int, Any] = {}
        errors: list[BaseException] = []
        for index, ref in enumerate(refs):
            self.dispatcher.submit(ref, self._store_in(values, index), errors.append)
        finished = self.dispatcher.drain(
            lambda: not errors and len(values) < len(refs),
            max(0.0, deadline - time.monotonic()),
        )
        if errors:
            return str(errors[0])
        if not finished:
            return f"no answer within {SHUTDOWN_TIMEOUT_S:.0f} s"
        return [values[index] for index in range(len(refs))]

    @staticmethod
    def _store_in(values: dict[int, Any], index: int) -> Callable[[Any], None]:
        return lambda value: values.__setitem__(index, value)

    def _check_learners_agree(self, deadline: float) -> None:
        """All-reduced learners must hold identical parameters; record and report it."""
        digests = self._fetch(self.learners.digests(), deadline)
        if isinstance(digests, str):
            logger.warning("could not compare the learners' parameters: %s", digests)
            return
        self.session.learner_digests = digests
        if len(set(digests)) == 1:
            logger.info("%d learners finished with identical parameters", len(digests))
        else:
            logger.error("the learners' parameters differ: %s", digests)

    def _kill_actors(self) -> None:
        handles = [*self.workers.handles(), *self.learners.handles]
        handles += [self.store.handle, self.evaluator.handle]
        for handle in filter(None, handles):
            with contextlib.suppress(RayError, ValueError):
                self.factory.kill(handle)
        with contextlib.suppress(RayError, ValueError):
            self.watchdog.close()
