"""What every run directory promises its readers, checked the same way by every test that
kills, restarts or resumes a run."""

from __future__ import annotations

from pathlib import Path

from rayrl.files import read_jsonl


def env_steps_logged(run_dir: Path) -> int:
    """The highest env-step count in a run's metrics.jsonl (0 before its first row); safe to
    call while the run writes the file (a half-written last line is skipped)."""
    return max((row["env_steps"] for row in read_jsonl(Path(run_dir) / "metrics.jsonl")), default=0)


def env_steps_column(path: Path) -> list[int]:
    return [row["env_steps"] for row in read_jsonl(path)]


def assert_in_env_step_order(run_dir: Path) -> None:
    """metrics.jsonl and eval.jsonl: env steps strictly increase from row to row (each metric
    at most once per count, in order without sorting), after any kill, restart or resume."""
    for name in ("metrics.jsonl", "eval.jsonl"):
        path = Path(run_dir) / name
        if path.is_file():
            steps = env_steps_column(path)
            assert steps == sorted(set(steps)), f"{name}: {steps}"
