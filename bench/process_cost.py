"""Where the machine's CPU goes while a command runs, by kind of process: runs the command,
reads every process's CPU time from /proc four times a second meanwhile, and prints the CPU
seconds each kind of process spent (a Ray actor's kind is its title, `ray::LearnerService`;
any other process's, its command line), with how many such processes there were. Every
process on the machine counts, the command's or not: run it on an otherwise quiet machine.

`bench/suite_cost.py` says which tests cost the most; this says what in them does: actor
start-ups, the learning itself, Ray's own processes, the local-run pool. Ray's per-process
accounting (its dashboard) sees only Ray's processes, and `time` only the command's own
children, not the processes Ray starts beside them, hence the polling. A process that lives
less than a poll's interval is missed, and one that exits loses its last quarter-second: the
total undercounts a little (Linux only).

    python bench/process_cost.py -- python -m pytest tests/integration/test_ray_runtime.py
    python bench/process_cost.py --top 40 -- python bench/suite_cost.py --out /tmp/cost.jsonl
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25


@dataclass
class Seen:
    kind: str
    cpu_s: float
    """CPU seconds (user and system) at the last reading."""
    start_cpu_s: float
    """CPU seconds when the command started (0 for a process that started after it)."""


BOOTSTRAP_KINDS = ("ray::IDLE", "default_worker.py")
"""What a Ray worker process is called before it becomes an actor: it starts as Ray's
`default_worker.py`, renames itself `ray::IDLE` once Ray is imported, and `ray::<Class>` once
it hosts an actor."""


def kind_of(pid: str) -> str:
    """A process's kind now: its command line up to its first option, on one line, shortened,
    with an actor's method left out (`ray::LearnerService.train` is `ray::LearnerService`);
    a kernel thread has no command line: its name. "" once the process has exited."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        if not command.strip():
            return f"[{Path(f'/proc/{pid}/comm').read_text().strip()}]"
    except OSError:
        return ""
    if command.startswith("ray::"):
        return command.split()[0].split(".")[0]
    return " ".join(command.split(" --")[0].split())[:90]  # one line


def better_kind(old: str, new: str) -> str:
    """The kind to keep of a process seen as `old` and now as `new`: the newest name, unless
    it says less (the process exited, or a worker went back to idle after its actor)."""
    if not new or (any(b in new for b in BOOTSTRAP_KINDS) and old):
        return old
    return new


def read_all(seen: dict[tuple[str, str], Seen], started: bool) -> None:
    """Update `seen` with every process's CPU time and kind, keyed by pid and start time (a
    pid can be reused; a process can rename itself, as Ray's workers do). `started`: whether
    the command has started (processes new after that count from 0)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        cpu_s = (int(fields[11]) + int(fields[12])) / TICKS
        # A zombie (exited, not yet reaped) has an empty command line: its name says nothing.
        kind = "" if fields[0] == "Z" else kind_of(entry.name)
        key = (entry.name, fields[19])
        if key in seen:
            seen[key].cpu_s = cpu_s
            seen[key].kind = better_kind(seen[key].kind, kind)
        else:
            seen[key] = Seen(kind, cpu_s, 0.0 if started else cpu_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="kinds of process printed")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    seen: dict[tuple[str, str], Seen] = {}
    read_all(seen, started=False)
    begun = time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        read_all(seen, started=True)
        time.sleep(POLL_S)
    read_all(seen, started=True)
    wall_s = time.monotonic() - begun
    cpu_by_kind: Counter[str] = Counter()
    count_by_kind: Counter[str] = Counter()
    for one in seen.values():
        spent = one.cpu_s - one.start_cpu_s
        if spent > 0:
            cpu_by_kind[one.kind or "(exited before it was read)"] += spent
            count_by_kind[one.kind or "(exited before it was read)"] += 1
    total = sum(cpu_by_kind.values())
    print(f"\n{' '.join(command)}: exit {process.returncode}, {wall_s:.1f} s, {total:.1f} CPU-s")
    print("\n| CPU-s | share | processes | kind |\n|---:|---:|---:|---|")
    for kind, cpu_s in cpu_by_kind.most_common(args.top):
        print(f"| {cpu_s:.1f} | {cpu_s / total:.0%} | {count_by_kind[kind]} | `{kind}` |")
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
