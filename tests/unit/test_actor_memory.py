"""A joined cluster's memory for actors bounds a run's actor processes, each of which imports
torch (`rayrl.ray.capacity.check_actor_memory`): refused before anything starts, in one line
naming `workers.num_workers`, unless an autoscaler may add the memory or the run says
`workers.oversubscribe`."""

from __future__ import annotations

import pytest

from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from rayrl.ray.capacity import ACTOR_MEMORY, Capacity, NodeType, check_actor_memory

GIB = 2**30


def check(num_workers: int, nodes, node_types=(), *extra: str) -> None:
    config = load_config("cartpole_ppo", [f"workers.num_workers={num_workers}", *extra])
    check_actor_memory(config, env_spec(config.env), Capacity(nodes, node_types))


def test_more_actor_processes_than_the_clusters_memory_holds_are_refused():
    nodes = ({"CPU": 64.0, "memory": 4.0 * GIB}, {"CPU": 64.0, "memory": 4.0 * GIB})
    check(16, nodes)  # 19 processes: about 7.4 GiB of 8
    with pytest.raises(ConfigError) as refused:
        check(100, nodes)
    message = str(refused.value)
    assert message.startswith("workers.num_workers=100: the run's 103 actor processes")
    assert "the Ray cluster has 8.0 GiB of memory for actors" in message
    fits = int(message.split("workers.num_workers <= ")[1].split(";")[0])
    check(fits, nodes)  # what it says fits, fits
    with pytest.raises(ConfigError):
        check(fits + 1, nodes)
    check(100, nodes, (), "workers.oversubscribe=true")  # deliberate


def test_memory_an_autoscaler_may_add_or_a_cluster_that_does_not_say_is_accepted():
    small = ({"CPU": 2.0, "memory": 2.0 * GIB},)
    big = NodeType("big", {"CPU": 64.0, "memory": 64.0 * GIB}, max_count=4)
    check(100, small, (big,))  # waits for the autoscaler
    check(100, small, None)  # an autoscaler of unknown node types
    check(100, ({"CPU": 2.0},))  # no node reports its memory: not known, not refused
    assert 100 * ACTOR_MEMORY > 2.0 * GIB
