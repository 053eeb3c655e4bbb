"""tests/local_runs.py: each marked run once, the longest expected first, so that the pool's
two processes finish together; the marked tests last, so that the runs have the session; the
pool's processes at idle priority, so that the tests beside them keep their cores."""

from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from tests.local_runs import idle_pool, last, local_run, longest_first


class MarkedItem:
    """What `longest_first` reads of a collected test: its closest `local_run` marker."""

    def __init__(self, decorator: pytest.MarkDecorator | None) -> None:
        self.mark = decorator.mark if decorator is not None else None

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.mark if self.mark is not None and self.mark.name == name else None


def test_runs_are_ordered_longest_first_each_once():
    items = [
        MarkedItem(local_run("cartpole_ppo", "run.seed=0")),
        MarkedItem(None),  # a test without a local run
        MarkedItem(local_run("minatar_dqn", "run.seed=0", seconds=75)),
        MarkedItem(local_run("pendulum_sac", seconds=45)),
        MarkedItem(local_run("minatar_dqn", "run.seed=0", seconds=75)),  # a second test of it
    ]
    assert longest_first(items) == [  # type: ignore[arg-type]
        ("minatar_dqn", ("run.seed=0",)),
        ("pendulum_sac", ()),
        ("cartpole_ppo", ("run.seed=0",)),
    ]


def test_marked_tests_go_last_and_each_group_keeps_its_order():
    marked = [MarkedItem(local_run("minatar_dqn")), MarkedItem(local_run("cartpole_ppo"))]
    unmarked = [MarkedItem(None), MarkedItem(None), MarkedItem(None)]
    items = [unmarked[0], marked[0], unmarked[1], marked[1], unmarked[2]]
    assert last(items) == [*unmarked, *marked]  # type: ignore[arg-type]


def scheduling_policy() -> int:
    return os.sched_getscheduler(0)


def test_the_pool_runs_at_idle_priority_and_ends_its_work_when_left():
    start = time.monotonic()
    with idle_pool() as pool:
        assert pool.submit(scheduling_policy).result() == os.SCHED_IDLE
        unfinished = pool.submit(time.sleep, 600)
    while not unfinished.done() and time.monotonic() - start < 60:
        time.sleep(0.1)  # a cancelled future is marked so by the pool's own thread
    assert unfinished.cancelled() or isinstance(unfinished.exception(), BrokenProcessPool)
    assert time.monotonic() - start < 60, "leaving the pool waited for its work"
