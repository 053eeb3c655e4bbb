"""The local runtime: the same workers, store, learner and evaluator as the Ray runtime,
taking turns in one process. For debugging, tests and small problems.

Each round, every worker delivers one chunk into the algorithm's experience store, and the
learner then updates as long as the store can serve a batch: as the samples-per-insert
ratio allows for replay (training every N env steps with K updates is samples_per_insert =
K * batch / N), or while enough fresh unrolls are queued for on-policy algorithms. How the
run stops and ends is `rayrl.run_lifecycle`'s.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_learner_state, warm_start
from rayrl.config import Config
from rayrl.contract import as_persistent
from rayrl.core import EvalResult, StoreStats
from rayrl.evaluation import Evaluator
from rayrl.replay.store import DAMAGED
from rayrl.run_lifecycle import TrainResult, finish_run, run_until_stopped
from rayrl.session import TrainingSession
from rayrl.worker import RolloutWorker

logger = logging.getLogger(__name__)


class LocalRuntime:
    """One process: `round` is one turn of every worker with the learner in between."""

    def __init__(
        self, config: Config, session: TrainingSession, resume: dict[str, Any] | None
    ) -> None:
        self.config = config
        self.session = session
        session.metrics.phase_done("setup")
        algorithm = ALGORITHMS[config.algorithm.name]
        self.workers = [
            RolloutWorker(config.env, config.workers, config.algorithm, config.run.seed, i)
            for i in range(config.workers.num_workers)
        ]
        spec = self.workers[0].spec
        self.learner = algorithm.build_learner(config.algorithm, spec, config.learner, config.run)
        self.evaluator = Evaluator(
            config.env, config.algorithm, config.run.eval_episodes, config.run.seed
        )
        self.store = algorithm.family.make_store(algorithm.family.store_settings(config, spec))
        session.metrics.phase_done("actors")  # the parts the Ray runtime makes actors of
        # after the workers, which set one thread for their processes (the Ray runtime's):
        # in this one process, the learner's setting is the one that counts
        torch.set_num_threads(config.learner.num_threads)
        self.persist = algorithm.family.persists(config.algorithm)
        replay_path = session.run_dir.replay_path
        if resume is not None:
            load_learner_state(self.learner, resume, session.run_dir.latest_checkpoint)
            if self.persist and session.refill_from(replay_path):
                self._refill(replay_path, algorithm.family.store_settings(config, spec))
        elif (weights := warm_start(config.run.init_checkpoint, algorithm.name)) is not None:
            self.learner.set_policy_weights(weights)
        self.policy = self.learner.get_weights()
        for worker in self.workers:
            worker.set_weights(self.policy)
        self.update_metrics: dict[str, list[float]] = defaultdict(list)

    def _refill(self, path: Path, settings: Any) -> None:
        """Refill the store from the replay saved with the checkpoint; one damaged past
        what `saved_replay_problem` reads (a member's checksum) leaves it empty, said."""
        try:
            as_persistent(self.store).load(path)
        except DAMAGED as error:
            logger.warning(
                "%s not used: it is damaged (%s: %s); the replay starts empty",
                path,
                type(error).__name__,
                error,
            )
            self.store = ALGORITHMS[self.config.algorithm.name].family.make_store(settings)
            return
        size = self.store.stats().size
        logger.info("replay refilled with %d transitions from the checkpoint", size)

    # ---- one round -----------------------------------------------------------------------

    def _can_update(self) -> bool:
        return self.store.can_sample(self.config.learner.batch_size, 1, self.learner.updates)

    def _update(self) -> None:
        (batch,) = self.store.sample(self.config.learner.batch_size, 1, self.learner.updates)
        result = self.learner.update(batch)
        if result.priorities is not None:
            self.store.update_priorities(batch.indices, result.priorities)
        for key, value in result.metrics.items():
            self.update_metrics[key].append(value)

    def _updates_while(self, condition: Any) -> float:
        """Update while `condition()` holds, the items too old for the learner dropped
        before each check (which may make room for a chunk); returns the seconds it took."""
        start = time.perf_counter()
        while True:
            self.store.drop_stale(self.learner.updates)
            if not condition():
                return time.perf_counter() - start
            self._update()

    def round(self) -> None:
        session, counters = self.session, self.session.counters
        for worker in self.workers:
            round_start = time.perf_counter()
            updates_before = self.learner.updates
            # make room first when the store refuses the chunk (the replay ratio, a full queue)
            update_s = self._updates_while(
                lambda: not self.store.can_insert(self.store.items_per_chunk) and self._can_update()
            )
            chunk, stats = worker.sample(counters.env_steps)
            inserted = self.store.add(chunk)
            counters.env_steps += stats.env_steps
            counters.episodes += len(stats.episode_returns)
            session.metrics.add_chunk(stats, self.learner.updates)
            session.metrics.add_inserted(inserted)
            update_s += self._updates_while(self._can_update)
            done = self.learner.updates - updates_before
            session.metrics.add_updates(
                dict(self.update_metrics),
                done,
                update_s,
                time.perf_counter() - round_start,
                sampled=done * self.config.learner.batch_size,
                nonfinite=self.learner.nonfinite,
            )
            self.update_metrics.clear()
            counters.updates = self.learner.updates
            if self.learner.updates - self.policy.version >= self.config.learner.sync_interval:
                self._publish()
        # the checkpoint first: an evaluation's record then goes with the checkpoint of the
        # weights it scored (a sweep's trial reports the two together, and PBT copies them)
        if session.checkpoint_due():
            session.checkpoint_started()
            self._checkpoint(periodic=True)
        if session.eval_due():
            session.eval_started()
            self._evaluate()
        session.log_if_due(self.store.stats())

    def _publish(self) -> None:
        self.policy = self.learner.get_weights()
        for worker in self.workers:
            worker.set_weights(self.policy)

    def _evaluate(self) -> EvalResult:
        result = self.evaluator.evaluate(
            self.learner.get_weights(), self.config.run.eval_episodes, self.session.video_due()
        )
        if self.session.record_eval(result, self.session.counters.env_steps):
            self._checkpoint(best=True)
        return result

    def _checkpoint(self, best: bool = False, periodic: bool = False) -> bool:
        """Save the learner (and the replay beside it, unless `best`); whether the replay
        was saved (True when it was not asked for)."""
        replay_saved = True
        if self.persist and not best:
            path = self.session.run_dir.replay_path
            save = functools.partial(
                as_persistent(self.store).save, path, self.session.counters.env_steps
            )
            replay_saved = self.session.writer.write("replay", f"the replay to {path}", save)
        self.session.save_checkpoint(
            self.learner.state_dict(), self.learner.get_weights(), best=best, periodic=periodic
        )
        return replay_saved

    # ---- the end (rayrl.run_lifecycle.RunEnd) -------------------------------------------------

    def stop_sampling(self) -> None:
        """Nothing runs between rounds: sampling and learning stopped with the last one."""

    def final_evaluation(self) -> EvalResult | None:
        if self.session.evaluated_now():
            logger.info("the weights at these env steps are evaluated already")
            return self.session.last_eval
        return self._evaluate()

    def final_checkpoint(self, periodic: bool) -> None:
        self.session.counters.updates = self.learner.updates
        if not self._checkpoint(periodic=periodic):
            self.session.replay_not_saved("its save failed")

    def store_stats(self) -> StoreStats | None:
        return self.store.stats()

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.evaluator.close()


def train_local(
    config: Config, session: TrainingSession, resume: dict[str, Any] | None
) -> TrainResult:
    """Train in this process until a stop condition; Ctrl-C stops after a checkpoint."""
    session.begin()
    runtime = LocalRuntime(config, session, resume)
    try:
        reason = run_until_stopped(session, runtime.round)
        return finish_run(session, reason, runtime)
    finally:
        runtime.close()
