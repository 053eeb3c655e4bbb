"""Time to solve CartPole-v1: wall-clock seconds until the greedy evaluation return (mean of
10 episodes) reaches 475, and the env steps that took, for `rayrl train` as a user runs it.

Each run is the real CLI in its own process (Ray's start included: the clock starts when the
command starts), with the preset as shipped (or `--set` overrides) and only the seed
changed; both runtimes.

    python bench/time_to_solve.py --seeds 0 1 2
    python bench/time_to_solve.py --preset cartpole_impala --runtimes ray --seeds 0 1 2
    python bench/time_to_solve.py --preset cartpole_ppo --runtimes local --seeds 0 1 2 \
        --set algorithm.orthogonal_init=false
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import machine, median_range, target_env_steps

TARGET = 475.0


def solve(
    preset: str, seed: int, runtime: str, overrides: Sequence[str]
) -> tuple[float, float, int]:
    """Seconds to the target, seconds for the whole command, env steps to the target."""
    with tempfile.TemporaryDirectory() as cwd:
        runs = Path(cwd) / "runs"
        # last, so that they win over the overrides: the target and the runs this reads
        fixed = (f"run.target_return={TARGET:g}", f"run.runs_dir={runs}")
        settings = [part for override in (*overrides, *fixed) for part in ("--set", override)]
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
                *settings,
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        wall = time.monotonic() - start
        env_steps = target_env_steps(runs, TARGET)
    reached = re.search(r"target return reached in ([\d.]+) s", output)
    if not reached or env_steps is None:
        raise RuntimeError(f"seed {seed} ({runtime}) did not reach the target:\n{output}")
    return float(reached.group(1)), wall, env_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cartpole_dqn")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runtimes", nargs="+", default=["ray", "local"])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    settings = f", {' '.join(args.overrides)}" if args.overrides else ""
    print(f"CartPole-v1 to {TARGET:g} ({args.preset} preset{settings}), {machine()}:")
    for runtime in args.runtimes:
        runs = [solve(args.preset, seed, runtime, args.overrides) for seed in args.seeds]
        print(
            f"  {runtime:>5}: {median_range([r[0] for r in runs])} s to the target, "
            f"{median_range([r[1] for r in runs])} s for the whole command, "
            f"{median_range([r[2] for r in runs], '{:,.0f}')} env steps; "
            f"seeds {args.seeds}: {[round(r[0], 1) for r in runs]} s, "
            f"{[r[2] for r in runs]} env steps"
        )


if __name__ == "__main__":
    main()
