"""The experience service's waiting: callers wait for the store, and are released; and its
process does not import torch."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from ray import cloudpickle  # how Ray pickles what it sends an actor

from rayrl.algorithms import ALGORITHMS
from rayrl.core import StepBatch
from rayrl.envs import env_spec
from rayrl.families.on_policy import ON_POLICY, QueueSettings
from rayrl.presets import load_config
from rayrl.processing import UnrollProcessor
from rayrl.ray.experience_service import ExperienceService


def unrolls(version: int, num_envs: int = 2):
    processor = UnrollProcessor(num_envs, steps_per_chunk=1)
    processor.process(
        StepBatch(
            obs=np.zeros((num_envs, 1), np.float32),
            actions=np.zeros(num_envs, np.int64),
            rewards=np.zeros(num_envs, np.float32),
            terminated=np.zeros(num_envs, bool),
            truncated=np.zeros(num_envs, bool),
            next_obs=np.zeros((num_envs, 1), np.float32),
            env_reset=np.zeros(num_envs, bool),
            extras={"logp": np.zeros(num_envs, np.float32)},
        ),
        version,
    )
    return processor.flush()


def in_thread(call, *args):
    results: list = []
    thread = threading.Thread(target=lambda: results.append(call(*args)), daemon=True)
    thread.start()
    return thread, results


def test_a_queue_full_of_stale_unrolls_lets_the_waiting_worker_in():
    """The learner's request drops the stale unrolls; the worker waiting for room must wake
    up, or both wait forever."""
    service = ExperienceService(ON_POLICY, QueueSettings(4, max_policy_lag=2, items_per_chunk=2))
    service.add(unrolls(version=0))
    service.add(unrolls(version=0))  # full
    adder, added = in_thread(service.add, unrolls(version=9))
    adder.join(0.2)
    assert adder.is_alive()  # no room yet
    sampler, batches = in_thread(service.sample, 2, 1, 10)  # the version-0 unrolls are stale
    adder.join(5)
    sampler.join(5)
    assert added == [2]
    assert [b.policy_version for b in batches[0]] == [9]
    assert service.stats().dropped == 4


def test_stop_releases_every_waiting_caller():
    service = ExperienceService(ON_POLICY, QueueSettings(2, max_policy_lag=2, items_per_chunk=2))
    service.add(unrolls(version=0))
    adder, added = in_thread(service.add, unrolls(version=0))
    sampler, batches = in_thread(service.sample, 8, 1, 0)
    service.stop()
    adder.join(5)
    sampler.join(5)
    assert added == [0]
    assert batches == [[]]


@pytest.mark.parametrize("preset", ["cartpole_dqn", "cartpole_impala"])
def test_the_store_actor_starts_without_torch(preset):
    """What Ray sends the store's process (its class, family and settings, pickled as Ray
    pickles them) loads in a fresh interpreter without importing torch, whose import would
    cost the cores about 1.7 s while the run starts."""
    config = load_config(preset)
    family = ALGORITHMS[config.algorithm.name].family
    settings = family.store_settings(config, env_spec(config.env))
    sent = cloudpickle.dumps((ExperienceService, family, settings))
    check = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('rayrl.algo')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check], input=sent, capture_output=True, check=True
    )
    assert loaded.stdout.decode().strip() == "[]"
