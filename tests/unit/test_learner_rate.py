"""bench/learner_rate.py's yardstick: updates timed on batches the env played, never on a
diverged network, and a run's average compared with an average (a fixed random batch drove
the bare MinAtar loop to NaN within 3,000 updates, and the best window flattered the loop
against the run's average: bench/reports/benchmarks.md, "The learner's yardstick,
corrected")."""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest

from tests.conftest import bench_script


@pytest.fixture(scope="module")
def learner_rate() -> Iterator[ModuleType]:
    with bench_script("learner_rate") as script:
        yield script


def test_a_contender_whose_loss_is_not_finite_stops_the_timing(learner_rate, monkeypatch):
    """A network that has diverged runs a different update (NaN arithmetic, or rayrl's
    guard skipping the optimizer step), so its rate is no figure: the timing stops and
    names it."""
    monkeypatch.setattr(learner_rate, "WINDOW_S", 0.05)

    def diverging() -> float:
        return math.nan

    with pytest.raises(RuntimeError, match="diverging: the loss is nan"):
        learner_rate.interleaved_rates({"fine": lambda: 0.1, "diverging": diverging}, 0.05)


def test_each_contender_gets_its_mean_and_its_best_window(learner_rate, monkeypatch):
    """The mean is all its updates over all its windows' time, what a run's rate is
    comparable with; the best window is at least the mean."""
    monkeypatch.setattr(learner_rate, "WINDOW_S", 0.05)
    rates = learner_rate.interleaved_rates({"a": lambda: 0.0, "b": lambda: 1.0}, 0.2)
    assert set(rates) == {"a", "b"}
    for rate in rates.values():
        assert 0 < rate.mean <= rate.best


def test_the_batches_are_distinct_transitions_the_env_gave(learner_rate):
    """CartPole under random actions: each batch is the preset's size, the observations are
    in the env's space and differ between batches, and the discounts are gamma or, after a
    termination, 0."""
    from rayrl.presets import load_config

    config = load_config("cartpole_dqn")
    batches = learner_rate.played_batches(config, count=8)
    size = config.learner.batch_size
    assert len(batches) == 8
    assert all(len(batch.obs) == len(batch.next_obs) == size for batch in batches)
    assert not np.array_equal(batches[0].obs, batches[1].obs)
    assert np.all(np.abs(np.concatenate([b.obs for b in batches])[:, 2]) < 0.25)  # pole angle
    discounts = np.unique(np.concatenate([b.discounts for b in batches]))
    assert discounts.tolist() == [0.0, float(np.float32(config.algorithm.gamma))]


def test_a_preset_the_bare_loop_does_not_write_is_refused(learner_rate, monkeypatch, capsys):
    """`pong_dqn` asks for a Nature CNN, a dueling head and prioritized replay, which the
    bare loop does not write: comparing it with rayrl's update would time two different
    networks, so the benchmark refuses it before any work, naming the preset."""
    monkeypatch.setattr("sys.argv", ["learner_rate.py", "--preset", "pong_dqn"])
    with pytest.raises(SystemExit):
        learner_rate.main()
    assert "pong_dqn asks for more" in capsys.readouterr().err


def test_in_process_rate_gives_rayrls_updates_per_second(learner_rate, monkeypatch):
    """`bench/gpu_learner.py` imports it (a refactor once dropped it and broke that script):
    rayrl's own learner, timed on played batches, a positive rate."""
    from rayrl.presets import load_config

    monkeypatch.setattr(learner_rate, "WINDOW_S", 0.05)
    assert learner_rate.in_process_rate(load_config("cartpole_dqn"), 0.1) > 0
