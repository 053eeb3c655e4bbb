"""The learner on a GPU against the same learner on the same machine's CPU, side by side.

For a machine with a GPU (the suite and the other benchmarks run without one). Two figures
per preset and device, measured one after the other in one sitting:
- **in-process**: rayrl's DQN learner called directly on numpy batches, no Ray
  (`learner_rate.in_process_rate`): what one update costs on that device;
- **run**: `rayrl train --config <preset>` as a user runs it (Ray runtime, a local Ray sized
  to the machine), stopped by `run.time_budget_s`, with `learner.device` set to the device:
  env steps/s and learner updates/s between the first and the last metrics row, the learner's
  busy share, and when the first metrics row came (start-up).

    python bench/gpu_learner.py --preset minatar_dqn --seconds 60 --set workers.num_workers=8
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import machine, read_metrics
from learner_rate import in_process_rate

from rayrl.presets import load_config


def device_settings(device: str) -> list[str]:
    """Overrides that put the learner on `device` (a GPU learner asks Ray for one GPU)."""
    gpus = 1 if device.startswith("cuda") else 0
    return [f"learner.device={device}", f"learner.num_gpus={gpus}"]


def run_figures(preset: str, device: str, seconds: float, extra: list[str]) -> dict:
    """Throughput of a whole `rayrl train` run of `seconds` with the learner on `device`."""
    with tempfile.TemporaryDirectory() as runs:
        overrides = [
            "logging.console=false",
            f"run.runs_dir={runs}",
            f"run.time_budget_s={seconds}",
            *device_settings(device),
            *extra,
        ]
        command = [sys.executable, "-m", "rayrl", "train", "--config", preset]
        for override in overrides:
            command += ["--set", override]
        start = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {completed.returncode}:\n{completed.stderr[-3000:]}"
            )
        (run_dir,) = [path.parent for path in Path(runs).glob("*/metrics.jsonl")]
        rows = [row for row in read_metrics(run_dir) if row.get("learner/updates")]
    if len(rows) < 2:
        raise RuntimeError(f"{preset} on {device}: fewer than two metrics rows with updates")
    first, last = rows[0], rows[-1]
    span = last["time_s"] - first["time_s"]
    return {
        "env_steps_per_s": (last["env_steps"] - first["env_steps"]) / span,
        "updates_per_s": (last["learner/updates"] - first["learner/updates"]) / span,
        "busy": statistics.median(
            row["learner/utilization"] for row in rows if "learner/utilization" in row
        ),
        "update_ms": statistics.median(
            row["learner/update_ms"] for row in rows if "learner/update_ms" in row
        ),
        "first_row_s": first["time_s"],
        "env_steps": last["env_steps"],
        "command_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help="repeatable; default minatar_dqn")
    parser.add_argument("--seconds", type=float, default=60.0, help="each run's time budget")
    parser.add_argument("--update-seconds", type=float, default=5.0, help="per in-process rate")
    parser.add_argument("--devices", default="cuda,cpu", help="comma-separated torch devices")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    devices = args.devices.split(",")
    if any(d.startswith("cuda") for d in devices) and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device: use --devices cpu")
    print(machine(), "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
    figures: dict[str, dict] = {}
    for preset in args.preset or ["minatar_dqn"]:
        for device in devices:
            key = f"{preset} {device}"
            figures[key] = {}
            config = load_config(preset, [*device_settings(device), *args.extra])
            if config.algorithm.name == "dqn":
                rate = in_process_rate(config, args.update_seconds)
                figures[key]["in_process_updates_per_s"] = rate
                print(
                    f"{key}: in-process {rate:,.0f} updates/s (batch {config.learner.batch_size})",
                    flush=True,
                )
            try:
                figures[key] |= run_figures(preset, device, args.seconds, args.extra)
            except RuntimeError as error:
                print(f"{key}: run failed: {error}", flush=True)
                continue
            f = figures[key]
            print(
                f"{key}: run {f['env_steps_per_s']:,.0f} env steps/s, "
                f"{f['updates_per_s']:,.0f} updates/s, {100 * f['busy']:.0f}% busy, "
                f"{f['update_ms']:.2f} ms/update, first row at {f['first_row_s']:.1f} s, "
                f"{f['env_steps']:,} env steps, command {f['command_s']:.1f} s",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
