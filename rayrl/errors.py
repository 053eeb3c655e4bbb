"""Errors a user can cause and fix, as opposed to bugs in rayrl.

The CLI prints a `UserError` as one line and exits non-zero without a traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


class UserError(Exception):
    """Bad input: a config value, an env id, a checkpoint path. The message says what is valid."""


class ConfigError(UserError):
    """A configuration key or value is invalid."""


class CheckpointError(UserError):
    """A checkpoint is missing, corrupt, or does not fit the configured agent."""


class RunFailedError(Exception):
    """The run cannot go on (an actor that fails at every start, writes to the run directory that
    keep failing, no rollout worker for too long). The message is the one-line cause the run ends
    with; `state_sound` says whether the learner's state can still be checkpointed."""

    def __init__(self, message: str, *, state_sound: bool = True) -> None:
        super().__init__(message)
        self.state_sound = state_sound


@dataclass
class Failure:
    """The error a run stopped on."""

    cause: str
    """One line."""
    state_sound: bool
    """Whether the learner's state can still be checkpointed."""


def failure_of(error: Exception) -> Failure:
    if isinstance(error, RunFailedError):
        return Failure(str(error), error.state_sound)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = lines[-1] if lines else ""
    return Failure(f"{type(error).__name__}: {detail}" if detail else type(error).__name__, False)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean x?)' for the closest candidates, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
