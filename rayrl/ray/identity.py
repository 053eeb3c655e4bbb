"""The call by which a supervisor learns that an actor it started has started, and its id.

`actor_id` answers once the actor's constructor has finished and names the actor as Ray's
errors name it (`RayActorError.actor_id`), so that a death surfacing in a call to another
actor is routed to the actor's supervisor (`rayrl.ray.dispatcher.Deaths`). Ray's public
API gives an actor its own id (`get_runtime_context().get_actor_id()`) but gives a
handle's holder none.
"""

from __future__ import annotations

import ray


class Identified:
    """Mixed into every actor class of the Ray runtime."""

    def actor_id(self) -> str:
        """This actor's Ray id, in hex."""
        actor = ray.get_runtime_context().get_actor_id()
        if actor is None:  # (only an actor's process has one)
            raise RuntimeError("actor_id is answered by a Ray actor only")
        return str(actor)
