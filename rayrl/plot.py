"""Learning curves without W&B: training and evaluation returns against env steps, several
runs overlaid, as a PNG.

Reads each run's `metrics.jsonl` (training episode returns, `worker/episode_return`) and
`eval.jsonl` (evaluation means, with min-max bands). Draws on a bare matplotlib `Figure`
(no pyplot state, no GUI backend), so it works on a headless machine and in notebooks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rayrl.errors import UserError
from rayrl.files import read_jsonl
from rayrl.rundir import RunDirectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Curves:
    """A run's learning curves."""

    label: str
    train_steps: list[int]
    train_returns: list[float]
    eval_steps: list[int]
    eval_means: list[float]
    eval_mins: list[float]
    eval_maxs: list[float]


def read_curves(run_dir: str | Path) -> Curves:
    run = RunDirectory.open(run_dir)
    curves = curves_of(run.root.name, read_jsonl(run.metrics_path), read_jsonl(run.eval_path))
    if not curves.train_steps and not curves.eval_steps:
        raise UserError(f"run '{run.root}' has no training or evaluation returns recorded yet")
    return curves


def curves_of(label: str, metrics: list[dict], evals: list[dict]) -> Curves:
    """The curves in a run's metrics and evaluation rows (as `metrics.jsonl` and
    `eval.jsonl` hold them; null, a value that was not finite, is drawn as a gap)."""
    train = [r for r in metrics if "worker/episode_return" in r]

    def values(rows: list[dict], key: str) -> list[float]:
        return [math.nan if r[key] is None else r[key] for r in rows]

    def steps(rows: list[dict]) -> list[int]:
        return [int(r["env_steps"]) for r in rows]

    return Curves(
        label=label,
        train_steps=steps(train),
        train_returns=values(train, "worker/episode_return"),
        eval_steps=steps(evals),
        eval_means=values(evals, "eval/return_mean"),
        eval_mins=values(evals, "eval/return_min"),
        eval_maxs=values(evals, "eval/return_max"),
    )


def draw_runs(run_dirs: Sequence[str | Path]) -> Figure:
    """A figure of the runs' training (left) and evaluation (right) returns against env
    steps, one color per run."""
    return draw_curves([read_curves(run) for run in run_dirs])


def draw_curves(curves: list[Curves]) -> Figure:
    """A figure of these curves' training (left) and evaluation (right) returns against env
    steps, one color per run (curves kept without their run directory, as the learning
    benchmark keeps them, draw the same as a run's)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.5))
    train_ax, eval_ax = figure.subplots(1, 2, sharex=True)
    for index, run in enumerate(curves):
        color = f"C{index % 10}"
        train_ax.plot(run.train_steps, run.train_returns, color=color, label=run.label)
        eval_ax.plot(run.eval_steps, run.eval_means, color=color, marker="o", label=run.label)
        eval_ax.fill_between(run.eval_steps, run.eval_mins, run.eval_maxs, color=color, alpha=0.2)
    train_ax.set_title("training episode return (mean per log interval)")
    eval_ax.set_title("evaluation return (mean, min-max)")
    for ax in (train_ax, eval_ax):
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def plot_runs(run_dirs: Sequence[str | Path], output: str | Path) -> Path:
    """Write a PNG of the runs' training and evaluation returns against env steps."""
    return save_png(draw_runs(run_dirs), output)


def save_png(figure: Figure, output: str | Path) -> Path:
    """Write `figure` as a PNG at `output` (its folder made if needed)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    return output
