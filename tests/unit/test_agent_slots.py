"""Envs with several agents as slots of a vector env (`rayrl.envs.pettingzoo`): the agent's
index in each observation, idle slots after an agent finishes (terminated, no reward, left
out of returns and marked inactive), one episode per copy with each agent's return, the
refusals; and the learners leaving idle steps out of every term of the loss."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from rayrl.algorithms.clipped_objective import ppo_loss
from rayrl.api import validate
from rayrl.config import EnvConfig
from rayrl.envs import env_spec, make_env
from rayrl.envs.adapter import ACTIVE_EXTRA
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from rayrl.processing import RETURN_EXTRA
from rayrl.worker import RolloutWorker
from tests import agent_envs
from tests.agent_envs import CODES, ENV_ID, EPISODE_STEPS, SHORT_STEPS
from tests.parts import learner_for

AGENTS = 3


def code_actions(obs: np.ndarray) -> np.ndarray:
    """The rewarded action of every slot: its code (after the agent's one-hot index)."""
    return obs[:, AGENTS : AGENTS + CODES].argmax(axis=1)


def test_each_agent_of_each_copy_is_a_slot_that_sees_its_index():
    env = make_env(EnvConfig(id=ENV_ID), 2, training=True)
    try:
        assert (env.num_envs, env.num_copies, env.agents_per_env) == (6, 2, 3)
        assert env.agent_names == ("agent_0", "agent_1", "agent_2")
        obs = env.reset(seed=0)
        assert obs.shape == (6, AGENTS + CODES)
        np.testing.assert_array_equal(obs[:, :AGENTS], np.tile(np.eye(AGENTS), (2, 1)))
        assert (obs[:, AGENTS:].sum(axis=1) == 1).all()  # each slot's own one-hot code
    finally:
        env.close()


@pytest.mark.parametrize("truncate", [False, True])
def test_an_agent_that_finishes_early_idles_unlearned_until_its_copy_ends(truncate):
    """agent_1 plays 5 steps of the 8, ending by termination or truncation: its slot's steps
    6-8 are idle (terminated, reward 0, inactive, showing its final observation); the copy
    ends after 8 env steps, with every slot active again."""
    config = EnvConfig(id=ENV_ID, kwargs={"truncate": truncate})
    env = make_env(config, 2, training=True)
    try:
        env.reset(seed=1)
        short = [1, 4]  # agent_1's slot in each copy
        for t in range(EPISODE_STEPS):
            step = env.step(code_actions(env.obs))
            active = step.extras[ACTIVE_EXTRA]
            playing = t < SHORT_STEPS
            assert active[short].tolist() == [playing] * 2
            assert active[[0, 2, 3, 5]].all()
            if t == SHORT_STEPS - 1:  # agent_1's last step: a real one, rewarded, ended
                assert (step.terminated[short] != truncate).all()
                assert (step.truncated[short] == truncate).all()
                assert (step.rewards[short] == 1).all()
                final = step.next_obs[short]  # its true final observation
            if not playing:  # idle: terminated, unrewarded, showing that observation
                assert step.terminated[short].all()
                assert (step.rewards[short] == 0).all()
                np.testing.assert_array_equal(step.obs[short], final)
                np.testing.assert_array_equal(step.next_obs[short], final)
            long_slots = [0, 2, 3, 5]
            ended = t == EPISODE_STEPS - 1
            assert step.env_reset[long_slots].tolist() == [ended] * 4
            if ended:
                assert step.truncated[long_slots].all() == truncate
                assert step.terminated[long_slots].all() != truncate
            assert len(env.pop_episodes()) == (2 if ended else 0)
    finally:
        env.close()


def test_one_episode_per_copy_with_each_agents_return():
    env = make_env(EnvConfig(id=ENV_ID), 2, training=True)
    try:
        env.reset(seed=2)
        finished = []
        for _ in range(EPISODE_STEPS):
            env.step(code_actions(env.obs))
            finished += env.pop_episodes()
        assert [e.env_index for e in finished] == [0, 1]
        for episode in finished:
            assert episode.length == EPISODE_STEPS
            assert episode.agent_returns == (EPISODE_STEPS, SHORT_STEPS, EPISODE_STEPS)
            assert episode.episode_return == pytest.approx((2 * EPISODE_STEPS + SHORT_STEPS) / 3)
        step = env.step(code_actions(env.obs))  # the copies started again
        assert step.extras[ACTIVE_EXTRA].all()
    finally:
        env.close()


def test_agents_with_different_observation_spaces_are_refused_naming_them():
    with pytest.raises(ConfigError, match=r"one observation space .* 'agent_1' has Box"):
        make_env(EnvConfig(id=ENV_ID, kwargs={"mismatched": True}), 1, training=True)


def test_an_env_whose_agents_the_slots_cannot_follow_fails_naming_them():
    env = make_env(EnvConfig(id=ENV_ID, kwargs={"late": True}), 1, training=True)
    try:
        with pytest.raises(ValueError, match=r"reset's observations lack \['agent_2'\]"):
            env.reset(seed=0)
    finally:
        env.close()


def test_a_queue_that_cannot_hold_a_workers_agent_unrolls_is_refused_before_start():
    config = load_config("cartpole_ppo", [f"env.id={ENV_ID}"])  # 8 copies x 3 agents, room 16
    with pytest.raises(ConfigError, match=r"algorithm.queue_capacity=16 .* at least 24"):
        validate(config)


def test_videos_of_several_agents_are_refused_before_start():
    config = load_config(
        "cartpole_ppo",
        [f"env.id={ENV_ID}", "algorithm.queue_capacity=48", "logging.video_interval_evals=1"],
    )
    with pytest.raises(ConfigError, match=r"videos of envs with several agents"):
        validate(config)


@pytest.mark.parametrize("preset", ["cartpole_dqn", "cartpole_impala", "pendulum_sac"])
def test_algorithms_without_several_agents_are_refused_before_anything_starts(preset):
    overrides = [f"env.id={ENV_ID}", "env.normalize.observations=false"]
    config = load_config(preset, overrides)
    with pytest.raises(ConfigError, match=r"cannot train the 3 agents .* use appo or ppo"):
        validate(config)


def test_a_pettingzoo_module_without_a_parallel_env_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"env.id='pettingzoo:json': module 'json' has no"):
        validate(load_config("cartpole_ppo", ["env.id=pettingzoo:json"]))


def test_the_loss_leaves_inactive_samples_out_of_every_term():
    """With a mask, the loss (values and gradients) is the unmasked loss of the active
    samples alone, advantage normalisation included."""
    rng = np.random.default_rng(0)

    def tensor(n, grad=False):
        return torch.tensor(rng.normal(size=n), dtype=torch.float64, requires_grad=grad)

    n = 24
    logp, old_logp, values = tensor(n, True), tensor(n), tensor(n, True)
    old_values, returns, advantages, entropy = tensor(n), tensor(n), tensor(n), tensor(n, True)
    weights = torch.rand(n, dtype=torch.float64)
    active = torch.tensor(rng.random(n) < 0.6, dtype=torch.float64)
    keep = active.bool()
    settings = {
        "clip": 0.2,
        "value_clip": 0.3,
        "value_coef": 0.5,
        "entropy_coef": 0.01,
        "normalize": True,
    }
    masked = ppo_loss(
        logp, old_logp, weights, advantages, values, old_values, returns, entropy,
        active=active, **settings,
    )  # fmt: skip
    alone = ppo_loss(
        logp[keep], old_logp[keep], weights[keep], advantages[keep], values[keep],
        old_values[keep], returns[keep], entropy[keep], **settings,
    )  # fmt: skip
    for field in ("loss", "pg_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        torch.testing.assert_close(getattr(masked, field), getattr(alone, field), check_dtype=False)
    for a, b in zip(
        torch.autograd.grad(masked.loss, [logp, values, entropy]),
        torch.autograd.grad(alone.loss, [logp, values, entropy]),
        strict=True,
    ):
        torch.testing.assert_close(a, b)
        assert (a[~keep] == 0).all()


@pytest.mark.parametrize("preset", ["cartpole_ppo", "cartpole_appo", "cartpole_pomdp_ppo"])
def test_an_update_is_the_same_whatever_the_idle_steps_hold(preset):
    """Unrolls sampled from the test env, and the same unrolls with their idle steps'
    observations, actions, rewards and running returns replaced by noise: two learners
    alike before the update are alike after it (an LSTM's too: its state starts afresh
    after each idle step; the recurrent preset's observation and reward normalisation
    too: their statistics leave idle steps out)."""
    config = load_config(
        preset,
        [
            f"env.id={ENV_ID}",
            "workers.envs_per_worker=2",
            "algorithm.steps_per_chunk=16",
            "learner.batch_size=6",
            "algorithm.queue_capacity=64",
            "run.seed=4",
        ],
    )
    worker = RolloutWorker(config.env, config.workers, config.algorithm, 4, 0)
    try:
        chunk, stats = worker.sample()
    finally:
        worker.close()
    assert stats.env_steps == 16 * 2  # env steps count the copies' steps
    assert stats.agent_returns["agent_1"]
    assert stats.agent_returns["agent_0"]
    idle = ~chunk.extras[ACTIVE_EXTRA]
    assert idle.any()
    rng = np.random.default_rng(5)
    noisy = copy.deepcopy(chunk)
    noisy.rewards[idle] = rng.normal(size=idle.sum())
    noisy.actions[idle] = rng.integers(CODES, size=idle.sum())
    step_obs = noisy.obs[:, :-1]
    step_obs[idle] = rng.normal(size=(idle.sum(), step_obs.shape[-1]))
    if RETURN_EXTRA in noisy.extras:
        noisy.extras[RETURN_EXTRA][idle] = rng.normal(size=idle.sum())

    def network(learner):
        return getattr(learner, "learner", learner).network  # inside a NormalizingLearner

    spec = env_spec(config.env)
    learners = [learner_for(config, spec), learner_for(config, spec)]
    network(learners[1]).load_state_dict(network(learners[0]).state_dict())
    learners[0].update(chunk)
    learners[1].update(noisy)
    for a, b in zip(
        network(learners[0]).parameters(), network(learners[1]).parameters(), strict=True
    ):
        torch.testing.assert_close(a, b)


def test_the_env_steps_of_an_update_count_env_copies():
    """An update learns from batch_size agent unrolls: with 3 agents, a third of as many
    env steps, which the schedules' length follows."""
    config = load_config(
        "cartpole_ppo",
        [
            f"env.id={ENV_ID}",
            "env.normalize.observations=false",
            "learner.batch_size=6",  # 6 unrolls of 32 steps: 64 env steps of 3 agents
            "run.total_env_steps=19200",
        ],
    )
    spec = env_spec(config.env)
    one_agent = replace(spec, agents=())
    assert spec.agents_per_env == 3
    assert learner_for(config, spec).total_updates == 300
    assert learner_for(config, one_agent).total_updates == 100


def test_the_test_env_raises_on_an_action_for_an_agent_that_finished():
    """What makes every run above a check that idle slots' actions never reach the env."""
    env = agent_envs.parallel_env()
    env.reset(seed=0)
    for _ in range(SHORT_STEPS):
        env.step({agent: 0 for agent in env.agents})
    with pytest.raises(RuntimeError, match="actions for"):
        env.step({agent: 0 for agent in env.possible_agents})
