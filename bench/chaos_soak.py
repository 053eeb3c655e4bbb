"""Chaos soak: a `pong_dqn` run (the real CLI, its own local Ray) while a random worker,
the learner or the replay actor is SIGKILLed every 30-90 s.

Reports the faults injected and survived (the run went on and ended on its time budget
with status 0), what each cost (transitions lost with a replay, learner updates rolled back
to the last checkpoint), whether the counters, metrics and checkpoints agree at the end
(env steps strictly increasing in the JSONL files, the last metrics row at the final
checkpoint's counters, the saved replay stamped with the final checkpoint's env steps,
every checkpoint loads, no temporary file left), and the memory of every process
from the second third of the run to the last: summed resident sizes (RSS), and summed
proportional sizes (PSS), which count Ray's shared-memory object store once rather than
once per process that touched it.

The restart limits are lifted (`faults.*_restarts`) since the soak kills far more often
than any real cluster fails; the replay is saved with every checkpoint so that a killed
replay actor is refilled.

    python bench/chaos_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from common import machine, pss_bytes, rss_bytes, run_processes, start_rayrl_train

from rayrl.checkpoint import load_checkpoint

TARGETS = {"worker": "WorkerService", "learner": "LearnerService", "replay": "ExperienceService"}


def start_run(workdir: Path, ray_tmp: Path, seconds: float, capacity: int) -> subprocess.Popen:
    overrides = [
        "logging.console=false",
        "logging.log_interval_s=5",
        "run.name=chaos",
        f"run.time_budget_s={seconds}",
        "run.total_env_steps=1000000000",
        "run.eval_interval_env_steps=25000",
        "run.eval_episodes=1",
        "run.checkpoint_interval_env_steps=10000",
        f"algorithm.replay.capacity={capacity}",
        "algorithm.replay.min_size=2048",
        "algorithm.replay.save_with_checkpoint=true",
        "faults.worker_restarts=1000",
        "faults.learner_restarts=1000",
        "faults.store_restarts=1000",
    ]
    return start_rayrl_train("pong_dqn", overrides, workdir, ray_tmp)


def training_rows(run: Path) -> list[dict]:
    """The training metrics rows of `metrics.jsonl` (evaluations are recorded there too)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "learner/updates" in row]


def check_run(run: Path) -> list[str]:
    """What does not agree at the end of the run (empty when everything does)."""
    problems = []
    rows = training_rows(run)
    for name in ("metrics.jsonl", "eval.jsonl"):
        lines = (run / name).read_text().splitlines()
        steps = [json.loads(line)["env_steps"] for line in lines]
        if steps != sorted(set(steps)):
            problems.append(f"{name}: env steps do not strictly increase")
    checkpoints = sorted((run / "checkpoints").glob("*.pt"))
    for path in checkpoints:
        load_checkpoint(path)
    final = load_checkpoint(run / "checkpoints" / "latest.pt")["counters"]
    if final["env_steps"] != rows[-1]["env_steps"]:
        problems.append(
            f"latest.pt at {final['env_steps']} env steps, metrics at {rows[-1]['env_steps']}"
        )
    with np.load(run / "checkpoints" / "replay.npz") as replay:
        stamp = int(replay["metadata_env_steps"])
    if stamp != final["env_steps"]:
        problems.append(f"replay.npz stamped {stamp} env steps, latest.pt {final['env_steps']}")
    if final["updates"] != rows[-1]["learner/updates"]:
        problems.append("latest.pt's updates differ from the last metrics row's")
    if list(run.rglob("*.tmp")):
        problems.append("temporary files left")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="chaos"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
    seconds = args.minutes * 60
    proc = start_run(workdir, ray_tmp, seconds, args.capacity)
    start = time.monotonic()
    faults: list[tuple[float, str]] = []
    memory: list[tuple[float, int, int]] = []  # seconds, summed RSS, summed PSS
    next_fault = start + rng.uniform(30, 90)
    while proc.poll() is None:
        time.sleep(5)
        found = run_processes(ray_tmp, proc.pid)
        every_pid = [p for ps in found.values() for p in ps]
        memory.append(
            (
                time.monotonic() - start,
                sum(rss_bytes(p) for p in every_pid),
                sum(pss_bytes(p) for p in every_pid),
            )
        )
        if time.monotonic() < next_fault or time.monotonic() - start > seconds - 30:
            continue
        kind = rng.choice(sorted(TARGETS))
        pids = found.get(TARGETS[kind], [])
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            faults.append((time.monotonic() - start, kind))
        next_fault = time.monotonic() + rng.uniform(30, 90)
    output = proc.stdout.read()
    shutil.rmtree(ray_tmp, ignore_errors=True)
    (workdir / "output.log").write_text(output)
    print(f"the run's output: {workdir / 'output.log'}")
    run = workdir / "runs" / "chaos"
    rows = training_rows(run)
    last = rows[-1]
    rolled_back = sum(
        max(0.0, a["learner/updates"] - b["learner/updates"]) for a, b in itertools.pairwise(rows)
    )
    stopped = next((line for line in output.splitlines() if line.startswith("stopped:")), "")
    print(f"Chaos soak, pong_dqn, {args.minutes:g} minutes, {machine()}")
    print(f"  exit status {proc.returncode}; {stopped or output[-2000:]}")
    print(
        f"  faults injected: {len(faults)} ("
        + ", ".join(f"{k} {sum(1 for _, f in faults if f == k)}" for k in sorted(TARGETS))
        + "), at s: "
        + ", ".join(f"{t:.0f} {k}" for t, k in faults)
    )
    print(
        "  restarts seen by the run: "
        + ", ".join(
            f"{key} {last.get(key, 0):.0f}"
            for key in ("worker/restarts", "learner/restarts", "replay/restarts")
        )
    )
    print(
        f"  lost: {last.get('replay/lost_transitions', 0):,.0f} transitions with killed replay "
        f"actors (refilled from the last checkpoint), {rolled_back:,.0f} learner updates rolled "
        "back to the last checkpoint"
    )
    problems = check_run(run)
    print(
        "  consistency: "
        + ("counters, metrics and checkpoints agree" if not problems else "; ".join(problems))
    )
    # a restart briefly runs the new process (importing torch) beside what remains of the
    # old one, so single samples jump: compare the medians of the run's last two thirds
    for index, label in ((1, "resident (RSS)"), (2, "proportional (PSS)")):
        middle = statistics.median(
            m[index] for m in memory if seconds / 3 <= m[0] < 2 * seconds / 3
        )
        final = statistics.median(m[index] for m in memory if m[0] >= 2 * seconds / 3)
        print(
            f"  {label} memory of all processes, median over each third: "
            f"{middle / 2**20:,.0f} MB in the second, {final / 2**20:,.0f} MB in the last "
            f"({(final - middle) / middle:+.1%})"
        )


if __name__ == "__main__":
    main()
