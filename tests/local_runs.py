"""The suite's learning runs with the local runtime, in the background at idle priority.

A test marked `@local_run(preset, *overrides)` gets, through the `local_run_result` fixture,
the `TrainResult` of `rayrl.train(preset, overrides)` with the local runtime. When the session
starts, the runs of every selected test so marked begin in a pool of two processes at the
kernel's idle priority (`SCHED_IDLE`), and the marked tests run last (`last`), by when the
runs are done or nearly; the first of them to wait gives the pool the normal priority back
(`BackgroundRuns`). The local runtime is deterministic (a seed solves at the same env
step however slowly it runs) and uses one core, so its runs can take whatever CPU the rest
of the suite leaves: the Ray, CLI and fault tests wait on start-ups, timeouts and one
another's processes for about a quarter of their cores' time. At idle priority a run takes a
core only when no other process wants it, so the tests beside it, whose timings count, keep
most of their cores' time: a CPU-bound process (`python -c "import torch"`) took as long
beside two idle-priority busy loops as on a quiet machine, but the Ray CLI tests, whose many
processes wake and sleep, took 22% longer beside them (`bench/reports/benchmarks.md`, "The
suite's waits"), still less than the runs would add in turn.

Written here rather than with pytest-xdist: xdist spreads whole tests over processes, each
with a test cluster of its own, and would put the Ray runtime's learning tests side by side
with other tests at the same priority (`bench/reports/benchmarks.md`, "The test suite's
cost")."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import pytest

if TYPE_CHECKING:
    from rayrl.run_lifecycle import TrainResult

RunKey = tuple[str, tuple[str, ...]]
"""A run: its preset and its overrides."""

T = TypeVar("T")

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


def to_normal_priority(pid: int) -> None:
    """Give every thread of process `pid` the normal policy back. Leaving `SCHED_IDLE` needs
    CAP_SYS_NICE or an RLIMIT_NICE above 0 (root has it, most users not): PermissionError
    otherwise."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:  # the process has ended
        return
    for thread in threads:
        with contextlib.suppress(ProcessLookupError):  # the thread has ended
            os.sched_setscheduler(int(thread), os.SCHED_OTHER, os.sched_param(0))


def train_locally(key: RunKey, runs_dir: Path) -> TrainResult:
    """One run with the local runtime (in a worker process of the pool)."""
    import rayrl

    preset, overrides = key
    settings = ["run.runtime=local", "logging.console=false", f"run.runs_dir={runs_dir}"]
    return rayrl.train(preset, overrides=[*settings, *overrides])


def new_pool(idle: bool) -> ProcessPoolExecutor:
    """`SIDE_BY_SIDE` fresh processes ("spawn": the suite's process holds Ray's threads)."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(
        SIDE_BY_SIDE, mp_context=context, initializer=at_idle_priority if idle else None
    )


def workers(pool: ProcessPoolExecutor) -> list[multiprocessing.Process]:
    """The pool's processes, which `ProcessPoolExecutor` names only in a private attribute
    (until Python 3.14's `terminate_workers`); not every child of the suite's process is one
    (a test may start a pool of its own)."""
    return list((pool._processes or {}).values())


def end(pool: ProcessPoolExecutor) -> None:
    """Cancel the pool's work not begun and end what runs, so that nothing waits for it (the
    session stopped early, e.g. at `-x`)."""
    processes = workers(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


class BackgroundRuns(Generic[T]):
    """`task(key, runs_dir / <its index>)` for every key, begun in the background at idle
    priority, in the keys' order; `result(key)` waits for one.

    The first wait gives the pool's processes the normal priority back: the marked tests run
    last, when nothing else of the suite runs beside the pool, but the machine may be busy with
    other work, which idle-priority processes would wait out. Where the system refuses it
    (an unprivileged user with RLIMIT_NICE 0 can lower a priority but not raise it), the
    runs not yet done start again in a pool at normal priority."""

    def __init__(self, keys: list[RunKey], runs_dir: Path, task: Callable[[RunKey, Path], T]):
        self.keys, self.runs_dir, self.task = keys, runs_dir, task
        self.pools = [new_pool(idle=True)]
        self.futures = {key: self._submit(self.pools[0], key, "") for key in keys}
        self.waited = False

    def _submit(self, pool: ProcessPoolExecutor, key: RunKey, again: str) -> Future[T]:
        return pool.submit(self.task, key, self.runs_dir / f"{self.keys.index(key)}{again}")

    def result(self, key: RunKey) -> T:
        if not self.waited:
            self.waited = True
            self._to_normal_priority()
        return self.futures[key].result()

    def _to_normal_priority(self) -> None:
        try:
            for process in workers(self.pools[0]):
                to_normal_priority(process.pid)  # type: ignore[arg-type]  # started: has a pid
        except PermissionError:
            unfinished = [key for key, future in self.futures.items() if not future.done()]
            end(self.pools[0])
            self.pools.append(new_pool(idle=False))
            for key in unfinished:
                self.futures[key] = self._submit(self.pools[-1], key, "-again")

    def close(self) -> None:
        for pool in self.pools:
            end(pool)


@contextlib.contextmanager
def runs_in_background(
    keys: list[RunKey], runs_dir: Path, task: Callable[[RunKey, Path], T]
) -> Iterator[BackgroundRuns[T]]:
    """`BackgroundRuns` ended on leaving."""
    runs = BackgroundRuns(keys, runs_dir, task)
    try:
        yield runs
    finally:
        runs.close()
