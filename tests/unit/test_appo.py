"""APPO: its loss and gradients against a per-sample reference, its targets against V-trace
written out step by step, recomputed before each pass with the value clip's anchor kept, and
its recurrent learner (feed-forward updates and Box actions: test_ppo.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rayrl.algorithms.appo import RATIO_LIMITS, APPOLearner
from rayrl.algorithms.clipped_objective import ppo_loss
from rayrl.algorithms.ppo import gae
from rayrl.core import Unrolls
from rayrl.envs import env_spec
from rayrl.presets import load_config
from tests.parts import heads_and_values, learner_for
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


def episode_batch(rng: np.random.Generator, unrolls: int = 3, steps: int = 6) -> Unrolls:
    """Unrolls of CartPole-shaped observations with terminations inside them and at an
    unroll's end, acted by a policy other than the learner's (random log-probabilities)."""
    terminated = np.zeros((unrolls, steps), dtype=bool)
    terminated[0, 2] = terminated[1, steps - 1] = terminated[2, 0] = True
    actions = rng.integers(0, 2, size=(unrolls, steps))
    return Unrolls(
        obs=rng.normal(size=(unrolls, steps + 1, 4)).astype(np.float32),
        actions=actions,
        rewards=rng.normal(size=(unrolls, steps)).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros((unrolls, steps), dtype=bool),
        env_reset=terminated.copy(),
        final_obs=np.zeros((0, 4), dtype=np.float32),
        final_index=np.zeros((0, 2), dtype=np.int64),
        policy_versions=np.zeros(unrolls, dtype=np.int64),
        extras={"logp": np.log(rng.uniform(0.02, 0.98, size=(unrolls, steps))).astype(np.float32)},
    )


def reference_targets(network, batch, gamma, rho_clip, c_clip, lam=1.0):
    """V-trace as the paper writes it, one unroll and one step at a time:
    v_s = V(x_s) + sum_{t=s}^{end} (prod_{i=s}^{t-1} gamma_i c_i) delta_t up to the episode's
    end, c_i = lam min(c_clip, ratio_i), and the advantage
    rho_s (r_s + gamma_s (lam v_{s+1} + (1 - lam) V(x_{s+1})) - V(x_s)), with the next value
    itself after an episode's or the unroll's end; ratios bounded to [0.05, 20]."""
    vs_all, adv_all = [], []
    for b in range(len(batch.actions)):
        with torch.no_grad():
            heads, values = heads_and_values(network, torch.from_numpy(batch.obs[b]))
        logp = torch.log_softmax(heads, 1)[torch.arange(len(batch.actions[b])), batch.actions[b]]
        ratio = torch.clamp(torch.exp(logp - torch.from_numpy(batch.extras["logp"][b])), 0.05, 20)
        steps = len(batch.actions[b])
        done = batch.terminated[b] | batch.truncated[b]
        disc = [0.0 if batch.terminated[b][t] else gamma for t in range(steps)]
        rho = [min(rho_clip, float(r)) for r in ratio]
        c = [lam * min(c_clip, float(r)) for r in ratio]
        r = batch.rewards[b]
        v = [float(x) for x in values]
        delta = [rho[t] * (r[t] + disc[t] * v[t + 1] - v[t]) for t in range(steps)]
        vs = []
        for s in range(steps):
            total, weight, t = v[s], 1.0, s
            while True:
                total += weight * delta[t]
                if done[t] or t == steps - 1:
                    break
                weight *= disc[t] * c[t]
                t += 1
            vs.append(total)
        adv = []
        for s in range(steps):
            inside = not (done[s] or s == steps - 1)
            after = lam * vs[s + 1] + (1 - lam) * v[s + 1] if inside else v[s + 1]
            adv.append(rho[s] * (r[s] + disc[s] * after - v[s]))
        vs_all.append(vs)
        adv_all.append(adv)
    # float32 as the learner computes; numpy 1.x makes float64 scalars of the sums above
    return torch.tensor(vs_all, dtype=torch.float32), torch.tensor(adv_all, dtype=torch.float32)


@pytest.mark.parametrize("trace_lambda", [1.0, 0.8])
def test_targets_are_vtrace_against_the_acting_policy(cartpole, trace_lambda):
    """Advantages and value targets are V-trace's as the paper writes it (IMPALA's `vtrace`
    computes them), with the ratio against the acting policy, bounded, the policy
    gradient's weight clipped at rho_clip, the traces scaled by lambda, across terminations
    inside the unrolls."""
    config, spec = cartpole
    config = replace(config, algorithm=replace(config.algorithm, trace_lambda=trace_lambda))
    learner = learner_for(config, spec)
    assert isinstance(learner, APPOLearner)
    batch = episode_batch(np.random.default_rng(0))
    columns, metrics = learner.columns(batch)

    algo = config.algorithm
    vs, adv = reference_targets(
        learner.network, batch, algo.gamma, algo.rho_clip, algo.c_clip, trace_lambda
    )
    torch.testing.assert_close(columns["returns"], vs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(columns["advantages"], adv, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(columns["old_logp"], learner.tensor(batch.extras["logp"]))
    assert bool((columns["weights"] == 1).all())
    assert metrics["learner/ratio_deviation"] > 0.1


def test_on_policy_targets_with_a_lambda_are_ppos_gae_and_lambda_returns(cartpole):
    """Unrolls acted by the learner's own network: V-trace with lambda gives PPO's
    GAE(lambda) advantages and lambda-returns on the same data."""
    config, spec = cartpole
    config = replace(config, algorithm=replace(config.algorithm, trace_lambda=0.9))
    learner = learner_for(config, spec)
    batch = episode_batch(np.random.default_rng(1))
    obs = torch.from_numpy(batch.obs)
    with torch.no_grad():
        heads, values = zip(*(heads_and_values(learner.network, o) for o in obs), strict=True)
    logp = torch.stack(
        [
            torch.log_softmax(h[:-1], 1)[torch.arange(6), a]
            for h, a in zip(heads, batch.actions, strict=True)
        ]
    )
    batch.extras["logp"] = logp.numpy()
    columns, _ = learner.columns(batch)

    values = torch.stack(values)
    discounts = torch.from_numpy(np.where(batch.terminated, 0.0, config.algorithm.gamma))
    continues = torch.from_numpy(~(batch.terminated | batch.truncated)).double()
    advantages = gae(
        torch.from_numpy(batch.rewards).T.double(),
        values[:, :-1].T.double(),
        values[:, 1:].T.double(),
        discounts.T,
        continues.T,
        0.9,
    ).T.float()
    torch.testing.assert_close(columns["advantages"], advantages, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        columns["returns"], advantages + values[:, :-1], atol=1e-5, rtol=1e-5
    )


def test_the_learner_passes_the_asymmetric_clip_the_bounds_and_unit_weights(cartpole, monkeypatch):
    import rayrl.algorithms.clipped_objective as objective

    config, spec = cartpole
    learner = learner_for(config, spec)
    seen = []
    original = objective.ppo_loss

    def recorded(*args, **kwargs):
        seen.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(objective, "ppo_loss", recorded)
    learner.update(episode_batch(np.random.default_rng(1)))
    (args, kwargs), *_ = seen
    clip = config.algorithm.clip_coef
    assert kwargs["clip_low"] == pytest.approx(1 / (1 + clip))
    assert kwargs["ratio_limits"] == RATIO_LIMITS
    assert bool((args[2] == 1).all())  # behaviour weights


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
    learner.update(episode_batch(rng))
    assert len(seen) == 3
    assert not torch.equal(seen[0], seen[1])  # the network moved between passes


def test_a_clipped_value_stays_near_its_value_at_the_updates_start(cartpole, monkeypatch):
    """With several passes, each recomputes the targets, but the value clip's anchor is the
    values the update started from, so no pass lets a value drift more than value_clip."""
    config = load_config(
        "cartpole_appo",
        ["algorithm.hidden_sizes=[16]", "algorithm.epochs=3", "algorithm.value_clip=0.1"],
    )
    learner = learner_for(config, env_spec(config.env))
    anchors = []
    sequences = learner.sequences

    def recorded(batch, columns):
        anchors.append(columns["old_values"].clone())
        return sequences(batch, columns)

    monkeypatch.setattr(learner, "sequences", recorded)
    learner.update(episode_batch(np.random.default_rng(2)))
    assert len(anchors) == 3
    for anchor in anchors[1:]:
        torch.testing.assert_close(anchor, anchors[0])


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
