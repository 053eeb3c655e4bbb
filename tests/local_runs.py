"""The suite's learning runs with the local runtime, two at a time.

A test marked `@local_run(preset, *overrides)` gets, through the `local_run_result` fixture,
the `TrainResult` of `rayrl.train(preset, overrides)` with the local runtime. The first such
test to run does the runs of every selected test so marked, each in a process of its own,
two at a time, and waits for all of them (so that none runs beside a later test). The local
runtime is deterministic (a seed solves at the same env step in every run) and uses one
core, so on a 2-core machine two of its runs side by side give the results they give alone
in about half the wall time. The Ray runtime's learning tests run alone, one after another:
its asynchronous workers need more env steps when their learner shares the cores.

Written here rather than with pytest-xdist: xdist spreads whole tests over processes, each
with a test cluster of its own, and would put the Ray runtime's learning tests side by side
with other tests too (`docs/benchmarks.md`, "The test suite's cost")."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rayrl.run_lifecycle import TrainResult

RunKey = tuple[str, tuple[str, ...]]
"""A run: its preset and its overrides."""

SIDE_BY_SIDE = 2
"""Runs at a time: the cores of the machine the suite is sized for."""


DEFAULT_SECONDS = 20.0
"""What a run marked without `seconds` is taken to last: a CartPole run's order."""


def local_run(
    preset: str, *overrides: str, seconds: float = DEFAULT_SECONDS
) -> pytest.MarkDecorator:
    """Mark a test as asserting on this local-runtime run's result (`local_run_result`).
    `seconds`: about how long the run takes alone; the longest runs start first, so that
    the two processes finish together (a long run started last would run alone)."""
    return pytest.mark.local_run(preset, *overrides, seconds=seconds)


def run_key(item: pytest.Item) -> RunKey | None:
    marker = item.get_closest_marker("local_run")
    if marker is None:
        return None
    preset, *overrides = marker.args
    return preset, tuple(overrides)


def longest_first(items: list[pytest.Item]) -> list[RunKey]:
    """The runs of the marked `items`, each once, the longest expected first."""
    seconds: dict[RunKey, float] = {}
    for item in items:
        key, marker = run_key(item), item.get_closest_marker("local_run")
        if key is not None and marker is not None:
            seconds[key] = marker.kwargs.get("seconds", DEFAULT_SECONDS)
    return sorted(seconds, key=seconds.__getitem__, reverse=True)


def train_locally(preset: str, overrides: list[str]) -> TrainResult:
    """One run with the local runtime (in a worker process of the pool)."""
    import rayrl

    return rayrl.train(preset, overrides=["run.runtime=local", *overrides])


def run_all(keys: list[RunKey], runs_dir: Path) -> dict[RunKey, Future[TrainResult]]:
    """Every run in `keys`, done `SIDE_BY_SIDE` at a time, each in a directory of its own
    under `runs_dir`; returns once all are done, each with its result or its error. Fresh
    processes ("spawn"): the suite's process holds Ray's threads."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(SIDE_BY_SIDE, mp_context=context) as pool:
        return {
            key: pool.submit(
                train_locally,
                key[0],
                ["logging.console=false", f"run.runs_dir={runs_dir / str(index)}", *key[1]],
            )
            for index, key in enumerate(keys)
        }
