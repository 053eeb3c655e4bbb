"""Memory soak: resident memory of every process of a Pong run with a fast sampler and a
slow learner, sampled over `--minutes` (default 10).

The run is the real CLI (`rayrl train --config pong_dqn`) in its own process and local Ray;
the replay ratio is left unlimited (`algorithm.replay.samples_per_insert=null`) so that the workers
run as fast as they can while the CPU learner crawls, the situation in which unbounded
queues grow. The buffer holds `--capacity` transitions, so it is full after the first
minutes; from then on every process must stay flat.

    python bench/memory_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, rss_bytes, run_processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="soak"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rr", dir="/tmp"))
    seconds = args.minutes * 60
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rayrl.cli",
            "train",
            "--config",
            "pong_dqn",
            "--set",
            "logging.console=false",
            "--set",
            f"run.time_budget_s={seconds}",
            "--set",
            "run.total_env_steps=1000000000",
            "--set",
            "run.eval_interval_env_steps=1000000000",
            "--set",
            "run.eval_episodes=1",
            "--set",
            "run.checkpoint_interval_env_steps=1000000000",
            "--set",
            f"algorithm.replay.capacity={args.capacity}",
            "--set",
            "algorithm.replay.min_size=2048",
            "--set",
            "algorithm.replay.samples_per_insert=null",
            "--set",
            "learner.batch_size=32",
        ],
        cwd=workdir,
        env={**os.environ, "RAY_TMPDIR": str(ray_tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    samples: list[tuple[float, dict[str, int]]] = []
    start = time.monotonic()
    while proc.poll() is None:
        time.sleep(args.every)
        by_role = {
            role: sum(rss_bytes(pid) for pid in pids)
            for role, pids in run_processes(ray_tmp, proc.pid).items()
        }
        if by_role:
            samples.append((time.monotonic() - start, by_role))
    output = proc.stdout.read()
    shutil.rmtree(ray_tmp, ignore_errors=True)
    steps = [line for line in output.splitlines() if line.startswith("stopped:")]
    print(
        f"Pong, 2 workers x 8 envs, replay capacity {args.capacity:,}, unlimited replay ratio, "
        f"{machine()}; {args.minutes:g} minutes: {steps[0] if steps else output[-2000:]}"
    )
    fill = next((i for i, (t, _) in enumerate(samples) if t >= seconds / 5), 0)
    roles = sorted({role for _, by_role in samples for role in by_role})
    print(
        f"  resident MB per role at {samples[fill][0]:.0f} s (buffer full), at the end "
        f"({samples[-2][0]:.0f} s), and the change:"
    )
    for role in [*roles, "all"]:

        def total(by_role, role=role):
            return sum(by_role.values()) if role == "all" else by_role.get(role, 0)

        first, last = total(samples[fill][1]) / 2**20, total(samples[-2][1]) / 2**20
        print(f"  {role:>15}: {first:8.0f} -> {last:8.0f} MB ({last - first:+.0f})")
    print(
        "  every sample (s: total MB):",
        ", ".join(f"{t:.0f}: {sum(b.values()) / 2**20:.0f}" for t, b in samples),
    )


if __name__ == "__main__":
    main()
