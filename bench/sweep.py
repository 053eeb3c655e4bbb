"""The cost of `rayrl sweep` against the same trials run one after another with `rayrl train`.

The trials: PPO on CartPole-v1 (the cartpole_ppo preset, one process each:
`run.runtime=local`), a grid of learning rates times seeds, each to the preset's target
(475) or its budget. Contenders, each a whole command in its own process, timed from its
start to its exit, in rounds that alternate their order:
- "sequential": one `rayrl train` per trial, one after another (what a shell loop does);
- "sweep": `rayrl sweep` of the same grid and seeds, no scheduler (the same trials run to
  the same end), as many at once as the machine has cores;
- "sweep asha": the same sweep with ASHA stopping the worse trials early.

    python bench/sweep.py --repeats 2

The target is "at most 1.1x the sequential wall time, and below it where ASHA stops
trials"; the ratios are per round (side by side) and their median is reported.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

RATES = (0.0005, 0.001, 0.002)
SEEDS = (0, 1)
SETTINGS = ["run.runtime=local", "logging.console=false", "run.total_env_steps=60000"]


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def sequential(cwd: Path) -> float:
    start = time.perf_counter()
    for lr in RATES:
        for seed in SEEDS:
            command = [sys.executable, "-m", "rayrl", "train", "--config", "cartpole_ppo"]
            for setting in [*SETTINGS, f"learner.lr={lr}", f"run.seed={seed}"]:
                command += ["--set", setting]
            subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def sweep(cwd: Path, scheduler: str) -> float:
    spec = {
        "name": f"bench-{scheduler}",
        "base": "cartpole_ppo",
        "set": SETTINGS,
        "space": {"learner.lr": {"grid": list(RATES)}},
        "seeds": list(SEEDS),
        "scheduler": {"name": scheduler, "grace_env_steps": 12288, "reduction_factor": 2},
    }
    path = cwd / f"{scheduler}_sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return timed([sys.executable, "-m", "rayrl", "sweep", str(path)], cwd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    contenders = {
        "sequential": sequential,
        "sweep": lambda cwd: sweep(cwd, "none"),
        "sweep asha": lambda cwd: sweep(cwd, "asha"),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(args.repeats):
        order = list(contenders)
        if round_ % 2:
            order.reverse()
        for name in order:
            with tempfile.TemporaryDirectory(prefix="rayrl-bench-sweep-") as folder:
                times[name].append(contenders[name](Path(folder)))
            print(f"round {round_}: {name} {times[name][-1]:.1f} s", flush=True)
    trials = len(RATES) * len(SEEDS)
    print(f"\n{trials} trials (PPO CartPole-v1, local runtime), {args.repeats} rounds\n")
    print("| contender | wall s (median) | / sequential (median of per-round ratios) |")
    print("|---|---|---|")
    for name, values in times.items():
        ratios = [v / s for v, s in zip(values, times["sequential"], strict=True)]
        print(f"| {name} | {statistics.median(values):.1f} | {statistics.median(ratios):.2f}x |")


if __name__ == "__main__":
    main()
