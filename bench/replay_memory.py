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
from dataclasses import replace

from common import atari_chunks, rss_bytes

from rayrl.envs import env_spec
from rayrl.families.off_policy import OFF_POLICY, make_buffer
from rayrl.presets import load_config, with_overrides

PRESET = load_config("pong_dqn")
ENVS = PRESET.workers.envs_per_worker
STEPS = PRESET.algorithm.steps_per_chunk
N_STEP = PRESET.algorithm.n_step
STACK = PRESET.env.atari.frame_stack
FRAME = (84, 84)


def measure(kind: str, capacity: int, seed: int) -> dict[str, float]:
    gc.collect()
    before = rss_bytes()
    config = with_overrides(
        PRESET,
        [
            f"algorithm.replay.capacity={capacity}",
            f"algorithm.replay.prioritized={kind == 'prioritized'}",
        ],
    )
    settings = OFF_POLICY.store_settings(config, env_spec(config.env))
    buffer = make_buffer(replace(settings, seed=seed))
    chunks = atari_chunks(ENVS, STEPS, N_STEP, STACK, seed)
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
