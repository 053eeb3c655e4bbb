"""What the evaluator's process costs a small run: whole `rayrl train` commands (a fresh local
Ray each) with `run.evaluator=actor` and `run.evaluator=driver`, alternating, each timed from
its start to its exit, with the CPU seconds the whole machine spent meanwhile (every process:
the driver, Ray's own, the actors). Run it on an otherwise quiet machine; the ratios compare
runs made within a minute of each other.

    python bench/evaluator_cost.py --repeats 5                       # the suite's tiny runs
    python bench/evaluator_cost.py --config cartpole_ppo --target 475 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median_range
from suite_cost import machine_busy_s

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests
from tests.conftest import tiny_run_overrides  # the suite's tiny run

MODES = ("actor", "driver")


def run(config: str | None, overrides: list[str], runs_dir: str) -> tuple[float, float]:
    """One whole command: (wall s, machine CPU-s)."""
    command = [str(Path(sys.executable).with_name("rayrl")), "train"]
    command += ["--config", config] if config else []
    for override in ["logging.console=false", f"run.runs_dir={runs_dir}", *overrides]:
        command += ["--set", override]
    busy, start = machine_busy_s(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall, cpu = time.monotonic() - start, machine_busy_s() - busy
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cartpole_ppo")
    parser.add_argument("--target", type=float, default=None, help="stop at this return")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in MODES}
    with tempfile.TemporaryDirectory() as runs_dir:
        if args.target is None:
            overrides = tiny_run_overrides(Path(runs_dir))  # its evaluator setting is overridden
        else:
            overrides = [f"run.target_return={args.target}", "run.eval_interval_env_steps=2048"]
        for repeat in range(args.repeats):
            order = MODES if repeat % 2 == 0 else MODES[::-1]
            for mode in order:
                seed = f"run.seed={repeat}"
                wall, cpu = run(args.config, [*overrides, seed, f"run.evaluator={mode}"], runs_dir)
                figures[mode]["wall"].append(wall)
                figures[mode]["cpu"].append(cpu)
                print(f"round {repeat}: {mode:6s} {wall:6.1f} s, {cpu:6.1f} CPU-s", flush=True)
    for mode in MODES:
        wall, cpu = figures[mode]["wall"], figures[mode]["cpu"]
        print(f"{mode:6s} wall {median_range(wall)} s, CPU {median_range(cpu)} CPU-s")
    for what in ("wall", "cpu"):
        ratios = [
            d / a for d, a in zip(figures["driver"][what], figures["actor"][what], strict=True)
        ]
        print(f"driver / actor, {what}: {median_range(ratios, '{:.2f}')} (per round)")
    saved = statistics.median(figures["actor"]["cpu"]) - statistics.median(figures["driver"]["cpu"])
    print(f"median CPU-s saved per run: {saved:.1f}")


if __name__ == "__main__":
    main()
