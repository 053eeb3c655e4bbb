"""Sample Factory's APPO on the race's game, for `bench/race.py`, run with a Python of its
own: Sample Factory 2.1 pins gymnasium < 1 and numpy < 2, so it lives in a virtualenv
beside rayrl's (`python -m venv SF && SF/bin/pip install torch==2.13.0 sample-factory
minatar`), and this file imports neither rayrl nor the race.

Its settings are its published Atari PPO ones (`sf_examples/atari/atari_params.py`: rollout
128, 4 epochs of 4 minibatches of 256, clip 0.1, lr 2.5e-4 (constant: the Atari settings'
linear decay is not in the 2.1 release on PyPI), entropy 0.01, normalised inputs and
returns), with its default of one rollout worker per core (the Atari settings' 8 workers of
one env become 2 workers of 4 envs on 2 cores: the same 1,024 env steps per update),
made asynchronous (`--async_rl`, what makes it APPO; the Atari settings train
synchronously) with its double-buffered sampling (2 splits, where they have 1), the
inputs unscaled (MinAtar's grids are 0/1, not 0-255) and the MinAtar paper's network as
its encoder.

Sample Factory has no periodic evaluation on separate episodes: at each EVAL_EVERY env
steps this takes the mean of the last EVAL_EPISODES training episodes (actions sampled
from the policy, as the others' evaluations sample), prints it as the race's other peers
print an evaluation, and stops the run at the target.

    SF/bin/python bench/race_sample_factory.py --seed 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import gymnasium as gym
import numpy as np
from plain_loop import make_env
from sample_factory.algo.runners.runner import AlgoObserver, Runner
from sample_factory.algo.utils.context import global_model_factory
from sample_factory.algo.utils.torch_utils import calc_num_elements
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.model.encoder import Encoder
from sample_factory.train import make_runner
from torch import nn

GAME = "MinAtar/SpaceInvaders-v1"
TARGET, EVAL_EVERY, EVAL_EPISODES = 70.0, 50_000, 10
"""As `bench/race.py`'s."""


class ChannelsFirst(gym.ObservationWrapper):
    """MinAtar's (height, width, channels) booleans as (channels, height, width) floats."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        height, width, channels = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0.0, 1.0, (channels, height, width), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(observation.transpose(2, 0, 1), dtype=np.float32)


class MinAtarEncoder(Encoder):
    """The MinAtar paper's body: a 16-filter 3x3 convolution and 128 units."""

    def __init__(self, cfg: object, obs_space: gym.spaces.Dict) -> None:
        super().__init__(cfg)
        shape = obs_space["obs"].shape
        self.conv = nn.Sequential(nn.Conv2d(shape[0], 16, kernel_size=3), nn.ReLU())
        self.fc = nn.Sequential(nn.Linear(calc_num_elements(self.conv, shape), 128), nn.ReLU())

    def forward(self, obs_dict: dict) -> object:
        return self.fc(self.conv(obs_dict["obs"]).flatten(1))

    def get_out_size(self) -> int:
        return 128


def make_race_env(*_: object, **__: object) -> gym.Env:
    """The race's env (a function of the module: Sample Factory's workers unpickle it)."""
    return ChannelsFirst(make_env(GAME))


class StopAtTarget(AlgoObserver):
    """The race's evaluation, from the training episodes' returns."""

    def __init__(self) -> None:
        self.next_eval = EVAL_EVERY

    def on_training_step(self, runner: Runner, training_iteration_since_resume: int) -> None:
        env_steps = runner.env_steps.get(0, 0)
        per_policy = runner.policy_avg_stats.get("reward")  # a deque per policy
        returns = list(per_policy[0]) if per_policy else []
        if env_steps < self.next_eval or len(returns) < EVAL_EPISODES:
            return
        self.next_eval += EVAL_EVERY
        mean = statistics.fmean(returns[-EVAL_EPISODES:])
        print(f"evaluation: {env_steps} {mean}", flush=True)
        if mean >= TARGET:
            runner._stop_training()  # (private, but the only way to end a run early)


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--seed", type=int, default=0)
    seed = arguments.parse_args().seed
    register_env("minatar", make_race_env)
    global_model_factory().register_encoder_factory(MinAtarEncoder)
    argv = [
        "--env=minatar", "--experiment=race", f"--seed={seed}", "--algo=APPO",
        "--async_rl=True", f"--num_workers={os.cpu_count()}", "--num_envs_per_worker=4",
        "--worker_num_splits=2", "--rollout=128", "--batch_size=256", "--num_epochs=4",
        "--num_batches_per_epoch=4", "--ppo_clip_ratio=0.1", "--value_loss_coeff=0.5",
        "--exploration_loss_coeff=0.01", "--learning_rate=0.00025",
        "--lr_schedule=constant", "--max_grad_norm=0.5", "--gamma=0.99",
        "--gae_lambda=0.95", "--normalize_input=True", "--normalize_returns=True",
        "--obs_scale=1.0", "--adam_eps=1e-5", "--nonlinearity=relu", "--use_rnn=False",
        "--train_for_env_steps=10000000", "--save_every_sec=100000",
        "--experiment_summaries_interval=3", "--device=cpu",
    ]  # fmt: skip
    parser, _ = parse_sf_args(argv)
    cfg = parse_full_cfg(parser, argv)
    cfg, runner = make_runner(cfg)
    runner.register_observer(StopAtTarget())
    status = runner.init()  # 0: ExperimentStatus.SUCCESS
    if status == 0:
        status = runner.run()
    return status


if __name__ == "__main__":
    sys.exit(main())
