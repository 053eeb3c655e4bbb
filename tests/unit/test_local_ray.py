"""The settings of a local Ray that rayrl starts for a run, and where a small machine's run
evaluates (`rayrl.ray.launch`)."""

from __future__ import annotations

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
