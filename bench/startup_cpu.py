"""Where a `rayrl train` start-up spends its CPU: the CPU seconds of every process of the run
(the driver and everything it started: Ray's own processes, the actors), from the
command's start to the first metrics row with env steps, summed by role.

On a machine with few cores the start-up is bound by CPU rather than by waiting, so what
shortens it is less work, not more overlap; this says which processes do the work. CPU
seconds are far less sensitive than wall time to what else runs on the machine, but they
still grow under load: compare runs from one sitting.

    python bench/startup_cpu.py                      # the default run
    python bench/startup_cpu.py --config cartpole_ppo
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
ROLES = (
    "WorkerService",
    "LearnerService",
    "ExperienceService",
    "Evaluator",
    "DashboardAgent",
    "RuntimeEnvAgent",
    "log_monitor",
    "autoscaler/_private/monitor.py",
    "raylet",
    "gcs_server",
    "ray::IDLE",
    "rayrl train",
)


def processes() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds including reaped children, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # exited meanwhile
            continue
        name, fields = stat.split("(", 1)[1].rsplit(")", 1)
        fields = fields.split()
        cpu = sum(int(tick) for tick in fields[11:15]) / TICKS
        found[int(entry.name)] = (int(fields[1]), cpu, command or name)
    return found


def descendants(root: int) -> dict[int, tuple[float, str]]:
    """`root` and every process below it: pid -> (CPU seconds, command line)."""
    table = processes()
    children = defaultdict(list)
    for pid, (parent, _, _) in table.items():
        children[parent].append(pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            tree[pid] = table[pid][1:]
        todo.extend(children[pid])
    return tree


def role(command: str) -> str:
    """A process's role: an actor's class, a Ray process's name, or for another Python
    process the script it runs. `ray::IDLE` is a Ray worker process whose actor has not
    set its title yet (still constructing), or one that Ray started in advance."""
    known = next((name for name in ROLES if name in command), None)
    if known is not None:
        return known
    scripts = [part for part in command.split() if part.endswith(".py")]
    return "/".join(Path(scripts[0]).parts[-3:]) if scripts else command[:50]


def sampled(metrics: Path) -> bool:
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    return any(json.loads(line).get("env_steps", 0) > 0 for line in lines if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="a preset (default: the default run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:
        overrides = [
            f"run.runs_dir={runs}",
            "run.name=startup",
            "logging.console=false",
            "logging.log_interval_s=0.2",
        ]
        command = [str(Path(sys.executable).with_name("rayrl")), "train"]
        command += ["--config", args.config] if args.config else []
        command += [part for override in overrides for part in ("--set", override)]
        started = time.monotonic()
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        metrics = Path(runs) / "startup" / "metrics.jsonl"
        tree: dict[int, tuple[float, str]] = {}
        while run.poll() is None and not sampled(metrics):
            tree = descendants(run.pid)  # the last view before the first chunk
            time.sleep(0.1)
        first_row = time.monotonic() - started
        output = run.communicate()[0].decode()
    if run.returncode != 0:
        raise SystemExit(f"the run failed:\n{output}")
    by_role: dict[str, list[float]] = defaultdict(list)
    for cpu, command_line in tree.values():
        by_role[role(command_line)].append(cpu)
    print(f"first metrics row with env steps {first_row:.1f} s after the command started")
    for line in output.splitlines():
        if "start-up:" in line:
            print(line.strip())
    print("CPU seconds by process until then:")
    for name, cpus in sorted(by_role.items(), key=lambda item: -sum(item[1])):
        print(f"  {sum(cpus):6.2f}  {len(cpus)} x {name}")
    print(f"  {sum(sum(cpus) for cpus in by_role.values()):6.2f}  in all")


if __name__ == "__main__":
    main()
