"""What acting costs a rollout worker: a preset's policy, built as a worker builds it,
acting for the preset's `workers.envs_per_worker` envs on observations sampled from the
env's observation space, with one torch thread (a worker's). The figure is milliseconds
per call (one env step of every env), the best of several windows: the machine drifts.

With `--baseline DIR` (a checkout of an earlier commit: `git worktree add DIR REV`), the
earlier commit is measured too. Each measurement runs in a process of its own (the
baseline's with its checkout ahead of the installed rayrl on `PYTHONPATH`), the two
alternating for `--repeats` rounds.

    python bench/acting_cost.py --presets minatar_ppo cartpole_ppo --repeats 3 --baseline DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import baseline_env, machine, median_range


def measure(preset: str, seconds: float, windows: int) -> float:
    """Best milliseconds per `act` call of `preset`'s worker-0 policy."""
    import numpy as np
    import torch

    from rayrl.algorithms import ALGORITHMS
    from rayrl.contract import Acting
    from rayrl.envs import env_spec
    from rayrl.presets import load_config

    torch.set_num_threads(1)
    config = load_config(preset, [])
    spec = env_spec(config.env)
    workers = config.workers
    acting = Acting(config.run.seed, 0, workers.envs_per_worker, workers.num_workers)
    policy = ALGORITHMS[config.algorithm.name].build_policy(config.algorithm, spec, acting)
    space = spec.observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(workers.envs_per_worker)])
    starts = np.ones(workers.envs_per_worker, dtype=bool)
    policy.act(obs, starts, explore=True)
    starts[:] = False
    best = float("inf")
    for _ in range(windows):
        calls, begun = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - begun) < seconds / windows:
            policy.act(obs, starts, explore=True)
            calls += 1
        best = min(best, elapsed / calls)
    return best * 1e3


def measured_in_process(preset: str, args: argparse.Namespace, code: Path | None) -> float:
    command = [sys.executable, __file__, "--measure", preset, "--seconds", str(args.seconds)]
    done = subprocess.run(command, capture_output=True, text=True, env=baseline_env(code))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return float(json.loads(done.stdout.splitlines()[-1])["ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["minatar_ppo", "cartpole_ppo"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps({"ms": measure(args.measure, args.seconds, windows=8)}))
        return
    print(f"acting cost, one torch thread; {machine()}")
    codes = {"this": None} | ({} if args.baseline is None else {"before": args.baseline})
    for preset in args.presets:
        figures: dict[str, list[float]] = {name: [] for name in codes}
        for round_ in range(args.repeats):
            order = list(codes) if round_ % 2 == 0 else list(reversed(codes))
            for name in order:
                figures[name].append(measured_in_process(preset, args, codes[name]))
        line = ", ".join(f"{name} {median_range(ms, '{:.3f}')} ms" for name, ms in figures.items())
        if args.baseline is not None:
            ratios = [a / b for a, b in zip(figures["this"], figures["before"], strict=True)]
            line += f"; this / before {median_range(ratios, '{:.2f}')}x"
        print(f"{preset}: {line} per call", flush=True)


if __name__ == "__main__":
    main()
