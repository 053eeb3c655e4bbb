"""Recurrent policies: the acting state starts afresh exactly where episodes start, and
PPO replays whole unrolls from their stored states in its minibatches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayrl.core import Unrolls
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.evaluation import Evaluator
from rayrl.presets import load_config
from tests.parts import learner_for, per_step_outputs, policy_for

SMALL = ["algorithm.hidden_sizes=[8]", "algorithm.lstm_size=8"]


@pytest.fixture(scope="module")
def pomdp():
    config = load_config("cartpole_pomdp_ppo", SMALL)
    return config, env_spec(config.env)


def test_the_state_starts_afresh_only_for_the_envs_that_start_an_episode(pomdp):
    """A hand-built sequence of starts over three envs; each env's state is checked against
    the network stepped by hand from zeros at that env's own starts."""
    config, spec = pomdp
    policy = policy_for(config, spec, 0).policy  # the recurrent policy inside the normalizer
    rng = np.random.default_rng(0)
    starts = np.zeros((6, 3), dtype=bool)
    starts[0] = True
    starts[2, 1] = starts[4, 0] = starts[5, 0] = True
    obs = rng.normal(size=(6, 3, 2)).astype(np.float32)
    reported = [policy.act(obs[t], starts[t], explore=True).state for t in range(6)]

    for env in range(3):
        resets = np.append(starts[1:, env], False)  # a start at t + 1: a reset after step t
        _, _, after = per_step_outputs(policy.network, obs[:, env], resets, None)
        for t in range(6):
            expected = torch.zeros(8) if starts[t, env] else after[t - 1][0][0]
            np.testing.assert_allclose(reported[t]["h"][env], expected.detach(), atol=1e-6)
    assert not reported[4]["h"][0].any()  # env 0 started afresh, env 1 went on
    assert reported[4]["h"][1].any()


def test_a_different_number_of_envs_needs_every_env_to_start(pomdp):
    config, spec = pomdp
    policy = policy_for(config, spec, None)
    obs = np.zeros((4, 2), dtype=np.float32)
    policy.act(obs, np.ones(4, bool), explore=False)
    with pytest.raises(ValueError, match="needs every env to start an episode"):
        policy.act(obs[:1], np.zeros(1, bool), explore=False)
    policy.act(obs[:1], np.ones(1, bool), explore=False)  # as the video's one env does


def recurrent_batch(rng: np.random.Generator, unrolls: int = 4, steps: int = 6) -> Unrolls:
    terminated = rng.random((unrolls, steps)) < 0.15
    return Unrolls(
        obs=rng.normal(size=(unrolls, steps + 1, 2)).astype(np.float32),
        actions=rng.integers(0, 2, size=(unrolls, steps)),
        rewards=np.ones((unrolls, steps), np.float32),
        terminated=terminated,
        truncated=np.zeros((unrolls, steps), bool),
        env_reset=terminated.copy(),
        final_obs=np.zeros((0, 2), np.float32),
        final_index=np.zeros((0, 2), np.int64),
        policy_versions=np.zeros(unrolls, np.int64),
        extras={
            "logp": np.full((unrolls, steps), np.log(0.5), np.float32),
            "discounted_return": np.ones((unrolls, steps), np.float32),
        },
        initial_state={k: rng.normal(size=(unrolls, 8)).astype(np.float32) for k in "hc"},
    )


def test_ppo_replays_each_unroll_of_a_minibatch_from_its_stored_state(pomdp):
    """The update's targets score every step as the per-step reference does, and a
    minibatch of some of the unrolls, in any order, reproduces their steps' scores."""
    config, spec = pomdp
    learner = learner_for(config, spec).learner
    batch = recurrent_batch(np.random.default_rng(1))
    assert batch.env_reset.any()
    start = learner.targets(batch)
    for b in range(len(batch)):
        state = tuple(torch.from_numpy(batch.initial_state[k][b : b + 1]) for k in "hc")
        heads, values, _ = per_step_outputs(
            learner.network, batch.obs[b], batch.env_reset[b], state
        )
        logp = torch.distributions.Categorical(logits=torch.stack(heads[:-1])).log_prob(
            torch.from_numpy(batch.actions[b])
        )
        torch.testing.assert_close(start.logp[b], logp.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(start.values[b], torch.stack(values[:-1]).detach())

    sequences = learner.sequences(batch, {"old_logp": start.logp})
    rows = torch.tensor([2, 0])
    with torch.no_grad():
        out = learner.wrapped_network(
            sequences.obs[rows], sequences.starts[rows], tuple(s[rows] for s in sequences.state)
        )
        actions = learner.tensor(batch.actions)[rows]
        logp = learner.network.distribution(out.head).log_prob(actions)
    torch.testing.assert_close(logp, start.logp[rows])


def test_every_minibatch_of_an_update_starts_its_unrolls_from_their_own_states(pomdp):
    """With a negligible learning rate the policy does not move, so every minibatch of every
    epoch must score its steps exactly as the update's start did (ratio 1, no KL): which
    fails if a minibatch's unrolls were replayed from another unroll's state."""
    _, spec = pomdp
    config = load_config(
        "cartpole_pomdp_ppo",
        [*SMALL, "algorithm.num_minibatches=4", "algorithm.epochs=2", "learner.lr=1e-12"],
    )
    learner = learner_for(config, spec)
    result = learner.update(recurrent_batch(np.random.default_rng(2), unrolls=8))
    assert abs(result.metrics["learner/approx_kl"]) < 1e-7
    assert result.metrics["learner/clip_fraction"] == 0.0
    assert learner.updates == 1


def test_minibatches_that_would_cut_unrolls_are_refused():
    with pytest.raises(ConfigError, match=r"algorithm.num_minibatches=3 .* whole unrolls"):
        load_config(
            "cartpole_pomdp_ppo",
            ["algorithm.num_minibatches=3", "learner.batch_size=8", "algorithm.steps_per_chunk=24"],
        )


def test_a_separate_critic_keeps_the_value_loss_out_of_the_policys_network():
    """With `separate_critic` the value's gradient reaches only the critic's torso and
    core, the policy's only the policy's; the state holds both cores' side by side."""
    config = load_config("cartpole_pomdp_ppo", [*SMALL, "algorithm.separate_critic=true"])
    network = learner_for(config, env_spec(config.env)).learner.network
    obs = torch.randn(3, 5, 2)
    starts = torch.zeros(3, 5, dtype=torch.bool)
    state = network.initial_state(3)
    assert state[0].shape == (3, 16)
    out = network(obs, starts, state)
    assert out.states[0].shape == (3, 5, 16)
    policy_side = [*network.torso.parameters(), *network.core.parameters()]
    critic_side = [*network.critic_torso.parameters(), *network.critic_core.parameters()]
    value_grads = torch.autograd.grad(
        out.values.sum(), policy_side + critic_side, allow_unused=True
    )
    assert all(g is None for g in value_grads[: len(policy_side)])
    assert all(g is not None and g.abs().sum() > 0 for g in value_grads[len(policy_side) :])
    head_grads = torch.autograd.grad(out.head.sum(), critic_side, allow_unused=True)
    assert all(g is None for g in head_grads)


def test_the_evaluator_starts_each_episode_afresh(pomdp):
    """The evaluator tells the policy where episodes start: every env at the reset, then
    exactly the envs whose episode ended on the step before; the state it acted from is
    zeros there."""
    config, _ = pomdp
    evaluator = Evaluator(config.env, config.algorithm, episodes=4, run_seed=0)
    calls, resets = [], []
    act, step = evaluator.policy.act, evaluator.env.step

    def recording_act(obs, episode_starts, **kwargs):
        out = act(obs, episode_starts, **kwargs)
        calls.append((episode_starts.copy(), out.state["h"]))
        return out

    def recording_step(actions, *args):
        batch = step(actions, *args)
        resets.append(batch.env_reset.copy())
        return batch

    evaluator.policy.act, evaluator.env.step = recording_act, recording_step
    for _ in range(2):  # a second evaluation resets every env again
        first = len(calls)
        evaluator.evaluate(None, episodes=4)
        assert calls[first][0].all()
        for t in range(first + 1, len(calls)):
            np.testing.assert_array_equal(calls[t][0], resets[t - 1])
    assert sum(starts.sum() for starts, _ in calls) >= 2 * 4 + 4  # resets and new episodes
    for starts, state in calls:
        assert not state[starts].any()
    evaluator.close()
