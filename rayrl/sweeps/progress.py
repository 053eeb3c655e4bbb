"""What a sweep shows while it runs: a table of its trials (settings, status, env steps,
metric) every `interval_s`, and one line when a trial ends or fails (with its error: the
sweep goes on). Written as a Ray Tune callback in place of Tune's own reporter, whose tables
name Tune's internals and not rayrl's settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ray import tune

from rayrl.sweeps.results import error_line, format_table, format_value

UNFINISHED = ("PENDING", "RUNNING", "PAUSED")
"""Tune's statuses of a trial that has not ended."""


def trial_error(trial: Any) -> str:
    """The last line of a failed trial's error: the exception and its message (read from
    the error file Tune has just written on this machine)."""
    try:
        text = Path(trial.error_file).read_text()
    except (OSError, TypeError):  # no file (yet): the error itself, else nothing
        text = ""
    return error_line(text)


class LiveTable(tune.Callback):
    def __init__(
        self,
        keys: Sequence[str],
        metric: str,
        interval_s: float = 15.0,
        echo: Callable[[str], None] = print,
    ) -> None:
        """`keys`: the settings shown per trial (the space's keys and `run.seed`)."""
        self.keys = list(keys)
        self.metric = metric
        self.interval_s = interval_s
        self.echo = echo
        self._last_table = time.monotonic()
        self._results: dict[str, dict[str, Any]] = {}
        self.unfinished = 0
        """Trials not ended when the sweep stopped (an interrupted sweep has some)."""

    def __getstate__(self) -> dict[str, Any]:
        """Tune saves its callbacks with the experiment; `echo` (print) is put back as is."""
        return {**self.__dict__, "echo": print}

    def settings(self, trial: Any) -> str:
        return " ".join(f"{k}={format_value(trial.config.get(k))}" for k in self.keys)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self._results[trial.trial_id] = result
        if time.monotonic() - self._last_table >= self.interval_s:
            self._last_table = time.monotonic()
            self.echo(self.table(trials))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info):
        result = self._results.get(trial.trial_id, {})
        value = result.get(self.metric)
        self.echo(
            f"trial {trial.trial_id} ({self.settings(trial)}) ended at "
            f"{result.get('env_steps', 0):,} env steps, {self.metric} "
            f"{format_value(value) if value is not None else 'not reported'}"
        )

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info):
        self.echo(
            f"trial {trial.trial_id} ({self.settings(trial)}) failed: {trial_error(trial)}; "
            "the sweep goes on"
        )

    def on_experiment_end(self, trials: list, **info):
        self.unfinished = sum(trial.status in UNFINISHED for trial in trials)

    def table(self, trials: list) -> str:
        rows = []
        for trial in trials:
            result = self._results.get(trial.trial_id, {})
            value = result.get(self.metric)
            rows.append(
                [
                    trial.trial_id,
                    *(format_value(trial.config.get(k)) for k in self.keys),
                    trial.status.lower(),
                    f"{result.get('env_steps', 0):,}",
                    format_value(value) if value is not None else "-",
                ]
            )
        header = ["trial", *self.keys, "status", "env steps", self.metric]
        return format_table(header, rows)
