"""A sweep's outcome: each trial's last reported metric, the settings ranked by that metric
averaged over their seeds, the best settings as `--set` options and as a config file, and a
plot of the best settings' runs.

A setting is ranked by its trials' last evaluations, averaged over the seeds that ran to
their end; a setting none of whose trials did (ASHA stopped them, or they failed) ranks after
every setting with one, by the evaluations it reported. Settings with equal means rank the
one with more such seeds first, then the one whose counted trials used fewer env steps (runs
that reach `run.target_return` end early). The `seeds` column says how many trials the mean
is of.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayrl.config import config_to_yaml
from rayrl.errors import UserError
from rayrl.plot import plot_runs
from rayrl.sweeps.spec import Sweep, override

BEST_SETTINGS_SHOWN = 3
"""How many of the best settings' runs the plot draws."""


@dataclass(frozen=True)
class TrialOutcome:
    trial_id: str
    settings: dict[str, Any]
    """The space's values and `run.seed`."""
    value: float | None
    """The metric at the trial's last evaluation; None when it reported none."""
    env_steps: int
    status: str
    """"finished", "stopped early" (by the scheduler), "failed" or "unfinished"."""
    error: str | None
    run_dir: Path


@dataclass
class SettingOutcome:
    settings: dict[str, Any]
    """The space's values (without the seed)."""
    trials: list[TrialOutcome] = field(default_factory=list)

    @property
    def counted(self) -> list[TrialOutcome]:
        """The trials the figures are of: those that ran to their end with a metric, else
        those that reported one (a trial stopped early reports an earlier evaluation, not
        comparable)."""
        reported = [t for t in self.trials if _finite(t.value) is not None]
        finished = [t for t in reported if t.status == "finished"]
        return finished or reported

    @property
    def values(self) -> list[float]:
        return [float(t.value) for t in self.counted if t.value is not None]

    @property
    def finished(self) -> bool:
        """Whether a trial of this setting ran to its end (and so counts first)."""
        return any(t.status == "finished" for t in self.counted)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float:
        return statistics.pstdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def env_steps(self) -> float:
        """The counted trials' mean env steps (all trials' when none reported)."""
        trials = self.counted or self.trials
        return statistics.fmean(t.env_steps for t in trials) if trials else 0.0

    def set_options(self) -> str:
        """The settings as `rayrl train` options."""
        return " ".join(f"--set {shlex.quote(override(k, v))}" for k, v in self.settings.items())


def rank(trials: Sequence[TrialOutcome], mode: str) -> list[SettingOutcome]:
    """Settings (over their seeds), best first."""
    groups: dict[str, SettingOutcome] = {}
    for trial in trials:
        settings = {k: v for k, v in trial.settings.items() if k != "run.seed"}
        key = json.dumps(settings, sort_keys=True, default=str)
        groups.setdefault(key, SettingOutcome(settings)).trials.append(trial)
    sign = -1.0 if mode == "max" else 1.0

    def order(group: SettingOutcome) -> tuple[bool, bool, float, int, float]:
        mean = group.mean
        return (
            mean is None,
            not group.finished,
            sign * mean if mean is not None else 0.0,
            -len(group.values),  # at equal means, more seeds that got there first
            group.env_steps,
        )

    return sorted(groups.values(), key=order)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def error_line(error: BaseException | str | None) -> str:
    """The last line of a trial's error (a remote traceback ends with the exception and its
    message)."""
    lines = [line.strip() for line in str(error or "").splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error (see the trial's error.txt)"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned, a rule under the header."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [[str(c).ljust(w) for c, w in zip(row, widths, strict=True)] for row in [header, *rows]]
    lines.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join(line).rstrip() for line in lines)


def settings_table(ranked: Sequence[SettingOutcome], metric: str) -> str:
    keys = list(ranked[0].settings) if ranked else []
    rows = []
    for position, group in enumerate(ranked, start=1):
        statuses = sorted({t.status for t in group.trials})
        mean = group.mean
        rows.append(
            [
                str(position),
                *(format_value(group.settings[k]) for k in keys),
                f"{len(group.values)}/{len(group.trials)}",
                "-" if mean is None else f"{mean:.4g} ± {group.std:.3g}",
                f"{group.env_steps:,.0f}",
                ", ".join(statuses),
            ]
        )
    header = ["rank", *keys, "seeds", f"{metric} (mean ± std)", "env steps", "trials"]
    return format_table(header, rows)


@dataclass
class SweepResult:
    """How a sweep ended."""

    sweep_dir: Path
    trials: list[TrialOutcome]
    ranked: list[SettingOutcome]
    metric: str
    interrupted: bool = False
    best_config: Path | None = None
    """`best.yaml`: the base config with the best settings."""
    plot: Path | None = None

    @property
    def best(self) -> SettingOutcome | None:
        return self.ranked[0] if self.ranked and self.ranked[0].mean is not None else None

    def table(self) -> str:
        return settings_table(self.ranked, self.metric)

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.trials)


def write_outputs(result: SweepResult, sweep: Sweep) -> None:
    """The table (`results.txt`), the best config (`best.yaml`) and the plot (`best.png`)."""
    (result.sweep_dir / "results.txt").write_text(result.table() + "\n")
    best = result.best
    if best is None:
        return
    result.best_config = result.sweep_dir / "best.yaml"
    result.best_config.write_text(config_to_yaml(sweep.config_with(best.settings)))
    runs = [
        t.run_dir
        for group in result.ranked[:BEST_SETTINGS_SHOWN]
        for t in group.trials
        if (t.run_dir / "config.yaml").is_file()
    ]
    try:
        result.plot = plot_runs(runs, result.sweep_dir / "best.png")
    except UserError:  # no run recorded a return yet
        result.plot = None
