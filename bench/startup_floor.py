"""A run's fixed cost against Ray's floor for the run's shape, side by side.

- **floor**: a fresh Python process that starts a local Ray (`ray.init` as rayrl starts
  one: as many CPUs as the machine or the run asks for, no dashboard unless `--dashboard`,
  Ray's workers at the command's priority) and then as many actors as the run has before
  its first chunk (its workers, learners and store; the evaluator starts after it), each
  importing torch in its constructor, all created at once; timed from the script's first
  line to the first actor's answer and to the last one's. Nothing of rayrl runs in it: it
  is what any Ray program of this shape pays before doing any work.
- **rayrl**: `rayrl train --config PRESET` as a user runs it (`--set` shortens the run),
  its `startup/total_s` from `metrics.jsonl`: from its `train` command's first line (after
  the CLI's own imports, about 0.1 s) to the first chunk of experience, split into the
  phases `rayrl.run_metrics.STARTUP_PHASES` names (set-up, Ray's start, the actors' start,
  the first chunk).

The gap is rayrl's start-up above the floor's every-actor-ready: the floor waits for every
actor, rayrl's first chunk for its first worker (which on a small machine starts beside
the others, so the two end close together). Both clocks start after the Python
interpreter's own start, which both pay alike. Rounds alternate which goes first; each
figure is the median over rounds, min-max in brackets, and the gap is the median of the
rounds' differences. Run it on a quiet machine.

    python bench/startup_floor.py --repeats 5                          # the default run
    python bench/startup_floor.py --preset cartpole_ppo --repeats 5
    python bench/startup_floor.py --dashboard --repeats 5              # both with Ray's dashboard
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import machine, median_range, read_metrics

from rayrl.host import usable_cores
from rayrl.presets import load_config
from rayrl.ray.capacity import requested_cpus
from rayrl.run_metrics import STARTUP_PHASES

FLOOR_SCRIPT = """
import time
started = time.time()
import json, logging, os, sys
import ray

actors, cpus, dashboard = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"


@ray.remote(num_cpus=0)
class ImportsTorch:
    def __init__(self):
        import torch  # noqa: F401

    def ready(self):
        return True


# as rayrl.ray.connect.local_system_config: Ray's workers at the command's priority
niceness = {} if "RAY_worker_niceness" in os.environ else {"worker_niceness": 0}
ray.init(
    address="local",
    num_cpus=cpus,
    include_dashboard=dashboard,
    logging_level=logging.WARNING,
    _system_config=niceness,
)
ray_ready = time.time()
answers = [actor.ready.remote() for actor in [ImportsTorch.remote() for _ in range(actors)]]
ray.wait(answers, num_returns=1)
first = time.time()
ray.get(answers)
done = time.time()
seconds = {"ray_s": ray_ready, "first_s": first, "total_s": done}
print(json.dumps({key: end - started for key, end in seconds.items()}))
ray.shutdown()
"""
"""The floor's whole program: Ray, then the actors, each importing torch."""


@dataclass(frozen=True)
class Shape:
    """What a run has started by its first chunk: its actors (workers, learners and the
    store; an evaluator, where the run has one of its own, starts after the first chunk),
    and the CPUs its local Ray declares."""

    actors: int
    cpus: int


def run_shape(preset: str, overrides: list[str]) -> Shape:
    """The actors the preset's run has started by its first chunk, and its local Ray's
    CPUs on this machine, by rayrl's own rules."""
    config = load_config(preset, overrides)
    cores = usable_cores()
    actors = config.workers.num_workers + config.learner.num_learners + 1  # and the store
    learner_gpus = config.learner.num_gpus or 0.0  # as rayrl.ray.connect sizes a local Ray
    return Shape(actors=actors, cpus=max(cores, math.ceil(requested_cpus(config, learner_gpus))))


def time_floor(shape: Shape, dashboard: bool) -> dict[str, float]:
    """One floor: its seconds to Ray's start (`ray_s`), to the first actor ready (`first_s`)
    and to every actor ready (`total_s`)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            FLOOR_SCRIPT,
            str(shape.actors),
            str(shape.cpus),
            str(int(dashboard)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the floor failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_rayrl(preset: str, overrides: list[str], dashboard: bool) -> dict[str, float]:
    """One `rayrl train`: its start-up phases and `total`, seconds (`startup/*_s`)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "rayrl", "train", "--config", preset]
        command += ["--dashboard"] if dashboard else []
        for override in [*overrides, f"run.runs_dir={tmp}", "logging.console=false"]:
            command += ["--set", override]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        # its exit status may say something of the run's end (a warning), not of its start
        runs = list(Path(tmp).iterdir())
        rows = read_metrics(runs[0]) if len(runs) == 1 else []
        if not any("startup/total_s" in row for row in rows):
            raise RuntimeError(
                f"rayrl train recorded no start-up ({done.returncode}): {done.stderr[-2000:]}"
            )
        return startup_of(rows)


def startup_of(rows: list[dict]) -> dict[str, float]:
    """The start-up phases and `total` of a run, from its metrics rows (the first with them)."""
    row = next(row for row in rows if "startup/total_s" in row)
    return {key: row[f"startup/{key}_s"] for key in (*STARTUP_PHASES, "total")}


def gaps(rayrl: list[dict[str, float]], floor: list[dict[str, float]]) -> list[float]:
    """Each round's rayrl start-up above its floor, seconds."""
    return [ours["total"] - theirs["total_s"] for ours, theirs in zip(rayrl, floor, strict=True)]


def report(shape: Shape, rayrl: list[dict[str, float]], floor: list[dict[str, float]]) -> str:
    lines = [
        f"floor ({shape.actors} actors importing torch, a local Ray of {shape.cpus} CPUs): "
        f"Ray started in {median_range([f['ray_s'] for f in floor], '{:.2f}')} s, the first "
        f"actor ready in {median_range([f['first_s'] for f in floor], '{:.2f}')} s, every "
        f"actor in {median_range([f['total_s'] for f in floor], '{:.2f}')} s",
        "rayrl, command start to the first chunk: "
        f"{median_range([r['total'] for r in rayrl], '{:.2f}')} s ("
        + ", ".join(
            f"{phase} {statistics.median(r[phase] for r in rayrl):.2f}" for phase in STARTUP_PHASES
        )
        + ")",
        f"rayrl above the floor: {median_range(gaps(rayrl, floor), '{:+.2f}')} s "
        "(target: at most +1.5 s)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="cartpole_dqn")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=["run.total_env_steps=2000"],
        help="a config override of the rayrl run (default: a 2,000 env-step run)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dashboard", action="store_true", help="Ray's dashboard on, in both")
    args = parser.parse_args()
    shape = run_shape(args.preset, args.overrides)
    print(f"machine: {machine()}; {os.cpu_count()} cores; preset {args.preset}")
    rayrl: list[dict[str, float]] = []
    floor: list[dict[str, float]] = []
    for round_ in range(args.repeats):
        pair = [
            lambda: floor.append(time_floor(shape, args.dashboard)),
            lambda: rayrl.append(time_rayrl(args.preset, args.overrides, args.dashboard)),
        ]
        for timed in pair if round_ % 2 == 0 else reversed(pair):
            timed()
        print(
            f"round {round_ + 1}: floor {floor[-1]['total_s']:.2f} s, "
            f"rayrl {rayrl[-1]['total']:.2f} s",
            flush=True,
        )
    print(report(shape, rayrl, floor))


if __name__ == "__main__":
    main()
