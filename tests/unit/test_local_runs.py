"""tests/local_runs.py: each marked run once, the longest expected first, so that the pool's
two processes finish together."""

from __future__ import annotations

import pytest

from tests.local_runs import local_run, longest_first


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
