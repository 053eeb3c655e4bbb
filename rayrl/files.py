"""File writes that never leave a broken file behind: whole-file writes go to a temporary
file that replaces the target only once it is complete and on disk (and is removed when the
write fails), and appended lines are cut back to the last whole line when a write fails
midway (a full disk, a file-size limit). A reader therefore sees the old file or the new
one, and JSONL files stay line-parseable, whatever interrupts a write.

A failed write raises `OSError` naming the file the caller wrote (not the temporary one,
nor no file at all, as `os.write` leaves it), so that the error says which file of the run
directory could not be written."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

from rayrl.errors import UserError


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; it replaces `path` when the block ends
    without an error, and is removed when it raises (also on Ctrl-C).

    The new file is flushed to the disk before the rename and the directory after it: a
    crash right after a rename can otherwise leave an empty file, or the old one, where the
    new one was said to be."""
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            yield tmp
            sync_to_disk(tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        sync_directory(path.parent)


NO_DIRECTORY_SYNC = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF, errno.EACCES}
"""What a file system that cannot fsync a directory (some FUSE and CIFS mounts) answers."""


def sync_directory(path: Path) -> None:
    """Flush a directory's entries (a rename) to the disk where the file system can; where
    it cannot, the rename stands as the file system keeps it (the write itself succeeded)."""
    try:
        sync_to_disk(path)
    except OSError as error:
        if error.errno not in NO_DIRECTORY_SYNC:
            raise


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """Raise an `OSError` of the block as the same error (errno, strerror) of `path`."""
    try:
        yield
    except OSError as error:
        if error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error


def sync_to_disk(path: Path) -> None:
    """Flush a file's or a directory's data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, line: str) -> None:
    """Append `line` (ending in a newline) to `path`, all of it or none of it."""
    data = memoryview(line.encode())
    with naming(path):
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
    """The rows of a JSONL file (metrics, evaluations), none when it does not exist.

    A last line without its newline that does not parse is skipped: a run still writing
    the file, or killed mid-write, leaves one (`append_line` cuts a failed line back, a
    killed process cannot). A broken line anywhere else is a damaged file, refused."""
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                break  # half-written
            raise UserError(
                f"'{path}' line {number} is not a JSON row: {error.msg} at column {error.colno}"
            ) from None
    return rows
