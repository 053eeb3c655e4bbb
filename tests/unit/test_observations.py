"""Observations of every space as one array: the batch encoder against gymnasium's own
`flatten`, the layout it records, the adapter's final observations, and the spaces refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from rayrl.envs import VectorEnvAdapter
from rayrl.envs.observations import ObservationEncoder, check_observation_space
from rayrl.errors import ConfigError
from tests import space_envs

SPACES = {
    "discrete": gym.spaces.Discrete(4, start=-1),
    "multi_discrete": gym.spaces.MultiDiscrete([[2, 3], [4, 1]], start=[[0, 1], [2, 0]]),
    "multi_binary": gym.spaces.MultiBinary((2, 3)),
    "dict": gym.spaces.Dict(
        {
            "z": gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32),
            "a": gym.spaces.Discrete(3),
            "m": gym.spaces.Dict({"b": gym.spaces.MultiBinary(2), "f": gym.spaces.Box(0, 1, (1,))}),
            "action_mask": gym.spaces.MultiBinary(3),
        }
    ),
    "tuple": gym.spaces.Tuple(
        (gym.spaces.Box(0, 255, (2,), np.uint8), gym.spaces.Tuple((gym.spaces.Discrete(2),)))
    ),
}


@pytest.mark.parametrize("kind", SPACES)
def test_a_batch_is_encoded_as_gymnasium_flattens_each_observation(kind):
    space = SPACES[kind]
    space.seed(0)
    samples = [space.sample() for _ in range(5)]
    batch = gym.vector.utils.concatenate(
        space, samples, gym.vector.utils.create_empty_array(space, 5)
    )
    encoder = ObservationEncoder(space)
    encoded = encoder.encode(batch)
    expected = np.stack([gym.spaces.flatten(space, sample) for sample in samples])
    assert encoded.dtype == np.float32
    assert encoded.shape == (5, *encoder.space.shape)
    np.testing.assert_array_equal(encoded, expected.astype(np.float32))
    for sample, row in zip(samples, encoded, strict=True):
        np.testing.assert_array_equal(encoder.encode_one(sample), row)


def test_the_layout_names_the_float_parts_and_the_action_mask():
    layout = ObservationEncoder(SPACES["dict"]).layout
    # flatten's order: "a" one-hot [0, 3), "action_mask" [3, 6), "m": "b" [6, 8), "f" [8, 9),
    # then "z" [9, 13)
    assert layout.action_mask == (3, 6)
    assert layout.float_parts == ((8, 13),)
    assert ObservationEncoder(SPACES["tuple"]).layout.float_parts == ()  # bytes are not floats


def test_a_nested_action_mask_is_an_ordinary_part():
    space = gym.spaces.Dict({"inner": gym.spaces.Dict({"action_mask": gym.spaces.MultiBinary(2)})})
    assert ObservationEncoder(space).layout.action_mask is None


def test_the_adapter_flattens_observations_and_the_true_final_ones():
    env = gym.make_vec(
        space_envs.env_id("dict", "discrete"),
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    adapter = VectorEnvAdapter(env)
    encoder = ObservationEncoder(env.single_observation_space)
    assert adapter.single_observation_space == encoder.space
    obs = adapter.reset(seed=0)
    assert obs.shape == (2, *encoder.space.shape)
    assert obs.dtype == np.float32
    for _ in range(space_envs.EPISODE_STEPS):
        batch = adapter.step(np.zeros(2, np.int64))
    assert batch.env_reset.all()
    # flatten's order: code [0, 3), flags [3, 5), nested.steps [5], position [6, 8)
    assert encoder.layout.float_parts == ((5, 8),)
    np.testing.assert_array_equal(batch.next_obs[:, 5], space_envs.EPISODE_STEPS)  # the last
    np.testing.assert_array_equal(adapter.obs[:, 5], 0)  # the next episode's first
    adapter.close()


def test_discrete_actions_are_offset_by_the_space_start():
    class Recorder(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,))
        action_space = gym.spaces.Discrete(3, start=5)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            assert self.action_space.contains(action), action
            return np.zeros(1, np.float32), float(action), False, False, {}

    env = gym.vector.SyncVectorEnv([Recorder], autoreset_mode=AutoresetMode.SAME_STEP)
    adapter = VectorEnvAdapter(env)
    adapter.reset(seed=0)
    step = adapter.step(np.array([2]))
    assert step.rewards[0] == 7.0
    assert step.actions[0] == 2  # as the policy chose it


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Text(5),
        gym.spaces.Dict({"words": gym.spaces.Sequence(gym.spaces.Discrete(2))}),
        gym.spaces.Dict({"action_mask": gym.spaces.Box(0.0, 1.0, (3,))}),
    ],
    ids=["text", "sequence-inside-dict", "float-mask"],
)
def test_observations_that_cannot_be_one_array_are_refused_naming_the_field(space):
    with pytest.raises(ConfigError, match=r"env.id='Some-v0'"):
        check_observation_space(space, "env.id", "Some-v0")
