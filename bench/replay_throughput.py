"""Replay actor throughput with Atari frames, against what a learner consumes.

A real replay actor (`ExperienceService` as the Ray runtime creates it, rate limit off) fed
with chunks shaped like the pong_dqn preset's workers' (8 envs x 128 steps, n-step 3, stack
4): transitions inserted per second (chunks put into the object store, then added by
reference, as workers' chunks are); batches sampled per second for batch 32 and 256, asked
for the way the learner asks (`learner.batches_per_request` per call, two calls in flight)
and fetched into the caller. The learner's own consumption is measured side by side: Nature
CNN updates per second on this machine's CPU.

    python bench/replay_throughput.py --repeats 3
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time
from collections import deque

import ray
from common import atari_chunks, machine, median_range

SECONDS = 5.0


def measure_inserts(replay, chunks) -> float:
    refs = [ray.put(c) for c in chunks]
    start = time.perf_counter()
    inserted = sum(ray.get([replay.add.remote(r) for r in refs]))
    return inserted / (time.perf_counter() - start)


def measure_samples(replay, batch_size: int, per_request: int) -> float:
    pending: deque = deque(replay.sample.remote(batch_size, per_request, 0) for _ in range(2))
    batches, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        batches += len(ray.get(pending.popleft()))
        pending.append(replay.sample.remote(batch_size, per_request, 0))
    return batches / (time.perf_counter() - start)


def learner_batches_per_s(config, batch_size: int) -> float:
    import torch

    from rayrl.algorithms import ALGORITHMS
    from rayrl.envs import env_spec
    from rayrl.families.off_policy import OFF_POLICY, make_buffer
    from rayrl.presets import with_overrides

    torch.set_num_threads(1)
    config = with_overrides(config, [f"learner.batch_size={batch_size}"])
    spec = env_spec(config.env)
    learner = ALGORITHMS["dqn"].make_learner(config.algorithm, spec, config.learner, config.run)
    buffer = make_buffer(OFF_POLICY.store_settings(config, spec))
    for chunk in itertools.islice(atari_chunks(8, 128, 3, 4), 4):
        buffer.add(chunk)
    batch = buffer.sample(batch_size)
    learner.update(batch)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        learner.update(batch)
        count += 1
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from rayrl.envs import env_spec
    from rayrl.presets import load_config, with_overrides
    from rayrl.ray.factory import ActorFactory

    config = with_overrides(
        load_config("pong_dqn"),
        [
            "algorithm.replay.capacity=200000",
            "algorithm.replay.min_size=2048",
            "algorithm.replay.samples_per_insert=null",
        ],
    )
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    factory = ActorFactory(config, env_spec(config.env), "bench", learner_gpus=0)
    chunks = list(itertools.islice(atari_chunks(8, 128, 3, 4), 40))
    per_request = config.learner.batches_per_request
    results: dict[str, list[float]] = {"inserts": [], "b32": [], "b256": []}
    learner: dict[int, list[float]] = {32: [], 256: []}
    for _ in range(args.repeats):
        replay = factory.experience(None)
        results["inserts"].append(measure_inserts(replay, chunks))
        results["b32"].append(measure_samples(replay, 32, per_request))
        results["b256"].append(measure_samples(replay, 256, per_request))
        ray.kill(replay)
        for batch_size in learner:
            learner[batch_size].append(learner_batches_per_s(config, batch_size))
    ray.shutdown()
    print(
        f"Replay actor, Atari frames (84x84, stack 4), {machine()}; median (min-max) of "
        f"{args.repeats}:"
    )
    print(f"  inserts: {median_range(results['inserts'], '{:,.0f}')} transitions/s")
    for batch_size, key in ((32, "b32"), (256, "b256")):
        ratio = [r / c for r, c in zip(results[key], learner[batch_size], strict=True)]
        print(
            f"  batch {batch_size:>3}: {median_range(results[key], '{:,.0f}')} batches/s sampled; "
            f"the CPU learner consumes {median_range(learner[batch_size], '{:,.1f}')}/s; "
            f"ratio {median_range(ratio, '{:,.0f}')}x"
        )


if __name__ == "__main__":
    main()
