"""Writes into the run directory: retried, counted, never half-done, and stopping the run
only when they keep failing."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ray.exceptions import RayTaskError

from rayrl.checkpoint import load_checkpoint
from rayrl.errors import RunFailedError, UserError
from rayrl.files import atomic_path, read_jsonl
from rayrl.run_writer import ATTEMPTS, RunWriter


class Flaky:
    """An action that raises `OSError` its first `failures` times."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(28, "No space left on device")


def test_a_write_is_retried_and_a_success_resets_the_count():
    writer = RunWriter(max_errors=3, sleep=lambda s: None)
    assert not writer.write("metrics", "a line", Flaky(ATTEMPTS))
    assert writer.errors_in_a_row == {"metrics": 1}
    flaky = Flaky(ATTEMPTS - 1)
    assert writer.write("metrics", "a line", flaky)
    assert flaky.calls == ATTEMPTS
    assert writer.errors_in_a_row == {"metrics": 0}
    assert writer.errors == 1


def test_failed_writes_of_one_kind_in_a_row_stop_the_run_naming_the_last():
    writer = RunWriter(max_errors=2, sleep=lambda s: None)
    assert not writer.write("checkpoints", "the checkpoint step_1.pt", Flaky(99))
    # metrics lines that still fit do not hide checkpoints that no longer do
    assert writer.write("metrics", "a line of metrics.jsonl", Flaky(0))
    with pytest.raises(
        RunFailedError, match=r"2 writes of the checkpoints .* latest\.pt: .*No space"
    ):
        writer.write("checkpoints", "the checkpoint latest.pt", Flaky(99))


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


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "No space left on the device holding {path}"),
        (errno.EDQUOT, "No space left on the device holding {path} (the disk quota is used up)"),
        (errno.EFBIG, "File too large: {path} would pass the file-size limit (ulimit -f)"),
        (errno.EROFS, "Read-only file system: {path} cannot be written"),
        (errno.EACCES, "Permission denied: {path} cannot be written"),
    ],
)
def test_a_failed_write_is_said_in_plain_words_naming_the_file(tmp_path, code, words):
    """The OS's error as `os.write` raises it (no file named) inside an atomic write: the
    run stops on a line naming the file written (not its temporary file) and the cause."""
    path = tmp_path / "checkpoints" / "latest.pt"

    def write() -> None:
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise OSError(code, os.strerror(code))

    writer = RunWriter(max_errors=1, sleep=lambda s: None)
    with pytest.raises(RunFailedError) as stopped:
        writer.write("checkpoints", "the checkpoint latest.pt", write)
    assert f"the last, the checkpoint latest.pt: {words.format(path=path)}" in str(stopped.value)
    assert [p.name for p in path.parent.iterdir()] == []


def test_a_save_that_failed_in_the_replay_actor_is_said_in_plain_words(caplog):
    """A failed save of the replay actor comes back from Ray as a `RayTaskError` (an
    `OSError` without an errno, whose `cause` is the actor's error)."""
    path = "/runs/full/checkpoints/replay.npz"
    cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    error = RayTaskError("save", "Traceback: ...", cause).as_instanceof_cause()
    with caplog.at_level(logging.ERROR, logger="rayrl.run_writer"):
        RunWriter(max_errors=3).failed("replay", f"the replay to {path}", error)
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"could not write the replay to {path}: No space left on the device holding {path} ("
    )


def test_checkpoints_and_the_replay_past_a_file_size_limit_fail_with_the_os_error(tmp_path):
    """A real limit (RLIMIT_FSIZE) crossed at many points of a checkpoint and of a saved
    replay: every failed save raises the OS's `OSError` (EFBIG) naming the file, never a
    serializer's own error (torch.save into a file says "unexpected pos"), and what is
    left is the last save that fitted, whole."""
    script = textwrap.dedent(
        f"""
        import json, resource
        from pathlib import Path
        import numpy as np, torch
        from rayrl.checkpoint import save_checkpoint
        from rayrl.core import TransitionChunk
        from rayrl.replay import UniformReplay

        folder = Path({str(tmp_path)!r})
        replay = UniformReplay(5000, 5000, seed=0, stacked=False)
        idx = np.arange(2000, dtype=np.int32)[:, None]
        replay.add(TransitionChunk(
            frames=np.random.default_rng(0).random((2001, 8), dtype=np.float32),
            obs_idx=idx, actions=np.zeros(2000, dtype=np.int64),
            rewards=np.ones(2000, dtype=np.float32), discounts=np.ones(2000, dtype=np.float32),
            next_obs_idx=idx + 1, policy_version=0,
        ))
        saves = {{
            "latest.pt": lambda path: save_checkpoint(
                path, algorithm="dqn", learner={{"w": torch.ones(200, 200)}},
                policy={{"version": 1, "weights": {{}}}}, counters={{}}, config={{}},
            ),
            "replay.npz": replay.save,
        }}
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        results = []
        for limit in range(1000, 220_000, 7919):
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
            for name, save in saves.items():
                try:
                    save(folder / name)
                    results.append([name, "saved", None, None])
                except Exception as error:
                    results.append([name, repr(error), getattr(error, "errno", None),
                                    getattr(error, "filename", None)])
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        print(json.dumps(results))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    results = json.loads(done.stdout)
    for name in ("latest.pt", "replay.npz"):
        failed = [r for r in results if r[0] == name and r[1] != "saved"]
        assert len(failed) > 10, results
        for _, error, code, filename in failed:
            assert error.startswith("OSError(27,"), error
            assert code == errno.EFBIG
            assert filename == str(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt", "replay.npz"]
    load_checkpoint(tmp_path / "latest.pt")
    np.load(tmp_path / "replay.npz")["frames"]


def test_a_half_written_last_line_of_a_jsonl_file_is_skipped(tmp_path):
    """A run still writing its metrics, or killed mid-write, leaves a last line without
    its newline: the rows before it are read (`rayrl plot` draws a running run)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"env_steps": 1}\n\n{"env_steps": 2}\n{"env_steps": 3, "worker/epi')
    assert read_jsonl(path) == [{"env_steps": 1}, {"env_steps": 2}]


@pytest.mark.parametrize("last", ['{"env_steps": 3}', "", '{"env_steps": 3}\n'])
def test_a_broken_line_of_a_jsonl_file_is_refused_naming_it(tmp_path, last):
    """A broken whole line (ended by a newline) is damage, not a write under way."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"env_steps": 1}\n{"env_steps": 2, "worker/epi\n' + last)
    with pytest.raises(UserError, match=rf"'{path}' line 2 is not a JSON row: "):
        read_jsonl(path)


def test_once_the_run_ends_failed_writes_are_counted_and_said_not_raised(caplog):
    """The end of a run writes what it can: a save that reaches the limit there must not
    skip the final checkpoint."""
    writer = RunWriter(max_errors=1, sleep=lambda s: None)
    writer.end()
    assert not writer.write("replay", "the replay", Flaky(ATTEMPTS))
    assert writer.errors == 1
    assert "could not write the replay" in caplog.text
    writer.succeeded("replay")
    assert writer.errors_in_a_row == {"replay": 0}
