"""The settings of a local Ray that rayrl starts for a run, and where a small machine's run
evaluates (`rayrl.ray.launch`)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from rayrl.ray import launch
from rayrl.ray.launch import WORKER_NICENESS_ENV, evaluates_in_driver, local_system_config


def test_a_local_ray_runs_its_actors_at_the_commands_priority(monkeypatch):
    monkeypatch.delenv(WORKER_NICENESS_ENV, raising=False)
    assert local_system_config() == {"worker_niceness": 0}


def test_a_priority_the_user_set_for_ray_workers_is_left_to_ray(monkeypatch):
    monkeypatch.setenv(WORKER_NICENESS_ENV, "15")
    assert local_system_config() == {}


def test_auto_evaluates_in_the_driver_on_a_small_machine_alone():
    """`cores_if_alone`: this machine's cores when the Ray is this machine alone, else None."""
    assert evaluates_in_driver("auto", 2)
    assert evaluates_in_driver("auto", 4)
    assert not evaluates_in_driver("auto", 16)
    assert not evaluates_in_driver("auto", None)  # a cluster, or Ray Client
    assert evaluates_in_driver("driver", None)
    assert not evaluates_in_driver("actor", 2)


def node(node_id: str, address: str, alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeManagerAddress": address, "Alive": alive}


@pytest.mark.parametrize(
    ("nodes", "autoscaler", "alone"),
    [
        ([node("a", "10.0.0.1")], (), True),  # a local Ray
        ([node("a", "10.0.0.1"), node("b", "10.0.0.1")], (), True),  # nodes simulated here
        ([node("a", "10.0.0.1"), node("b", "10.0.0.2", alive=False)], (), True),  # one lost
        ([node("a", "10.0.0.1"), node("b", "10.0.0.2")], (), False),  # a second machine
        ([node("b", "10.0.0.2")], (), False),  # the driver's node is not in the list
        ([node("a", "10.0.0.1")], None, False),  # an autoscaler may add machines
    ],
)
def test_the_ray_is_this_machine_alone_when_every_node_is_at_the_drivers_address(
    monkeypatch, nodes, autoscaler, alone
):
    """`cores_if_alone` reads Ray's node table; Ray's calls are replaced here to isolate it."""
    monkeypatch.setattr(launch.ray, "nodes", lambda: nodes)
    context = SimpleNamespace(get_node_id=lambda: "a")
    monkeypatch.setattr(launch.ray, "get_runtime_context", lambda: context)
    monkeypatch.setattr(launch, "autoscaler_node_types", lambda: autoscaler)
    expected = len(os.sched_getaffinity(0)) if alone else None
    assert launch.cores_if_alone() == expected
