"""tests/local_runs.py: each marked run once, the longest expected first, so that the pool's
two processes finish together; the marked tests last, so that the runs have the session; the
pool's processes at idle priority while the other tests run, so that these keep their cores,
and at normal priority once a test waits on them."""

from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from tests import local_runs
from tests.local_runs import RunKey, last, local_run, longest_first, runs_in_background


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


RELEASE = "release"
HELD: RunKey = ("held", ())
"""A key whose task ends only once the test has made `RELEASE` beside its directory: it is
unfinished when the test first waits on the pool however busy the machine is (a task of a
few seconds can finish first while idle-priority processes wait out other work)."""


def policy_after(key: RunKey, runs_dir: Path) -> tuple[int, int, str]:
    """A task for the pool: after `key`'s seconds (or, for `HELD`, once released), its
    process' policy, pid and directory."""
    if key == HELD:
        while not (runs_dir.parent / RELEASE).exists():
            time.sleep(0.05)
    else:
        time.sleep(float(key[0]))
    return os.sched_getscheduler(0), os.getpid(), runs_dir.name


def test_the_pool_runs_at_idle_priority_until_a_test_waits_on_it(tmp_path: Path):
    with runs_in_background([("0", ()), HELD], tmp_path, policy_after) as runs:
        assert runs.futures[("0", ())].result()[0] == os.SCHED_IDLE  # beside the tests
        runs.result(("0", ()))  # the first wait
        (tmp_path / RELEASE).touch()
        policy, _, directory = runs.result(HELD)
    assert policy == os.SCHED_OTHER  # waited on: the machine may be busy with other work
    assert directory in ("1", "1-again")


def test_where_priority_cannot_be_raised_the_unfinished_runs_start_again_at_normal_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def refused(pid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(local_runs, "to_normal_priority", refused)
    with runs_in_background([("0", ()), HELD], tmp_path, policy_after) as runs:
        done_at_idle = runs.futures[("0", ())].result()
        # the first wait starts the unfinished run again; a finished run is not done again
        assert runs.result(("0", ())) == done_at_idle
        (tmp_path / RELEASE).touch()
        policy, pid, directory = runs.result(HELD)
    assert (policy, directory) == (os.SCHED_OTHER, "1-again")
    assert pid != done_at_idle[1]


def test_leaving_ends_the_pools_work_at_once_and_no_other_pools(tmp_path: Path):
    with runs_in_background([("3", ())], tmp_path / "other", policy_after) as other:
        start = time.monotonic()
        keys: list[RunKey] = [("600", ("a",)), ("600", ("b",)), ("600", ("c",))]
        with runs_in_background(keys, tmp_path, policy_after) as runs:
            time.sleep(1)  # two begin, one waits
        for future in runs.futures.values():
            while not future.done() and time.monotonic() - start < 60:
                time.sleep(0.1)  # a cancelled future is marked so by the pool's own thread
            assert future.cancelled() or isinstance(future.exception(), BrokenProcessPool)
        assert time.monotonic() - start < 60, "leaving the pool waited for its work"
        assert other.futures[("3", ())].result()[2] == "0"  # the other pool's run went on
