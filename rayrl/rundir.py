"""The run directory: everything a run leaves behind, in one place.

RUN_DIR/
  .lock                held (flock) by the process that trains in the directory
  config.yaml          resolved config (also embedded in every checkpoint)
  metrics.jsonl        one JSON object per row: env_steps (the run's clock, strictly
                       increasing from row to row), time_s, namespaced metrics
  eval.jsonl           one JSON object per evaluation, env_steps of the weights evaluated
                       (strictly increasing)
  checkpoints/
    latest.pt          the newest checkpoint (what --resume continues from)
    best.pt            the checkpoint with the best evaluation return
    step_<N>.pt        periodic checkpoints, the newest `run.keep_checkpoints` kept
    replay.npz         the buffer, when replay.save_with_checkpoint is set
  videos/
    eval-<N>.mp4       evaluation episodes, when logging.video_interval_evals is set
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import IO, Any

from rayrl.config import Config, config_to_yaml, read_source
from rayrl.errors import UserError
from rayrl.files import append_line, atomic_path, read_jsonl
from rayrl.host import try_lock

logger = logging.getLogger(__name__)

LOCK = ".lock"


class RunDirectory:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock: IO[str] | None = None
        self.created = False
        """Made by this process for a new run (`create`)."""

    @classmethod
    def create(cls, config: Config, label: str) -> RunDirectory:
        """A new, empty run directory under `config.run.runs_dir`, held by this process.

        An unnamed run takes `<label>-<time>` (with `-2`, `-3`... when taken) by creating the
        directory, which only one process can do, so two runs started in the same second
        get two directories. A named run (`run.name`) may reuse an empty directory."""
        base = Path(config.run.runs_dir)
        base.mkdir(parents=True, exist_ok=True)
        if config.run.name is not None:
            root = base / config.run.name
            root.mkdir(exist_ok=True)
        else:
            name = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
            root, suffix = base / name, 1
            while True:
                try:
                    root.mkdir()
                    break
                except FileExistsError:
                    suffix += 1
                    root = base / f"{name}-{suffix}"
        run = cls(root)
        run.lock()
        try:
            if any(path.name != LOCK for path in root.iterdir()):
                raise UserError(
                    f"run directory '{root}' already exists and is not empty; choose another "
                    f"run.name, or continue it with --resume {root}"
                )
            run.created = True
            run.write_config(config)
        except BaseException:
            run.remove_if_unused()  # stopped while it wrote its config: nothing is left
            run.release()
            raise
        return run

    def remove_if_unused(self) -> None:
        """Remove the directory that `create` made for a run refused by a pre-flight check
        or stopped before it wrote anything, if nothing but its config and lock is in it: such
        a run leaves nothing behind."""
        unused = {LOCK, self.config_path.name}
        if self.created and all(path.name in unused for path in self.root.iterdir()):
            # the config goes while the lock is still held: a --resume-if-exists that
            # takes the lock next finds no run there, not a run that loses its config
            self.config_path.unlink(missing_ok=True)
            self.release()
            (self.root / LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.root.rmdir()

    @classmethod
    def open(cls, path: str | Path) -> RunDirectory:
        """An existing run directory (for --resume and evaluation)."""
        root = Path(path)
        if not (root / "config.yaml").is_file():
            raise UserError(f"'{root}' is not a rayrl run directory (no config.yaml in it)")
        return cls(root)

    def lock(self) -> None:
        """Hold the directory for this process until `release` (or the process ends), so
        that a second run or a second --resume cannot write into it at the same time."""
        handle = open(self.root / LOCK, "a+")  # noqa: SIM115 -- held for the run
        try:
            taken = try_lock(handle)
        except OSError as error:  # a filesystem without locks (NFS)
            logger.warning(
                "could not lock run directory %s (%s); nothing stops a second process "
                "from writing into it",
                self.root,
                error,
            )
            handle.close()
            return
        if not taken:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise UserError(
                f"run directory '{self.root}' is in use by another rayrl process (pid "
                f"{holder}); wait for it to end, or stop it"
            ) from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle

    def release(self) -> None:
        """Let go of the directory (see `lock`)."""
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def cut_back(self, env_steps: int) -> None:
        """Go back to the checkpoint at `env_steps` that a resumed run continues from: drop
        the rows recorded from that count on (metrics.jsonl's `env_steps`, eval.jsonl's
        `recorded_at_env_steps`: the run's clock when a row was written, so that both files
        drop the same evaluations; the resumed run records from that count again), and any
        line a killed process left half-written. A run started again from the beginning
        (`env_steps` 0) keeps nothing. Each file is replaced atomically."""
        keep = {
            self.metrics_path: lambda row: row.get("env_steps", 0) < env_steps,
            self.eval_path: lambda row: (
                row.get("recorded_at_env_steps", -1) < env_steps
                and row.get("env_steps", 0) <= env_steps
                and env_steps > 0
            ),
        }
        for path, kept_row in keep.items():
            if not path.is_file():
                continue
            kept, dropped = [], 0
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    dropped += 1
                    continue
                if kept_row(row):
                    kept.append(line + "\n")
                else:
                    dropped += 1
            if dropped:
                with atomic_path(path) as tmp:
                    tmp.write_text("".join(kept))
                logger.info(
                    "%s: %d rows from %d env steps on dropped (the run goes on from there)",
                    path.name,
                    dropped,
                    env_steps,
                )

    def last_evaluated_env_steps(self) -> int | None:
        """The env-step count of the weights that eval.jsonl evaluated last, if any."""
        rows = read_jsonl(self.eval_path)
        return int(rows[-1]["env_steps"]) if rows else None

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def eval_path(self) -> Path:
        return self.root / "eval.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def latest_checkpoint(self) -> Path:
        return self.checkpoints / "latest.pt"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "best.pt"

    @property
    def replay_path(self) -> Path:
        return self.checkpoints / "replay.npz"

    def periodic_checkpoint(self, env_steps: int) -> Path:
        return self.checkpoints / f"step_{env_steps:012d}.pt"

    def periodic_checkpoints(self) -> list[Path]:
        return sorted(self.checkpoints.glob("step_*.pt"))

    def raw_config(self) -> dict[str, Any]:
        return read_source(self.config_path)

    def write_config(self, config: Config) -> None:
        with atomic_path(self.config_path) as tmp:
            tmp.write_text(config_to_yaml(config))

    def video_path(self, env_steps: int) -> Path:
        return self.root / "videos" / f"eval-{env_steps:012d}.mp4"

    def save_video(self, video: bytes, path: Path) -> None:
        with atomic_path(path) as tmp:
            tmp.write_bytes(video)

    def append_eval(self, record: dict[str, Any]) -> None:
        append_line(self.eval_path, json_line(record))


def json_line(record: dict[str, Any]) -> str:
    """`record` as one line of strict JSON: a NaN or infinite number is written as null (the
    value was there and was not finite), since JSON has no such numbers."""
    finite = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()
    }
    return json.dumps(finite, allow_nan=False) + "\n"
