"""The single-process trainer: the same workers, store, learner and evaluator as the Ray
runtime, taking turns in one process. For debugging, tests and small problems.

Each round, every worker delivers one chunk into the algorithm's experience store, and the
learner then updates as long as the store can serve a batch: as the samples-per-insert
ratio allows for replay (training every N env steps with K updates is samples_per_insert =
K * batch / N), or while enough fresh unrolls are queued for IMPALA.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_learner_state, load_policy
from rayrl.config import Config
from rayrl.evaluation import Evaluator
from rayrl.session import TrainingSession, TrainResult
from rayrl.worker import RolloutWorker

logger = logging.getLogger(__name__)


def train_local(
    config: Config, session: TrainingSession, resume: dict[str, Any] | None
) -> TrainResult:
    """Train in this process until a stop condition; Ctrl-C stops after a checkpoint."""
    torch.set_num_threads(config.learner.num_threads)
    algorithm = ALGORITHMS[config.algorithm.name]
    workers = [RolloutWorker(config, i) for i in range(config.workers.num_workers)]
    spec = workers[0].spec
    learner = algorithm.make_learner(config, spec)
    evaluator = Evaluator(config)
    store = algorithm.make_store(config, spec)
    counters = session.counters
    replay_path = session.run_dir.replay_path
    if resume is not None:
        load_learner_state(learner, resume, session.run_dir.latest_checkpoint)
        if config.replay.save_with_checkpoint and replay_path.is_file():
            store.load(replay_path)
            logger.info("replay refilled with %d transitions from the checkpoint", len(store))
    elif config.run.init_checkpoint is not None:
        learner.set_policy_weights(load_policy(Path(config.run.init_checkpoint), algorithm.name))

    batch_size = config.learner.batch_size
    policy = learner.get_weights()
    for worker in workers:
        worker.set_weights(policy)
    metrics: dict[str, list[float]] = defaultdict(list)

    def can_update() -> bool:
        return store.can_sample(batch_size, 1, learner.updates)

    def update() -> None:
        (batch,) = store.sample(batch_size, 1, learner.updates)
        result = learner.update(batch)
        if result.priorities is not None:
            store.update_priorities(batch.indices, result.priorities)
        for key, value in result.metrics.items():
            metrics[key].append(value)

    def checkpoint(best: bool = False, periodic: bool = False) -> None:
        if config.replay.save_with_checkpoint and not best:
            store.save(replay_path)
        session.save_checkpoint(
            learner.state_dict(), learner.get_weights(), best=best, periodic=periodic
        )

    stop_reason = None
    try:
        while (stop_reason := session.stop_reason()) is None:
            for worker in workers:
                round_start = time.perf_counter()
                update_s = 0.0
                updates_before = learner.updates
                while not store.can_insert(store.items_per_chunk) and can_update():
                    t0 = time.perf_counter()
                    update()
                    update_s += time.perf_counter() - t0
                chunk, stats = worker.sample(counters.env_steps)
                inserted = store.add(chunk)
                counters.env_steps += stats.env_steps
                counters.episodes += len(stats.episode_returns)
                session.stats.add_chunk(stats, learner.updates)
                session.stats.add_inserted(inserted)
                t0 = time.perf_counter()
                while can_update():
                    update()
                update_s += time.perf_counter() - t0
                done = learner.updates - updates_before
                session.stats.add_updates(
                    dict(metrics),
                    done,
                    update_s,
                    time.perf_counter() - round_start,
                    sampled=done * batch_size,
                )
                metrics.clear()
                if learner.updates - policy.version >= config.learner.sync_interval:
                    policy = learner.get_weights()
                    for w in workers:
                        w.set_weights(policy)
            counters.updates = learner.updates
            if session.eval_due():
                session.eval_started()
                policy = learner.get_weights()
                result = evaluator.evaluate(policy, config.run.eval_episodes, session.video_due())
                if session.record_eval(result, counters.env_steps):
                    checkpoint(best=True)
            if session.checkpoint_due():
                session.checkpoint_started()
                checkpoint(periodic=True)
            session.log_if_due(store.stats())
    except KeyboardInterrupt:
        stop_reason = "interrupted"
        logger.warning("interrupted: writing a final checkpoint")

    counters.updates = learner.updates
    final_eval = session.last_eval if stop_reason == "target_return reached" else None
    if final_eval is None and stop_reason != "interrupted":
        final_eval = evaluator.evaluate(
            learner.get_weights(), config.run.eval_episodes, session.video_due()
        )
        if session.record_eval(final_eval, counters.env_steps):
            checkpoint(best=True)
    checkpoint(periodic=session.checkpoint_due())  # the step one too, if the run ended on it
    session.log_if_due(store.stats(), force=True)
    for worker in workers:
        worker.close()
    evaluator.close()
    return session.result(stop_reason, final_eval)
