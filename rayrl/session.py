"""What both runtimes share around the training loop: counters, the evaluation, checkpoint
and logging schedules, evaluations and the best checkpoint, metrics and run statistics.

The local runtime and the Ray driver differ only in how they get chunks, updates and
evaluations; everything they decide from those lives here and in `rayrl.run_lifecycle`, once.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rayrl.checkpoint import save_checkpoint
from rayrl.config import Config, config_to_dict
from rayrl.contract import StoreKind
from rayrl.core import EvalResult, ModelInfo, StoreStats
from rayrl.errors import Failure, UserError
from rayrl.recorders import Recorders
from rayrl.replay.store import saved_replay_problem
from rayrl.run_metrics import RunMetrics
from rayrl.run_writer import RunWriter
from rayrl.rundir import RunDirectory

logger = logging.getLogger(__name__)


@dataclass
class Counters:
    """Progress that a checkpoint keeps and a resumed run continues from."""

    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    evaluations: int = 0
    elapsed_s: float = 0.0
    """Wall time of the run's earlier segments (before a resume)."""
    best_eval_return: float = -math.inf

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Counters:
        known = {k: data[k] for k in asdict(cls()) if k in data}
        return cls(**known)


def weights_as_tensors(info: ModelInfo) -> dict[str, Any]:
    return {
        "version": info.version,
        "weights": {
            k: torch.from_numpy(np.require(v, requirements=("C", "W")))
            for k, v in info.weights.items()
        },
    }


class TrainingSession:
    def __init__(
        self,
        config: Config,
        run_dir: RunDirectory,
        recorders: Recorders,
        counters: Counters,
        started_at: float,
        store: StoreKind,
        writer: RunWriter | None = None,
        open_recorders: Callable[[], Recorders] | None = None,
    ) -> None:
        """`writer` runs the writes into the run directory (the recorders' too);
        `open_recorders()`, when given, makes the recorders once the run begins (`begin`),
        in place of `recorders`: a run refused before it begins starts no W&B run and writes
        no TensorBoard files."""
        self.config = config
        self.writer = writer if writer is not None else RunWriter(config.faults.max_write_errors)
        self.run_dir = run_dir
        self.recorders = recorders
        self._open_recorders = open_recorders
        self.counters = counters
        self.started_at = started_at
        self.metrics = RunMetrics(config.workers.num_workers, store, started_at)
        self._startup_recorded = False
        run = config.run
        self.next_eval = (counters.env_steps // run.eval_interval_env_steps + 1) * (
            run.eval_interval_env_steps
        )
        self.next_checkpoint = (counters.env_steps // run.checkpoint_interval_env_steps + 1) * (
            run.checkpoint_interval_env_steps
        )
        self._next_log = time.perf_counter() + config.logging.log_interval_s
        self.target_reached_s: float | None = None
        self.last_eval: EvalResult | None = None
        self.evaluations: list[dict[str, float]] = []
        self.placement: dict[str, dict[str, str]] = {}
        self.learner_digests: list[str] = []
        self.failure: Failure | None = None
        """The error the run stopped on, if any."""
        self.evaluated_env_steps: int | None = None
        """The env-step count of the weights evaluated last (see `begin`)."""
        self.saved_env_steps: int | None = (
            counters.env_steps if run_dir.latest_checkpoint.is_file() else None
        )
        """The env-step count of `latest.pt` on disk: the checkpoint the run resumed from,
        then the newest this segment wrote."""
        self.end_problems: list[str] = []
        """What the end of the run could not save besides `latest.pt`, one line each."""

    def begin(self) -> None:
        """The pre-flight checks passed and training begins: save the run's config and cut
        its metrics files back to the checkpoint it continues from. Nothing is written into
        the run directory before (the recorders hold their rows until they are recorded), so
        a run refused by a check leaves a resumed run's directory as it was."""
        try:
            self.run_dir.write_config(self.config)
            self.run_dir.cut_back(self.counters.env_steps)
        except OSError as error:
            raise UserError(
                f"cannot write into the run directory {self.run_dir.root}: "
                f"{error.strerror or error}"
            ) from None
        self.evaluated_env_steps = self.run_dir.last_evaluated_env_steps()
        interval = self.config.run.eval_interval_env_steps
        due = self.counters.env_steps // interval * interval
        evaluated = self.evaluated_env_steps
        if due > 0 and (evaluated is None or evaluated < due):
            # the evaluation due by the checkpoint's count was recorded at or after that
            # count, and is cut back with it (or never written: a sweep's trial paused in its
            # report): made again after the first round
            self.next_eval = self.counters.env_steps
        if self._open_recorders is not None:
            self.recorders = self._open_recorders()

    # ---- time ------------------------------------------------------------------------------

    @property
    def wall_s(self) -> float:
        """Seconds since this segment started (process start, Ray's start included)."""
        return time.time() - self.started_at

    # ---- schedules -------------------------------------------------------------------------

    def eval_due(self) -> bool:
        return self.counters.env_steps >= self.next_eval

    def checkpoint_due(self) -> bool:
        return self.counters.env_steps >= self.next_checkpoint

    # ---- events ----------------------------------------------------------------------------

    def log_due(self) -> bool:
        return time.perf_counter() >= self._next_log

    def log_if_due(self, store: StoreStats | None = None, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now < self._next_log:
            return
        self._next_log = now + self.config.logging.log_interval_s
        metrics = self.metrics.interval_metrics(store)
        metrics["learner/updates"] = float(self.counters.updates)  # the run's, across resumes
        metrics["run/wall_s"] = self.counters.elapsed_s + self.wall_s
        metrics["run/write_errors"] = float(self.writer.errors)
        startup = self.metrics.startup()
        if startup and not self._startup_recorded:  # once, in the first row after it
            self._startup_recorded = True
            metrics.update({f"startup/{key}_s": value for key, value in startup.items()})
        self.recorders.record(metrics, self.counters.env_steps)

    def eval_started(self) -> None:
        """Move the schedule on when an evaluation is launched."""
        interval = self.config.run.eval_interval_env_steps
        self.next_eval = (self.counters.env_steps // interval + 1) * interval

    def checkpoint_started(self) -> None:
        """Move the schedule on when a periodic checkpoint is requested."""
        interval = self.config.run.checkpoint_interval_env_steps
        self.next_checkpoint = (self.counters.env_steps // interval + 1) * interval

    def video_due(self) -> bool:
        """Whether the evaluation about to start should record a video."""
        interval = self.config.logging.video_interval_evals
        return interval is not None and self.counters.evaluations % interval == 0

    def record_eval(self, result: EvalResult, evaluated_env_steps: int) -> bool:
        """Record an evaluation of the weights at `evaluated_env_steps`; True if it is the
        best so far. Its metrics row is stamped with the run's clock (`counters.env_steps`,
        now: the evaluation may have run while training went on), so that metrics.jsonl stays
        in env-step order, and says which weights it evaluated in `eval/env_steps`; eval.jsonl
        and the video (its file and its W&B entry) are stamped with the evaluated weights' count."""
        self.last_eval = result
        self.evaluated_env_steps = evaluated_env_steps
        self.counters.evaluations += 1
        metrics = result.metrics()
        metrics["eval/policy_version"] = float(result.policy_version)
        self.recorders.record(
            {**metrics, "eval/env_steps": evaluated_env_steps}, self.counters.env_steps
        )
        if result.video is not None:
            path = self.run_dir.video_path(evaluated_env_steps)
            save = functools.partial(self.run_dir.save_video, result.video, path)
            if self.writer.write("videos", f"the video {path.name}", save):
                self.recorders.record_video(path, evaluated_env_steps)
        record = {
            "env_steps": evaluated_env_steps,
            "recorded_at_env_steps": self.counters.env_steps,
            "wall_s": round(self.wall_s, 3),
            **metrics,
        }
        self.evaluations.append(record)
        append = functools.partial(self.run_dir.append_eval, record)
        self.writer.write("evaluations", "a line of eval.jsonl", append)
        target = self.config.run.target_return
        if target is not None and result.mean >= target and self.target_reached_s is None:
            self.target_reached_s = self.wall_s
            logger.info("evaluation return %.1f reached the target %.1f", result.mean, target)
        improved = result.mean > self.counters.best_eval_return
        if improved:
            self.counters.best_eval_return = result.mean
        return improved

    def evaluated_now(self) -> bool:
        """Whether the newest evaluation (this segment's, or the last in eval.jsonl) is of the
        weights at the current env-step count: a final evaluation would repeat it, and write
        a second row at that count into eval.jsonl. (An evaluation of older weights that
        ended at this count does not count: the final one is still made, and shares that
        count's row of metrics.jsonl with it, its values winning; eval.jsonl keeps both.)"""
        return self.evaluated_env_steps == self.counters.env_steps

    def refill_from(self, path: Path) -> bool:
        """Whether the replay saved at `path` goes with the checkpoint the run continues
        from (`saved_env_steps`); when it does not, one warning line says why and the
        replay starts empty."""
        if self.saved_env_steps is None:
            return False  # started again from the beginning: whatever is there is older
        problem = saved_replay_problem(path, self.saved_env_steps)
        if problem is not None:
            logger.warning("%s not used: %s; the replay starts empty", path, problem)
        return problem is None

    def replay_not_saved(self, cause: str) -> None:
        """Say in one line, and keep for the exit status, that the replay asked for beside
        the final checkpoint was not saved, and what is on disk instead."""
        on_disk = "an earlier one" if self.run_dir.replay_path.is_file() else "none"
        message = (
            f"the replay was not saved with the final checkpoint ({cause}); {on_disk} is on disk"
        )
        logger.error("%s", message)
        self.end_problems.append(message)

    def save_checkpoint(
        self,
        learner_state: dict[str, Any],
        policy: ModelInfo,
        *,
        best: bool = False,
        periodic: bool = False,
        env_steps: int | None = None,
    ) -> None:
        """Write latest.pt (and best.pt / a periodic step checkpoint when asked), unless the
        weights are not finite: the checkpoints saved before are kept, never replaced or
        rotated away by broken ones. Writes go through `writer` (retried; a failed one
        leaves the file before it in place and rotates nothing away). `env_steps` is the
        count the learner's state was asked for at (default: now), which the replay saved
        beside it is stamped with."""
        env_steps = self.counters.env_steps if env_steps is None else env_steps
        if not all(np.isfinite(w).all() for w in policy.weights.values()):
            logger.error(
                "checkpoint at %d env steps not saved: the weights are not finite; the "
                "checkpoints saved before are kept",
                env_steps,
            )
            return
        counters = asdict(self.counters)
        counters["env_steps"] = env_steps
        counters["elapsed_s"] = self.counters.elapsed_s + self.wall_s
        payload: dict[str, Any] = {
            "algorithm": self.config.algorithm.name,
            "learner": learner_state,
            "policy": weights_as_tensors(policy),
            "counters": counters,
            "config": config_to_dict(self.config),
        }
        targets = [self.run_dir.best_checkpoint] if best else [self.run_dir.latest_checkpoint]
        if periodic:
            targets.append(self.run_dir.periodic_checkpoint(env_steps))
        saved = [
            path
            for path in targets
            if self.writer.write(
                "checkpoints",
                f"the checkpoint {path.name}",
                functools.partial(save_checkpoint, path, **payload),
            )
        ]
        if periodic and len(saved) == len(targets):
            for old in self.run_dir.periodic_checkpoints()[: -self.config.run.keep_checkpoints]:
                old.unlink(missing_ok=True)
        if self.run_dir.latest_checkpoint in saved:
            self.saved_env_steps = env_steps
        if saved:
            logger.info("checkpoint saved at %d env steps: %s", env_steps, saved)
