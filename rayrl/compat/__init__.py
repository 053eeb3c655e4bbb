"""Every private name of another project that rayrl uses, in one place, each behind a
fallback that degrades and never crashes.

A private name is an underscore name reached on another package's module or object: Ray's
`ray._private`, `ray._raylet` and `ray._common`, an actor handle's `_actor_id`, Tune's
scheduler internals, torch's `torch._dynamo`, CPython's `threading._shutdown`. They change
without notice between releases (Ray moved `ray._private.utils` to `ray._common.utils`
between minor versions), so rayrl's own code uses public APIs only
(`tests/unit/test_private_names.py` fails on a private name anywhere else in `rayrl/`), and
reaches these only where no public way exists:

- `ray_internals`: whether Ray has given an actor a process (without it, a worker waiting
  for a lost node's CPU counts as one that did not start); the autoscaler monitor killed
  first at shutdown (else `ray.shutdown` takes about a second longer); whether the driver
  uses token authentication (else no warning about a cluster that does not require it); a
  local Ray's actors at the command's priority (else Ray's default, nice 15); the
  autoscaler's node types and state (else what no node has now is accepted, with a log
  line); the Ray `ray start` recorded, and the Rays running here (else the record is read
  where Ray 2.60 writes it, and the running ones are not named);
- `tune_internals`: synchronous PBT that never waits for ever (else Tune's own
  `PopulationBasedTraining`);
- `torch_internals`: which error means a failed `torch.compile` (else any error of a
  compiled step falls back to the eager one, which raises again if the error was its own);
- `interpreter`: an exit without the interpreter's finalization (else a normal exit, about
  a second later).

Each access goes through `refuse_if_public_only` first: with `RAYRL_PUBLIC_API_ONLY=1` in
the environment (inherited by a local Ray's actors and Tune's trials) every one of them
raises and takes its fallback. That is how the tests show that runs and sweeps finish
without any of them, and a user whose newer Ray breaks one can run on the public API alone
while it is fixed. Where a private behaviour is only right for the Ray it was written
against (Tune's PBT internals, Ray's system config), `ray_written_for` gates it by version.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

PUBLIC_ONLY_ENV = "RAYRL_PUBLIC_API_ONLY"
"""Set (to anything but empty or 0) to make every private access take its fallback."""

RAY_WRITTEN_FOR = ((2, 52), (2, 60))
"""The Ray minor versions, oldest and newest, whose internals this package was written and
tested against (`.ci/run` runs the newest, `.ci/floors` the oldest)."""


class PrivateAccessRefusedError(RuntimeError):
    """A private access refused by `RAYRL_PUBLIC_API_ONLY`."""


def public_only() -> bool:
    """Whether `RAYRL_PUBLIC_API_ONLY` asks for public APIs only."""
    return os.environ.get(PUBLIC_ONLY_ENV, "").strip() not in ("", "0")


def refuse_if_public_only(what: str) -> None:
    """Raise `PrivateAccessRefusedError` naming `what` when public APIs only are asked for:
    every private access calls this first, inside the `try` of its fallback."""
    if public_only():
        raise PrivateAccessRefusedError(f"{what}: {PUBLIC_ONLY_ENV} is set")


_said: set[str] = set()


def fell_back(what: str, error: BaseException, consequence: str) -> None:
    """Log, once per process and access, that `what` failed and what rayrl does instead (at
    debug level when `RAYRL_PUBLIC_API_ONLY` asked for it)."""
    if what in _said:
        return
    _said.add(what)
    level = logging.DEBUG if public_only() else logging.INFO
    logger.log(level, "%s unavailable (%s): %s", what, error, consequence)


def ray_written_for() -> bool:
    """Whether the installed Ray is one `RAY_WRITTEN_FOR` spans."""
    import ray

    try:
        major, minor = (int(part) for part in ray.__version__.split(".")[:2])
    except ValueError:  # a development build: its internals are not known
        return False
    oldest, newest = RAY_WRITTEN_FOR
    return oldest <= (major, minor) <= newest
