"""A rayrl preset against its Stable-Baselines3 peer on the same env, side by side: SAC on
continuous control, sb3-contrib's RecurrentPPO on CartPole without velocities.

For each seed, in turn (the order alternating from seed to seed), two whole commands, each in
its own process and timed from its start to its exit:
- `rayrl train --config PRESET` (the Ray runtime, as users run it);
- the peer with rl-baselines3-zoo's settings for the env (`ZOO`), with torch's default
  threads (all cores), as a user runs it (rayrl's learner keeps its one thread: two made
  the Ray runtime slower on 2 cores, where the workers, the evaluator and Ray's processes
  share the second). SAC: SB3's defaults otherwise (256x256, batch 256, tau 0.005, gamma
  0.99, one gradient step per env step, the update-to-data ratio of rayrl's presets).
  RecurrentPPO: the zoo's `ppo_lstm.yml` entry, with its VecNormalize (observations and
  rewards), which the evaluation env shares.
Both evaluate the deterministic policy on 10 episodes every `--eval-every` env steps and
stop at `--target` (when given) or after `--steps` env steps. The table gives, per
contender, the final evaluation at equal env steps, the env steps at which the target was
first reached, the wall time and the env steps per second over the whole command, and the
ratios measured within each seed's pair; each run's line gives its whole evaluation curve
(`evaluations`: [env steps, mean return]), so a long run's earlier budgets can be read
off it. The peers come from `pip install -e ".[bench]"`.

    python bench/vs_sb3.py --preset pendulum_sac --steps 12000 --target -200 --seeds 0 1 2
    python bench/vs_sb3.py --preset halfcheetah_sac --steps 100000 --seeds 0
    python bench/vs_sb3.py --preset cartpole_pomdp_ppo --steps 100000 --target 475 \
        --eval-every 2048 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import median_range


@dataclass(frozen=True)
class Peer:
    """An SB3 algorithm as rl-baselines3-zoo runs it on one env."""

    algorithm: str
    """"SAC" (stable_baselines3) or "RecurrentPPO" (sb3_contrib)."""
    settings: dict[str, Any] = field(default_factory=dict)
    n_envs: int = 1
    normalize: bool = False
    """VecNormalize on observations and rewards (the zoo's `normalize: true`)."""


ZOO: dict[str, Peer] = {
    # rl-baselines3-zoo hyperparams/sac.yml
    "Pendulum-v1": Peer("SAC", {"learning_rate": 1e-3}),
    "HalfCheetah-v5": Peer("SAC", {"learning_starts": 10_000}),
    "Hopper-v5": Peer("SAC", {"learning_starts": 10_000}),
    # rl-baselines3-zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1 (our registration of it)
    "rayrl/CartPoleNoVel-v1": Peer(
        "RecurrentPPO",
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": "lin_0.001",
            "clip_range": "lin_0.2",
            "policy_kwargs": {
                "ortho_init": False,
                "activation_fn": "relu",
                "lstm_hidden_size": 64,
                "enable_critic_lstm": True,
                "net_arch": {"pi": [64], "vf": [64]},
            },
        },
        n_envs=8,
        normalize=True,
    ),
}


def run_rayrl(preset: str, steps: int, target: float | None, every: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as runs:
        command = [
            sys.executable, "-m", "rayrl", "train", "--config", preset,
            "--set", "logging.console=false", "--set", f"run.runs_dir={runs}",
            "--set", f"run.seed={seed}", "--set", f"run.total_env_steps={steps}",
            "--set", f"run.eval_interval_env_steps={every}", "--set", "run.eval_episodes=10",
            "--set", f"run.target_return={'null' if target is None else target}",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        wall = time.perf_counter() - started
        (run_dir,) = Path(runs).iterdir()
        evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    return summary([(row["env_steps"], row["eval/return_mean"]) for row in evals], target, wall)


def run_sb3(env_id: str, steps: int, target: float | None, every: int, seed: int) -> dict:
    command = [
        sys.executable, __file__, "--sb3-child", env_id,
        "--steps", str(steps), "--eval-every", str(every), "--seeds", str(seed),
        "--target", "none" if target is None else str(target),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    evals = json.loads(done.stdout.strip().splitlines()[-1])
    return summary([tuple(row) for row in evals], target, wall)


def sb3_child(env_id: str, steps: int, target: float | None, every: int, seed: int) -> None:
    """The env's SB3 peer trained and evaluated in this process; prints
    [[env_steps, mean], ...]."""
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rayrl.envs import suite_of  # (registers rayrl/CartPoleNoVel-v1 too)
    from rayrl.envs.mujoco import require_mujoco

    if suite_of(env_id).name == "mujoco":
        require_mujoco()  # MuJoCo's warnings to the log, not to a MUJOCO_LOG.TXT in the cwd

    peer = ZOO[env_id]
    stop = None if target is None else StopTrainingOnRewardThreshold(target, verbose=0)
    evaluations: list[list[float]] = []

    class Record(EvalCallback):
        def _on_step(self) -> bool:
            going_on = super()._on_step()
            if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
                evaluations.append([self.num_timesteps, float(self.last_mean_reward)])
            return going_on

    env = make_vec_env(env_id, n_envs=peer.n_envs, seed=seed)
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 1000)
    if peer.normalize:  # the callback copies the training statistics to the eval env
        env = VecNormalize(env, gamma=peer.settings.get("gamma", 0.99))
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    callback = Record(
        eval_env,
        callback_on_new_best=stop,
        eval_freq=max(1, every // peer.n_envs),  # counted in vector steps
        n_eval_episodes=10,
        deterministic=True,
        verbose=0,
    )
    model = peer_model(peer, env, seed)
    model.learn(steps, callback=callback)
    print(json.dumps(evaluations))


def peer_model(peer: Peer, env: Any, seed: int) -> Any:
    """The zoo's settings made into SB3 objects (schedules, activation functions)."""
    from stable_baselines3.common.utils import LinearSchedule
    from torch import nn

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("lin_"):
            return LinearSchedule(float(value[4:]), 0.0, 1.0)
        if value == "relu":
            return nn.ReLU
        if isinstance(value, dict):
            return {key: resolve(v) for key, v in value.items()}
        return value

    settings = resolve(peer.settings)
    if peer.algorithm == "RecurrentPPO":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", **settings)
    from stable_baselines3 import SAC

    return SAC("MlpPolicy", env, seed=seed, device="cpu", **settings)


def summary(evals: list[tuple[int, float]], target: float | None, wall: float) -> dict:
    last_steps, last_return = evals[-1]
    reached = next((s for s, mean in evals if target is not None and mean >= target), None)
    return {
        "final_return": last_return,
        "env_steps": last_steps,
        "steps_to_target": reached,
        "wall_s": wall,
        "steps_per_s": last_steps / wall,
        "evaluations": [[steps, mean] for steps, mean in evals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum_sac")
    parser.add_argument("--steps", type=int, default=12_000)
    parser.add_argument("--target", default=None, help="a return, or none")
    parser.add_argument("--eval-every", type=int, default=1_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sb3-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = None if args.target in (None, "none") else float(args.target)
    if args.sb3_child:
        sb3_child(args.sb3_child, args.steps, target, args.eval_every, args.seeds[0])
        return

    from rayrl.presets import load_config

    env_id = load_config(args.preset).env.id
    rows: dict[str, list[dict]] = {"rayrl": [], "sb3": []}
    for i, seed in enumerate(args.seeds):
        order = ["rayrl", "sb3"] if i % 2 == 0 else ["sb3", "rayrl"]
        for who in order:
            if who == "rayrl":
                row = run_rayrl(args.preset, args.steps, target, args.eval_every, seed)
            else:
                row = run_sb3(env_id, args.steps, target, args.eval_every, seed)
            rows[who].append(row)
            print(f"seed {seed} {who}: {json.dumps(row)}", flush=True)
    report(args, env_id, rows)


def report(args: argparse.Namespace, env_id: str, rows: dict[str, list[dict]]) -> None:
    print(f"\n{env_id}, {args.steps:,} env steps, seeds {args.seeds}, target {args.target}")
    print("| contender | final return | env steps to target | wall s | env steps/s |")
    print("|---|---|---|---|---|")
    for who, runs in rows.items():
        reached = [r["steps_to_target"] for r in runs]
        if args.target in (None, "none"):
            to_target = "-"
        elif None in reached:
            to_target = f"{sum(s is not None for s in reached)}/{len(reached)} reached"
        else:
            to_target = median_range([float(s) for s in reached], "{:,.0f}")
        finals = [r["final_return"] for r in runs]
        print(
            f"| {who} | {statistics.mean(finals):,.1f} ({min(finals):,.1f} to "
            f"{max(finals):,.1f}) | {to_target} | {median_range([r['wall_s'] for r in runs])} "
            f"| {median_range([r['steps_per_s'] for r in runs])} |"
        )
    speed = [
        r["steps_per_s"] / s["steps_per_s"] for r, s in zip(rows["rayrl"], rows["sb3"], strict=True)
    ]
    wall = [r["wall_s"] / s["wall_s"] for r, s in zip(rows["rayrl"], rows["sb3"], strict=True)]
    print(f"rayrl/sb3 env steps per second, per seed: {median_range(speed, '{:.2f}')}x")
    print(f"rayrl/sb3 wall time, per seed: {median_range(wall, '{:.2f}')}x")


if __name__ == "__main__":
    main()
