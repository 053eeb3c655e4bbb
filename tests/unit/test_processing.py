"""N-step targets and frame de-duplication, against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from rayrl.core import StepBatch
from rayrl.processing import FrameTracker, NStepProcessor, n_step_targets


def column(*values):
    return np.array(values, dtype=np.float64)[:, None]


def flags(*values):
    return np.array(values, dtype=bool)[:, None]


def test_n_step_targets_full_windows_and_open_tail():
    returns, discounts, bootstrap_t, complete = n_step_targets(
        column(1, 2, 3, 4), flags(0, 0, 0, 0), flags(0, 0, 0, 0), gamma=0.5, n_step=3
    )
    # t=0: 1 + 0.5*2 + 0.25*3 ; t=1: 2 + 0.5*3 + 0.25*4
    assert returns[:2, 0] == pytest.approx([2.75, 4.5])
    assert discounts[:2, 0] == pytest.approx([0.125, 0.125])
    assert list(bootstrap_t[:2, 0]) == [2, 3]
    assert list(complete[:, 0]) == [True, True, False, False]


def test_n_step_termination_inside_window_stops_bootstrap():
    returns, discounts, bootstrap_t, complete = n_step_targets(
        column(1, 2, 7), flags(0, 1, 0), flags(0, 0, 0), gamma=0.5, n_step=3
    )
    assert returns[:2, 0] == pytest.approx([1 + 0.5 * 2, 2])
    assert discounts[:2, 0] == pytest.approx([0.0, 0.0])
    assert list(bootstrap_t[:2, 0]) == [1, 1]
    assert list(complete[:, 0]) == [True, True, False]


def test_n_step_truncation_inside_window_bootstraps_from_final_obs():
    returns, discounts, bootstrap_t, _complete = n_step_targets(
        column(1, 2, 7), flags(0, 0, 0), flags(0, 1, 0), gamma=0.5, n_step=3
    )
    assert returns[:2, 0] == pytest.approx([2.0, 2.0])
    assert discounts[:2, 0] == pytest.approx([0.25, 0.5])
    assert list(bootstrap_t[:2, 0]) == [1, 1]


def test_one_step_targets():
    returns, discounts, _bootstrap_t, complete = n_step_targets(
        column(1, 2), flags(0, 1), flags(0, 0), gamma=0.9, n_step=1
    )
    assert returns[:, 0] == pytest.approx([1, 2])
    assert discounts[:, 0] == pytest.approx([0.9, 0.0])
    assert complete.all()


class ScalarEnvStream:
    """Observations are unique numbers so that every transition can be checked by value."""

    def __init__(self, num_envs: int, episode_lengths: list[list[int]], truncate=False):
        self.num_envs = num_envs
        self.lengths = [list(x) for x in episode_lengths]
        self.counter = 0
        self.t_in_episode = np.zeros(num_envs, dtype=int)
        self.truncate = truncate
        self.obs = self._fresh(num_envs)

    def _fresh(self, n):
        values = np.arange(self.counter, self.counter + n, dtype=np.float32)
        self.counter += n
        return values[:, None]

    def step(self):
        next_obs = self._fresh(self.num_envs)
        self.t_in_episode += 1
        ended = np.array([self.t_in_episode[i] == self.lengths[i][0] for i in range(self.num_envs)])
        rewards = next_obs[:, 0] / 1000.0
        obs_after = next_obs.copy()
        for i in np.flatnonzero(ended):
            self.lengths[i].pop(0)
            self.t_in_episode[i] = 0
            obs_after[i] = self._fresh(1)[0]
        step = StepBatch(
            obs=self.obs,
            actions=self.obs[:, 0].astype(np.int64),
            rewards=rewards.astype(np.float32),
            terminated=ended & (not self.truncate),
            truncated=ended & self.truncate,
            next_obs=next_obs,
            env_reset=ended,
        )
        self.obs = obs_after
        return step


@pytest.mark.parametrize("truncate", [False, True])
def test_processor_transitions_match_hand_computation_across_flushes(truncate):
    gamma, n = 0.5, 3
    stream = ScalarEnvStream(2, [[2, 5, 100], [4, 100]], truncate=truncate)
    processor = NStepProcessor(2, n_step=n, gamma=gamma, frame_stack=None)
    steps = []
    chunks = []
    for t in range(9):
        step = stream.step()
        steps.append(step)
        processor.process(step, policy_version=t)
        if t % 4 == 3:
            chunks.append(processor.flush())
    chunks.append(processor.flush())

    got = {}
    for chunk in chunks:
        for k in range(len(chunk)):
            obs = chunk.frames[chunk.obs_idx[k, 0]][0]
            nxt = chunk.frames[chunk.next_obs_idx[k, 0]][0]
            got[obs] = (nxt, chunk.rewards[k], chunk.discounts[k], chunk.actions[k])

    # expected: walk each env's steps by hand
    expected = {}
    for env in range(2):
        seq = [(s.obs[env, 0], s.rewards[env], s.next_obs[env, 0], s.env_reset[env]) for s in steps]
        for t in range(len(seq)):
            total, discount = 0.0, 1.0
            for j in range(n):
                if t + j >= len(seq):
                    total = None
                    break
                _obs_j, r, nxt, ended = seq[t + j]
                total += discount * r
                discount *= gamma
                if ended:
                    if not truncate:
                        discount = 0.0
                    break
            if total is None:
                continue
            expected[seq[t][0]] = (nxt, total, discount)
    assert set(got) == set(expected)
    for obs, (nxt, total, discount) in expected.items():
        g_next, g_reward, g_discount, g_action = got[obs]
        assert g_next == nxt
        assert g_reward == pytest.approx(total, rel=1e-5)
        assert g_discount == pytest.approx(discount)
        assert g_action == int(obs)


def test_chunks_are_self_contained_and_frames_unique():
    stream = ScalarEnvStream(3, [[3, 100]] * 3)
    processor = NStepProcessor(3, n_step=2, gamma=0.9, frame_stack=None)
    for _ in range(6):
        processor.process(stream.step(), policy_version=0)
    chunk = processor.flush()
    assert chunk.obs_idx.max() < len(chunk.frames)
    assert chunk.next_obs_idx.max() < len(chunk.frames)
    values = chunk.frames[:, 0]
    assert len(np.unique(values)) == len(values)


def make_stacked_steps(num_envs, num_steps, stack, reset_every, rng):
    """A synthetic Atari-like stream: new random frame each step, zero-padded reset stacks."""
    shape = (4, 4)

    def fresh_stack():
        s = np.zeros((stack, *shape), dtype=np.uint8)
        s[-1] = rng.integers(1, 255, size=shape)
        return s

    obs = np.stack([fresh_stack() for _ in range(num_envs)])
    steps = []
    for t in range(num_steps):
        new = rng.integers(1, 255, size=(num_envs, *shape), dtype=np.uint8)
        next_obs = np.concatenate([obs[:, 1:], new[:, None]], axis=1)
        env_reset = np.array([(t + 1 + i) % reset_every == 0 for i in range(num_envs)])
        obs_after = next_obs.copy()
        for i in np.flatnonzero(env_reset):
            obs_after[i] = fresh_stack()
        steps.append(
            StepBatch(
                obs=obs,
                actions=np.zeros(num_envs, dtype=np.int64),
                rewards=np.zeros(num_envs, dtype=np.float32),
                terminated=env_reset,
                truncated=np.zeros(num_envs, dtype=bool),
                next_obs=next_obs,
                env_reset=env_reset,
            )
        )
        obs = obs_after
    return steps


def test_frame_tracker_rebuilds_stacks_exactly():
    rng = np.random.default_rng(0)
    steps = make_stacked_steps(3, 40, stack=4, reset_every=7, rng=rng)
    tracker = FrameTracker(3, frame_stack=4)
    for step in steps:
        obs_ids, next_ids = tracker.observe(step)
        np.testing.assert_array_equal(tracker.frames(obs_ids), step.obs)
        np.testing.assert_array_equal(tracker.frames(next_ids), step.next_obs)


def test_stacked_chunk_costs_about_one_frame_per_transition():
    rng = np.random.default_rng(1)
    steps = make_stacked_steps(4, 64, stack=4, reset_every=1000, rng=rng)
    processor = NStepProcessor(4, n_step=3, gamma=0.99, frame_stack=4)
    for step in steps:
        processor.process(step, policy_version=0)
    chunk = processor.flush()
    # the last n-1 = 2 steps of each env wait for the next chunk
    assert len(chunk) == 4 * 62
    # per env: the reset frame and its zero padding (2 ids), then one new frame per step
    assert len(chunk.frames) <= 4 * (64 + 2)
    rebuilt = chunk.frames[chunk.obs_idx]
    originals = np.concatenate([s.obs for s in steps[:62]])
    assert {r.tobytes() for r in rebuilt} == {o.tobytes() for o in originals}
