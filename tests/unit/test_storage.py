"""Writes into the run directory: retried, counted, never half-done, and stopping the run
only when they keep failing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rayrl.errors import RunFailedError
from rayrl.files import atomic_path
from rayrl.storage import ATTEMPTS, Storage


class Flaky:
    """An action that raises `OSError` its first `failures` times."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(28, "No space left on device")


def test_a_write_is_retried_and_a_success_resets_the_count():
    storage = Storage(max_errors=3, sleep=lambda s: None)
    assert not storage.write("metrics", "a line", Flaky(ATTEMPTS))
    assert storage.errors_in_a_row == {"metrics": 1}
    flaky = Flaky(ATTEMPTS - 1)
    assert storage.write("metrics", "a line", flaky)
    assert flaky.calls == ATTEMPTS
    assert storage.errors_in_a_row == {"metrics": 0}
    assert storage.errors == 1


def test_failed_writes_of_one_kind_in_a_row_stop_the_run_naming_the_last():
    storage = Storage(max_errors=2, sleep=lambda s: None)
    assert not storage.write("checkpoints", "the checkpoint step_1.pt", Flaky(99))
    # metrics lines that still fit do not hide checkpoints that no longer do
    assert storage.write("metrics", "a line of metrics.jsonl", Flaky(0))
    with pytest.raises(
        RunFailedError, match=r"2 writes of the checkpoints .* latest\.pt: .*No space"
    ):
        storage.write("checkpoints", "the checkpoint latest.pt", Flaky(99))


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "latest.pt"
    path.write_text("old")

    def write_half() -> None:
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_half()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_a_line_that_does_not_fit_the_file_size_limit_leaves_whole_lines(tmp_path):
    """A real limit (RLIMIT_FSIZE, as a full disk): the line that would cross it is cut
    back, and every line in the file parses."""
    path = tmp_path / "metrics.jsonl"
    script = textwrap.dedent(
        f"""
        import resource, signal
        from pathlib import Path
        from rayrl.files import append_line
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        written = 0
        try:
            for i in range(1000):
                line = '{{"env_steps": %d, "pad": "%s"}}\\n' % (i, "x" * 37)
                append_line(Path({str(path)!r}), line)
                written += 1
        except OSError as error:
            print(written, error.errno)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    written, errno = map(int, done.stdout.split())
    assert errno == 27  # EFBIG
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == written
    assert all(line.endswith("}\n") for line in lines)
