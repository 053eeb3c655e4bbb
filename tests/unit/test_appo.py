"""APPO: its loss and gradients against a per-sample reference, its targets against V-trace
as IMPALA computes them, recomputed before each pass, and its learner on CartPole-sized
batches, feed-forward, recurrent and with Box actions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayrl.algorithms.actor_critic import episode_flags, forward_unrolls
from rayrl.algorithms.appo import RATIO_LIMITS, APPOLearner
from rayrl.algorithms.ppo import ppo_loss
from rayrl.algorithms.vtrace import vtrace
from rayrl.core import Unrolls
from rayrl.envs import env_spec
from rayrl.presets import load_config
from tests.parts import heads_and_values, learner_for
from tests.unit.test_ppo import one_state_batch
from tests.unit.test_recurrent import recurrent_batch


def reference_loss(logp, behaviour_logp, adv, values, old_values, returns, entropy, **settings):
    """Sample Factory's APPO loss one sample at a time: the ratio against the acting policy,
    bounded to [0.05, 20], clipped to [1 / (1 + clip), 1 + clip]."""
    n = len(logp)
    mean = sum(adv) / n
    std = math.sqrt(sum((float(a) - float(mean)) ** 2 for a in adv) / (n - 1))
    adv = [(a - mean) / (std + 1e-8) for a in adv]
    clip, value_clip = settings["clip"], settings["value_clip"]
    policy = value = 0.0
    for i in range(n):
        ratio = torch.clamp(torch.exp(logp[i] - behaviour_logp[i]), 0.05, 20.0)
        clipped = torch.clamp(ratio, 1 / (1 + clip), 1 + clip)
        policy = policy - min(ratio * adv[i], clipped * adv[i])
        error = (values[i] - returns[i]) ** 2
        moved = old_values[i] + torch.clamp(values[i] - old_values[i], -value_clip, value_clip)
        value = value + 0.5 * max(error, (moved - returns[i]) ** 2)
    mean_entropy = sum(entropy) / n
    return policy / n + settings["value_coef"] * value / n - settings["entropy_coef"] * mean_entropy


def test_loss_and_gradients_match_sample_factorys_per_sample_reference():
    settings = {"clip": 0.1, "value_clip": 0.2, "value_coef": 1.0, "entropy_coef": 0.003}
    rng = np.random.default_rng(2)

    def tensor(*shape, scale=1.0, grad=False):
        return torch.tensor(scale * rng.normal(size=shape), dtype=torch.float64, requires_grad=grad)

    behaviour_logp = tensor(32, scale=0.5) - 1.0
    # ratios near the clip, past it on both sides, and past the bounds of [0.05, 20]
    shift = tensor(32, scale=0.3)
    shift[:2] = torch.tensor([-4.0, 4.0], dtype=torch.float64)
    logp = (behaviour_logp + shift).detach().requires_grad_()
    values, old_values = tensor(32, grad=True), tensor(32)
    returns, advantages, entropy = tensor(32), tensor(32), tensor(32, scale=0.1, grad=True)

    ours = ppo_loss(
        logp,
        behaviour_logp,
        torch.ones(32, dtype=torch.float64),
        advantages,
        values,
        old_values,
        returns,
        entropy,
        normalize=True,
        clip_low=1 / (1 + settings["clip"]),
        ratio_limits=RATIO_LIMITS,
        **settings,
    )
    reference = reference_loss(
        logp, behaviour_logp, advantages, values, old_values, returns, entropy, **settings
    )
    torch.testing.assert_close(ours.loss, reference)
    for a, b in zip(
        torch.autograd.grad(ours.loss, [logp, values, entropy]),
        torch.autograd.grad(reference, [logp, values, entropy]),
        strict=True,
    ):
        torch.testing.assert_close(a, b)
    ratios = (logp - behaviour_logp).detach().exp()
    assert (ratios < 1 / 1.1).any()
    assert (ratios > 1.1).any()
    assert (ratios > 20).any()
    assert (ratios < 0.05).any()


@pytest.fixture(scope="module")
def cartpole():
    config = load_config("cartpole_appo", ["algorithm.hidden_sizes=[16]", "run.seed=3"])
    return config, env_spec(config.env)


def stale_batch(learner, rng, obs_row):
    """One-step episodes acted by a policy other than the learner's (ratios away from 1)."""
    actions = rng.integers(0, 2, size=(8, 32))
    batch = one_state_batch(actions, obs_row)
    batch.extras["logp"] = np.log(np.where(actions == 1, 0.3, 0.7)).astype(np.float32)
    return batch


def test_targets_are_vtrace_as_impala_computes_them(cartpole):
    """Advantages and value targets are V-trace's, computed as IMPALA's loss computes them
    (the acting policy's log-probabilities against the network's), with the policy
    gradient's weight clipped at rho_clip; the ratio is taken against the acting policy."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    assert isinstance(learner, APPOLearner)
    rng = np.random.default_rng(0)
    batch = stale_batch(learner, rng, rng.normal(size=4).astype(np.float32))
    columns, metrics = learner.columns(batch)

    tensor = learner.tensor
    out = forward_unrolls(learner.network, learner.network, batch, tensor)
    logp = learner.network.distribution(out.head).log_prob(tensor(batch.actions)).detach()
    terminated, ended = episode_flags(batch, tensor)
    expected = vtrace(
        tensor(batch.extras["logp"]).T,
        logp.T,
        tensor(batch.rewards).T,
        (config.algorithm.gamma * (1.0 - terminated)).T,
        (1.0 - ended).T,
        out.values.detach().T,
        out.next_values.detach().T,
        rho_clip=config.algorithm.rho_clip,
        c_clip=config.algorithm.c_clip,
        pg_rho_clip=config.algorithm.rho_clip,
    )
    torch.testing.assert_close(columns["returns"], expected.vs.T)
    torch.testing.assert_close(columns["advantages"], expected.pg_advantages.T)
    torch.testing.assert_close(columns["old_logp"], tensor(batch.extras["logp"]))
    torch.testing.assert_close(columns["old_values"], out.values.detach())
    assert bool((columns["weights"] == 1).all())
    assert metrics["learner/behaviour_ratio"] != pytest.approx(1.0)


def test_targets_are_recomputed_before_each_pass(cartpole, monkeypatch):
    config, spec = cartpole
    config = load_config(
        "cartpole_appo", ["algorithm.hidden_sizes=[16]", "algorithm.epochs=3", "run.seed=3"]
    )
    learner = learner_for(config, spec)
    seen = []
    columns = learner.columns

    def recorded(batch):
        made = columns(batch)
        seen.append(made[0]["returns"].clone())
        return made

    monkeypatch.setattr(learner, "columns", recorded)
    rng = np.random.default_rng(1)
    learner.update(stale_batch(learner, rng, rng.normal(size=4).astype(np.float32)))
    assert len(seen) == 3
    assert not torch.equal(seen[0], seen[1])  # the network moved between passes


def test_updates_move_the_policy_to_the_rewarded_action(cartpole):
    config, spec = cartpole
    learner = learner_for(config, spec)
    rng = np.random.default_rng(0)
    obs_row = rng.normal(size=4).astype(np.float32)
    for _ in range(40):
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
    expected = {"loss", "pg_loss", "value_loss", "entropy", "clip_fraction", "behaviour_ratio"}
    assert {f"learner/{name}" for name in expected} <= set(result.metrics)


def test_a_recurrent_learner_updates_on_whole_unrolls():
    """With an LSTM core the minibatches are whole unrolls, each replayed from its stored
    state, and V-trace runs over them as for a feed-forward network."""
    config = load_config(
        "cartpole_appo",
        [
            "env.id=rayrl/CartPoleNoVel-v1",
            "algorithm.hidden_sizes=[8]",
            "algorithm.lstm_size=8",
            "algorithm.separate_critic=false",  # the state recurrent_batch gives: one core
            "algorithm.epochs=2",
            "algorithm.num_minibatches=2",
            "learner.batch_size=4",
        ],
    )
    learner = learner_for(config, env_spec(config.env))
    batch = recurrent_batch(np.random.default_rng(3))
    assert batch.env_reset.any()
    result = learner.update(batch)
    assert np.isfinite(result.metrics["learner/loss"])
    assert learner.updates == 1


def test_a_gaussian_head_learns_from_box_actions():
    config = load_config(
        "cartpole_appo", ["env.id=Pendulum-v1", "algorithm.hidden_sizes=[16]", "algorithm.epochs=2"]
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
