"""Errors a user can cause and fix, as opposed to bugs in rayrl.

The CLI prints a `UserError` as one line and exits non-zero without a traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input: a config value, an env id, a checkpoint path. The message says what is valid."""


class ConfigError(UserError):
    """A configuration key or value is invalid."""


class CheckpointError(UserError):
    """A checkpoint is missing, corrupt, or does not fit the configured agent."""


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean x?)' for the closest candidates, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
