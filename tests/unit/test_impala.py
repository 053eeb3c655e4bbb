"""IMPALA pieces: unroll processing, the trajectory queue, the policy and the update."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayrl.core import StepBatch, Unrolls
from rayrl.envs import env_spec
from rayrl.presets import load_config, with_overrides
from rayrl.processing import UnrollProcessor
from rayrl.trajectory_queue import TrajectoryQueue
from tests.parts import all_starting, heads_and_values, learner_for, per_step_outputs, policy_for


def step(t: int, num_envs: int = 2, truncate_env: int | None = None) -> StepBatch:
    obs = np.full((num_envs, 1), t, dtype=np.float32)
    truncated = np.zeros(num_envs, dtype=bool)
    if truncate_env is not None:
        truncated[truncate_env] = True
    next_obs = obs + 0.5  # the true successor; distinguishable from the next step's obs
    return StepBatch(
        obs=obs,
        actions=np.full(num_envs, t % 2),
        rewards=np.ones(num_envs, dtype=np.float32),
        terminated=np.zeros(num_envs, dtype=bool),
        truncated=truncated,
        next_obs=next_obs,
        env_reset=truncated,
        extras={"logp": np.full(num_envs, -0.5, dtype=np.float32)},
    )


def test_unroll_processor_keeps_bootstrap_and_final_observations():
    processor = UnrollProcessor(num_envs=2, steps_per_chunk=3)
    for t in range(3):
        processor.process(step(t, truncate_env=1 if t == 1 else None), policy_version=7 + t)
    unrolls = processor.flush()
    assert unrolls.obs.shape == (2, 4, 1)
    assert unrolls.obs[0, :, 0].tolist() == [0, 1, 2, 2.5]  # last: the last step's successor
    assert unrolls.final_index.tolist() == [[1, 1]]
    assert unrolls.final_obs[:, 0].tolist() == [1.5]
    assert unrolls.truncated[1].tolist() == [False, True, False]
    assert unrolls.policy_versions.tolist() == [7, 7]
    assert unrolls.extras["logp"].shape == (2, 3)


def test_unroll_processor_needs_log_probs():
    processor = UnrollProcessor(num_envs=2, steps_per_chunk=1)
    bare = step(0)
    bare.extras = {}
    with pytest.raises(ValueError, match="log-probabilities"):
        processor.process(bare, 0)


def unrolls(version: int, num_envs: int = 2) -> Unrolls:
    processor = UnrollProcessor(num_envs=num_envs, steps_per_chunk=2)
    processor.process(step(0, num_envs, truncate_env=0), version)
    processor.process(step(1, num_envs), version)
    return processor.flush()


def test_split_and_concatenate_keep_final_observations_with_their_unroll():
    chunk = unrolls(0, num_envs=3)
    parts = chunk.split()
    assert [len(p) for p in parts] == [1, 1, 1]
    assert parts[0].final_index.tolist() == [[0, 0]]
    assert len(parts[1].final_obs) == 0
    batch = Unrolls.concatenate([parts[1], parts[0], parts[2]])
    assert batch.final_index.tolist() == [[1, 0]]
    np.testing.assert_array_equal(batch.obs[1], chunk.obs[0])


def test_queue_is_bounded_fifo_and_drops_stale_unrolls():
    queue = TrajectoryQueue(capacity=4, max_policy_lag=5, items_per_chunk=2)
    assert queue.can_insert(2)
    queue.add(unrolls(version=0))
    queue.add(unrolls(version=10))
    assert not queue.can_insert(1)  # full: the Ray service makes workers wait
    assert queue.can_sample(4, 1, learner_version=12)  # a query: nothing is dropped by it
    assert queue.stats().size == 4
    assert queue.drop_stale(learner_version=12) == 2  # the version-0 unrolls
    assert queue.can_sample(2, 1, learner_version=12)
    assert not queue.can_sample(3, 1, learner_version=12)
    stats = queue.stats()
    assert (stats.size, stats.dropped) == (2, 2)
    (batch,) = queue.sample(2, 1, learner_version=12)
    assert batch.policy_versions.tolist() == [10, 10]
    assert queue.stats().sampled == 2
    assert not queue.can_sample(1, 1, learner_version=12)


@pytest.fixture(scope="module")
def cartpole():
    config = load_config("cartpole_impala", ["algorithm.hidden_sizes=[16]", "learner.lr=0.01"])
    return config, env_spec(config.env)


def test_workers_sample_and_evaluation_follows_its_protocol(cartpole):
    config, spec = cartpole  # cartpole_impala evaluates greedily, the CartPole protocol
    obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    evaluation = policy_for(config, spec, None)
    greedy = evaluation.act(obs, all_starting(obs), explore=False)
    np.testing.assert_array_equal(
        greedy.actions, evaluation.act(obs, all_starting(obs), explore=False).actions
    )
    sampled = policy_for(config, spec, 0).act(obs, all_starting(obs), explore=True)
    assert not np.array_equal(sampled.actions, greedy.actions)
    assert sampled.extras["logp"].shape == (256,)
    assert np.all(sampled.extras["logp"] <= 0)
    # the IMPALA paper's protocol: evaluation samples from the policy too
    sampling = policy_for(with_overrides(config, ["algorithm.eval_policy=sample"]), spec, None)
    first, second = (sampling.act(obs, all_starting(obs), explore=False).actions for _ in range(2))
    assert not np.array_equal(first, second)


def test_update_learns_to_prefer_rewarded_actions(cartpole):
    """One state, one-step episodes: the baseline learns the mean reward, so the action that
    pays gets a positive advantage and the policy moves to it."""
    config, spec = cartpole
    learner = learner_for(config, spec)
    rng = np.random.default_rng(0)
    obs = np.broadcast_to(rng.normal(size=4).astype(np.float32), (16, 9, 4)).copy()
    actions = rng.integers(0, 2, size=(16, 8))
    batch = Unrolls(
        obs=obs,
        actions=actions,
        rewards=(actions == 1).astype(np.float32),  # action 1 pays
        terminated=np.ones((16, 8), dtype=bool),
        truncated=np.zeros((16, 8), dtype=bool),
        env_reset=np.ones((16, 8), dtype=bool),
        final_obs=np.zeros((0, 4), dtype=np.float32),
        final_index=np.zeros((0, 2), dtype=np.int64),
        policy_versions=np.zeros(16, dtype=np.int64),
        extras={"logp": np.full((16, 8), np.log(0.5), dtype=np.float32)},
    )
    for _ in range(100):
        result = learner.update(batch)
    assert {"learner/pg_loss", "learner/baseline_loss", "learner/entropy"} <= set(result.metrics)
    with torch.no_grad():
        logits, value = heads_and_values(learner.network, torch.from_numpy(obs[:1, 0]))
    assert torch.softmax(logits, 1)[0, 1] > 0.9
    # V-trace values the *target* policy, which now takes the paying action (about 1), not
    # the uniform behaviour policy that produced the batch (about 0.58)
    assert value.item() > 0.85
    assert float(batch.rewards.mean()) < 0.6
    assert learner.updates == 100
    # acted by version 0, learned from by a learner 99 updates on
    assert result.metrics["learner/policy_lag"] == 99.0


def test_gaussian_head_for_box_actions():
    config = load_config("cartpole_impala", ["env.id=Pendulum-v1", "algorithm.hidden_sizes=[16]"])
    spec = env_spec(config.env)
    policy = policy_for(config, spec, 0)
    out = policy.act(np.zeros((5, 3), dtype=np.float32), np.ones(5, bool), explore=True)
    assert out.actions.shape == (5, 1)
    assert out.extras["logp"].shape == (5,)


def reference_loss(network, batch: Unrolls, algo) -> torch.Tensor:
    """IMPALA's loss one step at a time, from V-trace's definition as a sum
    (Espeholt et al. 2018, eq. 1) rather than its recursion, summed over steps and unrolls
    as the reference implementations do. A recurrent network steps one observation at a
    time from each unroll's stored state (`per_step_outputs`)."""
    total = 0.0
    for b in range(len(batch)):
        state = None
        if batch.initial_state:
            state = tuple(torch.from_numpy(batch.initial_state[k][b : b + 1]) for k in "hc")
        heads, value_list, states = per_step_outputs(
            network, batch.obs[b], batch.env_reset[b], state
        )
        logits, values = torch.stack(heads), torch.stack(value_list)
        steps = len(batch.rewards[b])
        distribution = torch.distributions.Categorical(logits=logits[:steps])
        logp = distribution.log_prob(torch.from_numpy(batch.actions[b]))
        next_values = list(values[1:].detach())
        for k, (unroll, t) in enumerate(batch.final_index):
            if unroll == b:
                final = batch.final_obs[k : k + 1]
                after = per_step_outputs(network, final, np.zeros(1, bool), states[t])
                next_values[t] = after[1][0].detach()
        rho = torch.exp(logp.detach() - torch.from_numpy(batch.extras["logp"][b]))
        ends = batch.terminated[b] | batch.truncated[b]
        gammas = [0.0 if batch.terminated[b][t] else algo.gamma for t in range(steps)]
        deltas = [
            min(algo.rho_clip, rho[t])
            * (batch.rewards[b][t] + gammas[t] * next_values[t] - values[t].detach())
            for t in range(steps)
        ]
        vs = []
        for s in range(steps):
            target, trace = values[s].detach(), 1.0
            for t in range(s, steps):
                target = target + trace * deltas[t]
                if ends[t]:
                    break
                trace = trace * gammas[t] * algo.trace_lambda * min(algo.c_clip, rho[t])
            vs.append(target)
        for s in range(steps):
            following = next_values[s]
            if s + 1 < steps and not ends[s]:  # rlax's bootstrap with lambda
                following = algo.trace_lambda * vs[s + 1] + (1 - algo.trace_lambda) * following
            advantage = min(algo.pg_rho_clip, rho[s]) * (
                batch.rewards[b][s] + gammas[s] * following - values[s].detach()
            )
            total = total - advantage * logp[s]
            total = total + algo.baseline_coef * 0.5 * (vs[s] - values[s]) ** 2
            total = total - algo.entropy_coef * distribution.entropy()[s]
    return total


def off_policy_unrolls(seed: int) -> Unrolls:
    """Three unrolls of five CartPole-shaped steps, with a termination and a truncation inside
    them and behaviour log-probabilities on both sides of V-trace's clips."""
    rng = np.random.default_rng(seed)
    batch = Unrolls(
        obs=rng.normal(size=(3, 6, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=(3, 5)),
        rewards=rng.normal(size=(3, 5)).astype(np.float32),
        terminated=np.zeros((3, 5), dtype=bool),
        truncated=np.zeros((3, 5), dtype=bool),
        env_reset=np.zeros((3, 5), dtype=bool),
        final_obs=rng.normal(size=(1, 4)).astype(np.float32),
        final_index=np.array([[1, 2]]),
        policy_versions=np.zeros(3, dtype=np.int64),
        extras={"logp": np.log(rng.uniform(0.2, 0.8, size=(3, 5))).astype(np.float32)},
    )
    batch.terminated[0, 1] = batch.terminated[2, 4] = True
    batch.truncated[1, 2] = True
    batch.env_reset[:] = batch.terminated | batch.truncated
    return batch


@pytest.mark.parametrize(
    ("lstm_size", "separate_critic", "trace_lambda"),
    [(None, False, 1.0), (None, False, 0.8), (8, False, 1.0), (None, True, 1.0), (8, True, 0.8)],
    ids=["feedforward", "feedforward-lambda", "lstm", "separate-critic", "lstm-separate-critic"],
)
def test_loss_and_gradients_match_the_reference_at_its_scale(
    cartpole, lstm_size, separate_critic, trace_lambda
):
    """A fixed batch with a termination and a truncation inside unrolls and off-policy
    ratios on both sides of the clips; the losses are sums, not means. A recurrent network
    starts from stored states and starts afresh after the episode ends inside the unrolls:
    gradients through time against the per-step reference. V-trace's lambda scales each
    trace coefficient."""
    config, spec = cartpole
    overrides = [
        "algorithm.rho_clip=1.0",
        "algorithm.c_clip=0.9",
        f"algorithm.trace_lambda={trace_lambda}",
    ]
    if lstm_size is not None:
        overrides.append(f"algorithm.lstm_size={lstm_size}")
    overrides.append(f"algorithm.separate_critic={str(separate_critic).lower()}")
    config = with_overrides(config, overrides)
    learner = learner_for(config, spec)
    batch = off_policy_unrolls(seed=5)
    rng = np.random.default_rng(6)
    if lstm_size is not None:
        width = lstm_size * (2 if separate_critic else 1)
        batch.initial_state = {
            key: rng.normal(size=(3, width)).astype(np.float32) for key in ("h", "c")
        }

    ours = learner.loss(batch)["loss"]
    ours_grads = torch.autograd.grad(ours, list(learner.network.parameters()))
    reference = reference_loss(learner.network, batch, config.algorithm)
    reference_grads = torch.autograd.grad(reference, list(learner.network.parameters()))
    torch.testing.assert_close(ours, reference.float(), rtol=1e-5, atol=1e-5)
    for a, b in zip(ours_grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-5)

    # the scale: the same unrolls twice give twice the gradient (a mean would not)
    twice = Unrolls.concatenate(batch.split() + batch.split())
    doubled = torch.autograd.grad(learner.loss(twice)["loss"], list(learner.network.parameters()))
    for a, b in zip(doubled, ours_grads, strict=True):
        torch.testing.assert_close(a, 2 * b, rtol=1e-4, atol=1e-5)


def test_epochs_replay_the_batch_with_targets_recomputed_each_pass(cartpole):
    """`algorithm.epochs=3`: three gradient steps on one batch, each on the loss of the
    network as the previous step left it (V-trace's ratios and values recomputed), at the
    rate of the update's start; the update counts once and its metrics are the passes'
    means."""
    decaying = ["algorithm.lr_decay=true", "run.total_env_steps=1024"]  # over 4 updates
    config = with_overrides(cartpole[0], decaying)
    spec = cartpole[1]
    replaying = learner_for(with_overrides(config, ["algorithm.epochs=3"]), spec)
    stepping = learner_for(config, spec)
    stepping.network.load_state_dict(replaying.network.state_dict())
    batch = off_policy_unrolls(seed=1)

    result = replaying.update(batch)
    losses = []
    for _ in range(3):
        loss = stepping.loss(batch)["loss"]
        losses.append(float(loss))
        stepping.step(loss, stepping.optimizer, stepping.network.parameters())

    for ours, reference in zip(
        replaying.network.parameters(), stepping.network.parameters(), strict=True
    ):
        torch.testing.assert_close(ours, reference)
    assert len(set(losses)) == 3  # each pass saw the network the last one left
    assert result.metrics["learner/loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert replaying.updates == 1
    # the three passes stepped at the first rate (the weights match), and it decayed once
    first = float(stepping.optimizer.param_groups[0]["lr"])
    assert float(replaying.optimizer.param_groups[0]["lr"]) == pytest.approx(first * 3 / 4)
    fresh = learner_for(config, spec).network.parameters()
    moved = replaying.network.parameters()
    assert not any(torch.equal(a, b) for a, b in zip(moved, fresh, strict=True))
