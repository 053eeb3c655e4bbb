"""Every private access of `rayrl.compat` made to fail (`RAYRL_PUBLIC_API_ONLY`): each
takes its fallback, and the callers treat that as the cautious choice. Without the switch,
the private path works on the Ray, Tune and torch installed (and its fallback agrees with it
where both can answer). Runs and sweeps that finish with every access failing:
`tests/integration/test_macos_like.py`."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch._dynamo.exc
from ray.tune.schedulers import PopulationBasedTraining

from rayrl import compat
from rayrl.compat import ray_internals, torch_internals, tune_internals
from rayrl.compat.tune_internals import SweepPBT, pbt_scheduler
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from rayrl.ray import capacity
from rayrl.ray.address import resolve_auto
from rayrl.ray.capacity import Capacity, check_workers

REPO = Path(__file__).resolve().parents[2]

PBT_SETTINGS = {
    "time_attr": "env_steps",
    "perturbation_interval": 4096,
    "hyperparam_mutations": {"learner.lr": [1e-4, 1e-3]},
    "synch": True,
}


@pytest.fixture
def public_only(monkeypatch):
    monkeypatch.setenv(compat.PUBLIC_ONLY_ENV, "1")


@pytest.mark.usefixtures("public_only")
def test_each_ray_access_answers_not_known():
    class Handle:  # nothing is read of it: the access fails first
        pass

    assert ray_internals.actor_has_process(Handle()) is None
    assert ray_internals.token_auth_enabled() is None
    assert ray_internals.system_config_argument({"worker_niceness": 0}) == {}
    assert ray_internals.cluster_node_groups() is None
    assert ray_internals.autoscaler_reports_state() is None
    assert ray_internals.running_ray_addresses() == []
    ray_internals.kill_autoscaler_monitor()  # nothing to kill, no error


def test_what_not_known_means_to_the_callers(monkeypatch):
    """An actor whose placement cannot be read is neither placed nor waiting (the
    supervisors' tests say what each does then); an autoscaler that cannot be asked about is
    one of unknown node types, so a run that no node can hold now is accepted (the start
    timeouts bound it), never refused on a guess, except on a Ray the run started itself."""
    from rayrl.ray.factory import is_placed

    monkeypatch.setattr(ray_internals, "actor_has_process", lambda handle: None)
    assert is_placed(object()) is None
    monkeypatch.setattr(ray_internals, "cluster_node_groups", lambda: None)
    monkeypatch.setattr(ray_internals, "autoscaler_reports_state", lambda: None)
    assert capacity.autoscaler_node_types() is None
    config = load_config("cartpole_ppo", ["workers.num_workers=64"])
    check_workers(config, Capacity(nodes=({"CPU": 2.0},), node_types=None), 0.0)  # accepted
    with pytest.raises(ConfigError, match=r"workers\.num_workers=64"):  # a Ray it started
        check_workers(config, Capacity(nodes=({"CPU": 2.0},), node_types=()), 0.0)


def test_the_recorded_ray_is_read_where_ray_writes_it(tmp_path, monkeypatch):
    """The fallback's place for `ray start`'s record is Ray's own, and `auto` finds it."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    ray_own = ray_internals.ray_address_file()
    monkeypatch.setenv(compat.PUBLIC_ONLY_ENV, "1")
    assert ray_internals.ray_address_file() == ray_own == str(tmp_path / "ray/ray_current_cluster")
    (tmp_path / "ray").mkdir()
    Path(ray_own).write_text("127.0.0.1:6379\n")
    assert resolve_auto() == "127.0.0.1:6379"


def test_tunes_own_pbt_runs_where_sweep_pbt_cannot(monkeypatch, caplog):
    assert type(pbt_scheduler(**PBT_SETTINGS)) is SweepPBT  # the Ray it was written for
    monkeypatch.setenv(compat.PUBLIC_ONLY_ENV, "1")
    with caplog.at_level(logging.WARNING, logger=tune_internals.__name__):
        fallback = pbt_scheduler(**PBT_SETTINGS)
    assert type(fallback) is PopulationBasedTraining
    assert "scheduler.synch=true runs on Tune's own synchronous PBT" in caplog.text
    monkeypatch.delenv(compat.PUBLIC_ONLY_ENV)
    monkeypatch.setattr(compat, "RAY_WRITTEN_FOR", ((2, 0), (2, 1)))  # a newer Ray
    assert type(pbt_scheduler(**PBT_SETTINGS)) is PopulationBasedTraining


def test_a_compile_failure_is_recognised_with_or_without_torchs_error_type(monkeypatch):
    compiler_failed = (torch._dynamo.exc.BackendCompilerFailed,)
    assert torch_internals.compile_failure_types(first_call=True) == compiler_failed
    assert torch_internals.compile_failure_types(first_call=False) == compiler_failed
    monkeypatch.setenv(compat.PUBLIC_ONLY_ENV, "1")
    assert torch_internals.compile_failure_types(first_call=True) == (Exception,)
    assert torch_internals.compile_failure_types(first_call=False) == ()  # a real error


def test_a_ray_outside_the_versions_written_for_gets_no_system_config(monkeypatch):
    assert ray_internals.system_config_argument({"worker_niceness": 0}) == {
        "_system_config": {"worker_niceness": 0}
    }
    monkeypatch.setattr(compat, "RAY_WRITTEN_FOR", ((2, 0), (2, 1)))
    assert ray_internals.system_config_argument({"worker_niceness": 0}) == {}


@pytest.mark.parametrize("public_only", ["0", "1"])
def test_the_exit_runs_exit_handlers_with_or_without_cpythons_steps(public_only):
    """With CPython's exit steps or a normal exit instead: atexit handlers run, the output
    is flushed and the status is the command's."""
    program = (
        "import atexit, sys\n"
        "from rayrl.compat.interpreter import exit_now\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "sys.stdout.write('unflushed ')\n"
        "exit_now(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, compat.PUBLIC_ONLY_ENV: public_only},
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "unflushed handler ran\n"
