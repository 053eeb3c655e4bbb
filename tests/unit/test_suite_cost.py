"""bench/suite_cost.py: one row per test from a real pytest run, and the table summed by file
and ordered by CPU seconds. What to cut from the suite is chosen from this table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, bench_script


@pytest.fixture(scope="module")
def suite_cost():
    with bench_script("suite_cost") as script:
        yield script


def test_the_plugin_writes_a_row_per_test_with_the_cpu_it_cost(suite_cost, tmp_path):
    tests = tmp_path / "test_two.py"
    tests.write_text(
        "import time\n"
        "def test_spins():\n"
        "    end = time.process_time() + 0.3\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "def test_sleeps():\n"
        "    time.sleep(0.3)\n"
    )
    out = tmp_path / "cost.jsonl"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cost", str(tests)],
        cwd=REPO,
        env={**os.environ, suite_cost.OUT_VARIABLE: str(out)},
        check=True,
        capture_output=True,
    )
    written = [json.loads(line) for line in out.read_text().splitlines()]
    rows = {row["test"].split("::")[1]: row for row in written}
    assert set(rows) == {"test_spins", "test_sleeps"}
    assert rows["test_spins"]["cpu_s"] >= 0.25  # the machine's busy time covers the spin
    assert rows["test_sleeps"]["wall_s"] >= 0.3


def test_the_table_sums_by_file_and_puts_the_costliest_first(suite_cost):
    rows = [
        {"test": "tests/a.py::cheap", "cpu_s": 1.0, "wall_s": 1.0},
        {"test": "tests/b.py::dear", "cpu_s": 8.0, "wall_s": 5.0},
        {"test": "tests/a.py::middling", "cpu_s": 3.0, "wall_s": 2.0},
    ]
    table = suite_cost.report(rows, top=2).splitlines()
    cores = os.cpu_count() or 1
    assert table[0] == (
        f"3 tests: 12 CPU-s in 8 s of tests, the machine busy {12 / 8 / cores:.0%} of its "
        f"{cores} cores"
    )
    files = [line for line in table if line.startswith("| tests/") and "::" not in line]
    assert files == ["| tests/b.py | 1 | 8 | 5 |", "| tests/a.py | 2 | 4 | 3 |"]
    listed = [line.split(" | ")[0] for line in table if "::" in line]
    assert listed == ["| tests/b.py::dear", "| tests/a.py::middling"]


def test_a_missing_report_file_is_one_line_naming_the_option(tmp_path):
    missing = tmp_path / "never-written.jsonl"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "suite_cost.py"), "--report", str(missing)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert f"--report {missing}: no such file" in done.stderr
    assert "Traceback" not in done.stderr
