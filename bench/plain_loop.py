"""What the plain single-process loops (`plain_dqn.py`, `plain_ppo.py`) share: MinAtar envs
as the presets make them, their command line, and the one line of figures they print for
`vs_plain_loop.py`. It imports neither rayrl nor torch, so that the loops stay what a user
would write without rayrl."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import gymnasium as gym
import minatar.gym
import numpy as np

STICKY_ACTIONS = 0.1
MAX_EPISODE_STEPS = 10_000
"""As the presets' MinAtar envs: the paper's sticky actions, rayrl's episode cap."""


def make_env(game: str) -> gym.Env:
    if game not in gym.registry:
        minatar.gym.register_envs()
    return gym.make(game, sticky_action_prob=STICKY_ACTIONS, max_episode_steps=MAX_EPISODE_STEPS)


def make_envs(game: str, num_envs: int) -> gym.vector.VectorEnv:
    """A synchronous vector env; an ended env's final observation is in
    `info["final_obs"]` and the returned one is the next episode's first."""
    return gym.vector.SyncVectorEnv(
        [lambda: make_env(game) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


def evaluate(act: Callable[[np.ndarray], int], game: str, episodes: int, seed: int) -> float:
    """Mean return of `episodes` episodes of `act` (an observation to an action)."""
    env = make_env(game)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + 1000 + episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def parser(description: str, env_steps: int, envs: int, envs_help: str) -> argparse.ArgumentParser:
    arguments = argparse.ArgumentParser(description=description)
    arguments.add_argument("--game", default="MinAtar/Breakout-v1")
    arguments.add_argument("--env-steps", type=int, default=env_steps)
    arguments.add_argument("--envs", type=int, default=envs, help=envs_help)
    arguments.add_argument("--threads", type=int, default=1, help="torch threads (rayrl's: 1)")
    arguments.add_argument("--eval-episodes", type=int, default=20)
    arguments.add_argument("--seed", type=int, default=0)
    return arguments


def report(
    name: str,
    started: float,
    first_step: float,
    trained: float,
    training_returns: list[float],
    eval_return: float,
    evaluations: list[list[float]] | None = None,
    **figures: float,
) -> None:
    """Print `name` and the loop's figures as one JSON line: start-up (from the command's
    start to the first env step), training time and rate, the whole command's time, the
    mean of the last 100 training episodes, the final evaluation's return and the
    evaluations made while training ([env steps, mean return], if any)."""
    env_steps = figures["env_steps"]
    line = {
        **figures,
        "start_up_s": round(first_step - started, 2),
        "train_s": round(trained - first_step, 2),
        "env_steps_per_s": round(env_steps / (trained - first_step), 1),
        "whole_s": round(time.monotonic() - started, 2),
        "training_return_last_100": round(float(np.mean(training_returns[-100:] or [0.0])), 2),
        "eval_return": round(eval_return, 2),
        "evaluations": evaluations or [],
    }
    print(f"{name} {json.dumps(line)}", flush=True)
