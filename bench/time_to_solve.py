"""Time to solve CartPole-v1: wall-clock seconds until the greedy evaluation return (mean of
10 episodes) reaches 475, for `rayrl train` as a user runs it.

Each run is the real CLI in its own process (Ray's start included: the clock starts when the
command starts), with the default preset and only the seed changed; both runtimes.

    python bench/time_to_solve.py --seeds 0 1 2
    python bench/time_to_solve.py --preset cartpole_impala --runtimes ray --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time

from common import machine, median_range


def solve(preset: str, seed: int, runtime: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.monotonic()
        output = subprocess.run(
            [
                sys.executable,
                "-m",
                "rayrl.cli",
                "train",
                "--config",
                preset,
                "--runtime",
                runtime,
                "--set",
                f"run.seed={seed}",
                "--set",
                "logging.console=false",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        wall = time.monotonic() - start
    reached = re.search(r"target return reached in ([\d.]+) s", output)
    if not reached:
        raise RuntimeError(f"seed {seed} ({runtime}) did not reach the target:\n{output}")
    return float(reached.group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cartpole_dqn")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runtimes", nargs="+", default=["ray", "local"])
    args = parser.parse_args()
    print(f"CartPole-v1 to 475 ({args.preset} preset), {machine()}:")
    for runtime in args.runtimes:
        runs = [solve(args.preset, seed, runtime) for seed in args.seeds]
        print(
            f"  {runtime:>5}: {median_range([r[0] for r in runs])} s to the target, "
            f"{median_range([r[1] for r in runs])} s for the whole command; "
            f"seeds {args.seeds}: {[round(r[0], 1) for r in runs]}"
        )


if __name__ == "__main__":
    main()
