"""Atari env throughput: ale-py's C++ vector env vs gymnasium's Python wrappers.

Both produce the same DeepMind observations (no-op starts, frame skip 4 with max-pool,
84x84 grayscale, stack of 4) for Pong with random actions, side by side in one run:

- `ale_vector`: `ale_py.vector_env.AtariVectorEnv` (what rayrl uses), `--threads` threads;
- `rayrl_env`: the same through rayrl's autoreset adapter (`rayrl.envs.make_env`);
- `gym_wrappers`: `AtariPreprocessing` + `FrameStackObservation` in a gymnasium
  SyncVectorEnv, one process (needs `pip install opencv-python-headless`).

    python bench/atari_env.py --envs 8 --threads 2 --seconds 5 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np


def ale_vector(envs: int, threads: int):
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("pong", envs, num_threads=threads, autoreset_mode="SameStep")
    env.reset(seed=0)
    return lambda actions: env.step(actions), env.close


def rayrl_env(envs: int, threads: int):
    from rayrl.config import EnvConfig
    from rayrl.envs import make_env

    env = make_env(EnvConfig(id="ALE/Pong-v5"), envs, training=True, num_threads=threads)
    env.reset(seed=0)
    return lambda actions: env.step(actions), env.close


def gym_wrappers(envs: int, threads: int):
    import ale_py

    gym.register_envs(ale_py)

    def make():
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
        env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
        return gym.wrappers.FrameStackObservation(env, 4)

    env = gym.vector.SyncVectorEnv([make] * envs)
    env.reset(seed=0)
    return lambda actions: env.step(actions), env.close


def steps_per_s(make: Callable, envs: int, threads: int, seconds: float) -> float:
    step, close = make(envs, threads)
    rng = np.random.default_rng(0)
    for _ in range(20):
        step(rng.integers(0, 6, size=envs))
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(rng.integers(0, 6, size=envs))
        count += envs
    rate = count / (time.perf_counter() - start)
    close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"ale_vector": [], "rayrl_env": [], "gym_wrappers": []}
    makers = {"ale_vector": ale_vector, "rayrl_env": rayrl_env, "gym_wrappers": gym_wrappers}
    for _ in range(args.repeats):  # interleaved, so that machine noise hits all alike
        for name, make in makers.items():
            rates[name].append(steps_per_s(make, args.envs, args.threads, args.seconds))
    print(
        f"Pong, random actions, {args.envs} envs, {args.threads} threads for ale-py; "
        f"median of {args.repeats} x {args.seconds:.0f} s (min-max):"
    )
    base = statistics.median(rates["gym_wrappers"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"  {name:>12}: {median:7,.0f} steps/s ({min(values):,.0f}-{max(values):,.0f}), "
            f"{median / base:.2f}x gymnasium's wrappers"
        )


if __name__ == "__main__":
    main()
