"""Evaluation episode videos: one greedy episode recorded with gymnasium's `RecordVideo`.

The training and evaluation envs do not render (ale-py's vector env has no renderer), so
the episode is played on a single gymnasium env made with `render_mode="rgb_array"` and
wrapped to give the policy the observations it was trained on: for Atari, gymnasium's
`AtariPreprocessing` and `FrameStackObservation` reproduce ale-py's C++ preprocessing
(no-op starts, frame skip 4 with max-pooling, 84x84 grayscale, a stack of 4). The video
records the raw, full-resolution frames.

The encoded MP4 comes back as bytes, so the evaluator can run on any node of a cluster
and the driver, which owns the run directory and the W&B run, stores it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np

from rayrl.config import EnvConfig
from rayrl.core import Policy
from rayrl.envs import ATARI_MAX_FRAMES, is_atari, register_atari
from rayrl.errors import ConfigError


def check_video_support(config: EnvConfig) -> None:
    """Fail before training when videos are asked for and cannot be made: render one frame
    through the wrappers a recording uses, and check that the encoder is there."""
    problem = None
    try:
        import moviepy  # noqa: F401

        env = _observe(_make_render_env(config), config)
        try:
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


def _make_render_env(config: EnvConfig) -> gym.Env:
    if not is_atari(config.id):
        kwargs = dict(config.kwargs)
        if config.max_episode_steps is not None:
            kwargs["max_episode_steps"] = config.max_episode_steps
        return gym.make(config.id, render_mode="rgb_array", **kwargs)
    register_atari()
    max_frames = ATARI_MAX_FRAMES
    if config.max_episode_steps is not None:
        max_frames = config.max_episode_steps * config.frame_skip
    return gym.make(
        config.id,
        render_mode="rgb_array",
        frameskip=1,
        repeat_action_probability=config.repeat_action_probability,
        max_episode_steps=max_frames,
    )


def _observe(env: gym.Env, config: EnvConfig) -> gym.Env:
    """Wrap a recording env so that the policy sees training-time observations."""
    if not is_atari(config.id):
        return env
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=config.noop_max, frame_skip=config.frame_skip, screen_size=84
    )
    return gym.wrappers.FrameStackObservation(env, config.frame_stack)


def record_episode(config: EnvConfig, policy: Policy, seed: int) -> bytes:
    """Play one greedy episode and return it as an MP4 file's bytes."""
    with tempfile.TemporaryDirectory(prefix="rayrl-video-") as temp:
        folder = Path(temp) / "video"  # RecordVideo warns about folders that exist
        recorder = gym.wrappers.RecordVideo(
            _make_render_env(config),
            str(folder),
            episode_trigger=lambda _: True,
            name_prefix="eval",
            disable_logger=True,
        )
        env = _observe(recorder, config)
        try:
            obs, _ = env.reset(seed=seed)
            finished = False
            while not finished:
                batch = np.asarray(obs)[None]
                if batch.dtype == np.float64:  # as the training adapter serves them
                    batch = batch.astype(np.float32)
                out = policy.act(batch, explore=False)
                obs, _, terminated, truncated, _ = env.step(out.actions[0])
                finished = terminated or truncated
        finally:
            env.close()  # RecordVideo writes the file when it closes
        (video,) = folder.glob("*.mp4")
        return video.read_bytes()
