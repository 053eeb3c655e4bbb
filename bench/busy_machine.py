"""rayrl on a busy machine: one preset's whole `rayrl train` (the CLI, its own local Ray)
alone and beside N busy loops at normal priority, one after the other, with its exit
status, wall time and what its watchdogs replaced; with `--stop-worker-after S`, a rollout
worker is also stopped with SIGSTOP S seconds into each run (as a frozen process is left:
it neither dies nor answers) S seconds after the run's first metrics row, and must be
replaced and the run finish.

A watchdog that counts wall-clock seconds takes a starved actor for a hung one; rayrl's
count the seconds an actor could run (`rayrl.ray.watchdog`), and the wall clock's for a
stopped process. So a run beside busy loops should replace nothing, take about as much
longer as its share of the cores is smaller, and replace the stopped worker within its
`workers.sample_timeout_s` on the wall clock.

    python bench/busy_machine.py                       # minatar_ppo, 200k env steps, 0 and 4 loops
    python bench/busy_machine.py --busy 0 4 --stop-worker-after 20 \\
        --set workers.sample_timeout_s=10
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import busy_loops, machine, read_metrics, run_processes, start_rayrl_train

COUNTS = ("worker/hangs", "worker/restarts", "learner/hangs", "replay/hangs", "eval/failures")
"""What the watchdogs did, from the run's last metrics row."""


def stop_a_worker(
    ray_tmp: Path, metrics: Path, driver: subprocess.Popen, after_s: float, stopped: list[int]
) -> None:
    """From a thread: SIGSTOP one of the run's workers `after_s` seconds after its first
    metrics row (its workers have started by then: a worker stopped in its start is judged
    by `faults.start_timeout_s`)."""
    while driver.poll() is None and not metrics.is_file():
        time.sleep(0.5)
    deadline = time.monotonic() + after_s
    while driver.poll() is None:
        workers = run_processes(ray_tmp, driver.pid).get("WorkerService", [])
        if workers and time.monotonic() >= deadline:
            os.kill(min(workers), signal.SIGSTOP)
            stopped.append(min(workers))
            return
        time.sleep(0.5)


def one_run(args: argparse.Namespace, busy: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="busy"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    run_dir = workdir / "runs" / "busy"
    overrides = [
        f"run.total_env_steps={args.env_steps}",
        "run.name=busy",
        "logging.console=false",
        *args.set,
    ]
    stopped: list[int] = []
    with busy_loops(busy):
        start = time.monotonic()
        driver = start_rayrl_train(args.preset, overrides, workdir, ray_tmp)
        if args.stop_worker_after is not None:
            threading.Thread(
                target=stop_a_worker,
                args=(ray_tmp, run_dir / "metrics.jsonl", driver, args.stop_worker_after, stopped),
                daemon=True,
            ).start()
        output, _ = driver.communicate()
        wall = time.monotonic() - start
    for pid in stopped:  # Ray kills it once replaced; make sure
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    rows = [r for r in read_metrics(run_dir) if "learner/updates" in r] if run_dir.is_dir() else []
    last = rows[-1] if rows else {}
    replaced = re.findall(r"worker \d+ [a-z ]+ for (\d+) s, (\d+) s it could run", output)
    (workdir / "output.log").write_text(output)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return {
        "busy": busy,
        "exit": driver.returncode,
        "wall_s": wall,
        "env_steps": last.get("env_steps", 0),
        "stopped": len(stopped),
        "replaced_after": [f"{w} s ({c} s it could run)" for w, c in replaced],
        **{name: last.get(name, 0) for name in COUNTS},
        "log": str(workdir / "output.log"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="minatar_ppo")
    parser.add_argument("--env-steps", type=int, default=200_000)
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 4], help="busy loops per run")
    parser.add_argument("--stop-worker-after", type=float, default=None)
    parser.add_argument("--set", action="append", default=[], help="an override, as rayrl's")
    args = parser.parse_args()
    print(f"{machine()}; {args.preset}, {args.env_steps} env steps, overrides {args.set}")
    results = [one_run(args, busy) for busy in args.busy]
    idle = next((r["wall_s"] for r in results if r["busy"] == 0), None)
    print("| busy loops | exit | wall s | x alone | env steps | " + " | ".join(COUNTS) + " |")
    print("|---:|---:|---:|---:|---:|" + "---:|" * len(COUNTS))
    for r in results:
        ratio = f"{r['wall_s'] / idle:.2f}x" if idle else "-"
        counts = " | ".join(f"{r[name]:g}" for name in COUNTS)
        print(
            f"| {r['busy']} | {r['exit']} | {r['wall_s']:.1f} | {ratio} | {r['env_steps']:,} "
            f"| {counts} |"
        )
    for r in results:
        if r["stopped"]:
            print(f"{r['busy']} busy loops: worker stopped, replaced after {r['replaced_after']}")
        print(f"{r['busy']} busy loops: output in {r['log']}")


if __name__ == "__main__":
    main()
