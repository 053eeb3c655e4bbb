"""PPO: GAE by hand, the loss against a straightforward reference (values and gradients),
and the learner's update, targets, schedules and state."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rayrl.algorithms.clipped_objective import ppo_loss
from rayrl.algorithms.ppo import gae
from rayrl.core import Unrolls
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from tests.parts import heads_and_values, learner_for

# ---- GAE -------------------------------------------------------------------------------------


def column(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)[:, None]  # (T, B=1)


def test_gae_by_hand_with_a_truncation_and_a_termination_inside_the_unroll():
    """t=1 is truncated and bootstraps from the value of its true final observation (4.0);
    t=2 terminates (no bootstrap); no advantage flows across either episode end."""
    gamma, lam = 0.9, 0.8
    advantages = gae(
        rewards=column(1.0, 2.0, 3.0, 4.0),
        values=column(0.5, 1.0, 1.5, 2.0),
        next_values=column(1.0, 4.0, 9.9, 2.5),  # V(x1), V(final), discounted away, V(x4)
        discounts=column(gamma, gamma, 0.0, gamma),
        continues=column(1.0, 0.0, 0.0, 1.0),
        lam=lam,
    )
    # deltas: 1 + .9 * 1 - .5 = 1.4;  2 + .9 * 4 - 1 = 4.6;  3 - 1.5 = 1.5;  4 + .9 * 2.5 - 2 = 4.25
    # A3 = 4.25;  A2 = 1.5;  A1 = 4.6;  A0 = 1.4 + .9 * .8 * 4.6 = 4.712
    np.testing.assert_allclose(advantages[:, 0].numpy(), [4.712, 4.6, 1.5, 4.25])


def test_gae_at_its_extremes_is_the_td_error_and_the_monte_carlo_advantage():
    rng = np.random.default_rng(0)
    rewards, values = (torch.from_numpy(rng.normal(size=(6, 3))) for _ in range(2))
    next_values = torch.cat([values[1:], torch.from_numpy(rng.normal(size=(1, 3)))])
    discounts, continues = torch.full((6, 3), 0.9, dtype=torch.float64), torch.ones(6, 3)
    deltas = rewards + 0.9 * next_values - values
    torch.testing.assert_close(
        gae(rewards, values, next_values, discounts, continues, lam=0.0), deltas
    )
    returns = torch.zeros(6, 3, dtype=torch.float64)
    carry = next_values[-1]
    for t in reversed(range(6)):
        carry = rewards[t] + 0.9 * carry
        returns[t] = carry
    torch.testing.assert_close(
        gae(rewards, values, next_values, discounts, continues, lam=1.0), returns - values
    )


# ---- the loss --------------------------------------------------------------------------------


def reference_loss(logp, old_logp, weights, adv, values, old_values, returns, entropy, **settings):
    """The (decoupled) PPO loss one sample at a time, as the papers write it."""
    n = len(logp)
    adv = list(adv)
    if settings["normalize"]:
        mean = sum(adv) / n
        std = math.sqrt(sum((float(a) - float(mean)) ** 2 for a in adv) / (n - 1))
        adv = [(a - mean) / (std + 1e-8) for a in adv]
    clip, value_clip = settings["clip"], settings["value_clip"]
    policy = value = 0.0
    for i in range(n):
        ratio = torch.exp(logp[i] - old_logp[i])
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
        policy = policy - weights[i] * min(ratio * adv[i], clipped * adv[i])
        error = (values[i] - returns[i]) ** 2
        if value_clip is not None:
            moved = old_values[i] + torch.clamp(values[i] - old_values[i], -value_clip, value_clip)
            error = max(error, (moved - returns[i]) ** 2)
        value = value + 0.5 * error
    mean_entropy = sum(entropy) / n
    return policy / n + settings["value_coef"] * value / n - settings["entropy_coef"] * mean_entropy


@pytest.mark.parametrize(
    "settings",
    [
        {"clip": 0.2, "value_clip": None, "normalize": True},
        {"clip": 0.1, "value_clip": 0.1, "normalize": False},
    ],
)
def test_loss_and_gradients_match_the_per_sample_reference(settings):
    settings = {**settings, "value_coef": 0.5, "entropy_coef": 0.01}
    rng = np.random.default_rng(1)

    def tensor(*shape, scale=1.0, grad=False):
        return torch.tensor(scale * rng.normal(size=shape), dtype=torch.float64, requires_grad=grad)

    old_logp = tensor(16, scale=0.5) - 1.0
    logp = (
        (old_logp + tensor(16, scale=0.3)).detach().requires_grad_()
    )  # ratios near and past the clip
    weights = torch.from_numpy(rng.uniform(0.5, 2.0, size=16))
    values, old_values = tensor(16, grad=True), tensor(16)
    returns, advantages = tensor(16), tensor(16)
    entropy = tensor(16, scale=0.1, grad=True)
    args = (logp, old_logp, weights, advantages, values, old_values, returns, entropy)

    ours = ppo_loss(*args, **settings).loss
    ours_grads = torch.autograd.grad(ours, [logp, values, entropy])
    reference = reference_loss(*args, **settings)
    reference_grads = torch.autograd.grad(reference, [logp, values, entropy])
    torch.testing.assert_close(ours, reference)
    for a, b in zip(ours_grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b)
    ratios = (logp - old_logp).detach().exp()
    assert ((ratios - 1).abs() > settings["clip"]).any()  # some ratios are clipped


# ---- the learner -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole():
    config = load_config("cartpole_ppo", ["algorithm.hidden_sizes=[16]", "run.seed=3"])
    return config, env_spec(config.env)


def one_state_batch(actions: np.ndarray, obs_row: np.ndarray) -> Unrolls:
    """One-step episodes from one state; action 1 pays 1, action 0 nothing."""
    unrolls, steps = actions.shape
    return Unrolls(
        obs=np.broadcast_to(obs_row, (unrolls, steps + 1, 4)).copy(),
        actions=actions,
        rewards=(actions == 1).astype(np.float32),
        terminated=np.ones((unrolls, steps), dtype=bool),
        truncated=np.zeros((unrolls, steps), dtype=bool),
        env_reset=np.ones((unrolls, steps), dtype=bool),
        final_obs=np.zeros((0, 4), dtype=np.float32),
        final_index=np.zeros((0, 2), dtype=np.int64),
        policy_versions=np.zeros(unrolls, dtype=np.int64),
        extras={"logp": np.full((unrolls, steps), np.log(0.5), dtype=np.float32)},
    )


@pytest.mark.parametrize(
    ("preset", "updates", "metric"),
    [("cartpole_ppo", 15, "approx_kl"), ("cartpole_appo", 40, "ratio_deviation")],
)
def test_updates_move_the_policy_to_the_rewarded_action(preset, updates, metric):
    """PPO's and APPO's learners (one clipped-objective learner; APPO makes one pass per
    batch, so it takes more updates) move the policy to the rewarded action."""
    config = load_config(preset, ["algorithm.hidden_sizes=[16]", "run.seed=3"])
    spec = env_spec(config.env)
    learner = learner_for(config, spec)
    rng = np.random.default_rng(0)
    obs_row = rng.normal(size=4).astype(np.float32)
    for _ in range(updates):
        # fresh behaviour data from the current policy, as workers would send it
        with torch.no_grad():
            logits, _ = heads_and_values(learner.network, torch.from_numpy(obs_row[None]))
        probs = torch.softmax(logits, 1)[0].numpy().astype(np.float64)
        actions = rng.choice(2, size=(8, 32), p=probs / probs.sum())
        batch = one_state_batch(actions, obs_row)
        batch.extras["logp"] = np.log(probs[actions]).astype(np.float32)
        result = learner.update(batch)
    with torch.no_grad():
        logits, value = heads_and_values(learner.network, torch.from_numpy(obs_row[None]))
    assert torch.softmax(logits, 1)[0, 1] > 0.9
    assert value.item() > 0.7
    assert learner.updates == updates
    expected = {"loss", "pg_loss", "value_loss", "entropy", "clip_fraction", metric}
    assert {f"learner/{name}" for name in expected} <= set(result.metrics)
    assert all(
        np.isfinite(v) for k, v in result.metrics.items() if k != "learner/explained_variance"
    )


def test_a_nan_batch_is_one_skipped_update_whatever_its_epochs(cartpole):
    """`cartpole_ppo` takes 20 optimizer steps per update: a batch with a NaN reward skips
    all of them and counts once, and the weights stay as they were."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    obs_row = np.random.default_rng(1).normal(size=4).astype(np.float32)
    batch = one_state_batch(np.ones((8, 32), dtype=np.int64), obs_row)
    batch.rewards[0, 0] = np.nan
    before = learner.get_weights().weights
    learner.update(batch)
    for name, value in learner.get_weights().weights.items():
        np.testing.assert_array_equal(value, before[name])
    assert (learner.nonfinite.skipped, learner.nonfinite.in_a_row) == (1, 1)
    learner.update(batch)
    assert (learner.nonfinite.skipped, learner.nonfinite.in_a_row) == (2, 2)


def test_a_truncated_step_bootstraps_from_its_true_final_observation(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(1, 4, 4)).astype(np.float32)  # 3 steps + the bootstrap obs
    final = rng.normal(size=(1, 4)).astype(np.float32)  # the truncated episode's last obs
    batch = Unrolls(
        obs=obs,
        actions=np.array([[0, 1, 0]]),
        rewards=np.array([[1.0, 2.0, 3.0]], dtype=np.float32),
        terminated=np.array([[False, False, False]]),
        truncated=np.array([[False, True, False]]),
        env_reset=np.array([[False, True, False]]),
        final_obs=final,
        final_index=np.array([[0, 1]]),
        policy_versions=np.zeros(1, dtype=np.int64),
        extras={"logp": np.zeros((1, 3), dtype=np.float32)},
    )
    start = learner.targets(batch)
    values, advantages, returns = start.values, start.advantages, start.returns
    with torch.no_grad():
        v = heads_and_values(learner.network, torch.from_numpy(obs[0]))[1].double().numpy()
        v_final = heads_and_values(learner.network, torch.from_numpy(final))[1].double().item()
    gamma, lam = config.algorithm.gamma, config.algorithm.gae_lambda
    a2 = 3.0 + gamma * v[3] - v[2]  # a new episode from t=2, bootstrapping from obs[3]
    a1 = 2.0 + gamma * v_final - v[1]  # truncated: the final obs's value, no carry from t=2
    a0 = 1.0 + gamma * v[1] - v[0] + gamma * lam * a1
    np.testing.assert_allclose(advantages[0].numpy(), [a0, a1, a2], rtol=1e-5)
    np.testing.assert_allclose(returns[0].numpy(), np.array([a0, a1, a2]) + v[:3], rtol=1e-5)
    np.testing.assert_allclose(values[0].numpy(), v[:3], rtol=1e-5)


def test_learning_rate_and_clip_range_anneal_linearly(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    assert learner.clip == pytest.approx(0.2)
    total = learner.total_updates
    assert total == config.run.total_env_steps // (8 * 32)
    batch = one_state_batch(np.zeros((8, 32), dtype=np.int64), np.zeros(4, np.float32))
    result = learner.update(batch)
    assert result.metrics["learner/clip"] == pytest.approx(0.2)  # what the update used
    assert result.metrics["learner/lr"] == pytest.approx(1e-3)
    assert learner.clip == pytest.approx(0.2 * (1 - 1 / total))
    assert float(learner.optimizer.param_groups[0]["lr"]) == pytest.approx(1e-3 * (1 - 1 / total))


def test_the_entropy_bonus_moves_linearly_to_its_final_weight(cartpole):
    config, spec = cartpole
    assert config.algorithm.entropy_coef_final is None
    constant = learner_for(config, spec)
    batch = one_state_batch(np.zeros((8, 32), dtype=np.int64), np.zeros(4, np.float32))
    assert constant.update(batch).metrics["learner/entropy_coef"] == config.algorithm.entropy_coef
    assert constant.entropy_coef == config.algorithm.entropy_coef

    algorithm = replace(config.algorithm, entropy_coef=0.02, entropy_coef_final=0.01)
    learner = learner_for(replace(config, algorithm=algorithm), spec)
    total = learner.total_updates
    assert learner.update(batch).metrics["learner/entropy_coef"] == pytest.approx(0.02)
    assert learner.entropy_coef == pytest.approx(0.02 - 0.01 / total)
    learner.updates = total // 2
    assert learner.entropy_coef == pytest.approx(0.02 - 0.01 * (total // 2) / total)
    learner.updates = total + 5  # a run continued past its budget keeps the final weight
    assert learner.entropy_coef == pytest.approx(0.01)


def test_the_loss_weighs_the_entropy_by_the_annealed_weight(cartpole):
    """Halfway through the run, bonuses annealed from 0.02 and from 0.01 to 0 weigh 0.01
    and 0.005: with one minibatch step on one batch from one seed, everything else in the
    two losses is equal, so they differ by 0.005 x the entropy."""
    config, spec = cartpole
    batch = one_state_batch(np.zeros((8, 32), dtype=np.int64), np.zeros(4, np.float32))
    metrics = []
    for start in (0.02, 0.01):
        algorithm = replace(
            config.algorithm,
            entropy_coef=start,
            entropy_coef_final=0.0,
            epochs=1,
            num_minibatches=1,
        )
        learner = learner_for(replace(config, algorithm=algorithm), spec)
        learner.updates = learner.total_updates // 2
        metrics.append(learner.update(batch).metrics)
    larger, smaller = metrics
    half = (learner.total_updates // 2) / learner.total_updates
    assert larger["learner/entropy_coef"] == pytest.approx(0.02 * (1 - half))
    assert larger["learner/entropy"] == pytest.approx(smaller["learner/entropy"])
    gap = smaller["learner/loss"] - larger["learner/loss"]
    assert gap == pytest.approx(0.01 * (1 - half) * larger["learner/entropy"], rel=1e-4)


def test_an_entropy_weight_below_zero_is_refused():
    with pytest.raises(ConfigError, match="entropy_coef_final"):
        load_config("cartpole_ppo", ["algorithm.entropy_coef_final=-0.01"])


def test_state_round_trips_through_a_checkpoint(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    learner.update(one_state_batch(np.ones((8, 32), dtype=np.int64), np.ones(4, np.float32)))
    restored = learner_for(config, spec)
    restored.load_state_dict(learner.state_dict())
    assert restored.updates == 1
    assert restored.clip == learner.clip
    assert restored.entropy_coef == learner.entropy_coef
    rates = [[float(g["lr"]) for g in x.optimizer.param_groups] for x in (restored, learner)]
    assert rates[0] == rates[1]
    for key, value in learner.get_weights().weights.items():
        np.testing.assert_array_equal(restored.get_weights().weights[key], value)


def test_a_restored_learner_trains_at_its_configured_rate_not_the_checkpoints(cartpole):
    """A resume with a new `learner.lr`, or a PBT perturbation, must train at the new rate:
    the optimizer's and the schedule's state dicts carry the old one."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    batch = one_state_batch(np.ones((8, 32), dtype=np.int64), np.ones(4, np.float32))
    learner.update(batch)
    changed = replace(config, learner=replace(config.learner, lr=4e-4))
    restored = learner_for(changed, spec)
    restored.load_state_dict(learner.state_dict())
    decay = 1 - 1 / learner.total_updates
    assert float(restored.optimizer.param_groups[0]["lr"]) == pytest.approx(4e-4 * decay)
    assert restored.update(batch).metrics["learner/lr"] == pytest.approx(4e-4 * decay)
    assert restored.optimizer.param_groups[0]["lr"] == pytest.approx(
        4e-4 * (1 - 2 / learner.total_updates)
    )


@pytest.mark.parametrize("preset", ["cartpole_ppo", "cartpole_appo"])
def test_gaussian_head_for_box_actions(preset):
    """PPO's and APPO's learners (one clipped-objective learner) on Box actions."""
    config = load_config(
        preset, ["env.id=Pendulum-v1", "algorithm.hidden_sizes=[16]", "algorithm.epochs=2"]
    )
    learner = learner_for(config, env_spec(config.env))
    rng = np.random.default_rng(0)
    batch = Unrolls(
        obs=rng.normal(size=(8, 33, 3)).astype(np.float32),
        actions=rng.normal(size=(8, 32, 1)).astype(np.float32),
        rewards=rng.normal(size=(8, 32)).astype(np.float32),
        terminated=np.zeros((8, 32), dtype=bool),
        truncated=np.zeros((8, 32), dtype=bool),
        env_reset=np.zeros((8, 32), dtype=bool),
        final_obs=np.zeros((0, 3), dtype=np.float32),
        final_index=np.zeros((0, 2), dtype=np.int64),
        policy_versions=np.zeros(8, dtype=np.int64),
        extras={"logp": np.full((8, 32), -1.0, dtype=np.float32)},
    )
    result = learner.update(batch)
    assert np.isfinite(result.metrics["learner/loss"])


def test_stale_unrolls_are_weighted_by_the_start_policy_over_the_acting_one(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    batch = one_state_batch(np.ones((8, 32), dtype=np.int64), np.ones(4, np.float32))
    start = learner.targets(batch).logp
    # acted by the same policy (weight 1), by one that found the action half as likely
    # (weight 2), or ten times as likely (weight 0.1); then a third as likely: 3, truncated
    for acted, expected in ((0.0, 1.0), (np.log(0.5), 2.0), (np.log(10.0), 0.1)):
        batch.extras["logp"] = (start.numpy() + acted).astype(np.float32)
        result = learner.update(batch)
        assert result.metrics["learner/behaviour_weight"] == pytest.approx(expected, rel=1e-4)
        learner.load_state_dict(learner_for(config, spec).state_dict())  # back to the start
    batch.extras["logp"] = (start.numpy() + np.log(1 / 3)).astype(np.float32)
    capped = learner.update(batch).metrics["learner/behaviour_weight"]
    assert capped == pytest.approx(config.algorithm.max_behaviour_weight)


def test_minibatches_must_divide_the_batch():
    with pytest.raises(ConfigError, match=r"algorithm.num_minibatches=3 does not divide the 256"):
        load_config("cartpole_ppo", ["algorithm.num_minibatches=3"])


def test_the_policy_lag_of_what_the_learner_learns_from_is_reported(cartpole):
    """The learner's own figure: its updates so far minus the versions that acted each
    unroll, averaged over the batch (unrolls that waited in the queue count their wait)."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    batch = one_state_batch(np.ones((8, 32), dtype=np.int64), np.ones(4, np.float32))
    assert learner.update(batch).metrics["learner/policy_lag"] == 0.0
    learner.update(batch)
    batch.policy_versions = np.array([2, 2, 2, 2, 1, 1, 0, 0])  # the learner is at 2
    assert learner.update(batch).metrics["learner/policy_lag"] == pytest.approx(0.75)
