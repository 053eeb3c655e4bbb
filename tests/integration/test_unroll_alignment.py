"""The on-policy data path on a real MinAtar game: what the learner learns from is what the
workers acted on. An off-by-one here (an observation paired with the next step's action, a
reset observation taken for a successor) would not stop learning, only cap it, so it is
checked directly rather than inferred from a learning curve."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.algorithms.actor_critic import forward_unrolls
from rayrl.config import EnvConfig
from rayrl.core import Unrolls
from rayrl.envs import env_spec, make_env
from rayrl.presets import load_config
from rayrl.processing import UnrollProcessor
from rayrl.worker import RolloutWorker


def test_unrolls_hold_the_observations_acted_on_and_their_true_successors():
    envs, steps = 4, 200
    env = make_env(EnvConfig(id="MinAtar/Breakout-v1"), envs, training=True)
    env.reset(seed=1)
    processor = UnrollProcessor(envs, steps)
    rng = np.random.default_rng(0)
    acted, successors, resets = [], [], []
    for _ in range(steps):
        acted.append(env.obs.copy())
        step = env.step(rng.integers(0, 3, envs), {"logp": np.zeros(envs, np.float32)})
        successors.append(step.next_obs.copy())
        resets.append(step.env_reset.copy())
        processor.process(step, policy_version=0)
    unrolls = processor.flush()

    assert np.asarray(resets).sum() > 10  # random play loses often: episode ends are covered
    for t in range(steps):
        np.testing.assert_array_equal(unrolls.obs[:, t], acted[t])
        for e in range(envs):
            if not resets[t][e]:  # the next observation is this step's successor
                np.testing.assert_array_equal(unrolls.obs[e, t + 1], successors[t][e])
    np.testing.assert_array_equal(unrolls.obs[:, steps], successors[-1])  # the bootstrap
    ended = unrolls.terminated | unrolls.truncated
    np.testing.assert_array_equal(ended, np.asarray(resets).T)


@pytest.mark.parametrize(
    ("preset", "extra"),
    [
        ("minatar_ppo", []),
        ("minatar_impala", []),
        ("minatar_ppo", ["algorithm.lstm_size=32"]),
        ("minatar_impala", ["algorithm.lstm_size=32", "algorithm.separate_critic=true"]),
    ],
    ids=["ppo", "impala", "ppo-lstm", "impala-lstm-separate-critic"],
)
def test_the_learner_scores_a_workers_unrolls_as_the_worker_did(preset, extra):
    """The learner, with the weights the worker acted with, gives every acted action the
    log-probability the worker recorded: the same observations, layout and network. A
    recurrent learner replays each unroll from its stored initial state, starting afresh at
    the episode starts inside it (a second chunk, so that the initial states are not zeros)."""
    torch.set_num_threads(1)
    overrides = [
        "workers.envs_per_worker=8",
        "algorithm.steps_per_chunk=32",
        "learner.batch_size=8",
        "algorithm.queue_capacity=8",
        "learner.device=cpu",
    ]
    config = load_config(preset, overrides + extra)
    recurrent = bool(extra)
    spec = env_spec(config.env)
    learner = ALGORITHMS[config.algorithm.name].make_learner(
        config.algorithm, spec, config.learner, config.run
    )
    worker = RolloutWorker(config.env, config.workers, config.algorithm, 0, 0)
    worker.set_weights(learner.get_weights())
    chunks = [worker.sample(0)[0] for _ in range(2)]
    for chunk in chunks:
        batch = Unrolls.concatenate(chunk.split())
        with torch.no_grad():
            out = forward_unrolls(learner.network, learner.network, batch, learner.tensor)
            logp = learner.network.distribution(out.head).log_prob(learner.tensor(batch.actions))
        np.testing.assert_allclose(logp.numpy(), batch.extras["logp"], atol=1e-5)
    if recurrent:
        assert chunks[1].env_reset.any()  # resets inside an unroll are covered
        assert np.abs(chunks[1].initial_state["h"]).min(axis=1).max() > 0
    else:
        assert not chunks[1].initial_state
