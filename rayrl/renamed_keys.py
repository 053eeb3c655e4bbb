"""Config keys that were renamed or moved: one table that both ways a key comes in read.

A key someone writes (`--set`, a config file, a sweep's search space) that the table names
is refused with its new name, so that a script says what it means today
(`strict.unknown_key`). A run's saved config (its config.yaml, a checkpoint's) is moved to
the new names as it is read (`migrate`), so an old run still resumes, evaluates and plots.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

FamilyName = Literal["off-policy", "on-policy"]


@dataclass(frozen=True)
class Renamed:
    old: str
    """The dotted key as it was."""
    new: tuple[str, ...]
    """Where its value goes now: one key, or several where one key was split."""
    family: FamilyName | None = None
    """The algorithm family whose config has the new key; an algorithm of the other family
    never read the old one, so a saved value of it is dropped. None: every algorithm."""

    def names_new(self) -> str:
        quoted = [f"'{key}'" for key in self.new]
        if len(quoted) == 1:
            return f"it moved to {quoted[0]}"
        return f"it was split into {' and '.join(quoted)}"


RENAMED_KEYS: tuple[Renamed, ...] = (
    # settings moved to the part that reads them
    Renamed("replay", ("algorithm.replay",), "off-policy"),
    Renamed("workers.steps_per_chunk", ("algorithm.steps_per_chunk",), "off-policy"),
    Renamed("algorithm.num_learners", ("learner.num_learners",)),
    Renamed("algorithm.optimizer", ("learner.optimizer",)),
    Renamed("algorithm.rmsprop_alpha", ("learner.rmsprop_alpha",)),
    # one word for one thing (docs/extending.md, "Words the code uses")
    Renamed("algorithm.num_steps", ("algorithm.steps_per_chunk",), "on-policy"),
    Renamed("algorithm.num_storages", ("algorithm.queue_capacity",), "on-policy"),
    Renamed("faults.call_timeout_s", ("faults.probe_timeout_s", "faults.stall_timeout_s")),
    Renamed("faults.max_storage_errors", ("faults.max_write_errors",)),
    # a suite's own settings in its own section
    Renamed("env.frame_stack", ("env.atari.frame_stack",)),
    Renamed("env.frame_skip", ("env.atari.frame_skip",)),
    Renamed("env.noop_max", ("env.atari.noop_max",)),
    Renamed("env.fire_reset", ("env.atari.fire_reset",)),
)
"""Oldest first; a saved config is moved through every entry in this order."""


def renamed(dotted: str) -> Renamed | None:
    """The entry for `dotted` or a key under it (`replay.capacity` is under `replay`)."""
    for entry in RENAMED_KEYS:
        if dotted == entry.old or dotted.startswith(entry.old + "."):
            return entry
    return None


def new_keys(dotted: str, family: FamilyName | None) -> tuple[str, ...]:
    """Where a saved value of `dotted` goes now: `dotted` itself when it was not renamed;
    no key when its algorithm's family never read it. `family` is the config's algorithm
    family (None when its algorithm is unknown: every old value moves, and the unknown name
    is reported when the config is built)."""
    entry = renamed(dotted)
    if entry is None:
        return (dotted,)
    if entry.family is not None and family is not None and entry.family != family:
        return ()
    below = dotted[len(entry.old) :]
    return tuple(new + below for new in entry.new)


def migrate(data: MutableMapping[str, Any], family: FamilyName | None) -> list[str]:
    """Move the old keys of a saved config (nested mappings, changed in place) to their new
    places (`new_keys`), where the new key is not already set; returns the old keys found."""
    found = []
    for entry in RENAMED_KEYS:
        value = _pop(data, entry.old)
        if value is _MISSING:
            continue
        found.append(entry.old)
        for key in new_keys(entry.old, family):
            _set_default(data, key, value)
    return found


_MISSING = object()


def _pop(data: MutableMapping[str, Any], dotted: str) -> Any:
    *parents, last = dotted.split(".")
    for name in parents:
        inner = data.get(name)
        if not isinstance(inner, MutableMapping):
            return _MISSING
        data = inner
    return data.pop(last, _MISSING)


def _set_default(data: MutableMapping[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for name in parents:
        data = data.setdefault(name, {})
    data.setdefault(last, value)
