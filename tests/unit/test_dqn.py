"""DQN pieces: exploration, the update, target networks, policy weights."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rayrl.algorithms.exploration import apex_epsilons, linear_epsilon
from rayrl.core import TransitionBatch
from rayrl.envs import env_spec
from rayrl.presets import load_config, with_overrides
from tests.parts import all_starting, learner_for, policy_for


def test_apex_epsilons_follow_the_paper():
    eps = apex_epsilons(8, 0.4, 7.0)
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert np.all(np.diff(eps) < 0)
    assert apex_epsilons(1, 0.4, 7.0)[0] == pytest.approx(0.4)


def test_linear_epsilon_schedule():
    assert linear_epsilon(0, 1.0, 0.1, 100) == pytest.approx(1.0)
    assert linear_epsilon(50, 1.0, 0.1, 100) == pytest.approx(0.55)
    assert linear_epsilon(10**6, 1.0, 0.1, 100) == pytest.approx(0.1)


@pytest.fixture(scope="module")
def cartpole():
    config = load_config(
        None, ["algorithm.hidden_sizes=[16]", "learner.lr=0.01", "learner.device=cpu"]
    )
    return config, env_spec(config.env)


def test_each_worker_gets_its_slice_of_apex_epsilons(cartpole):
    config, spec = cartpole
    apex = with_overrides(
        config,
        ["algorithm.exploration=apex", "workers.num_workers=2", "workers.envs_per_worker=3"],
    )
    all_eps = apex_epsilons(6, 0.4, 7.0)
    assert policy_for(apex, spec, 1).epsilon(0) == pytest.approx(all_eps[3:])
    assert policy_for(apex, spec, None).epsilon(0) == 0.0  # evaluation: eval_epsilon


def test_greedy_policy_is_deterministic_and_exploring_one_is_not(cartpole):
    config, spec = cartpole
    policy = policy_for(config, spec, 0)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = policy.act(obs, all_starting(obs), explore=False).actions
    assert np.array_equal(greedy, policy.act(obs, all_starting(obs), explore=False).actions)
    exploring = policy.act(obs, all_starting(obs), explore=True, env_steps=0).actions  # epsilon 1
    assert not np.array_equal(greedy, exploring)


def batch(obs, actions, rewards, discounts):
    n = len(actions)
    return TransitionBatch(
        obs=obs,
        actions=np.asarray(actions),
        rewards=np.asarray(rewards, dtype=np.float32),
        discounts=np.asarray(discounts, dtype=np.float32),
        next_obs=obs,
        weights=np.ones(n, dtype=np.float32),
        indices=np.arange(n),
    )


def test_update_regresses_q_to_terminal_rewards(cartpole):
    config, spec = cartpole
    learner = learner_for(with_overrides(config, ["algorithm.replay.prioritized=true"]), spec)
    obs = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    fixed = batch(obs, [0, 1] * 4, np.arange(8), np.zeros(8))  # terminal: target = reward
    first = learner.update(fixed)
    for _ in range(300):
        last = learner.update(fixed)
    assert last.metrics["learner/loss"] < 0.05 * first.metrics["learner/loss"]
    with torch.no_grad():
        q = learner.online(torch.from_numpy(obs))
    taken = q[torch.arange(8), torch.tensor([0, 1] * 4)].numpy()
    np.testing.assert_allclose(taken, np.arange(8), atol=0.5)
    assert first.priorities.shape == (8,)
    assert learner.updates == 301


def test_a_non_finite_loss_skips_the_step_and_is_counted(cartpole):
    """A NaN reward makes the loss NaN: the weights and Adam's state stay as they were, the
    skip is counted, and a finite batch afterwards trains and resets the count in a row."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    obs = np.random.default_rng(2).normal(size=(8, 4)).astype(np.float32)
    good = batch(obs, [0, 1] * 4, np.ones(8), np.zeros(8))
    learner.update(good)
    weights = learner.get_weights().weights
    adam_state = {k: v.clone() for k, v in learner.optimizer.state_dict()["state"][0].items()}
    poisoned = batch(obs, [0, 1] * 4, [np.nan] + [1.0] * 7, np.zeros(8))
    for _ in range(3):
        learner.update(poisoned)
    for name, value in learner.get_weights().weights.items():
        np.testing.assert_array_equal(value, weights[name])
    for key, value in learner.optimizer.state_dict()["state"][0].items():
        torch.testing.assert_close(value, adam_state[key])
    assert (learner.nonfinite.skipped, learner.nonfinite.in_a_row) == (3, 3)
    learner.update(good)
    assert (learner.nonfinite.skipped, learner.nonfinite.in_a_row) == (3, 0)
    assert any(
        not np.array_equal(value, weights[name])
        for name, value in learner.get_weights().weights.items()
    )


def test_hard_and_soft_target_updates(cartpole):
    config, spec = cartpole

    def learner_with(*overrides):
        return learner_for(with_overrides(config, overrides), spec)

    obs = np.random.default_rng(2).normal(size=(8, 4)).astype(np.float32)
    fixed = batch(obs, [0] * 8, np.ones(8), np.zeros(8))
    hard = learner_with("algorithm.target_update_every=3")
    before = [p.clone() for p in hard.target.parameters()]
    hard.update(fixed)
    hard.update(fixed)
    assert all(torch.equal(a, b) for a, b in zip(before, hard.target.parameters(), strict=True))
    hard.update(fixed)
    assert all(
        torch.equal(a, b)
        for a, b in zip(hard.online.parameters(), hard.target.parameters(), strict=True)
    )

    soft = learner_with("algorithm.target_update_every=1", "algorithm.target_update_tau=0.25")
    target_before = [p.clone() for p in soft.target.parameters()]
    soft.update(fixed)
    for old, new, online in zip(
        target_before, soft.target.parameters(), soft.online.parameters(), strict=True
    ):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online)


def test_weights_round_trip_through_model_info(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    obs = np.random.default_rng(3).normal(size=(8, 4)).astype(np.float32)
    learner.update(batch(obs, [1] * 8, np.ones(8), np.zeros(8)))
    info = learner.get_weights()
    assert info.version == 1
    assert all(isinstance(v, np.ndarray) for v in info.weights.values())
    policy = policy_for(config, spec, None)
    policy.set_weights(info)
    assert policy.version == 1
    with torch.no_grad():
        expected = learner.online(torch.from_numpy(obs)).argmax(1).numpy()
    np.testing.assert_array_equal(
        policy.act(obs, all_starting(obs), explore=False).actions, expected
    )


def test_the_dueling_head_is_value_plus_centred_advantages():
    """Q(s, a) = V(s) + A(s, a) - mean_a A(s, a), from the head's own two streams (Wang et
    al. 2016, eq. 9): the value stream is the mean of the action values."""
    config = load_config(None, ["algorithm.dueling=true", "learner.device=cpu"])
    network = learner_for(config, env_spec(config.env)).online
    obs = torch.from_numpy(np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32))
    with torch.no_grad():
        features = network.torso(obs)
        value, advantage = network.value(features), network.advantage(features)
        expected = value + advantage - advantage.mean(dim=1, keepdim=True)
        q = network(obs)
        torch.testing.assert_close(q, expected)
        torch.testing.assert_close(q.mean(dim=1, keepdim=True), value)  # V is Q's mean


def huber(td: torch.Tensor, delta: float) -> torch.Tensor:
    """Quadratic within `delta`, linear outside."""
    return 0.5 * td**2 if abs(float(td)) <= delta else delta * (td.abs() - 0.5 * delta)


def reference_loss(online, target, batch: TransitionBatch, double_q: bool, delta: float):
    """DQN's loss written out one transition at a time: y = r + d Q_target(s', a') with a'
    the online network's greedy action (double Q, van Hasselt et al. 2016) or the target's
    own, `d` the replay's discount (gamma^k after k steps, 0 after a termination); the
    importance-weighted Huber loss on the taken action (Schaul et al. 2016); |TD| as the
    new priority."""
    losses, priorities = [], []
    for i in range(len(batch.actions)):
        obs = torch.from_numpy(batch.obs[i : i + 1])
        next_obs = torch.from_numpy(batch.next_obs[i : i + 1])
        with torch.no_grad():
            next_q = target(next_obs)[0]
            chooser = online(next_obs)[0] if double_q else next_q
            y = float(batch.rewards[i]) + float(batch.discounts[i]) * float(
                next_q[int(chooser.argmax())]
            )
        q = online(obs)[0, int(batch.actions[i])]
        td = y - q
        losses.append(float(batch.weights[i]) * huber(td, delta))
        priorities.append(abs(float(td)))
    return torch.stack(losses).mean(), np.array(priorities, dtype=np.float32)


@pytest.mark.parametrize(("double_q", "prioritized"), [(True, True), (False, True), (True, False)])
def test_the_update_matches_the_papers_loss_gradient_and_priorities(
    cartpole, double_q, prioritized
):
    """Prioritized replay weighs each transition's loss; uniform replay's weights are all
    one, and its update is the plain mean."""
    config, spec = cartpole
    config = with_overrides(
        config,
        [
            f"algorithm.double_q={str(double_q).lower()}",
            f"algorithm.replay.prioritized={str(prioritized).lower()}",
            "algorithm.huber_delta=0.5",  # both the quadratic and the linear part
            "learner.max_grad_norm=null",  # the raw gradient
        ],
    )
    learner = learner_for(config, spec)
    noise = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a target network that disagrees with the online one
        for parameter in learner.target.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=noise))
    rng = np.random.default_rng(6)
    n = 16
    fixed = TransitionBatch(
        obs=rng.normal(size=(n, 4)).astype(np.float32),
        actions=rng.integers(0, 2, n),
        rewards=rng.normal(size=n).astype(np.float32),
        discounts=np.array([0.0, 0.99, 0.99**2, 0.99**3] * 4, dtype=np.float32),
        next_obs=rng.normal(size=(n, 4)).astype(np.float32),
        weights=rng.uniform(0.2, 1.0, n).astype(np.float32)
        if prioritized
        else np.ones(n, dtype=np.float32),
        indices=np.arange(n),
    )
    with torch.no_grad():
        next_obs = torch.from_numpy(fixed.next_obs)
        disagree = learner.online(next_obs).argmax(1) != learner.target(next_obs).argmax(1)
    assert disagree[fixed.discounts > 0].any()  # double and plain Q targets differ here
    online, target = copy.deepcopy(learner.online), copy.deepcopy(learner.target)
    loss, priorities = reference_loss(online, target, fixed, double_q, delta=0.5)
    assert (priorities < 0.5).any()  # the Huber loss's quadratic part
    assert (priorities > 0.5).any()  # and its linear part
    loss.backward()

    result = learner.update(fixed)

    assert result.metrics["learner/loss"] == pytest.approx(float(loss), rel=1e-5)
    if prioritized:
        np.testing.assert_allclose(result.priorities, priorities, rtol=1e-5, atol=1e-6)
    else:
        assert result.priorities is None
    for (name, mine), theirs in zip(
        learner.online.named_parameters(), online.parameters(), strict=True
    ):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-6, msg=name)
