"""The settings of a local Ray that rayrl starts for a run (`rayrl.ray.launch`)."""

from __future__ import annotations

from rayrl.ray.launch import WORKER_NICENESS_ENV, local_system_config


def test_a_local_ray_runs_its_actors_at_the_commands_priority(monkeypatch):
    monkeypatch.delenv(WORKER_NICENESS_ENV, raising=False)
    assert local_system_config() == {"worker_niceness": 0}


def test_a_priority_the_user_set_for_ray_workers_is_left_to_ray(monkeypatch):
    monkeypatch.setenv(WORKER_NICENESS_ENV, "15")
    assert local_system_config() == {}
