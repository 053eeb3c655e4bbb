"""bench/startup_floor.py's yardstick: the floor starts as many actors as the run does, on
a local Ray of the size rayrl would start, and the gap is rayrl's start-up above it, round
by round."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from rayrl.ray.capacity import SMALL_MACHINE_CPUS
from tests.conftest import bench_script


@pytest.fixture(scope="module")
def startup_floor() -> Iterator[ModuleType]:
    with bench_script("startup_floor") as script:
        yield script


@pytest.mark.parametrize("cores", [2, SMALL_MACHINE_CPUS + 4])
def test_the_floor_has_the_actors_the_run_has_by_its_first_chunk(startup_floor, monkeypatch, cores):
    """Workers, learners and the store, on a machine of any size: an evaluator of its own,
    where the run has one, starts after the first chunk (`rayrl.ray.driver`)."""
    monkeypatch.setattr(startup_floor, "usable_cores", lambda: cores)
    shape = startup_floor.run_shape("cartpole_dqn", ["workers.num_workers=3"])
    assert shape.actors == 3 + 1 + 1
    assert shape.cpus >= cores
    assert shape.cpus >= 3  # the workers' CPUs at least, as the run's local Ray declares


def test_the_gap_is_each_rounds_start_up_above_its_floor(startup_floor):
    rows = [
        {"env_steps": 0, "learner/updates": 0.0},
        {
            "env_steps": 64,
            "startup/setup_s": 1.0,
            "startup/ray_s": 3.0,
            "startup/actors_s": 4.0,
            "startup/first_chunk_s": 0.5,
            "startup/total_s": 8.5,
        },
    ]
    phases = startup_floor.startup_of(rows)
    assert phases == {"setup": 1.0, "ray": 3.0, "actors": 4.0, "first_chunk": 0.5, "total": 8.5}
    floors = [
        {"ray_s": 2.5, "first_s": 5.0, "total_s": 6.0},
        {"ray_s": 3.0, "first_s": 8.0, "total_s": 9.5},
    ]
    assert startup_floor.gaps([phases, phases], floors) == [2.5, -1.0]
    shape = startup_floor.Shape(actors=4, cpus=4)
    assert "rayrl above the floor: +0.75 (-1.00-+2.50) s" in startup_floor.report(
        shape, [phases, phases], floors
    )
