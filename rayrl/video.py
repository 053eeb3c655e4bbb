"""Evaluation episode videos: one episode recorded with gymnasium's `RecordVideo`.

The training and evaluation envs need not render (ale-py's vector env cannot), so the
episode is played on the env suite's rendering env (`EnvSuite.make_render_env`), which
gives the policy the observations it was trained on while the video records the raw,
full-resolution frames.

The encoded MP4 comes back as bytes, so the evaluator can run on any node of a cluster
and the driver, which owns the run directory and the W&B run, stores it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np

from rayrl.config import EnvConfig
from rayrl.contract import Policy
from rayrl.envs import resolve_env, suite_of
from rayrl.envs.adapter import carried_observations, encoder_of, env_actions
from rayrl.errors import ConfigError


def check_video_support(config: EnvConfig) -> None:
    """Fail before training when videos are asked for and cannot be made: render one frame
    through the wrappers a recording uses, and check that the encoder is there."""
    problem = None
    try:
        # first the env (a suite that records no videos says so), then the encoder
        env = suite_of(config.id).make_render_env(resolve_env(config))
        try:
            import moviepy  # noqa: F401

            env.reset(seed=0)
            env.render()
        finally:
            env.close()
    except (ImportError, gym.error.DependencyNotInstalled) as exc:
        problem = str(exc).strip().splitlines()[0]
    if problem is not None:
        raise ConfigError(
            f"logging.video_interval_evals is set, but {config.id} cannot be recorded here "
            f"({problem}); install the video extra: pip install 'rayrl[video]'"
        )


def record_episode(config: EnvConfig, policy: Policy, seed: int) -> bytes:
    """Play one evaluation episode and return it as an MP4 file's bytes."""
    with tempfile.TemporaryDirectory(prefix="rayrl-video-") as temp:
        folder = Path(temp) / "video"  # RecordVideo warns about folders that exist

        def record(raw: gym.Env) -> gym.Env:
            return gym.wrappers.RecordVideo(
                raw,
                str(folder),
                episode_trigger=lambda _: True,
                name_prefix="eval",
                disable_logger=True,
            )

        env = suite_of(config.id).make_render_env(resolve_env(config), wrap_raw=record)
        try:
            encoder = encoder_of(env.observation_space)
            obs, _ = env.reset(seed=seed)
            finished, starts = False, np.ones(1, dtype=bool)
            while not finished:  # observations and actions as the training adapter's
                empty = gym.vector.utils.create_empty_array(env.observation_space, 1)
                assert empty is not None  # None for spaces the encoder refuses
                batch = gym.vector.utils.concatenate(env.observation_space, [obs], empty)
                out = policy.act(carried_observations(batch, encoder), starts, explore=False)
                starts = np.zeros(1, dtype=bool)
                obs, _, terminated, truncated, _ = env.step(
                    env_actions(env.action_space, out.actions)[0]
                )
                finished = terminated or truncated
        finally:
            env.close()  # RecordVideo writes the file when it closes
        (video,) = folder.glob("*.mp4")
        return video.read_bytes()
