"""Ray's private names (see `rayrl.compat`): each function tries Ray's own internals and,
where they fail (another Ray version, `RAYRL_PUBLIC_API_ONLY`), answers "not known" in a
way its caller treats as the cautious choice."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import ray

from rayrl.compat import fell_back, ray_written_for, refuse_if_public_only


def actor_has_process(handle: Any) -> bool | None:
    """Whether Ray has given the actor behind `handle` a process (a pid in Ray's actor
    table); None when that cannot be read. Ray's public state API (`ray.util.state`) answers
    this only where the dashboard runs, and a handle's id is private."""
    try:
        refuse_if_public_only("ray._private.state.actors")
        from ray._private.state import actors

        return bool(actors(handle._actor_id.hex()).get("Pid"))
    except Exception as error:
        fell_back("Ray's actor table", error, "an actor counts as placed")
        return None


def kill_autoscaler_monitor() -> None:
    """Kill the autoscaler monitor of the local Ray this process started, if any: Ray's
    `ray.shutdown` gives it a second to exit on SIGTERM, which it never does once the GCS
    is gone. It only reports the cluster's state."""
    try:
        refuse_if_public_only("ray._private.worker._global_node")
        node = ray._private.worker._global_node
        processes: list[Any] = node.all_processes.get("monitor", []) if node is not None else []
        for info in processes:
            info.process.kill()
    except Exception as error:
        fell_back("Ray's node processes", error, "the monitor is left to ray.shutdown")


def token_auth_enabled() -> bool | None:
    """Whether this process talks to Ray with token authentication (Ray 2.52+); None when
    this Ray does not say."""
    try:
        refuse_if_public_only("ray._private.authentication")
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except Exception as error:
        fell_back("Ray's token authentication setting", error, "no warning without a token")
        return None


def system_config_argument(settings: dict[str, Any]) -> dict[str, Any]:
    """`ray.init`'s keyword arguments that give a local Ray `settings` (Ray's system
    config, a private argument whose keys change between versions): empty outside the Ray
    versions rayrl was written for, where a key Ray no longer knows would fail the start."""
    if not settings:
        return {}
    try:
        refuse_if_public_only("ray.init(_system_config=...)")
        if not ray_written_for():
            raise RuntimeError(f"Ray {ray.__version__} is not one rayrl was written for")
    except Exception as error:
        fell_back("Ray's system config", error, f"{sorted(settings)} left at Ray's defaults")
        return {}
    return {"_system_config": settings}


def cluster_node_groups() -> list[tuple[str, dict[str, float], float]] | None:
    """The node groups an autoscaler reported in the GCS's cluster config (name, resources,
    how many it may start: math.inf without a limit); None when none were reported or they
    cannot be read."""
    try:
        refuse_if_public_only("ray._private.state.state.get_cluster_config")
        from ray._private.state import state

        cluster_config = state.get_cluster_config()
        if cluster_config is None or not cluster_config.node_group_configs:
            return None
        return [
            (
                str(group.name),
                {str(key): float(amount) for key, amount in group.resources.items()},
                math.inf if group.max_count < 0 else float(group.max_count),
            )
            for group in cluster_config.node_group_configs
        ]
    except Exception as error:
        fell_back("the GCS's cluster config", error, "node types not known from it")
        return None


def autoscaler_reports_state() -> bool | None:
    """Whether an autoscaler reports its state to the GCS (Ray's v2 autoscaler does); None
    when the GCS cannot be asked."""
    try:
        refuse_if_public_only("ray._raylet.GcsClient")
        from ray._raylet import GcsClient  # type: ignore[attr-defined, unused-ignore]
        from ray.core.generated.autoscaler_pb2 import (  # type: ignore[attr-defined, unused-ignore]
            GetClusterStatusReply,  # generated protobuf code: no stubs
        )

        client = GcsClient(address=ray.get_runtime_context().gcs_address)
        reply = GetClusterStatusReply.FromString(client.get_cluster_status())
        return bool(reply.HasField("autoscaling_state"))
    except Exception as error:
        fell_back("the autoscaler's state in the GCS", error, "an autoscaler counts as unknown")
        return None


def ray_address_file() -> str:
    """Where `ray start` records the address of the Ray it started (`ray stop` removes it):
    Ray's own answer, else the place Ray 2.60 uses ($RAY_TMPDIR, on Linux $TMPDIR, else
    /tmp; then `ray/ray_current_cluster`)."""
    try:
        refuse_if_public_only("ray._common.utils.get_ray_address_file")
        from ray._common.utils import get_ray_address_file

        return str(get_ray_address_file(None))
    except Exception as error:
        fell_back("Ray's address file", error, "Ray 2.60's location is read")
    if "RAY_TMPDIR" in os.environ:
        system_temp = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        system_temp = os.environ["TMPDIR"]
    else:
        system_temp = "/tmp"
    return os.path.join(system_temp, "ray", "ray_current_cluster")


def recorded_ray_address() -> str | None:
    """The address `ray start` recorded on this machine; None without a record."""
    try:
        with open(ray_address_file()) as record:
            return record.read().strip() or None
    except OSError:
        return None


def running_ray_addresses() -> list[str]:
    """The GCS addresses of every Ray running on this machine (empty when Ray cannot say)."""
    try:
        refuse_if_public_only("ray._private.services.find_gcs_addresses")
        from ray._private.services import find_gcs_addresses

        return sorted(find_gcs_addresses())
    except Exception as error:
        fell_back("Ray's list of running GCSes", error, "the Rays running here are not named")
        return []
