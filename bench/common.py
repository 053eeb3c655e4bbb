"""Helpers shared by the benchmarks: busy loops beside a run, medians with ranges, resident
memory, Atari-shaped chunks, reading a run's metrics, finding a run's processes by role,
and running an earlier checkout's rayrl beside this one."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from rayrl.core import StepBatch, TransitionChunk
from rayrl.processing import NStepProcessor


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes that spin at normal priority until the block ends: a machine that
    is also doing something else."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def start_rayrl_train(
    preset: str, overrides: Sequence[str], workdir: Path, ray_tmp: Path
) -> subprocess.Popen:
    """`rayrl train --config preset --set ...` as a user runs it, in `workdir` (its runs
    under `workdir/runs`), its local Ray's files under `ray_tmp` (so that `run_processes`
    finds them); its output, stderr included, in its `stdout`."""
    command = [sys.executable, "-m", "rayrl", "train", "--config", preset]
    for override in overrides:
        command += ["--set", override]
    return subprocess.Popen(
        command,
        cwd=workdir,
        env={**os.environ, "RAY_TMPDIR": str(ray_tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def baseline_env(checkout: Path | None) -> dict[str, str] | None:
    """The environment that runs rayrl from `checkout` (a checkout of an earlier commit,
    `--baseline`): its code ahead of the installed rayrl on `PYTHONPATH`, which a local Ray's
    actors inherit. None for the installed rayrl. A path without rayrl in it is refused:
    Python would fall back to the installed rayrl without a word, and "before" would measure
    this code."""
    if checkout is None:
        return None
    root = checkout.resolve()
    if not (root / "rayrl" / "__init__.py").is_file():
        raise SystemExit(
            f"--baseline {checkout}: no rayrl/__init__.py there; pass a checkout of an "
            "earlier commit (git worktree add DIR REV)"
        )
    paths = [str(root), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def median_range(values: Sequence[float], fmt: str = "{:,.1f}") -> str:
    """ "median (min-max)" of repeated measurements."""
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def pss_bytes(pid: int | str = "self") -> int:
    """Proportional set size: a page shared by N processes counts 1/N in each, so a sum over
    processes counts Ray's shared-memory object store once (resident sizes count it once per
    process that touched it)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # exited meanwhile
        pass
    return 0


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def atari_chunks(
    envs: int, steps: int, n_step: int, stack: int, seed: int = 0
) -> Iterator[TransitionChunk]:
    """Chunks exactly as a worker makes them from an Atari-like stream (random 84x84 frames,
    an episode end every ~2,000 steps), without running an emulator."""
    rng = np.random.default_rng(seed)
    frame = (84, 84)
    processor = NStepProcessor(envs, n_step=n_step, gamma=0.99, frame_stack=stack)
    obs = np.zeros((envs, stack, *frame), dtype=np.uint8)
    obs[:, -1] = rng.integers(0, 255, size=(envs, *frame), dtype=np.uint8)
    while True:
        for _ in range(steps):
            new = rng.integers(0, 255, size=(envs, *frame), dtype=np.uint8)
            next_obs = np.concatenate([obs[:, 1:], new[:, None]], axis=1)
            ended = rng.random(envs) < 1 / 2000
            after = next_obs.copy()
            after[ended] = 0
            after[ended, -1] = rng.integers(0, 255, size=(int(ended.sum()), *frame))
            processor.process(
                StepBatch(
                    obs=obs,
                    actions=rng.integers(0, 6, size=envs),
                    rewards=np.zeros(envs, np.float32),
                    terminated=ended,
                    truncated=np.zeros(envs, bool),
                    next_obs=next_obs,
                    env_reset=ended,
                ),
                policy_version=0,
            )
            obs = after
        yield processor.flush()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def target_env_steps(runs_dir: Path, target: float) -> int | None:
    """The env steps of the first evaluation at or above `target` of the run under
    `runs_dir` (its eval.jsonl), or None when none reached it."""
    for path in Path(runs_dir).glob("*/eval.jsonl"):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["eval/return_mean"] >= target:
                return int(row["env_steps"])
    return None


def steady_rate(rows: list[dict], skip_s: float) -> float:
    """Env steps per second between the first row after `skip_s` and the last row."""
    window = [r for r in rows if r["time_s"] >= skip_s and "worker/env_steps_per_s" in r]
    if len(window) < 2:
        raise RuntimeError("run too short for a steady-state window")
    first, last = window[0], window[-1]
    return (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"])


def machine() -> str:
    import ray
    import torch

    cpus = os.cpu_count()
    return f"{cpus} CPUs, no GPU, torch {torch.__version__}, ray {ray.__version__}"


ROLES = (
    "WorkerService",
    "LearnerService",
    "ExperienceService",
    "Evaluator",
    "raylet",
    "gcs_server",
)


def run_processes(ray_tmp: Path, driver: int) -> dict[str, list[int]]:
    """Role -> pids of the processes of the run (the driver and its Ray)."""
    found: dict[str, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        pid = int(entry.name)
        if pid == driver:
            found["driver"].append(pid)
        elif str(ray_tmp) in cmdline or f"RAY_TMPDIR={ray_tmp}" in environ:
            role = next((r for r in ROLES if r in cmdline), "other ray")
            found[role].append(pid)
    return found
