"""Replay memory per stored Atari transition (84x84 frames, stack of 4).

Fills a buffer sized by `make_buffer` from the pong_dqn preset with chunks shaped exactly
like its workers' (envs per worker, steps per chunk, n-step, frame stack; new random frames
every step, an episode end every ~2,000 steps) and reads the process's resident memory
before and after. Also reports the naive cost of storing both stacks per transition.

    python bench/replay_memory.py                     # 1M transitions, uniform and PER
    python bench/replay_memory.py --capacity 200000   # smaller, faster
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np

from rayrl.config import load_config, with_overrides
from rayrl.core import StepBatch
from rayrl.processing import NStepProcessor
from rayrl.replay import make_buffer

PRESET = load_config("pong_dqn")
ENVS = PRESET.workers.envs_per_worker
STEPS = PRESET.workers.steps_per_chunk
N_STEP = PRESET.algorithm.n_step
STACK = PRESET.env.frame_stack
FRAME = (84, 84)


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def worker_chunks(rng: np.random.Generator):
    """Chunks as a worker makes them, from a synthetic Atari-like stream."""
    processor = NStepProcessor(ENVS, n_step=N_STEP, gamma=0.99, frame_stack=STACK)
    obs = np.zeros((ENVS, STACK, *FRAME), dtype=np.uint8)
    obs[:, -1] = rng.integers(0, 255, size=(ENVS, *FRAME), dtype=np.uint8)
    while True:
        for _ in range(STEPS):
            new = rng.integers(0, 255, size=(ENVS, *FRAME), dtype=np.uint8)
            next_obs = np.concatenate([obs[:, 1:], new[:, None]], axis=1)
            ended = rng.random(ENVS) < 1 / 2000
            after = next_obs.copy()
            after[ended] = 0
            after[ended, -1] = rng.integers(0, 255, size=(int(ended.sum()), *FRAME))
            processor.process(
                StepBatch(
                    obs=obs,
                    actions=rng.integers(0, 6, size=ENVS),
                    rewards=np.zeros(ENVS, np.float32),
                    terminated=ended,
                    truncated=np.zeros(ENVS, bool),
                    next_obs=next_obs,
                    env_reset=ended,
                ),
                policy_version=0,
            )
            obs = after
        yield processor.flush()


def measure(kind: str, capacity: int, seed: int) -> dict[str, float]:
    gc.collect()
    before = rss_bytes()
    config = PRESET
    for key, value in (("capacity", capacity), ("prioritized", kind == "prioritized")):
        config = with_overrides(config, [f"replay.{key}={value}"])
    buffer = make_buffer(config, STACK, seed=seed)
    rng = np.random.default_rng(seed)
    chunks = worker_chunks(rng)
    start = time.perf_counter()
    while buffer.inserted < capacity + 10 * ENVS * STEPS:  # full, and wrapped around
        buffer.add(next(chunks))
    fill_s = time.perf_counter() - start
    batch = buffer.sample(32)
    assert batch.obs.shape == (32, STACK, *FRAME)
    used = rss_bytes() - before
    result = {
        "size": len(buffer),
        "rss_gib": used / 2**30,
        "bytes_per_transition": used / len(buffer),
        "frames_per_transition": (buffer.frames_written - buffer._chunks[0].first_frame)
        / len(buffer),
        "fill_s": fill_s,
    }
    del buffer, chunks
    gc.collect()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    naive = 2 * STACK * FRAME[0] * FRAME[1]
    print(
        f"capacity {args.capacity:,} transitions, chunks of {ENVS} envs x {STEPS} steps, "
        f"n-step {N_STEP}, stack {STACK}; naive storage (both stacks): {naive:,} B/transition"
    )
    for kind in ("uniform", "prioritized"):
        runs = [measure(kind, args.capacity, seed) for seed in range(args.repeats)]
        per = [r["bytes_per_transition"] for r in runs]
        gib = [r["rss_gib"] for r in runs]
        print(
            f"{kind:>11}: {statistics.median(per):,.0f} B/transition "
            f"(min {min(per):,.0f}, max {max(per):,.0f}); "
            f"{statistics.median(gib):.2f} GiB resident for {runs[0]['size']:,} transitions; "
            f"{runs[0]['frames_per_transition']:.3f} frames/transition; "
            f"{naive / statistics.median(per):.1f}x less than naive; "
            f"fill {statistics.median([r['fill_s'] for r in runs]):.0f} s"
        )


if __name__ == "__main__":
    main()
