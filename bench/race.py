"""Time to score: MinAtar SpaceInvaders to a return of 70, whole commands side by side.

Each contender is the whole command a user would run, in its own fresh process, timed by
this harness from its start to its exit, and stops at its first evaluation of
EVAL_EPISODES episodes, with actions sampled from the policy, whose mean return is at or
above TARGET. Every contender evaluates about every EVAL_EVERY env steps (each where its
loop can: after the update, chunk or vector step that crosses the mark), on the presets'
env: sticky actions 0.1, episodes cut at 10,000 steps (`bench/plain_loop.py`'s
`make_env`). The table gives the whole command's wall time and the env steps of the
evaluation that reached the target.

How each one evaluates is part of what a user gets, and differs: rayrl evaluates on a
thread of its driver while its workers and learner go on training (and skips a due
evaluation while one is still running); the plain loop, SB3 and RLlib stop training to
evaluate; Sample Factory has no evaluation of its own and takes its last training
episodes (`bench/race_sample_factory.py`).

The contenders, each with its own published settings and the MinAtar paper's network (one
16-filter 3x3 convolution, 128 units) where it allows one:
- `rayrl minatar_ppo`, `rayrl minatar_appo`, `rayrl minatar_impala`: `rayrl train
  --config PRESET` on the game as shipped (Ray runtime), with the race's target, evaluation
  interval and episodes;
- `plain ppo`: `bench/plain_ppo.py`, the single-file loop a user writes (CleanRL's shape,
  `minatar_ppo`'s settings), with one torch thread, as rayrl's learner has (`--threads`:
  torch's default would be every core);
- `sb3 ppo`: Stable-Baselines3 PPO with rl-baselines3-zoo's Atari settings
  (hyperparams/ppo.yml `atari`: 8 envs, 128 steps, 4 epochs, batch 256, lr and clip
  linear from 2.5e-4 and 0.1 over the zoo's 1e7 Atari steps, entropy 0.01, value 0.5), its
  Atari shape of network (one feature extractor shared by the policy and the value, linear
  heads) with the MinAtar network as that extractor, evaluated by SB3's EvalCallback;
- `rllib ppo`, `rllib appo`: RLlib's new API stack with its tuned Atari examples' settings
  (`rllib/tuned_examples/ppo/atari_ppo.py`, `appo/pong_appo.py`) and the MinAtar network
  as its default model's encoder and head (one 16-filter 3x3 convolution, a 128-unit
  head, the value sharing the encoder as the examples share it), one env runner of 8 envs
  (a second env runner does not fit 2 CPUs beside RLlib's main process), evaluated with
  `Algorithm.evaluate` (exploring, so sampled actions) on an evaluation env runner of one
  env in the main process;
- `sample-factory appo`: Sample Factory's PPO with its Atari settings made asynchronous
  (its APPO), in a virtualenv of its own (`--sample-factory-python`;
  `bench/race_sample_factory.py` says how to make it and what it changes).

Rounds are interleaved (every contender once per round, the order rotating) and each round
uses one seed for all, so that pairwise ratios compare runs made within minutes of each
other. A contender that has not reached the target within `--timeout-minutes` is stopped
and counts as not reached; its evaluations until then are kept, and its time (as the time
of one that ended its budget without reaching the target) is a lower bound on its time to
the target. One that fails is shown and left out of the figures. Each peer prints
"evaluation: ENV_STEPS MEAN_RETURN" as it evaluates; rayrl's evaluations are read from its
run's `eval.jsonl`. The peers come from `pip install -e ".[bench]"`, Sample Factory aside.

    python bench/race.py --seeds 0 1 2 3 4 --sample-factory-python SF/bin/python
    python bench/race.py --seeds 0 --contenders "rayrl minatar_ppo" "plain ppo"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

GAME = "MinAtar/SpaceInvaders-v1"
TARGET = 70.0
EVAL_EVERY = 50_000
EVAL_EPISODES = 10
PEER_BUDGET = 10_000_000
"""The peers' budget in env steps: the zoo's Atari budget, over which SB3's linear
schedules run (rayrl's presets keep their own, over which their schedules run)."""

RAYRL_PRESETS = ("minatar_ppo", "minatar_appo", "minatar_impala")
CONTENDERS = (
    *(f"rayrl {preset}" for preset in RAYRL_PRESETS),
    "plain ppo",
    "sb3 ppo",
    "rllib ppo",
    "rllib appo",
    "sample-factory appo",
)
BENCH = Path(__file__).resolve().parent


@dataclass
class Outcome:
    """One whole command."""

    wall_s: float
    evaluations: list[list[float]]
    """[env steps, mean return] of every evaluation made."""
    failed: bool = False
    """It exited with an error (its output is printed): left out of the figures."""

    @property
    def target_env_steps(self) -> int | None:
        """Env steps of the evaluation that reached the target (None: not reached)."""
        return next((int(steps) for steps, mean in self.evaluations if mean >= TARGET), None)

    @property
    def exact(self) -> bool:
        """Its time is its time to the target; otherwise (stopped at the timeout, or its
        budget spent) a lower bound on it."""
        return self.target_env_steps is not None


def command(contender: str, seed: int, runs: Path, sample_factory: Path | None) -> list[str]:
    """The contender's whole command; a rayrl run writes under `runs`."""
    if contender.startswith("rayrl "):
        settings = {
            "env.id": GAME,
            "run.seed": seed,
            "run.target_return": TARGET,
            "run.eval_interval_env_steps": EVAL_EVERY,
            "run.eval_episodes": EVAL_EPISODES,
            "run.runs_dir": runs,
            "logging.console": "false",
        }
        overrides = [
            part for key, value in settings.items() for part in ("--set", f"{key}={value}")
        ]
        rayrl = str(Path(sys.executable).with_name("rayrl"))
        return [rayrl, "train", "--config", contender.removeprefix("rayrl "), *overrides]
    if contender == "plain ppo":
        return [
            sys.executable, str(BENCH / "plain_ppo.py"), "--game", GAME, "--seed", str(seed),
            "--env-steps", str(PEER_BUDGET), "--target", str(TARGET), "--threads", "1",
            "--eval-every", str(EVAL_EVERY), "--eval-episodes", str(EVAL_EPISODES),
        ]  # fmt: skip
    if contender == "sample-factory appo":
        assert sample_factory is not None  # (main refuses the contender without it)
        return [str(sample_factory), str(BENCH / "race_sample_factory.py"), "--seed", str(seed)]
    return [sys.executable, __file__, "--child", contender.replace(" ", "-"), "--seed", str(seed)]


def run(contender: str, seed: int, timeout_s: float, sample_factory: Path | None) -> Outcome:
    """The contender's whole command, timed from its start to its exit (or to the timeout,
    which kills its process group: Ray's processes and Sample Factory's go with it)."""
    with tempfile.TemporaryDirectory() as cwd:
        runs, output = Path(cwd) / "runs", Path(cwd) / "output.txt"
        with output.open("w") as sink:  # a file, not a pipe: a leftover child cannot hold it
            start = time.monotonic()
            process = subprocess.Popen(
                command(contender, seed, runs, sample_factory),
                cwd=cwd,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            wall = time.monotonic() - start
            with contextlib.suppress(ProcessLookupError):  # what it left behind, if anything
                os.killpg(process.pid, signal.SIGKILL)
        text = output.read_text(errors="replace")
        failed = process.returncode not in (0, -signal.SIGKILL)
        if failed:
            print(f"{contender} (seed {seed}) failed:\n{text[-4000:]}")
        if contender.startswith("rayrl "):
            logs = list(runs.glob("*/eval.jsonl"))
            rows = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
            evaluations = [[row["env_steps"], row["eval/return_mean"]] for row in rows]
        else:
            evaluations = [
                [float(value) for value in line.split()[1:3]]
                for line in text.splitlines()
                if line.startswith("evaluation: ")
            ]
    return Outcome(wall, evaluations, failed)


def sb3_child(seed: int) -> None:
    """SB3 PPO with the zoo's Atari settings on the race's game, to the target."""
    import gymnasium as gym
    import numpy as np
    import torch
    from plain_loop import make_env
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.utils import LinearSchedule
    from torch import nn

    def as_bytes(env: gym.Env) -> gym.Env:
        """MinAtar's boolean grids as 0/1 bytes (SB3 takes no boolean Box)."""
        shape = env.observation_space.shape
        space = gym.spaces.Box(0, 1, shape, np.uint8)
        return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.uint8), space)

    class MinAtarNetwork(BaseFeaturesExtractor):
        """The MinAtar paper's body: a 16-filter 3x3 convolution and 128 units."""

        def __init__(self, space: gym.spaces.Box) -> None:
            super().__init__(space, features_dim=128)
            height, width, channels = space.shape
            self.conv = nn.Conv2d(channels, 16, kernel_size=3)
            self.fc = nn.Linear(16 * (height - 2) * (width - 2), 128)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.conv(obs.permute(0, 3, 1, 2)))
            return torch.relu(self.fc(x.flatten(1)))

    class Record(EvalCallback):
        def _on_step(self) -> bool:
            going_on = super()._on_step()
            if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
                print(f"evaluation: {self.num_timesteps} {self.last_mean_reward}", flush=True)
            return going_on

    n_envs = 8
    env = make_vec_env(lambda: as_bytes(make_env(GAME)), n_envs=n_envs, seed=seed)
    eval_env = make_vec_env(lambda: as_bytes(make_env(GAME)), n_envs=1, seed=seed + 1000)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=LinearSchedule(2.5e-4, 0.0, 1.0),
        clip_range=LinearSchedule(0.1, 0.0, 1.0),
        vf_coef=0.5,
        ent_coef=0.01,
        policy_kwargs={"features_extractor_class": MinAtarNetwork, "net_arch": []},
        seed=seed,
        device="cpu",
    )
    callback = Record(
        eval_env,
        callback_on_new_best=StopTrainingOnRewardThreshold(TARGET, verbose=0),
        eval_freq=EVAL_EVERY // n_envs,  # counted in vector steps
        n_eval_episodes=EVAL_EPISODES,
        deterministic=False,
        verbose=0,
    )
    model.learn(PEER_BUDGET, callback=callback)


def rllib_child(algorithm: str, seed: int) -> None:
    """RLlib's PPO or APPO (new API stack) with its tuned Atari settings on the race's
    game, evaluated every EVAL_EVERY env steps, to the target."""
    import gymnasium as gym
    import numpy as np
    import ray
    from plain_loop import make_env
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    def as_floats(_: dict) -> gym.Env:
        env = make_env(GAME)
        space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
        return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.float32), space)

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    register_env("race", as_floats)
    if algorithm == "ppo":  # rllib/tuned_examples/ppo/atari_ppo.py
        config = PPOConfig().training(
            train_batch_size_per_learner=4000,
            minibatch_size=128,
            lambda_=0.95,
            kl_coeff=0.5,
            clip_param=0.1,
            vf_clip_param=10.0,
            entropy_coeff=0.01,
            num_epochs=10,
            lr=0.00015,
            grad_clip=100.0,
            grad_clip_by="global_norm",
        )
    else:  # rllib/tuned_examples/appo/pong_appo.py
        config = APPOConfig().training(
            train_batch_size_per_learner=500,
            target_network_update_freq=2,
            lr=0.0005,
            vf_loss_coeff=1.0,
            entropy_coeff=[[0, 0.01], [3_000_000, 0.0]],
            broadcast_interval=5,
            circular_buffer_num_batches=4,
            circular_buffer_iterations_per_batch=2,
        )
    config = (
        config.environment("race")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
        .rl_module(
            model_config=DefaultModelConfig(
                vf_share_layers=True,
                conv_filters=[[16, 3, 1, "valid"]],
                conv_activation="relu",
                head_fcnet_hiddens=[128],
            )
        )
        .evaluation(
            # an interval (never reached: this loop calls `evaluate`) makes RLlib build an
            # evaluation env runner of its own, here in the main process with one env, so
            # that its 10 episodes are 10 whole ones, not the first to end of 8 envs
            evaluation_interval=10**9,
            evaluation_duration=EVAL_EPISODES,
            evaluation_duration_unit="episodes",
            evaluation_num_env_runners=0,
            evaluation_config={"explore": True, "num_envs_per_env_runner": 1},
        )
        .debugging(seed=seed)
    )
    trainer = config.build_algo()
    next_eval = EVAL_EVERY
    while True:
        result = trainer.train()
        # (APPO's first results may come before any env runner's metrics)
        env_steps = int(result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0))
        print(f"{env_steps} env steps", file=sys.stderr, flush=True)  # progress, for a look
        if env_steps >= next_eval:
            next_eval += EVAL_EVERY
            score = trainer.evaluate()["env_runners"]["episode_return_mean"]
            print(f"evaluation: {env_steps} {score}", flush=True)
            if score >= TARGET:
                return


def summary(values: list[float], digits: int = 1) -> str:
    """ "median (min-max)"."""
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{median:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--timeout-minutes", type=float, default=30.0)
    parser.add_argument(
        "--sample-factory-python",
        type=Path,
        help="the Python of a virtualenv with Sample Factory (bench/race_sample_factory.py)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "sb3-ppo":  # one peer, in this process
        sb3_child(args.seed)
        return
    if args.child:
        rllib_child(args.child.removeprefix("rllib-"), args.seed)
        return
    from common import machine

    chosen = list(args.contenders)
    if "sample-factory appo" in chosen and args.sample_factory_python is None:
        parser.error("--contenders 'sample-factory appo' needs --sample-factory-python")
    outcomes: dict[str, list[Outcome]] = {name: [] for name in chosen}
    for round_, seed in enumerate(args.seeds):
        shift = round_ % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            outcome = run(contender, seed, args.timeout_minutes * 60, args.sample_factory_python)
            outcomes[contender].append(outcome)
            steps = outcome.target_env_steps
            shown = "not reached" if steps is None else f"reached at {steps:,} env steps"
            shown += " (failed)" if outcome.failed else ""
            print(f"seed {seed}, {contender}: {outcome.wall_s:.1f} s, {shown}", flush=True)
            print(f"  evaluations: {json.dumps(outcome.evaluations)}", flush=True)
    print(
        f"\n{GAME} to {TARGET:g} ({EVAL_EPISODES} sampled episodes every {EVAL_EVERY:,} env "
        f"steps), seeds {' '.join(map(str, args.seeds))}; {machine()}; median (min-max):"
    )
    kept = {name: [row for row in rows if not row.failed] for name, rows in outcomes.items()}
    for contender, rows in kept.items():
        reached = [row for row in rows if row.exact]
        line = f"  {contender:>19}: {len(reached)}/{len(rows)} reached"
        if rows:
            line += f"; whole command {summary([row.wall_s for row in rows])} s"
        if len(reached) < len(rows):
            line += " (a run not reached counts its time: a lower bound)"
        if reached:
            line += f"; env steps {summary([row.target_env_steps for row in reached], 0)}"
        for row in rows:
            if not row.exact and row.evaluations:
                steps, mean = row.evaluations[-1]
                line += f"; last evaluation {mean:.1f} at {int(steps):,} env steps"
        print(line)
    compare(outcomes)


def compare(outcomes: dict[str, list[Outcome]]) -> None:
    """Each peer's whole command over rayrl's best preset's (the lowest median of its runs
    that reached the target), per round: a round where rayrl's run did not reach the target
    or either run failed is left out; one where the peer's did not reach it makes the ratio
    a lower bound."""
    own = [name for name in outcomes if name.startswith("rayrl ")]
    exact = {name: [row.wall_s for row in outcomes[name] if row.exact] for name in own}
    if not any(exact.values()):
        return
    best = min((name for name in own if exact[name]), key=lambda n: statistics.median(exact[n]))
    for peer in (name for name in outcomes if name not in own):
        pairs = [
            (theirs, ours)
            for theirs, ours in zip(outcomes[peer], outcomes[best], strict=True)
            if ours.exact and not theirs.failed
        ]
        if not pairs:
            continue
        ratios = [theirs.wall_s / ours.wall_s for theirs, ours in pairs]
        bound = " at least" if not all(theirs.exact for theirs, _ in pairs) else ""
        print(f"  {peer} / {best}, whole command, per seed:{bound} {summary(ratios, 2)}x")


if __name__ == "__main__":
    main()
