"""Replay buffers, the sum tree and the rate limiter."""

from __future__ import annotations

import numpy as np
import pytest

from rayrl.core import TransitionChunk
from rayrl.replay import PrioritizedReplay, RateLimiter, UniformReplay
from rayrl.replay.buffer import frame_capacity_for
from rayrl.replay.store import ReplayStore, saved_replay_problem
from rayrl.replay.sum_tree import SumTree


def scalar_chunk(start: int, count: int) -> TransitionChunk:
    """`count` transitions whose obs are start.. and next obs start+1..; action = obs."""
    frames = np.arange(start, start + count + 1, dtype=np.float32)[:, None]
    idx = np.arange(count, dtype=np.int32)[:, None]
    return TransitionChunk(
        frames=frames,
        obs_idx=idx,
        actions=np.arange(start, start + count),
        rewards=np.ones(count, dtype=np.float32),
        discounts=np.full(count, 0.99, dtype=np.float32),
        next_obs_idx=idx + 1,
        policy_version=0,
    )


def test_uniform_sample_rebuilds_observations():
    buffer = UniformReplay(100, 200, seed=0, stacked=False)
    buffer.add(scalar_chunk(0, 10))
    batch = buffer.sample(64)
    assert batch.obs.shape == (64, 1)
    np.testing.assert_array_equal(batch.obs[:, 0], batch.actions)
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.actions + 1)
    np.testing.assert_array_equal(batch.weights, 1.0)


def test_whole_chunks_are_evicted_and_sizes_stay_within_capacity():
    buffer = UniformReplay(25, 1000, seed=0, stacked=False)
    for i in range(5):
        buffer.add(scalar_chunk(100 * i, 10))
        assert len(buffer) <= 25
    # the newest two chunks fit (20), a third would exceed 25 transitions
    assert len(buffer) == 20
    batch = buffer.sample(200)
    assert batch.actions.min() >= 300
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.actions + 1)


def test_frame_ring_overflow_evicts_the_chunks_it_overwrites():
    buffer = UniformReplay(1000, 25, seed=0, stacked=False)  # frames are the tight ring
    for i in range(6):
        buffer.add(scalar_chunk(100 * i, 10))  # 11 frames per chunk
    assert len(buffer) == 20
    batch = buffer.sample(300)
    np.testing.assert_array_equal(batch.obs[:, 0], batch.actions)
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.actions + 1)


def test_stacked_frames_are_gathered_into_stacks():
    frames = np.arange(6, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), np.uint8)
    chunk = TransitionChunk(
        frames=frames,
        obs_idx=np.array([[0, 1, 2, 3], [1, 2, 3, 4]], dtype=np.int32),
        actions=np.array([0, 1]),
        rewards=np.zeros(2, np.float32),
        discounts=np.ones(2, np.float32),
        next_obs_idx=np.array([[1, 2, 3, 4], [2, 3, 4, 5]], dtype=np.int32),
        policy_version=0,
    )
    buffer = UniformReplay(10, 20, seed=0, stacked=True)
    buffer.add(chunk)
    batch = buffer.sample(16)
    assert batch.obs.shape == (16, 4, 2, 2)
    for obs, nxt, action in zip(batch.obs, batch.next_obs, batch.actions, strict=True):
        assert list(obs[:, 0, 0]) == [action, action + 1, action + 2, action + 3]
        assert list(nxt[:, 0, 0]) == [action + 1, action + 2, action + 3, action + 4]


def test_frame_capacity_covers_chunk_history():
    assert frame_capacity_for(1000, steps_per_chunk=64, n_step=3, stack=4) >= 1000 * 1.09


def test_sum_tree_sums_and_finds():
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 0.0, 2.0, 3.0, 4.0]))
    assert tree.total == pytest.approx(10.0)
    found = tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99]))
    assert list(found) == [0, 0, 2, 2, 3, 3, 4, 4]
    tree.set(np.array([4, 4]), np.array([5.0, 1.0]))  # the last value wins
    assert tree.total == pytest.approx(7.0)


def test_sum_tree_rejects_negative_priorities():
    with pytest.raises(ValueError, match="non-negative"):
        SumTree(4).set(np.array([0]), np.array([-1.0]))


def prioritized(capacity=100, **kwargs):
    options = dict(alpha=1.0, beta_start=0.4, beta_end=1.0, beta_anneal_samples=10, epsilon=0.0)
    options.update(kwargs)
    return PrioritizedReplay(capacity, 2 * capacity, seed=0, stacked=False, **options)


def test_prioritized_sampling_follows_priorities():
    buffer = prioritized()
    buffer.add(scalar_chunk(0, 4))
    first = buffer.sample(4)
    buffer.update_priorities(first.indices, np.where(first.actions == 2, 9.0, 1.0))
    # priorities now: action 2 -> 9, the others 1 (each sampled once with stratification)
    counts = np.zeros(4)
    for _ in range(200):
        counts += np.bincount(buffer.sample(12).actions, minlength=4)
    assert counts[2] / counts.sum() == pytest.approx(9 / 12, abs=0.05)


def test_new_items_get_max_priority_and_weights_are_normalized():
    buffer = prioritized()
    buffer.add(scalar_chunk(0, 2))
    batch = buffer.sample(2)
    buffer.update_priorities(batch.indices, np.array([5.0, 1.0]))
    buffer.add(scalar_chunk(10, 1))
    slot = 2
    assert buffer.tree.get(np.array([slot]))[0] == pytest.approx(5.0)
    batch = buffer.sample(8)
    assert batch.weights.max() == pytest.approx(1.0)
    assert (batch.weights > 0).all()


def test_priorities_and_importance_weights_follow_the_paper_by_hand():
    """Schaul et al. 2016: p_i = (|TD_i| + eps)^alpha, P(i) = p_i / sum_k p_k,
    w_i = (N P(i))^-beta normalized by the batch's largest; a new item gets the largest
    |TD| + eps seen so far."""
    alpha, eps = 0.6, 0.01
    buffer = prioritized(alpha=alpha, epsilon=eps, beta_start=0.4, beta_anneal_samples=10)
    buffer.add(scalar_chunk(0, 4))
    td_errors = np.array([1.0, -2.0, 3.0, 0.5])  # each item's share spans several strata
    buffer.update_priorities(np.arange(4), td_errors)
    p = (np.abs(td_errors) + eps) ** alpha
    np.testing.assert_allclose(buffer.tree.get(np.arange(4)), p)
    beta = buffer.beta  # the beta this batch is sampled with
    batch = buffer.sample(64)
    probabilities = p[batch.indices] / p.sum()
    weights = (4 * probabilities) ** -beta
    np.testing.assert_allclose(batch.weights, weights / weights.max(), rtol=1e-6)
    assert set(batch.indices) == {0, 1, 2, 3}
    (single,) = buffer.sample(1).weights  # by the batch's largest, not the buffer's
    assert single == 1.0
    buffer.add(scalar_chunk(10, 1))
    assert buffer.tree.get(np.array([4]))[0] == pytest.approx((3.0 + eps) ** alpha)


def test_stale_priority_updates_are_ignored():
    buffer = prioritized(capacity=10)
    buffer.add(scalar_chunk(0, 10))
    stale = buffer.sample(5)
    buffer.add(scalar_chunk(100, 10))  # overwrites every slot
    before = buffer.tree.get(np.arange(10)).copy()
    buffer.update_priorities(stale.indices, np.full(5, 1000.0))
    np.testing.assert_array_equal(buffer.tree.get(np.arange(10)), before)


def test_non_finite_priorities_keep_the_old_ones():
    """A batch with a NaN reward gives NaN TD errors: those items keep their priority, the
    others take theirs, and the sum tree stays finite."""
    buffer = prioritized(capacity=10)
    buffer.add(scalar_chunk(0, 4))
    indices = np.arange(4)
    buffer.update_priorities(indices, np.array([1.0, 2.0, 3.0, 4.0]))
    before = buffer.tree.get(indices).copy()
    buffer.update_priorities(indices, np.array([np.nan, 5.0, np.inf, 6.0]))
    after = buffer.tree.get(indices)
    assert after[0] == before[0]
    assert after[2] == before[2]
    assert after[1] > before[1]
    assert after[3] > before[3]
    assert np.isfinite(buffer.tree.total)
    assert np.isfinite(buffer.max_priority)


def test_evicted_transitions_are_never_sampled():
    buffer = prioritized(capacity=25)
    for i in range(4):
        buffer.add(scalar_chunk(100 * i, 10))
    batch = buffer.sample(500)
    assert batch.actions.min() >= 200


def test_beta_anneals_with_sampled_batches():
    buffer = prioritized(beta_start=0.4, beta_end=1.0, beta_anneal_samples=10)
    buffer.add(scalar_chunk(0, 5))
    assert buffer.beta == pytest.approx(0.4)
    for _ in range(5):
        buffer.sample(2)
    assert buffer.beta == pytest.approx(0.7)
    for _ in range(10):
        buffer.sample(2)
    assert buffer.beta == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_save_and_load_round_trip(tmp_path, kind):
    make = (
        (lambda: UniformReplay(25, 60, seed=0, stacked=False))
        if kind == "uniform"
        else (lambda: prioritized(capacity=25))
    )
    buffer = make()
    for i in range(4):
        buffer.add(scalar_chunk(100 * i, 10))
    buffer.update_priorities(buffer.sample(4).indices, np.full(4, 3.0))
    buffer.save(tmp_path / "replay.npz")
    restored = make()
    restored.load(tmp_path / "replay.npz")
    assert len(restored) == len(buffer)
    batch = restored.sample(100)
    assert batch.actions.min() >= 200
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.actions + 1)
    if kind == "prioritized":
        assert restored.tree.total == pytest.approx(buffer.tree.total)


def stored_transitions(buffer: UniformReplay) -> set[tuple[float, float, int]]:
    batch = buffer._gather(np.arange(buffer.oldest, buffer.inserted), np.ones(len(buffer)))
    return set(zip(batch.obs[:, 0], batch.next_obs[:, 0], batch.actions, strict=True))


def test_a_buffer_whose_rings_wrapped_around_saves_and_loads_whole(tmp_path):
    """The frame ring is written as its two halves, oldest first, without a copy of it."""
    buffer = UniformReplay(25, 30, seed=0, stacked=False)
    for i in range(7):
        buffer.add(scalar_chunk(100 * i, 6))  # 7 frames each: the frame ring wraps
    assert buffer.frames_written > buffer.frame_capacity
    ring = buffer._rings.frames
    assert len(buffer._frame_parts(ring, buffer._chunks[0].first_frame, buffer.frames_written)) == 2
    buffer.save(tmp_path / "replay.npz")
    restored = UniformReplay(25, 30, seed=0, stacked=False)
    restored.load(tmp_path / "replay.npz")
    assert len(restored) == len(buffer) > 0
    assert stored_transitions(restored) == stored_transitions(buffer)


def test_a_saved_replay_refills_only_the_checkpoint_it_was_saved_with(tmp_path):
    path = tmp_path / "replay.npz"
    assert saved_replay_problem(path, 40) == "there is none"
    store = replay_store()
    for i in range(8):
        store.add(scalar_chunk(10 * i, 5))
    store.buffer.save(path)  # rayrl 0.1's file: no stamp
    assert saved_replay_problem(path, 40) == "it carries no env-step stamp (saved by rayrl 0.1)"
    store.save(path, env_steps=40)
    assert saved_replay_problem(path, 40) is None
    assert saved_replay_problem(path, 80) == (
        "it was saved at 40 env steps and the checkpoint at 80"
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a copy cut short: a full disk, a kill
    assert saved_replay_problem(path, 40).startswith("it is damaged (BadZipFile: ")


def test_rate_limiter_enforces_the_ratio_both_ways():
    limiter = RateLimiter.for_sizes(2.0, min_size=10, chunk_size=5, batch_size=4)
    assert not limiter.can_sample(4, size=5)  # warm-up
    limiter.record_insert(10)
    assert limiter.can_insert(5)
    # at min size, the tolerance (2*5 + 4 = 14) allows 3 batches of 4 ahead of the ratio
    sampled = 0
    while limiter.can_sample(4, size=10):
        limiter.record_sample(4)
        sampled += 4
    assert sampled == 12
    limiter.record_insert(5)  # now 10 samples are owed
    assert limiter.can_sample(4, size=15)
    # with no sampling, inserts stop once they run 14 sampled transitions ahead of the ratio
    fresh = RateLimiter.for_sizes(2.0, min_size=10, chunk_size=5, batch_size=4)
    fresh.record_insert(10)
    inserted = 0
    while fresh.can_insert(5):
        fresh.record_insert(5)
        inserted += 5
    assert inserted == 5


@pytest.mark.parametrize(
    ("samples_per_insert", "chunk", "sample_size"),
    [(8.0, 64, 32), (4.0, 64, 512), (0.25, 1024, 256), (32.0, 256, 1024)],
)
def test_rate_limiter_never_deadlocks(samples_per_insert, chunk, sample_size):
    rng = np.random.default_rng(0)
    limiter = RateLimiter.for_sizes(
        samples_per_insert, min_size=100, chunk_size=chunk, batch_size=sample_size
    )
    size = 0
    for _ in range(5000):
        can_insert, can_sample = limiter.can_insert(chunk), limiter.can_sample(sample_size, size)
        assert can_insert or can_sample
        if can_insert and (not can_sample or rng.random() < 0.5):
            limiter.record_insert(chunk)
            size += chunk
        else:
            limiter.record_sample(sample_size)


def test_unlimited_rate():
    limiter = RateLimiter.for_sizes(None, min_size=10, chunk_size=5, batch_size=4)
    assert limiter.can_insert(10**6)
    assert not limiter.can_sample(4, size=9)
    assert limiter.can_sample(4, size=10)


def replay_store() -> ReplayStore:
    """A store of the Ape-X kind: 2 samples per insert after 10 transitions."""
    buffer = UniformReplay(100, 200, seed=0, stacked=False)
    return ReplayStore(buffer, RateLimiter.for_sizes(2.0, 10, chunk_size=5, batch_size=4), 5)


def samples_granted(store: ReplayStore) -> int:
    granted = 0
    while store.can_sample(4, 1, 0):
        store.sample(4, 1, 0)
        granted += 4
    return granted


def test_a_refilled_store_grants_no_burst_of_samples(tmp_path):
    """Saved and refilled (a resume, or a replay actor replaced), the store grants exactly
    the samples it had left to grant, not `samples_per_insert` x its size again."""
    store = replay_store()
    for i in range(8):
        store.add(scalar_chunk(10 * i, 5))
        samples_granted(store)
    store.add(scalar_chunk(100, 5))  # 10 samples owed when saved
    store.save(tmp_path / "replay.npz", env_steps=45)
    refilled = replay_store()
    refilled.load(tmp_path / "replay.npz")
    assert refilled.stats() == store.stats()
    assert samples_granted(refilled) == samples_granted(store)


def test_a_refilled_store_without_saved_counts_starts_balanced(tmp_path):
    """A buffer file from before the counts were saved: no credit at all."""
    store = replay_store()
    for i in range(8):
        store.add(scalar_chunk(10 * i, 5))
    store.buffer.save(tmp_path / "replay.npz")
    refilled = replay_store()
    refilled.load(tmp_path / "replay.npz")
    assert samples_granted(refilled) <= refilled.limiter.tolerance


def test_a_store_refilled_under_a_new_ratio_starts_balanced(tmp_path):
    """Resumed with another samples_per_insert: the old counts mean nothing under it."""
    store = replay_store()
    for i in range(8):
        store.add(scalar_chunk(10 * i, 5))
    store.save(tmp_path / "replay.npz", env_steps=40)
    buffer = UniformReplay(100, 200, seed=0, stacked=False)
    faster = ReplayStore(buffer, RateLimiter.for_sizes(8.0, 10, chunk_size=5, batch_size=4), 5)
    faster.load(tmp_path / "replay.npz")
    assert samples_granted(faster) <= faster.limiter.tolerance
