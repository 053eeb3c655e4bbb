"""The call by which a supervisor learns that an actor it started has started, which actor
it is and where its process runs.

`identify` answers once the actor's constructor has finished. Its `actor_id` names the
actor as Ray's errors name it (`RayActorError.actor_id`), so that a death surfacing in a call
to another actor is routed to the actor's supervisor (`rayrl.ray.dispatcher.Deaths`): Ray's
public API gives an actor its own id (`get_runtime_context().get_actor_id()`) but gives a
handle's holder none. Its machine and process id let the watchdogs read the process's state
(`rayrl.ray.watchdog`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ray


@dataclass(frozen=True)
class ActorIdentity:
    actor_id: str
    """The actor's Ray id, in hex."""
    node_ip: str
    """The address of the machine its process runs on (Ray's nodes on one machine share it)."""
    pid: int


def this_process(actor_id: str) -> ActorIdentity:
    """The identity of an actor that runs in this process."""
    return ActorIdentity(actor_id, ray.util.get_node_ip_address(), os.getpid())


class Identified:
    """Mixed into every actor class of the Ray runtime."""

    def identify(self) -> ActorIdentity:
        actor = ray.get_runtime_context().get_actor_id()
        if actor is None:  # (only an actor's process has one)
            raise RuntimeError("identify is answered by a Ray actor only")
        return this_process(str(actor))
