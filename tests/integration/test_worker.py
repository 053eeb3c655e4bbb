"""The rollout worker's weight pick-up in its Ray shell: at once between chunks, at the next
env step while a chunk is being sampled (from another thread, as in a Ray actor's
concurrency group). The shell is a plain class here, called from two threads."""

from __future__ import annotations

import threading
import time

from rayrl.algorithms.networks import numpy_state_dict
from rayrl.core import ModelInfo
from rayrl.presets import load_config
from rayrl.ray.worker_service import WorkerService


def make_service() -> WorkerService:
    config = load_config("cartpole_dqn")
    return WorkerService(config.env, config.workers, config.algorithm, 0, 0)


def weights(service: WorkerService, version: int, age_s: float) -> ModelInfo:
    state = numpy_state_dict(service.worker.policy.network)
    return ModelInfo(version, state, published_at=time.time() - age_s)


def test_weights_sent_between_chunks_are_in_use_at_once():
    service = make_service()
    service.sample()
    service.set_weights(weights(service, 7, age_s=0.010))
    assert service.worker.policy.version == 7  # before any new chunk is asked for
    _, stats = service.sample()
    # reported with the next chunk: from publication to arrival, not to that chunk's start
    (latency,) = stats.sync_latencies_s
    assert 0.010 <= latency < 0.5


def test_weights_sent_while_sampling_are_used_from_the_next_env_step():
    service = make_service()
    policy = service.worker.policy
    policy_act = policy.act
    steps_seen: list[int] = []
    sent = threading.Event()

    def act(*args, **kwargs):
        steps_seen.append(policy.version)
        if len(steps_seen) == 3:  # mid-chunk, from another thread (a Ray actor's group)
            sender = threading.Thread(target=service.set_weights, args=(weights(service, 5, 0),))
            sender.start()
            sender.join()
            sent.set()
        return policy_act(*args, **kwargs)

    policy.act = act
    _, stats = service.sample()
    assert sent.is_set()
    assert steps_seen[:3] == [0, 0, 0]  # not applied under the running step
    assert set(steps_seen[3:]) == {5}
    assert len(stats.sync_latencies_s) == 1


def test_weights_that_arrive_after_the_last_step_are_in_use_before_the_next_chunk():
    service = make_service()
    original = service.worker.sample

    def sample_then_receive(*args, **kwargs):
        result = original(*args, **kwargs)
        service.set_weights(weights(service, 9, age_s=0.0))  # lands in the inbox
        return result

    service.worker.sample = sample_then_receive
    _, stats = service.sample()
    assert stats.sync_latencies_s == []
    assert service.worker.policy.version == 9  # applied as the sample call ended
    service.worker.sample = original
    _, stats = service.sample()
    assert len(stats.sync_latencies_s) == 1  # and reported with the next chunk
