"""Real gymnasium and ale-py envs through the autoreset adapter."""

from __future__ import annotations

import sys
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import rayrl
from rayrl.checkpoint import load_checkpoint
from rayrl.config import EnvConfig
from rayrl.envs import check_env, env_spec, make_env, resolve_env, suite_of
from rayrl.errors import ConfigError
from rayrl.normalization import MOMENTS_PREFIX
from rayrl.processing import NStepProcessor
from tests.conftest import tiny_run_overrides

PONG = EnvConfig(
    id="ALE/Pong-v5", terminal_on_life_loss=True, clip_rewards=True, max_episode_steps=None
)


def test_next_obs_at_termination_is_the_true_final_observation():
    env = make_env(EnvConfig(id="CartPole-v1"), 2, training=True)
    env.reset(seed=3)
    reference = gym.make("CartPole-v1")
    reference.reset(seed=3)  # env 0 of the vector env is seeded with 3
    for _ in range(200):
        step = env.step(np.array([1, 1]))  # always push right: falls within ~10 steps
        ref_obs, _, ref_term, _, _ = reference.step(1)
        np.testing.assert_allclose(step.next_obs[0], ref_obs, rtol=1e-6)
        if step.terminated[0]:
            assert ref_term
            assert step.env_reset[0]
            x, theta = step.next_obs[0][0], step.next_obs[0][2]
            assert abs(x) > 2.4 or abs(theta) > 0.2095  # the terminal state, not a reset
            assert np.abs(env.obs[0]).max() <= 0.05  # the next action sees a fresh episode
            return
    pytest.fail("CartPole never terminated")


def test_next_obs_at_truncation_is_the_true_final_observation_and_bootstraps():
    env = make_env(EnvConfig(id="CartPole-v1", max_episode_steps=5), 1, training=True)
    env.reset(seed=0)
    reference = gym.make("CartPole-v1")
    reference.reset(seed=0)
    for t in range(5):
        action = t % 2
        step = env.step(np.array([action]))
        ref_obs, *_ = reference.step(action)
    assert step.truncated[0]
    assert not step.terminated[0]
    assert step.env_reset[0]
    np.testing.assert_allclose(step.next_obs[0], ref_obs, rtol=1e-6)
    assert not np.allclose(env.obs[0], ref_obs)
    episodes = env.pop_episodes()
    assert [(e.episode_return, e.length) for e in episodes] == [(5.0, 5)]


def test_unknown_env_id_suggests_close_matches():
    with pytest.raises(ConfigError, match=r"unknown environment 'CartPole-v9'.*CartPole-v1"):
        check_env(EnvConfig(id="CartPole-v9"))


def test_atari_spec_and_preprocessing_shapes():
    spec = env_spec(PONG)
    assert spec.observation_space.shape == (4, 84, 84)
    assert spec.observation_space.dtype == np.uint8
    assert spec.action_space.n == 6
    assert spec.frame_stack == 4


def test_atari_is_reproducible_from_its_seed_and_seeds_differ():
    def rollout(seed):
        env = make_env(PONG, 2, training=True)
        env.reset(seed=seed)
        rng = np.random.default_rng(0)
        frames = []
        for _ in range(60):
            env.step(rng.integers(0, 6, size=2))
            frames.append(env.obs.copy())
        env.close()
        return np.stack(frames)

    a, b, c = rollout(1), rollout(1), rollout(2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_atari_training_signal_clips_and_counts_whole_games():
    env = make_env(replace(PONG, max_episode_steps=300), 2, training=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    clipped_ok = True
    for _ in range(300):
        step = env.step(rng.integers(0, 6, size=2))
        clipped_ok &= bool(np.all(np.isin(step.rewards, [-1.0, 0.0, 1.0])))
    assert clipped_ok
    episodes = env.pop_episodes()
    assert [e.length for e in episodes] == [300, 300]
    assert all(e.episode_return <= 0 for e in episodes)  # a random Pong player loses points


def test_frame_tracker_matches_real_atari_stacks():
    env = make_env(replace(PONG, max_episode_steps=40), 2, training=True)
    env.reset(seed=0)
    processor = NStepProcessor(2, n_step=3, gamma=0.99, frame_stack=4)
    rng = np.random.default_rng(0)
    observed = set()
    for _ in range(100):  # crosses two truncations per env
        step = env.step(rng.integers(0, 6, size=2))
        processor.process(step, policy_version=0)
        observed.update(o.tobytes() for o in step.obs)
    chunk = processor.flush()
    rebuilt = chunk.frames[chunk.obs_idx]
    assert {r.tobytes() for r in rebuilt} <= observed
    assert len(chunk) > 150
    assert len(chunk.frames) < 1.2 * len(chunk)


def test_ids_go_to_their_suite():
    assert suite_of("ALE/Pong-v5").name == "atari"
    assert suite_of("CartPole-v1").name == "gymnasium"
    assert suite_of("tests.fake_envs:HangingCartPole-v0").name == "gymnasium"


def test_an_unknown_evaluation_env_names_its_field():
    with pytest.raises(ConfigError, match=r"env\.eval_id: unknown environment 'CartPole-v9'"):
        check_env(EnvConfig(id="CartPole-v1", eval_id="CartPole-v9"))


def test_the_atari_rendering_env_shows_the_policy_its_training_observations():
    env = suite_of(PONG.id).make_render_env(resolve_env(PONG))
    obs, _ = env.reset(seed=0)
    assert obs.shape == env_spec(PONG).observation_space.shape == (4, 84, 84)
    assert env.render().shape == (210, 160, 3)  # the video gets the full frames
    env.close()


BREAKOUT = EnvConfig(id="MinAtar/Breakout-v1")


def test_minatar_spec_and_suite_defaults():
    spec = env_spec(BREAKOUT)
    assert spec.observation_space.shape == (10, 10, 4)
    assert spec.observation_space.dtype == np.bool_
    assert spec.action_space.n == 3  # v1: the minimal action set
    assert spec.frame_stack is None
    resolved = resolve_env(BREAKOUT)
    assert resolved.repeat_action_probability == 0.1  # the MinAtar paper's sticky actions
    assert (resolved.clip_rewards, resolved.terminal_on_life_loss) == (False, False)
    pong = resolve_env(PONG_UNSET)
    assert (pong.clip_rewards, pong.terminal_on_life_loss) == (True, True)  # DeepMind's


PONG_UNSET = EnvConfig(id="ALE/Pong-v5")


def test_minatar_episodes_end_with_their_true_final_observation_and_the_cap():
    env = make_env(replace(BREAKOUT, max_episode_steps=50), 4, training=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(120):
        step = env.step(rng.integers(0, 3, size=4))
        for i in np.flatnonzero(step.env_reset):
            ends += 1
            # the next obs is the episode's last grid, not the reset grid that follows it
            assert not np.array_equal(step.next_obs[i], env.obs[i])
    assert ends >= 8  # every env ended at least twice within 120 steps: the cap holds
    lengths = [e.length for e in env.pop_episodes()]
    assert max(lengths) <= 50


def test_minatar_videos_are_made_of_byte_frames_large_enough_to_see():
    env = suite_of(BREAKOUT.id).make_render_env(resolve_env(BREAKOUT))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (10, 10, 4)
    frame = env.render()
    assert frame.dtype == np.uint8
    assert frame.shape == (160, 160, 3)
    env.close()


def test_minatar_without_its_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar", None)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(ConfigError, match=r"pip install 'rayrl\[minatar\]'"):
        check_env(EnvConfig(id="MinAtar/SpaceInvaders-v1"))


HOPPER = EnvConfig(id="Hopper-v5")


def test_mujoco_ids_go_to_their_suite_and_step_with_their_true_final_observation():
    assert suite_of("HalfCheetah-v5").name == "mujoco"
    assert suite_of("Hopper-v4").name == "mujoco"
    spec = env_spec(HOPPER)
    assert spec.observation_space.shape == (11,)
    assert spec.observation_space.dtype == np.float32  # served as float32, not float64
    assert spec.action_space.shape == (3,)
    env = make_env(HOPPER, 2, training=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(200):  # random hoppers fall within tens of steps
        step = env.step(rng.uniform(-1, 1, size=(2, 3)).astype(np.float32))
        assert step.next_obs.dtype == np.float32
        for i in np.flatnonzero(step.terminated):
            ends += 1
            assert not np.array_equal(step.next_obs[i], env.obs[i])
    assert ends >= 2
    env.close()


def test_mujoco_without_its_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ConfigError, match=r"pip install 'rayrl\[mujoco\]'"):
        check_env(HOPPER)


def test_mujoco_warnings_go_to_the_log_not_a_file_in_the_working_directory(tmp_path, monkeypatch):
    """Gymnasium's HalfCheetah model raises a deprecation warning each time it is built,
    which MuJoCo would append to a MUJOCO_LOG.TXT in the working directory."""
    monkeypatch.chdir(tmp_path)
    make_env(EnvConfig(id="HalfCheetah-v5"), 1, training=False).close()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


SMALL_SAC = [
    "algorithm.hidden_sizes=[32, 32]",
    "algorithm.random_env_steps=256",
    "algorithm.replay.min_size=256",
    "run.total_env_steps=1024",
]
"""One update of a 32x32 SAC per env step, after 256 random ones, to 1,024 env steps."""


@pytest.mark.parametrize(
    ("preset", "shrunk"),
    [
        ("hopper_sac", SMALL_SAC),
        ("halfcheetah_sac", SMALL_SAC),
        ("halfcheetah_ppo", ["run.total_env_steps=4096"]),  # two updates of 2,048 env steps
    ],
)
def test_the_mujoco_presets_train_end_to_end(preset, shrunk, tmp_path):
    """Each MuJoCo preset as shipped, shrunk only in its budget and network (in one process,
    evaluating 2 episodes): it trains, evaluates and saves, and what it saves carries the
    normalization statistics where the preset normalizes."""
    result = rayrl.train(
        preset, overrides=[*tiny_run_overrides(tmp_path), "run.runtime=local", *shrunk]
    )
    assert result.stop_reason == "total_env_steps reached"
    assert result.counters.updates > 0
    assert np.isfinite(result.final_eval.mean)
    weights = load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")["policy"]["weights"]
    normalizes = rayrl.load_config(preset).env.normalize.observations
    assert any(name.startswith(MOMENTS_PREFIX) for name in weights) == normalizes
