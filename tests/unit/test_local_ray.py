"""The settings of a local Ray that rayrl starts for a run, and where a small machine's run
evaluates (`rayrl.ray.connect`, `rayrl.ray.capacity`)."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from rayrl.compat import ray_internals
from rayrl.host import usable_cores
from rayrl.ray import capacity, connect
from rayrl.ray.capacity import evaluates_in_driver
from rayrl.ray.connect import WORKER_NICENESS_ENV, local_system_config


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
    monkeypatch.setattr(capacity.ray, "nodes", lambda: nodes)
    context = SimpleNamespace(get_node_id=lambda: "a")
    monkeypatch.setattr(capacity.ray, "get_runtime_context", lambda: context)
    monkeypatch.setattr(capacity, "autoscaler_node_types", lambda: autoscaler)
    expected = usable_cores() if alone else None
    assert capacity.cores_if_alone() == expected


def test_a_local_ray_that_did_not_start_in_time_ends_the_run_with_one_line(monkeypatch):
    """Ray's bare startup-timeout `Exception` (its raylet did not register within 30 s, on a
    machine too busy) becomes a `UserError` that says so and what to do; any other error
    of `ray.init` stays what it is (a bug to see with its traceback)."""
    from rayrl.errors import UserError
    from rayrl.presets import load_config

    def timed_out(**kwargs):
        raise Exception(  # what ray._private.node raises
            "The current node timed out during startup. This could happen because some of "
            "the raylet failed to startup or the GCS has become overloaded."
        )

    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", timed_out)
    with pytest.raises(UserError) as error:
        connect.connect(load_config("cartpole_ppo"), None)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("the local Ray did not start: its raylet did not register")
    assert "nothing was trained" in message
    assert "--address" in message

    def broken(**kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", broken)
    with pytest.raises(RuntimeError, match="something else"):
        connect.connect(load_config("cartpole_ppo"), None)


def test_a_ray_address_where_nothing_listens_ends_the_run_naming_the_variable(monkeypatch):
    """`connect` probes the address it took from RAY_ADDRESS before `ray.init` (which would
    retry it for about 14 minutes) and says where it came from; `ray.is_initialized` is
    replaced so that the suite's own Ray does not stand in for the one asked for."""
    from rayrl.errors import UserError
    from rayrl.presets import load_config
    from tests.ports import refusing_port

    def joined(**kwargs):
        raise AssertionError("ray.init was called for an address where nothing listens")

    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", joined)
    with refusing_port() as (_, port):
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        with pytest.raises(UserError) as error:
            connect.connect(load_config("cartpole_ppo"), None)
    assert f"RAY_ADDRESS=127.0.0.1:{port}" in str(error.value)
    assert "unset RAY_ADDRESS to start a local Ray" in str(error.value)


def test_auto_probes_the_address_ray_start_recorded_and_names_both(tmp_path, monkeypatch):
    """`--address auto` stands for the address `ray start` recorded; where nothing listens
    there any more (a head killed without `ray stop`), the error gives both."""
    from rayrl.errors import UserError
    from rayrl.presets import load_config
    from rayrl.ray import address
    from tests.ports import refusing_port

    def joined(**kwargs):
        raise AssertionError("ray.init was called for an address where nothing listens")

    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", joined)
    refused_at_once = functools.partial(address.check_reachable, retry_s=0.0)
    monkeypatch.setattr(connect, "check_reachable", refused_at_once)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    with refusing_port() as (_, port):
        (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")
        with pytest.raises(UserError) as error:
            connect.connect(load_config("cartpole_ppo"), "auto")
    assert str(error.value).startswith(
        f"cannot connect to the Ray cluster at --address=auto (127.0.0.1:{port}, recorded by "
        "`ray start`): nothing accepts connections"
    )


@pytest.mark.parametrize(
    ("environment", "joins"),
    [(None, "auto"), ("auto", "auto"), ("LISTENING", "LISTENING")],
)
def test_auto_joins_the_recorded_ray_as_auto_unless_ray_address_names_one(
    tmp_path, monkeypatch, environment, joins
):
    """With a `ray start` Ray recorded, `ray.init` gets `auto` itself (Ray turns on token
    authentication for `auto` only, and reads the record first); a RAY_ADDRESS that names a
    cluster goes before `--address auto`, as in Ray (inside `ray job submit`)."""
    import socket

    from rayrl.presets import load_config

    calls = []
    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", lambda **k: calls.append(k))
    monkeypatch.setattr(ray_internals, "token_auth_enabled", lambda: True)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text(address)
        if environment is None:
            monkeypatch.delenv("RAY_ADDRESS", raising=False)
        else:
            monkeypatch.setenv("RAY_ADDRESS", address if environment == "LISTENING" else "auto")
        assert connect.connect(load_config("cartpole_ppo"), "auto")
    assert calls[0]["address"] == (address if joins == "LISTENING" else "auto")


@pytest.mark.parametrize(
    ("address", "dashboard", "missing"),
    [(None, True, "aiohttp"), ("ray://127.0.0.1:10001", False, "grpc")],
)
def test_what_needs_rays_cluster_packages_is_refused_in_one_line_without_them(
    monkeypatch, address, dashboard, missing
):
    """`--dashboard` and a Ray Client address need `ray[default]` (the `cluster` extra),
    which `pip install rayrl` leaves out: said before Ray starts, not Ray's bare exception."""
    import importlib.util

    from rayrl.errors import UserError
    from rayrl.presets import load_config

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == missing else find_spec(name)
    )
    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UserError, match=r'pip install "rayrl\[cluster\]"'):
        connect.connect(load_config("cartpole_ppo"), address, dashboard=dashboard)


def test_a_local_ray_larger_than_the_machine_bounds_is_refused_in_one_line(monkeypatch):
    """`workers.num_workers=100000` (a typo's extra zeros) on this machine: refused before
    Ray starts, naming the key, the machine's cores and what is valid; the bound holds at
    four CPUs per core, and `workers.oversubscribe` starts it anyway."""
    from rayrl.errors import ConfigError
    from rayrl.presets import load_config

    started = []
    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", lambda **k: started.append(k))
    monkeypatch.setattr(connect, "usable_cores", lambda: 2)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # the default preset: one learner on a CPU beside the workers, one CPU each
    with pytest.raises(ConfigError) as refused:
        connect.connect(load_config(None, ["workers.num_workers=100000"]), None)
    assert str(refused.value) == (
        "workers.num_workers=100000: the run asks a local Ray for 100001 CPUs and this "
        "machine has 2 cores; at most 8 (4 per core) are allowed, which is "
        "workers.num_workers <= 7 at workers.cpus_per_worker=1; set "
        "workers.oversubscribe=true to start it anyway, or join a cluster (--address)"
    )
    assert started == []
    connect.connect(load_config(None, ["workers.num_workers=7"]), None)
    assert started[-1]["num_cpus"] == 8
    with pytest.raises(ConfigError, match=r"workers\.num_workers <= 7 "):
        connect.connect(load_config(None, ["workers.num_workers=8"]), None)
    connect.connect(
        load_config(None, ["workers.num_workers=40", "workers.oversubscribe=true"]), None
    )
    assert started[-1]["num_cpus"] == 41


def test_a_local_ray_whose_actors_the_memory_cannot_hold_is_refused(monkeypatch):
    from rayrl.errors import ConfigError
    from rayrl.presets import load_config

    monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(connect, "_init_keeping_sigterm_handler", lambda **k: None)
    monkeypatch.setattr(connect, "usable_cores", lambda: 64)
    available = SimpleNamespace(available=2 * 2**30)  # 2 GiB: five actor processes
    monkeypatch.setattr(connect.psutil, "virtual_memory", lambda: available)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=r"workers\.num_workers=8: 10 actor processes need"):
        connect.connect(load_config(None, ["workers.num_workers=8"]), None)
    with pytest.raises(ConfigError, match=r"enough for workers\.num_workers <= 3;"):
        connect.connect(load_config(None, ["workers.num_workers=8"]), None)
    connect.connect(load_config(None, ["workers.num_workers=3"]), None)
