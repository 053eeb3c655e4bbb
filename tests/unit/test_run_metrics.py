"""A run's metrics: the start-up split in its headline numbers and its summary."""

from __future__ import annotations

import pytest

from rayrl.contract import StoreKind
from rayrl.core import ChunkStats
from rayrl.run_metrics import RunMetrics

KIND = StoreKind(namespace="replay", items="transitions", drops_stale=False)


def test_startup_splits_the_time_to_the_first_chunk_into_its_phases(monkeypatch):
    clock = iter([101.0, 104.5, 109.0, 109.25, 120.0])
    monkeypatch.setattr("rayrl.run_metrics.time.time", lambda: next(clock))
    metrics = RunMetrics(1, KIND, started_at=100.0)
    assert metrics.startup() == {}  # nothing before the first chunk
    metrics.phase_done("setup")
    metrics.phase_done("ray")
    metrics.phase_done("actors")
    metrics.add_chunk(ChunkStats(0, 32, [], [], policy_version=0), 0)
    metrics.phase_done("actors")  # a restarted worker's start is not start-up
    expected = {"setup": 1.0, "ray": 3.5, "actors": 4.5, "first_chunk": 0.25, "total": 9.25}
    assert metrics.startup() == pytest.approx(expected)
    headline = metrics.headline()
    assert headline["startup_s"] == pytest.approx(9.25)
    assert headline["startup_ray_s"] == pytest.approx(3.5)
    assert metrics.summary().startswith(
        "start-up: 9.2 s to the first chunk (setup 1.0, ray 3.5, actors 4.5, first chunk 0.2)"
    )


def test_a_phase_the_runtime_does_not_have_takes_no_time(monkeypatch):
    clock = iter([100.5, 102.0])
    monkeypatch.setattr("rayrl.run_metrics.time.time", lambda: next(clock))
    metrics = RunMetrics(1, KIND, started_at=100.0)
    metrics.phase_done("setup")  # the local runtime starts no Ray
    metrics.add_chunk(ChunkStats(0, 32, [], [], policy_version=0), 0)
    startup = metrics.startup()
    assert startup["ray"] == startup["actors"] == 0.0
    assert startup["first_chunk"] == pytest.approx(1.5)
    assert startup["total"] == pytest.approx(2.0)
