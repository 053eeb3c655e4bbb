"""Observation normalisation: the running statistics against numpy's mean and variance, the
learner normalizing what it learns from, and the statistics travelling with the weights to
workers, the evaluator, checkpoints, warm starts and resumes. Reward normalisation: the
workers' running returns, the learner's scaling and its checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayrl.api import validate
from rayrl.core import StepBatch, TransitionBatch, Unrolls
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.evaluation import Evaluator
from rayrl.normalization import (
    MOMENTS_PREFIX,
    NormalizingLearner,
    NormalizingPolicy,
    RunningMoments,
    normalization_mismatch,
    reward_normalization_mismatch,
)
from rayrl.presets import load_config
from rayrl.processing import RETURN_EXTRA, UnrollProcessor
from rayrl.worker import RolloutWorker
from tests import space_envs
from tests.parts import all_starting, learner_for, policy_for

NORMALIZED = ["env.normalize.observations=true", "algorithm.hidden_sizes=[16]"]


def test_merged_moments_equal_numpys_over_everything_seen():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=s, size=(n, 4)) for s, n in [(1, 5), (10, 50), (0.1, 7)]]
    moments = RunningMoments((4,))
    for batch in batches:
        moments.update(batch.sum(0), np.square(batch).sum(0), len(batch), weight=1.0)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(moments.mean, everything.mean(0), rtol=1e-10)
    np.testing.assert_allclose(moments.var, everything.var(0), rtol=1e-9)
    assert moments.count == len(everything)
    # a replayed batch counts for its share: the mean is the same, the count a quarter
    quarter = RunningMoments((4,))
    for batch in batches:
        quarter.update(batch.sum(0), np.square(batch).sum(0), len(batch), weight=0.25)
    np.testing.assert_allclose(quarter.mean, everything.mean(0), rtol=1e-10)
    assert quarter.count == pytest.approx(len(everything) / 4)


@pytest.fixture(scope="module")
def pendulum():
    config = load_config("pendulum_sac", [*NORMALIZED, "learner.batch_size=32"])
    return config, env_spec(config.env)


def transitions(size: int, seed: int = 0) -> TransitionBatch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(loc=[1.0, -1.0, 5.0], scale=[0.5, 0.5, 3.0], size=(size, 3))
    return TransitionBatch(
        obs=obs.astype(np.float32),
        actions=rng.uniform(-2, 2, size=(size, 1)).astype(np.float32),
        rewards=rng.normal(size=size).astype(np.float32),
        discounts=np.full(size, 0.99, np.float32),
        next_obs=(obs + 0.1).astype(np.float32),
        weights=np.ones(size, np.float32),
        indices=np.arange(size),
    )


class Recording:
    """Wraps a learner and keeps the batches it was given."""

    def __init__(self, learner):
        self.learner, self.batches = learner, []

    def __getattr__(self, name):
        return getattr(self.learner, name)

    def update(self, batch):
        self.batches.append(batch)
        return self.learner.update(batch)


def test_the_learner_learns_from_normalized_observations_and_publishes_their_moments(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    assert isinstance(learner, NormalizingLearner)
    assert learner.reuse == config.algorithm.replay.samples_per_insert
    recording = learner.learner = Recording(learner.learner)
    batch = transitions(256)
    learner.update(batch)
    seen = recording.batches[0]
    mean, std = batch.obs.mean(0), batch.obs.std(0)
    np.testing.assert_allclose(seen.obs, (batch.obs - mean) / std, atol=1e-4)
    np.testing.assert_allclose(seen.next_obs, (batch.next_obs - mean) / std, atol=1e-4)
    np.testing.assert_array_equal(seen.rewards, batch.rewards)

    weights = learner.get_weights().weights
    np.testing.assert_allclose(weights[f"{MOMENTS_PREFIX}mean"], mean, rtol=1e-5)
    assert float(weights[f"{MOMENTS_PREFIX}count"]) == pytest.approx(256 / learner.reuse)

    # an outlier is clipped to env.normalize.clip
    far = transitions(4)
    far.obs[0, 2] = 1e6
    learner.update(far)
    assert recording.batches[-1].obs[0, 2] == pytest.approx(config.env.normalize.clip)


def uniform_unrolls(
    obs: np.ndarray, actions: int, final_obs: np.ndarray, final_index: list
) -> Unrolls:
    """Unrolls of `obs` (B, T + 1, ...) with reward 1 at every step, no episode end, and
    actions drawn uniformly from `actions` choices (their log-probabilities)."""
    batch, steps = obs.shape[0], obs.shape[1] - 1
    return Unrolls(
        obs=obs,
        actions=np.random.default_rng(0).integers(0, actions, size=(batch, steps)),
        rewards=np.ones((batch, steps), np.float32),
        terminated=np.zeros((batch, steps), bool),
        truncated=np.zeros((batch, steps), bool),
        env_reset=np.zeros((batch, steps), bool),
        final_obs=final_obs,
        final_index=np.array(final_index, np.int64).reshape(-1, 2),
        policy_versions=np.zeros(batch, np.int64),
        extras={"logp": np.full((batch, steps), np.log(1 / actions), np.float32)},
    )


def test_unrolls_count_each_step_once_and_normalize_their_final_observations():
    config = load_config("cartpole_ppo", NORMALIZED)
    learner = learner_for(config, env_spec(config.env))
    assert learner.reuse == 1.0
    recording = learner.learner = Recording(learner.learner)
    rng = np.random.default_rng(1)
    obs = rng.normal(loc=2.0, size=(64, 9, 4)).astype(np.float32)
    unrolls = uniform_unrolls(
        obs, actions=2, final_obs=np.full((1, 4), 2.0, np.float32), final_index=[[0, 3]]
    )
    learner.update(unrolls)
    steps = obs[:, :-1].reshape(-1, 4)
    assert learner.moments.count == len(steps)  # the bootstrap observation is not counted
    np.testing.assert_allclose(learner.moments.mean, steps.mean(0), rtol=1e-6)
    expected = (2.0 - steps.mean(0)) / np.sqrt(steps.var(0) + 1e-8)
    np.testing.assert_allclose(recording.batches[0].final_obs[0], expected, atol=1e-5)


def test_only_the_float_parts_of_a_flattened_observation_are_normalized():
    """A Dict of a float Box, a one-hot code, 0/1 flags and the steps (a float Box): the
    learner's batch and the policy's input keep the one-hot and the flags bit for bit."""
    config = load_config(
        "cartpole_ppo", [*NORMALIZED, f"env.id={space_envs.env_id('dict', 'discrete')}"]
    )
    spec = env_spec(config.env)
    floats = np.zeros(spec.observation_space.shape, bool)
    for start, stop in spec.layout.float_parts:
        floats[start:stop] = True
    assert floats.any()
    assert not floats.all()
    learner = learner_for(config, spec)
    recording = learner.learner = Recording(learner.learner)
    rng = np.random.default_rng(2)
    obs = rng.integers(0, 2, size=(16, 9, len(floats))).astype(np.float32)
    obs[..., floats] = rng.normal(loc=5.0, size=obs[..., floats].shape)
    learner.update(
        uniform_unrolls(
            obs, actions=3, final_obs=np.zeros((0, len(floats)), np.float32), final_index=[]
        )
    )
    seen = recording.batches[0].obs
    np.testing.assert_array_equal(seen[..., ~floats], obs[..., ~floats])
    assert abs(float(seen[:, :-1][..., floats].mean())) < 0.1  # centred: normalized

    policy = policy_for(config, spec, None)
    assert isinstance(policy, NormalizingPolicy)
    policy.set_weights(learner.get_weights())
    seen_by_network = []
    act = policy.policy.act
    policy.policy.act = lambda obs, *args, **kwargs: (
        seen_by_network.append(obs) or act(obs, *args, **kwargs)
    )
    policy.act(obs[:, 0], all_starting(obs[:, 0]), explore=True)
    np.testing.assert_array_equal(seen_by_network[0][:, ~floats], obs[:, 0][:, ~floats])
    assert not np.array_equal(seen_by_network[0][:, floats], obs[:, 0][:, floats])


def test_workers_and_the_evaluator_act_on_the_learners_statistics(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    for seed in range(3):
        learner.update(transitions(64, seed))
    info = learner.get_weights()
    worker = RolloutWorker(config.env, config.workers, config.algorithm, config.run.seed, 0)
    evaluator = Evaluator(config.env, config.algorithm, episodes=2, run_seed=config.run.seed)
    plain = policy_for(load_config("pendulum_sac", ["algorithm.hidden_sizes=[16]"]), spec, None)
    for policy in (worker.policy, evaluator.policy):
        assert isinstance(policy, NormalizingPolicy)
        policy.set_weights(info)
        np.testing.assert_array_equal(policy.moments.mean, learner.moments.mean)
        np.testing.assert_array_equal(policy.moments.var, learner.moments.var)
    # the evaluator's action is the plain policy's on the normalized observation
    network = {k: v for k, v in info.weights.items() if MOMENTS_PREFIX not in k}
    plain.set_weights(type(info)(info.version, network))
    obs = transitions(8, seed=7).obs
    normalized = learner.moments.normalize(obs, config.env.normalize.clip)
    np.testing.assert_array_equal(
        evaluator.policy.act(obs, all_starting(obs), explore=False).actions,
        plain.act(normalized, all_starting(normalized), explore=False).actions,
    )
    worker.close()
    evaluator.close()


def test_statistics_survive_a_checkpoint_and_a_warm_start(pendulum):
    config, spec = pendulum
    learner = learner_for(config, spec)
    learner.update(transitions(64))
    state = learner.state_dict()
    assert isinstance(state["observation_moments"][f"{MOMENTS_PREFIX}mean"], torch.Tensor)
    resumed = learner_for(config, spec)
    resumed.load_state_dict(state)
    np.testing.assert_array_equal(resumed.moments.mean, learner.moments.mean)
    assert resumed.moments.count == learner.moments.count
    assert resumed.updates == 1
    warm = learner_for(config, spec)
    warm.set_policy_weights(learner.get_weights())
    np.testing.assert_array_equal(warm.moments.var, learner.moments.var)


def test_normalisation_is_refused_for_frames_and_grids():
    config = load_config("minatar_ppo", ["env.normalize.observations=true"])
    with pytest.raises(ConfigError, match=r"env\.normalize\.observations=true needs float"):
        validate(config)


def test_weights_trained_with_normalisation_are_refused_without_it_and_back(pendulum):
    config, spec = pendulum
    normalized = learner_for(config, spec).get_weights()
    plain_config = load_config("pendulum_sac", ["algorithm.hidden_sizes=[16]"])
    plain = learner_for(plain_config, env_spec(plain_config.env)).get_weights()
    assert normalization_mismatch(normalized, normalized=True) is None
    assert "set env.normalize.observations=true" in normalization_mismatch(normalized, False)
    assert "set env.normalize.observations=false" in normalization_mismatch(plain, True)


# ---- rewards ---------------------------------------------------------------------------------


def reward_step(rewards: list[float], resets: list[bool]) -> StepBatch:
    envs = len(rewards)
    return StepBatch(
        obs=np.zeros((envs, 2), np.float32),
        actions=np.zeros(envs, np.int64),
        rewards=np.array(rewards, np.float32),
        terminated=np.array(resets),
        truncated=np.zeros(envs, bool),
        next_obs=np.zeros((envs, 2), np.float32),
        env_reset=np.array(resets),
        extras={"logp": np.zeros(envs, np.float32)},
    )


def test_workers_track_each_envs_discounted_return_across_unrolls_and_episodes():
    processor = UnrollProcessor(num_envs=2, steps_per_chunk=2, return_discount=0.5)
    unrolls = []
    for first, second in (([False, False], [False, True]), ([False, False], [False, False])):
        processor.process(reward_step([1, 2], first), policy_version=0)
        processor.process(reward_step([1, 2], second), policy_version=0)
        unrolls.append(processor.flush().extras[RETURN_EXTRA])
    returns = np.concatenate(unrolls, axis=1)
    # env 0: 1, 1.5, 1.75, 1.875 (across the unrolls); env 1 ends after its second step
    np.testing.assert_allclose(returns[0], [1, 1.5, 1.75, 1.875])
    np.testing.assert_allclose(returns[1], [2, 3, 2, 3])
    processor = UnrollProcessor(num_envs=2, steps_per_chunk=1)  # without reward normalisation
    processor.process(reward_step([1, 2], [False, False]), policy_version=0)
    assert RETURN_EXTRA not in processor.flush().extras


def test_the_learner_scales_rewards_by_the_spread_of_the_returns():
    config = load_config(
        "cartpole_ppo", ["env.normalize.rewards=true", "algorithm.hidden_sizes=[8]"]
    )
    learner = learner_for(config, env_spec(config.env))
    assert learner.moments is None  # observations as they come
    recording = learner.learner = Recording(learner.learner)
    rng = np.random.default_rng(3)
    returns = rng.normal(loc=40.0, scale=8.0, size=(16, 8)).astype(np.float32)
    batch = Unrolls(
        obs=rng.normal(size=(16, 9, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=(16, 8)),
        rewards=np.ones((16, 8), np.float32),
        terminated=np.zeros((16, 8), bool),
        truncated=np.zeros((16, 8), bool),
        env_reset=np.zeros((16, 8), bool),
        final_obs=np.zeros((0, 4), np.float32),
        final_index=np.zeros((0, 2), np.int64),
        policy_versions=np.zeros(16, np.int64),
        extras={"logp": np.full((16, 8), np.log(0.5), np.float32), RETURN_EXTRA: returns},
    )
    result = learner.update(batch)
    spread = returns.astype(np.float64).std()
    np.testing.assert_allclose(recording.batches[0].rewards, 1.0 / spread, rtol=1e-5)
    np.testing.assert_array_equal(recording.batches[0].obs, batch.obs)
    assert result.metrics["learner/return_std"] == pytest.approx(spread, rel=1e-5)
    assert "observation_moments" not in learner.state_dict()
    assert not any(key.startswith(MOMENTS_PREFIX) for key in learner.get_weights().weights)

    resumed = learner_for(config, env_spec(config.env))
    resumed.load_state_dict(learner.state_dict())
    assert resumed.return_moments.var == pytest.approx(spread**2)
    assert reward_normalization_mismatch(learner.state_dict(), normalized=True) is None
    problem = reward_normalization_mismatch(learner.state_dict(), normalized=False)
    assert "set env.normalize.rewards=true" in problem


def test_reward_normalisation_is_refused_for_replay():
    with pytest.raises(ConfigError, match=r"env\.normalize\.rewards=true is for on-policy"):
        load_config("pendulum_sac", ["env.normalize.rewards=true"])
