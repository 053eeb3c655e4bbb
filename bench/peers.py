"""rayrl against Stable-Baselines3 on CartPole-v1, whole commands side by side.

Each contender is the whole command a user would type, in its own process, timed from its
start to its exit, and each trains to the same target: the mean return of 10
deterministic (greedy) evaluation episodes reaching 475, checked every 2,048 env steps.
- `rayrl train` (the default: DQN, Ray runtime), `rayrl train --config cartpole_ppo` and
  the same with `--runtime local` (rayrl's single-process runtime), and `rayrl train
  --config cartpole_appo`;
- SB3 PPO and SB3 DQN with rl-baselines3-zoo's CartPole-v1 hyperparameters
  (hyperparams/ppo.yml, hyperparams/dqn.yml), within the zoo's budgets (1e5 and 5e4 env
  steps), evaluated by SB3's EvalCallback and stopped by StopTrainingOnRewardThreshold;
- "sb3 ppo zoo budget": SB3 PPO as the zoo's `train.py` runs it, to the end of its 1e5
  env-step budget whatever the return (still evaluated, to say when it reached 475).

Rounds are interleaved (every contender once per round, the order rotating) and each round
uses one seed for all, so pairwise ratios compare runs made within minutes of each other.
The peers are installed by `pip install -e ".[bench]"`, never by rayrl itself.

    python bench/peers.py --repeats 3

With `--baseline DIR` (a checkout of an earlier commit: `git worktree add DIR REV`), each
rayrl contender also runs from that checkout (`python -m rayrl` with DIR first on
PYTHONPATH, Ray's workers included), in the same rounds, for before/after ratios.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET = 475.0
EVAL_EVERY = 2048
"""Env steps between evaluations, for every contender."""

RAYRL = {
    "rayrl default": [],
    "rayrl cartpole_ppo": ["--config", "cartpole_ppo"],
    "rayrl cartpole_ppo local": ["--config", "cartpole_ppo", "--runtime", "local"],
    "rayrl cartpole_appo": ["--config", "cartpole_appo"],
}
SB3 = ("sb3 ppo", "sb3 dqn", "sb3 ppo zoo budget")


def linear(start: float) -> Callable[[float], float]:
    """The zoo's `lin_<value>`: from `start` down to 0 over the budget."""
    return lambda progress_remaining: progress_remaining * start


ZOO: dict[str, tuple[int, int, dict[str, Any]]] = {
    # algorithm: envs, env-step budget, SB3 settings (rl-baselines3-zoo, CartPole-v1)
    "ppo": (
        8,
        100_000,
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": linear(1e-3),
            "clip_range": linear(0.2),
        },
    ),
    "dqn": (
        1,
        50_000,
        {
            "learning_rate": 2.3e-3,
            "batch_size": 64,
            "buffer_size": 100_000,
            "learning_starts": 1000,
            "gamma": 0.99,
            "target_update_interval": 10,
            "train_freq": 256,
            "gradient_steps": 128,
            "exploration_fraction": 0.16,
            "exploration_final_eps": 0.04,
            "policy_kwargs": {"net_arch": [256, 256]},
        },
    ),
}


BEFORE = " (before)"
"""Suffix of a rayrl contender run from `--baseline`'s checkout."""


def command(contender: str, seed: int) -> list[str]:
    if contender.endswith(BEFORE):  # the older checkout, on PYTHONPATH (see `run`)
        options = RAYRL[contender.removesuffix(BEFORE)]
        return [sys.executable, "-m", "rayrl", "train", *options, "--set", f"run.seed={seed}"]
    if contender in RAYRL:
        rayrl = str(Path(sys.executable).with_name("rayrl"))
        return [rayrl, "train", *RAYRL[contender], "--set", f"run.seed={seed}"]
    algorithm = contender.split()[1]
    whole_budget = ["--whole-budget"] if contender.endswith("zoo budget") else []
    return [sys.executable, __file__, "--sb3", algorithm, "--seed", str(seed), *whole_budget]


@dataclass
class Outcome:
    """One whole command."""

    wall_s: float
    target_s: float | None
    """Seconds to the target (None: not reached)."""
    target_env_steps: int | None
    """Env steps of the weights that reached the target (None: not reached)."""
    startup_s: float | None
    """rayrl's start-up, command start to the first chunk (None for the peers)."""


def is_rayrl(contender: str) -> bool:
    return contender.removesuffix(BEFORE) in RAYRL


def run(contender: str, seed: int, baseline: Path | None) -> Outcome:
    from common import baseline_env, target_env_steps  # here: the SB3 command runs this file

    env = baseline_env(baseline if contender.endswith(BEFORE) else None)
    with tempfile.TemporaryDirectory() as cwd:
        start = time.monotonic()
        done = subprocess.run(
            command(contender, seed), cwd=cwd, env=env, capture_output=True, text=True
        )
        wall = time.monotonic() - start
        rayrl_steps = target_env_steps(Path(cwd) / "runs", TARGET) if is_rayrl(contender) else None
    if done.returncode != 0:
        raise RuntimeError(f"{contender} (seed {seed}) failed:\n{done.stdout}\n{done.stderr}")
    reached = re.search(r"target return reached in ([\d.]+) s", done.stdout)
    sb3_steps = re.search(r"target return reached at (\d+) env steps", done.stdout)
    startup = re.search(r"start-up: ([\d.]+) s", done.stdout)
    return Outcome(
        wall,
        float(reached.group(1)) if reached else None,
        int(sb3_steps.group(1)) if sb3_steps else rayrl_steps,
        float(startup.group(1)) if startup else None,
    )


def sb3_train(algorithm: str, seed: int, whole_budget: bool) -> None:
    """One SB3 run with the zoo's CartPole-v1 hyperparameters, to the target (or to the end
    of its budget)."""
    started = time.time()
    import gymnasium as gym
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.monitor import Monitor

    n_envs, budget, settings = ZOO[algorithm]
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    model = {"ppo": PPO, "dqn": DQN}[algorithm]("MlpPolicy", env, seed=seed, **settings)
    reached: list[tuple[float, int]] = []

    class Reached(StopTrainingOnRewardThreshold):
        def _on_step(self) -> bool:
            go_on = super()._on_step()
            if not go_on:
                reached.append((time.time() - started, self.num_timesteps))
            return go_on or whole_budget

    evaluation = EvalCallback(
        Monitor(gym.make("CartPole-v1")),
        callback_on_new_best=Reached(reward_threshold=TARGET),
        n_eval_episodes=10,
        eval_freq=max(1, EVAL_EVERY // n_envs),
        deterministic=True,
        verbose=0,
    )
    model.learn(total_timesteps=budget, callback=evaluation)
    if reached:
        print(f"target return reached in {reached[0][0]:.1f} s")
        print(f"target return reached at {reached[0][1]} env steps")
    print(f"{model.num_timesteps} env steps, best mean return {evaluation.best_mean_reward:.1f}")


def summary(values: list[float], digits: int = 1) -> str:
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{median:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    contenders = [*RAYRL, *SB3]
    parser.add_argument("--contenders", nargs="+", default=contenders, choices=contenders)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an earlier rayrl (git worktree add DIR REV): each rayrl contender "
        "also runs from it, side by side, as '<contender> (before)'",
    )
    parser.add_argument("--sb3", choices=["ppo", "dqn"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--whole-budget", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3:
        sb3_train(args.sb3, args.seed, args.whole_budget)
        return
    chosen = list(args.contenders)
    if args.baseline is not None:
        chosen += [name + BEFORE for name in args.contenders if name in RAYRL]
    outcomes: dict[str, list[Outcome]] = {name: [] for name in chosen}
    for round_ in range(args.repeats):
        shift = round_ % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            outcome = run(contender, round_, args.baseline)
            outcomes[contender].append(outcome)
            shown = "not reached"
            if outcome.target_s is not None:
                shown = f"{outcome.target_s:.1f} s, {outcome.target_env_steps} env steps"
            print(
                f"round {round_ + 1}, {contender}: {outcome.wall_s:.1f} s, target {shown}",
                flush=True,
            )
    walls = {name: [o.wall_s for o in rows] for name, rows in outcomes.items()}
    print(f"\nCartPole-v1 to {TARGET:g}, seeds 0-{args.repeats - 1}; median (min-max):")
    for contender, rows in outcomes.items():
        reached = [o for o in rows if o.target_s is not None]
        line = f"  {contender:>24}: whole command {summary(walls[contender])} s"
        if reached:
            line += (
                f"; to the target {summary([o.target_s for o in reached])} s, "
                f"{summary([o.target_env_steps for o in reached], 0)} env steps"
            )
        line += f" ({len(reached)}/{args.repeats} reached)"
        if startups := [o.startup_s for o in rows if o.startup_s is not None]:
            line += f"; start-up {summary(startups)} s"
        if is_rayrl(contender) and reached:
            # from the evaluation that reached the target to the process' exit
            line += f"; end {summary([o.wall_s - o.target_s for o in reached])} s"
        print(line)
    pairs = [(c, p) for p in ("sb3 ppo", "sb3 ppo zoo budget") for c in RAYRL]
    pairs.append(("rayrl cartpole_ppo", "rayrl cartpole_ppo local"))
    pairs.append(("rayrl cartpole_appo", "rayrl cartpole_ppo"))
    pairs += [(name, name + BEFORE) for name in RAYRL]
    for contender, peer in pairs:
        if contender in walls and peer in walls:
            ratios = [a / b for a, b in zip(walls[contender], walls[peer], strict=True)]
            print(f"  {contender} / {peer}, whole command, pairwise: {summary(ratios, 2)}x")


if __name__ == "__main__":
    main()
