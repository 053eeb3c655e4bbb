"""Run statistics: the start-up split."""

from __future__ import annotations

import pytest

from rayrl.contract import StoreKind
from rayrl.core import ChunkStats
from rayrl.stats import RunStats

KIND = StoreKind(namespace="replay", items="transitions", drops_stale=False)


def test_startup_splits_the_time_to_the_first_chunk_into_its_phases(monkeypatch):
    clock = iter([101.0, 104.5, 109.0, 109.25, 120.0])
    monkeypatch.setattr("rayrl.stats.time.time", lambda: next(clock))
    stats = RunStats(1, KIND, started_at=100.0)
    assert stats.startup() == {}  # nothing before the first chunk
    stats.phase_done("setup")
    stats.phase_done("ray")
    stats.phase_done("actors")
    stats.add_chunk(ChunkStats(0, 32, [], [], policy_version=0), 0)
    stats.phase_done("actors")  # a restarted worker's start is not start-up
    expected = {"setup": 1.0, "ray": 3.5, "actors": 4.5, "first_chunk": 0.25, "total": 9.25}
    assert stats.startup() == pytest.approx(expected)
    figures = stats.figures()
    assert figures["startup_s"] == pytest.approx(9.25)
    assert figures["startup_ray_s"] == pytest.approx(3.5)
    assert stats.summary().startswith(
        "start-up: 9.2 s to the first chunk (setup 1.0, ray 3.5, actors 4.5, first chunk 0.2)"
    )


def test_a_phase_the_runtime_does_not_have_takes_no_time(monkeypatch):
    clock = iter([100.5, 102.0])
    monkeypatch.setattr("rayrl.stats.time.time", lambda: next(clock))
    stats = RunStats(1, KIND, started_at=100.0)
    stats.phase_done("setup")  # the local runtime starts no Ray
    stats.add_chunk(ChunkStats(0, 32, [], [], policy_version=0), 0)
    startup = stats.startup()
    assert startup["ray"] == startup["actors"] == 0.0
    assert startup["first_chunk"] == pytest.approx(1.5)
    assert startup["total"] == pytest.approx(2.0)
