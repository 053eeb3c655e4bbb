"""File writes that never leave a broken file behind: whole-file writes go to a temporary
file that replaces the target only once it is complete (and is removed when the write
fails), and appended lines are cut back to the last whole line when a write fails midway
(a full disk, a file-size limit). A reader therefore sees the old file or the new one, and
JSONL files stay line-parseable, whatever interrupts a write."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; it replaces `path` when the block ends
    without an error, and is removed when it raises (also on Ctrl-C)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append `line` (ending in a newline) to `path`, all of it or none of it."""
    data = memoryview(line.encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data) :]
        except BaseException:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file (metrics, evaluations), none when it does not exist."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
