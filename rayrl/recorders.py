"""Recorders: where namespaced metrics go, always at an env-step count.

JSONL in the run directory (always), the console (a live progress bar on a terminal, a
line every few seconds in a log), Weights & Biases and TensorBoard. Only the driver
process records; workers and learner send their numbers to it.
"""

from __future__ import annotations

import functools
import logging
import netrc
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol, cast

from tqdm import tqdm

from rayrl.config import Config, config_to_dict
from rayrl.errors import ConfigError, failure_of
from rayrl.files import append_line
from rayrl.run_writer import RunWriter
from rayrl.rundir import RunDirectory, json_line

logger = logging.getLogger(__name__)


class Recorder(Protocol):
    """Receives namespaced metrics (`worker/`, `learner/`, `replay/`, `eval/`) at an env step."""

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None: ...

    def close(self, exit_code: int = 0) -> None:
        """End the recording; `exit_code` is the run's (non-zero: it failed or was stopped)."""
        ...


class JsonlRecorder:
    """One JSON object per row: `env_steps`, `time_s` and the metrics. Appends, so a resumed
    run continues the same file; each line is written whole or not at all, through `writer`
    (retried, and counted when it fails).

    The file's order is a property a reader may rely on: `env_steps` strictly increases from
    row to row, so each metric appears at most once per env-step count, in order, without
    sorting. `env_steps` is the run's clock when a row is recorded (an evaluation row says
    which weights it evaluated in `eval/env_steps`). Records at the same count (a log row and
    an evaluation that ended in the same round, or log rows while no experience arrives) are
    merged into one row, the newer values winning; so a row is written once a later count is
    recorded, or when the recorder closes (two evaluations that end at one count, the last
    periodic one and the final one, share its row: the final one's values; eval.jsonl has
    both). A resumed run's rows start at its checkpoint's count, and
    `RunDirectory.cut_back` has dropped the rows from that count on.
    """

    def __init__(self, path: Path, writer: RunWriter, time_offset_s: float = 0.0) -> None:
        self.path = path
        self.writer = writer
        self._start = time.perf_counter() - time_offset_s
        self._held: dict[str, float] | None = None
        """The row at the newest count, not yet written."""

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        held = self._held
        if held is not None and env_steps > held["env_steps"]:
            self._write(held)
            held = None
        if held is None:
            held = self._held = {"env_steps": env_steps, "time_s": 0.0}
        held["time_s"] = round(time.perf_counter() - self._start, 3)
        held.update(metrics)

    def _write(self, row: Mapping[str, float]) -> None:
        append = functools.partial(append_line, self.path, json_line(dict(row)))
        self.writer.write("metrics", f"a line of {self.path}", append)

    def close(self, exit_code: int = 0) -> None:
        if self._held is not None:
            self._write(self._held)
            self._held = None


class ConsoleRecorder:
    """A progress bar on a terminal; a plain line every `line_interval_s` otherwise."""

    def __init__(
        self, total_env_steps: int, initial_env_steps: int = 0, line_interval_s: float = 10.0
    ) -> None:
        self.interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=total_env_steps,
            initial=initial_env_steps,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not self.interactive,
            mininterval=0.5,
        )
        self.line_interval_s = line_interval_s
        self._last_line = 0.0
        self._shown: dict[str, float] = {}

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        for key, label in (
            ("worker/env_steps_per_s", "steps/s"),
            ("worker/episode_return", "return"),
            ("eval/return_mean", "eval"),
        ):
            if key in metrics:
                self._shown[label] = metrics[key]
        text = {k: f"{v:.4g}" for k, v in self._shown.items()}
        if self.interactive:
            self.bar.update(max(0, env_steps - self.bar.n))
            self.bar.set_postfix(text, refresh=False)
        elif time.monotonic() - self._last_line >= self.line_interval_s or "eval/return_mean" in (
            metrics
        ):
            self._last_line = time.monotonic()
            parts = " ".join(f"{k}={v}" for k, v in text.items())
            print(f"[rayrl] env_steps={env_steps:,} {parts}", file=sys.stderr, flush=True)

    def close(self, exit_code: int = 0) -> None:
        self.bar.close()


class TensorboardRecorder:
    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "logging.tensorboard=true needs the tensorboard package: "
                "pip install 'rayrl[tensorboard]'"
            ) from None
        self.writer = SummaryWriter(str(log_dir))

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, env_steps)

    def close(self, exit_code: int = 0) -> None:
        self.writer.close()


WandbMode = Literal["online", "offline", "disabled", "shared"]


def wandb_mode(configured: str) -> WandbMode:
    """The W&B mode to run in: WANDB_MODE wins; "auto" is online only with an API key.
    (`wandb.init` checks a mode it does not know, so a WANDB_MODE typo is its to report.)"""
    if os.environ.get("WANDB_MODE"):
        return cast(WandbMode, os.environ["WANDB_MODE"])
    if configured != "auto":
        return cast(WandbMode, configured)
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        netrc_path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
        if netrc.netrc(netrc_path).authenticators("api.wandb.ai"):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return "offline"


class WandbRecorder:
    """One W&B run per training run; a resumed run continues the same W&B run.

    Env steps are the x-axis of every metric. Only the resolved config's plain values are
    sent, so nothing W&B cannot serialize ever reaches it. Evaluation videos go in as
    `eval/video`; with `log_best_checkpoint`, `best.pt` goes up as a model artifact when
    the run closes (once, not at every improvement).
    """

    def __init__(self, config: Config, run_dir: RunDirectory) -> None:
        import wandb

        self.wandb = wandb
        self.run_dir = run_dir
        settings = self.settings = config.logging.wandb
        id_file = run_dir.root / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else None
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            group=settings.group,
            name=settings.name or run_dir.root.name,
            tags=list(settings.tags),
            config=config_to_dict(config),
            dir=str(run_dir.root),
            id=run_id,
            resume="allow",
            mode=wandb_mode(settings.mode),
        )
        id_file.write_text(self.run.id)
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        self.run.log({**metrics, "env_steps": env_steps})

    def record_video(self, path: Path, env_steps: int) -> None:
        self.run.log(
            {"eval/video": self.wandb.Video(str(path), format="mp4"), "env_steps": env_steps}
        )

    def close(self, exit_code: int = 0) -> None:
        best = self.run_dir.best_checkpoint
        if self.settings.log_best_checkpoint and best.is_file():
            name = re.sub(r"[^\w.-]", "-", self.run.name or self.run.id)  # W&B's allowed set
            artifact = self.wandb.Artifact(f"{name}-best", type="model")
            artifact.add_file(str(best))
            self.run.log_artifact(artifact, aliases=["best"])
        self.run.finish(exit_code=exit_code)


class Recorders:
    """Fans every record out to the configured recorders."""

    def __init__(self, recorders: list[Recorder]) -> None:
        self.recorders = recorders

    def record(self, metrics: Mapping[str, float], env_steps: int) -> None:
        for recorder in self.recorders:
            recorder.record(metrics, env_steps)

    def record_video(self, path: Path, env_steps: int) -> None:
        """An evaluation video, already saved in the run directory, to the recorders that
        show videos (W&B)."""
        for recorder in self.recorders:
            if hasattr(recorder, "record_video"):
                recorder.record_video(path, env_steps)

    def close(self, exit_code: int = 0) -> None:
        for recorder in self.recorders:
            try:
                recorder.close(exit_code)
            except Exception as error:
                logger.error(
                    "closing recorder %s failed: %s",
                    type(recorder).__name__,
                    failure_of(error).cause,
                )


def make_recorders(
    config: Config,
    run_dir: RunDirectory,
    writer: RunWriter,
    initial_env_steps: int = 0,
    time_offset_s: float = 0.0,
    extra: Sequence[Recorder] = (),
) -> Recorders:
    """The recorders the config asks for, JSONL always (written through `writer`), and
    `extra` ones (a sweep's trial reports to Ray Tune through one)."""
    recorders: list[Recorder] = [JsonlRecorder(run_dir.metrics_path, writer, time_offset_s)]
    recorders.extend(extra)
    if config.logging.console:
        recorders.append(ConsoleRecorder(config.run.total_env_steps, initial_env_steps))
    if config.logging.tensorboard:
        recorders.append(TensorboardRecorder(run_dir.root / "tensorboard"))
    if config.logging.wandb.enabled:
        recorders.append(WandbRecorder(config, run_dir))
    return Recorders(recorders)
