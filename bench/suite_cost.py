"""What each test costs the machine: the CPU seconds of the whole machine (every process:
pytest, Ray's own processes, the actors, CLI runs a test starts) during each test, beside its
wall time, summed by file, with the machine's busy share over the run.

pytest's `--durations` gives wall time only. On a machine with few cores the suite is bound
by CPU, not by waiting, and most of that CPU is spent outside pytest's process (actor start-ups
importing torch, Ray's raylets, the training itself), so wall time says little about what to
cut, and `time.process_time` in pytest sees none of it. This reads the machine's busy time from
/proc/stat around each test; run it on an otherwise quiet machine (Linux only).

    python bench/suite_cost.py                         # the whole suite
    python bench/suite_cost.py tests/integration/test_hangs.py
    python bench/suite_cost.py --report /tmp/suite_cost.jsonl   # print an earlier run's table

Runs as a pytest plugin (`-p bench.suite_cost`) of the pytest it starts; one JSON line per
test goes to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

OUT_VARIABLE = "RAYRL_SUITE_COST_OUT"
TICKS = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent


def machine_busy_s() -> float:
    """CPU seconds the machine has spent busy (all cores; not idle, not waiting on I/O)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    idle, iowait = ticks[3], ticks[4]
    return (sum(ticks) - idle - iowait) / TICKS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    """Around each test's setup, call and teardown: the machine's busy CPU-s and wall time."""
    busy, start = machine_busy_s(), time.monotonic()
    yield
    row = {
        "test": item.nodeid,
        "cpu_s": machine_busy_s() - busy,
        "wall_s": time.monotonic() - start,
    }
    with open(os.environ[OUT_VARIABLE], "a") as out:
        out.write(json.dumps(row) + "\n")


def report(rows: list[dict[str, Any]], top: int) -> str:
    cpu = sum(row["cpu_s"] for row in rows)
    wall = sum(row["wall_s"] for row in rows)
    cores = os.cpu_count() or 1
    lines = [
        f"{len(rows)} tests: {cpu:.0f} CPU-s in {wall:.0f} s of tests, the machine busy "
        f"{cpu / wall / cores:.0%} of its {cores} cores",
        "",
        "| file | tests | CPU-s | wall s |",
        "|---|---:|---:|---:|",
    ]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for row in rows:
        totals = by_file[row["test"].split("::")[0]]
        totals[0] += 1
        totals[1] += row["cpu_s"]
        totals[2] += row["wall_s"]
    for name, (count, file_cpu, file_wall) in sorted(by_file.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {name} | {count:.0f} | {file_cpu:.0f} | {file_wall:.0f} |")
    lines += ["", f"| the {top} costliest tests | CPU-s | wall s |", "|---|---:|---:|"]
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"| {row['test']} | {row['cpu_s']:.1f} | {row['wall_s']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/suite_cost.jsonl"))
    parser.add_argument("--report", type=Path, help="print the table of an earlier run's --out")
    parser.add_argument("--top", type=int, default=30)
    args, pytest_args = parser.parse_known_args()
    if args.report is not None and not args.report.is_file():
        parser.error(f"--report {args.report}: no such file (an earlier run's --out)")
    if args.report is None:
        args.out.unlink(missing_ok=True)
        command = [sys.executable, "-m", "pytest", "-p", "bench.suite_cost", *pytest_args]
        status = subprocess.call(command, cwd=REPO, env={**os.environ, OUT_VARIABLE: str(args.out)})
    else:
        args.out, status = args.report, 0
    rows = [json.loads(line) for line in args.out.read_text().splitlines()]
    print(report(rows, args.top))
    return status


if __name__ == "__main__":
    sys.exit(main())
