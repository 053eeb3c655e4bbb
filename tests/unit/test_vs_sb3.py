"""bench/vs_sb3.py's summary of one run: the figures at the end, and the whole evaluation
curve, from which a long run's earlier budgets are read (HalfCheetah's 300k run gave its
100k and 200k figures this way: bench/reports/benchmarks.md, "Issue 23")."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conftest import bench_script


@pytest.fixture(scope="module")
def vs_sb3() -> Iterator[ModuleType]:
    with bench_script("vs_sb3") as script:
        yield script


def test_a_runs_summary_keeps_its_whole_curve_and_its_first_target(vs_sb3):
    evals = [(10_000, -120.0), (20_000, 1_800.0), (30_000, 2_800.0)]
    row = vs_sb3.summary(evals, target=1_500.0, wall=300.0)
    assert row["evaluations"] == [[10_000, -120.0], [20_000, 1_800.0], [30_000, 2_800.0]]
    assert row["final_return"] == 2_800.0
    assert row["env_steps"] == 30_000
    assert row["steps_to_target"] == 20_000
    assert row["steps_per_s"] == 100.0
    assert vs_sb3.summary(evals, target=None, wall=300.0)["steps_to_target"] is None
