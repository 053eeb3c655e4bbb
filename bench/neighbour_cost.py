"""Does work on the other core slow the learner's update? The bare DQN update of a preset
(`learner_rate.bare_update`, one torch thread) pinned to CPU 0, timed alone and beside a
neighbour pinned to CPU 1, in interleaved rounds so that the machine's drift hits each
alike: a spinning Python loop (a busy worker), and a second bare update (a process that
competes for the caches and memory bandwidth as a learner does).

If the update is as fast beside a neighbour as alone, the other core's work in a run is
not what slows rayrl's learner below the bare update (`bench/learner_rate.py`). Linux only
(CPU affinity).

    python bench/neighbour_cost.py --preset minatar_dqn --rounds 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import machine
from learner_rate import bare_update, played_batches

from rayrl.presets import load_config

BENCH = Path(__file__).resolve().parent
WARMUP_UPDATES = 50
SETTLE_S = 8.0
"""How long a neighbour runs before the timing starts (its imports and warm-up)."""


def neighbours(preset: str) -> dict[str, list[str] | None]:
    second_update = (
        f"import sys; sys.path.insert(0, {str(BENCH)!r}); import torch; "
        "torch.set_num_threads(1); from learner_rate import bare_update, played_batches; "
        f"from rayrl.presets import load_config; c = load_config({preset!r}); "
        "u = bare_update(c, played_batches(c))\nwhile True: u()"
    )
    return {
        "alone": None,
        "beside a spinning loop": [sys.executable, "-c", "while True: pass"],
        "beside a second update": [sys.executable, "-c", second_update],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="minatar_dqn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("neighbour_cost.py pins processes to cores: Linux only")
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {0})
    config = load_config(args.preset)
    update = bare_update(config, played_batches(config))
    print(machine(), flush=True)
    for round_index in range(args.rounds):
        for name, command in neighbours(args.preset).items():
            process = None
            if command is not None:
                process = subprocess.Popen(command, preexec_fn=lambda: os.sched_setaffinity(0, {1}))
                time.sleep(SETTLE_S)
            for _ in range(WARMUP_UPDATES):
                update()
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                update()
                count += 1
            rate = count / (time.perf_counter() - start)
            if process is not None:
                process.kill()
                process.wait()
            print(f"round {round_index}: {name}: {rate:.0f} updates/s", flush=True)


if __name__ == "__main__":
    main()
