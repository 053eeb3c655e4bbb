"""The suite's learning runs with the local runtime, in the background at idle priority.

A test marked `@local_run(preset, *overrides)` gets, through the `local_run_result` fixture,
the `TrainResult` of `rayrl.train(preset, overrides)` with the local runtime. When the session
starts, the runs of every selected test so marked begin in a pool of two processes at the
kernel's idle priority (`SCHED_IDLE`), and the marked tests run last (`last`), by when most
runs are done. The local runtime is deterministic (a seed solves at the same env step however
slowly it runs) and uses one core, so its runs can take whatever CPU the rest of the suite
leaves: the suite's Ray and CLI tests wait on start-ups, timeouts and one another's processes
much of the time. At idle priority a run takes a core only when no other process wants it, so
the Ray runtime's learning tests and the hang and fault tests, whose timings count, run as if
the pool were not there (an idle-class process yields the core within a scheduler tick).

Written here rather than with pytest-xdist: xdist spreads whole tests over processes, each
with a test cluster of its own, and would put the Ray runtime's learning tests side by side
with other tests at the same priority (`docs/benchmarks.md`, "The test suite's cost")."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
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


def last(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with the marked tests moved to the end, each group in its order: they wait on
    the pool, which has the rest of the session to do their runs."""
    return sorted(items, key=lambda item: run_key(item) is not None)


def at_idle_priority() -> None:
    """Make this process (a pool worker, before it imports anything that starts threads,
    which inherit the policy) run only on a core no other process wants."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def train_locally(preset: str, overrides: list[str]) -> TrainResult:
    """One run with the local runtime (in a worker process of the pool)."""
    import rayrl

    return rayrl.train(preset, overrides=["run.runtime=local", *overrides])


@contextmanager
def idle_pool() -> Iterator[ProcessPoolExecutor]:
    """A pool of `SIDE_BY_SIDE` fresh processes ("spawn": the suite's process holds Ray's
    threads) at idle priority. On leaving, work not yet done (the session stopped early, e.g.
    at `-x`) is cancelled or ended, so that the session exits at once rather than waiting."""
    pool = ProcessPoolExecutor(
        SIDE_BY_SIDE, mp_context=multiprocessing.get_context("spawn"), initializer=at_idle_priority
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in multiprocessing.active_children():
            worker.terminate()


@contextmanager
def runs_in_background(
    keys: list[RunKey], runs_dir: Path
) -> Iterator[dict[RunKey, Future[TrainResult]]]:
    """Every run in `keys` started in the background in an `idle_pool`, in that order, each
    in a directory of its own under `runs_dir`; yields each run's future."""
    with idle_pool() as pool:
        yield {
            key: pool.submit(
                train_locally,
                key[0],
                ["logging.console=false", f"run.runs_dir={runs_dir / str(index)}", *key[1]],
            )
            for index, key in enumerate(keys)
        }
