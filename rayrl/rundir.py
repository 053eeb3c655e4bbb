"""The run directory: everything a run leaves behind, in one place.

RUN_DIR/
  config.yaml          resolved config (also embedded in every checkpoint)
  metrics.jsonl        one JSON object per record: env_steps, time_s, namespaced metrics
  eval.jsonl           one JSON object per evaluation
  checkpoints/
    latest.pt          the newest checkpoint (what --resume continues from)
    best.pt            the checkpoint with the best evaluation return
    step_<N>.pt        periodic checkpoints, the newest `run.keep_checkpoints` kept
    replay.npz         the buffer, when replay.save_with_checkpoint is set
  videos/
    eval-<N>.mp4       evaluation episodes, when logging.video_interval_evals is set
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rayrl.config import Config, config_to_yaml, read_source
from rayrl.errors import UserError


class RunDirectory:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def create(cls, config: Config, label: str) -> RunDirectory:
        """A new, empty run directory under `config.run.runs_dir`."""
        base = Path(config.run.runs_dir)
        name = config.run.name or f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        root = base / name
        suffix = 1
        while root.exists() and config.run.name is None:
            suffix += 1
            root = base / f"{name}-{suffix}"
        if root.exists() and any(root.iterdir()):
            raise UserError(
                f"run directory '{root}' already exists and is not empty; choose another "
                f"run.name, or continue it with --resume {root}"
            )
        root.mkdir(parents=True, exist_ok=True)
        run = cls(root)
        run.write_config(config)
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDirectory:
        """An existing run directory (for --resume and evaluation)."""
        root = Path(path)
        if not (root / "config.yaml").is_file():
            raise UserError(f"'{root}' is not a rayrl run directory (no config.yaml in it)")
        return cls(root)

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
        tmp = self.config_path.with_name(".config.yaml.tmp")
        tmp.write_text(config_to_yaml(config))
        tmp.replace(self.config_path)

    def save_video(self, video: bytes, env_steps: int) -> Path:
        path = self.root / "videos" / f"eval-{env_steps:012d}.mp4"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(video)
        return path

    def append_eval(self, record: dict[str, Any]) -> None:
        with open(self.eval_path, "a") as f:
            f.write(json_line(record))


def json_line(record: dict[str, Any]) -> str:
    """`record` as one line of strict JSON: a NaN or infinite number is written as null (the
    value was there and was not finite), since JSON has no such numbers."""
    finite = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()
    }
    return json.dumps(finite, allow_nan=False) + "\n"
