"""The rollout worker's weight pick-up: at once between chunks, at the next env step while
a chunk is being sampled (from another thread, as in a Ray actor)."""

from __future__ import annotations

import threading
import time

from rayrl.algorithms.networks import numpy_state_dict
from rayrl.core import ModelInfo
from rayrl.presets import load_config
from rayrl.worker import RolloutWorker


def make_worker() -> RolloutWorker:
    config = load_config("cartpole_dqn")
    return RolloutWorker(config.env, config.workers, config.algorithm, 0, 0)


def weights(worker: RolloutWorker, version: int, age_s: float) -> ModelInfo:
    state = numpy_state_dict(worker.policy.network)
    return ModelInfo(version, state, published_at=time.time() - age_s)


def test_weights_sent_between_chunks_are_in_use_at_once():
    worker = make_worker()
    worker.sample()
    worker.set_weights(weights(worker, 7, age_s=0.010))
    assert worker.policy.version == 7  # before any new chunk is asked for
    _, stats = worker.sample()
    # reported with the next chunk: from publication to arrival, not to that chunk's start
    (latency,) = stats.sync_latencies_s
    assert 0.010 <= latency < 0.5


def test_weights_sent_while_sampling_are_used_from_the_next_env_step():
    worker = make_worker()
    policy_act = worker.policy.act
    steps_seen: list[int] = []
    sent = threading.Event()

    def act(*args, **kwargs):
        steps_seen.append(worker.policy.version)
        if len(steps_seen) == 3:  # mid-chunk, from another thread (a Ray actor's group)
            sender = threading.Thread(target=worker.set_weights, args=(weights(worker, 5, 0),))
            sender.start()
            sender.join()
            sent.set()
        return policy_act(*args, **kwargs)

    worker.policy.act = act
    _, stats = worker.sample()
    assert sent.is_set()
    assert steps_seen[:3] == [0, 0, 0]  # not applied under the running step
    assert set(steps_seen[3:]) == {5}
    assert len(stats.sync_latencies_s) == 1
