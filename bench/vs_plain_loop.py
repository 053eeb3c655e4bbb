"""rayrl against a plain single-process loop of the same algorithm on MinAtar, whole
commands over the same env steps, one after the other on this machine.

- **rayrl**: `rayrl train --config minatar_dqn` (or `minatar_ppo`), the Ray runtime as a
  user runs it, stopped at `--env-steps`;
- **plain**: `bench/plain_dqn.py` (or `bench/plain_ppo.py`), the loop a user would write
  instead: sampling and learning one after the other, the same network, optimizer, batch
  and thread count, no rayrl.

Both are timed from the command's start to its exit (start-up, the final evaluation of 20
episodes and the exit included). The figure is env steps per second of the whole command,
and the ratio rayrl / plain is taken pairwise within a round (the machine drifts); rounds
alternate which goes first. Each round uses one seed for both.

With `--baseline DIR` (a checkout of an earlier commit: `git worktree add DIR REV`), each
round also runs that commit's rayrl, as "before" (its code ahead of the installed rayrl on
`PYTHONPATH`, which the local Ray's actors inherit).

`--busy-loops N` runs N busy loops at normal priority throughout (a machine that is also
doing something else); `RAY_worker_niceness=15` in the environment gives rayrl's actors
Ray's own priority instead of the command's (`rayrl.ray.connect.local_system_config`).

    python bench/vs_plain_loop.py --algorithm dqn --env-steps 60000 --repeats 3
    python bench/vs_plain_loop.py --algorithm ppo --env-steps 500000 --repeats 3
    python bench/vs_plain_loop.py --algorithm ppo --env-steps 200000 --repeats 2 --busy-loops 2
    python bench/vs_plain_loop.py --algorithm ppo --env-steps 500000 --repeats 3 --baseline DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import baseline_env, busy_loops, machine, median_range

from rayrl.ray.connect import WORKER_NICENESS_ENV

BENCH = Path(__file__).resolve().parent


def rayrl_command(algorithm: str, env_steps: int, seed: int, game: str) -> list[str]:
    overrides = [
        f"env.id={game}",
        f"run.total_env_steps={env_steps}",
        f"run.seed={seed}",
        "run.target_return=null",
        "logging.console=false",
    ]
    # `python -m rayrl`, not the `rayrl` script: the script names the installed entry point,
    # which an earlier checkout (--baseline) may not have
    return [sys.executable, "-m", "rayrl", "train", "--config", f"minatar_{algorithm}"] + [
        part for override in overrides for part in ("--set", override)
    ]


def plain_command(algorithm: str, env_steps: int, seed: int, game: str) -> list[str]:
    script = BENCH / f"plain_{algorithm}.py"
    return [sys.executable, str(script), "--env-steps", str(env_steps), "--seed", str(seed),
            "--game", game]  # fmt: skip


def run(command: list[str], code: Path | None = None) -> tuple[float, str]:
    """`command`'s wall time and output; with `code`, that checkout's rayrl is imported."""
    env = baseline_env(code)
    with tempfile.TemporaryDirectory() as cwd:
        start = time.monotonic()
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, check=False, env=env
        )
        wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return wall, done.stdout


def rayrl_figures(wall: float, stdout: str) -> dict:
    stopped = re.search(r"after [\d.]+ s \(([\d,]+) env steps, ([\d,]+) learner updates\)", stdout)
    final = re.search(r"final evaluation: mean return ([-\d.]+)", stdout)
    startup = re.search(r"start-up: ([\d.]+) s", stdout)
    if stopped is None:
        raise RuntimeError(f"no 'stopped:' line in rayrl's output:\n{stdout}")
    env_steps = int(stopped.group(1).replace(",", ""))
    return {
        "env_steps": env_steps,
        "updates": int(stopped.group(2).replace(",", "")),
        "whole_s": wall,
        "start_up_s": float(startup.group(1)) if startup else None,
        "eval_return": float(final.group(1)) if final else None,
        "env_steps_per_s": env_steps / wall,
    }


def plain_figures(wall: float, stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("plain_"))
    figures = json.loads(line.split(" ", 1)[1])
    return {**figures, "whole_s": wall, "env_steps_per_s": figures["env_steps"] / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=["dqn", "ppo"], default="dqn")
    parser.add_argument("--env-steps", type=int, default=60_000)
    parser.add_argument("--game", default="MinAtar/Breakout-v1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy-loops", type=int, default=0)
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    args = parser.parse_args()
    print(
        f"{args.algorithm} on {args.game}, {args.env_steps:,} env steps, "
        f"{args.busy_loops} busy loops, {WORKER_NICENESS_ENV}="
        f"{os.environ.get(WORKER_NICENESS_ENV, 'unset')}; {machine()}"
    )
    figures: dict[str, list[dict]] = {"rayrl": [], "plain": []}
    if args.baseline is not None:
        figures["before"] = []
    with busy_loops(args.busy_loops):
        compare(args, figures)
    report(figures)


def compare(args: argparse.Namespace, figures: dict[str, list[dict]]) -> None:
    """Rounds of every contender's command, the order reversed every other round, rows into
    `figures`."""
    for round_ in range(args.repeats):
        order = list(figures) if round_ % 2 == 0 else list(reversed(figures))
        for contender in order:
            if contender in ("rayrl", "before"):
                code = args.baseline if contender == "before" else None
                command = rayrl_command(args.algorithm, args.env_steps, round_, args.game)
                wall, out = run(command, code)
                row = rayrl_figures(wall, out)
            else:
                wall, out = run(plain_command(args.algorithm, args.env_steps, round_, args.game))
                row = plain_figures(wall, out)
            figures[contender].append(row)
            shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}
            print(f"round {round_ + 1}, {contender}: {shown}", flush=True)


def report(figures: dict[str, list[dict]]) -> None:
    print("\nmedian (min-max):")
    for contender, rows in figures.items():
        rates = [row["env_steps_per_s"] for row in rows]
        walls = [row["whole_s"] for row in rows]
        returns = [row["eval_return"] for row in rows if row.get("eval_return") is not None]
        print(
            f"  {contender:>6}: {median_range(rates)} env steps/s (whole command), "
            f"{median_range(walls)} s"
            + (f", final return {median_range(returns, '{:.2f}')}" if returns else "")
        )
    pairs = [(name, "plain") for name in figures if name != "plain"]
    if "before" in figures:
        pairs.append(("rayrl", "before"))
    for mine, theirs in pairs:
        ratios = [
            a["env_steps_per_s"] / b["env_steps_per_s"]
            for a, b in zip(figures[mine], figures[theirs], strict=True)
        ]
        print(f"  {mine} / {theirs}, env steps/s, pairwise: {median_range(ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
