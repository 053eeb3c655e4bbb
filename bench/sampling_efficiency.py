"""Sampling efficiency on Pong: rayrl's workers vs a bare loop doing only the unavoidable work.

Side by side, repeated and interleaved (the machine is noisy):

- `bare`: N plain processes, each stepping ale-py's vector env (the same options rayrl uses)
  and running the same Nature-CNN inference on every observation, nothing else;
- `random`: the same processes stepping with random actions (the env ceiling);
- `rayrl`: a real `rayrl.train` run of the pong_dqn preset with N workers: inference,
  n-step processing, frame de-duplication, chunks pushed to the replay actor, a learner
  updating and publishing new weights after every update (at a low replay ratio, so that on
  a CPU-only machine the learner does not take the workers' cores). Its rate is the env
  steps per second of the run's steady state (after `--warmup` seconds).

    python bench/sampling_efficiency.py --workers 2 --seconds 40 --repeats 3
    python bench/sampling_efficiency.py --preset pong_impala --workers 2 --seconds 40 --repeats 3
    python bench/sampling_efficiency.py --preset pong_ppo --workers 2 --seconds 40 --repeats 3
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import statistics
import tempfile
import time

from common import machine, median_range, read_metrics, steady_rate

ENVS = 8


def bare_loop(preset: str, seconds: float, inference: bool, queue: mp.Queue) -> None:
    """ale-py's vector env with rayrl's options and the preset's own policy network (its
    forward pass and action choice, nothing else): the work no sampler can avoid."""
    import numpy as np
    import torch

    from rayrl.algorithms import ALGORITHMS
    from rayrl.contract import Acting
    from rayrl.envs import env_spec
    from rayrl.envs.atari import ATARI
    from rayrl.presets import load_config

    torch.set_num_threads(1)
    config = load_config(preset)
    env = ATARI.make_vector_env(config.env, ENVS, num_threads=1)
    obs, _ = env.reset(seed=0)
    episode_starts = np.ones(ENVS, dtype=bool)
    acting = Acting(config.run.seed, 0, ENVS, 1)
    make_policy = ALGORITHMS[config.algorithm.name].make_policy
    policy = make_policy(config.algorithm, env_spec(config.env), acting)
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if inference:
            actions = policy.act(obs, episode_starts, explore=True).actions
        else:
            actions = rng.integers(0, 6, size=ENVS)
        obs, _, terminated, truncated, _ = env.step(actions)
        episode_starts = terminated | truncated
        steps += ENVS
    queue.put(steps / (time.perf_counter() - start))


def bare(preset: str, workers: int, seconds: float, inference: bool) -> float:
    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [
        context.Process(target=bare_loop, args=(preset, seconds, inference, queue))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    rates = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


ALGORITHM_OVERRIDES = {
    # a low replay ratio, so that on a CPU-only machine the learner does not take the
    # workers' cores; every update published
    "pong_dqn": [
        "algorithm.replay.capacity=200000",
        "algorithm.replay.min_size=2048",
        "algorithm.replay.samples_per_insert=0.02",
        "learner.batch_size=32",
        "learner.batches_per_request=1",
        "learner.sync_interval=1",
    ],
    # IMPALA and PPO consume every unroll: the learner's speed sets the pace of the queue
    "pong_impala": ["learner.sync_interval=1"],
    "pong_ppo": ["learner.sync_interval=1"],
}


def rayrl_run(preset: str, workers: int, seconds: float, warmup: float) -> dict[str, float]:
    import rayrl

    with tempfile.TemporaryDirectory() as runs:
        result = rayrl.train(
            preset,
            overrides=[
                "logging.console=false",
                "logging.log_interval_s=1",
                f"run.runs_dir={runs}",
                f"run.time_budget_s={warmup + seconds}",
                "run.total_env_steps=100000000",
                "run.eval_interval_env_steps=100000000",
                "run.eval_episodes=1",
                "run.checkpoint_interval_env_steps=100000000",
                f"workers.num_workers={workers}",
                f"workers.envs_per_worker={ENVS}",
                *ALGORITHM_OVERRIDES[preset],
            ],
        )
        rows = read_metrics(result.run_dir)
    steady = [r for r in rows if r["time_s"] >= warmup]

    def median_of(key: str) -> float:
        values = [r[key] for r in steady if key in r]
        return statistics.median(values) if values else float("nan")

    return {
        "rate": steady_rate(rows, warmup),
        "updates": result.counters.updates,
        "utilization": median_of("learner/utilization"),
        "lag_p50": median_of("worker/policy_lag_p50"),
        "lag_max": max(
            (r["worker/policy_lag_max"] for r in steady if "worker/policy_lag_max" in r),
            default=float("nan"),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(ALGORITHM_OVERRIDES), default="pong_dqn")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rates: dict[str, list[float]] = {"bare": [], "random": [], "rayrl": []}
    runs = []
    for _ in range(args.repeats):
        rates["bare"].append(bare(args.preset, args.workers, args.seconds, inference=True))
        rates["random"].append(bare(args.preset, args.workers, args.seconds, inference=False))
        runs.append(rayrl_run(args.preset, args.workers, args.seconds, args.warmup))
        rates["rayrl"].append(runs[-1]["rate"])
    efficiency = [r / b for r, b in zip(rates["rayrl"], rates["bare"], strict=True)]
    ceiling = [r / b for r, b in zip(rates["rayrl"], rates["random"], strict=True)]
    print(
        f"{args.preset}: Pong, {args.workers} workers x {ENVS} envs, {machine()}; median "
        f"(min-max) of "
        f"{args.repeats} interleaved repetitions, {args.seconds:.0f} s each:"
    )
    for name, values in rates.items():
        print(f"  {name:>7}: {median_range(values, '{:,.0f}')} env steps/s")
    print(
        f"  sampling efficiency (rayrl / bare loop with inference): "
        f"{median_range(efficiency, '{:.2f}')}"
    )
    print(f"  rayrl / random-action env ceiling: {median_range(ceiling, '{:.2f}')}")
    print(f"  learner updates during the rayrl runs: {[r['updates'] for r in runs]}")
    for key, label in (
        ("utilization", "learner utilization (time updating / wall)"),
        ("lag_p50", "policy lag p50 (versions)"),
        ("lag_max", "policy lag max (versions)"),
    ):
        print(f"  {label}: {median_range([r[key] for r in runs], '{:.2f}')}")


if __name__ == "__main__":
    main()
