"""Writes into the run directory that survive a flaky disk: retried, counted, and stopping
the run only when they keep failing.

A network file system that hiccups, or a disk that fills, makes a write raise `OSError`
(`rayrl.files` and `rayrl.checkpoint` see to it that every failed write does, naming its
file), which is reported in plain words: which file, and why (`cause_of`).
One failed metrics line or checkpoint is not worth losing hours of training for; many in a
row of one kind (checkpoints, the replay, metrics lines...) mean the run can no longer keep
that, so it stops (with what was written before intact: every file is replaced atomically,
and appended lines are cut back to whole lines on failure). Kinds count apart: metrics
lines that still fit must not hide checkpoints that no longer do.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

from rayrl.errors import RunFailedError

logger = logging.getLogger(__name__)

ATTEMPTS = 3
"""Tries of one write before it counts as failed."""
RETRY_DELAY_S = 0.5
"""Wait before the second try; doubled before each later one."""


class RunWriter:
    """Runs the run directory's writes: `write` retries, `failed` counts a write that failed
    elsewhere (the replay saved by its actor); `max_errors` failed writes of one kind in a
    row raise `RunFailedError`."""

    def __init__(self, max_errors: int, sleep: Callable[[float], None] = time.sleep) -> None:
        self.max_errors = max_errors
        self.sleep = sleep
        self.errors_in_a_row: dict[str, int] = {}
        """Failed writes in a row, by kind."""
        self.errors = 0
        """Failed writes in this segment (the `run/write_errors` metric)."""
        self.gave_up = False
        """The run was stopped for failed writes."""
        self.ending = False
        """The run is ending (`end`): failures are counted and said, not raised."""

    def write(self, kind: str, what: str, action: Callable[[], object]) -> bool:
        """`action()` (writing `what`, of `kind`), tried `ATTEMPTS` times on `OSError`;
        whether it succeeded."""
        attempt, delay = 1, RETRY_DELAY_S
        while True:
            try:
                action()
            except OSError as error:
                if attempt == ATTEMPTS:
                    self.failed(kind, what, error)
                    return False
                logger.warning("writing %s failed (%s); trying again", what, cause_of(error))
                self.sleep(delay)
                attempt, delay = attempt + 1, delay * 2
            else:
                self.errors_in_a_row[kind] = 0
                return True

    def end(self) -> None:
        """The run ends from here on: a failed write no longer stops it (which would skip
        the final checkpoint); the end says what it could not save."""
        self.ending = True

    def succeeded(self, kind: str) -> None:
        """Count a write of `kind` that succeeded elsewhere (the replay saved by its actor):
        the failures of that kind are no longer in a row."""
        self.errors_in_a_row[kind] = 0

    def failed(self, kind: str, what: str, error: BaseException) -> None:
        """Count a write that failed; stop the run after `max_errors` of its kind in a row."""
        in_a_row = self.errors_in_a_row[kind] = self.errors_in_a_row.get(kind, 0) + 1
        self.errors += 1
        cause = cause_of(error)
        if in_a_row >= self.max_errors and not self.gave_up and not self.ending:
            self.gave_up = True  # once: the end of the run still writes what it can
            raise RunFailedError(
                f"{in_a_row} writes of the {kind} failed in a row "
                f"(faults.max_write_errors={self.max_errors}); the last, {what}: {cause}"
            )
        stops = "" if self.gave_up or self.ending else f"; the run stops at {self.max_errors}"
        logger.error(
            "could not write %s: %s (%d failed write(s) of the %s in a row%s)",
            what,
            cause,
            in_a_row,
            kind,
            stops,
        )


CAUSES = {
    errno.ENOSPC: "No space left on the device holding {path}",
    errno.EDQUOT: "No space left on the device holding {path} (the disk quota is used up)",
    errno.EFBIG: (
        "File too large: {path} would pass the file-size limit (ulimit -f) or the largest "
        "file of its file system"
    ),
    errno.EROFS: "Read-only file system: {path} cannot be written",
    errno.EACCES: "Permission denied: {path} cannot be written",
    errno.EPERM: "Permission denied: {path} cannot be written",
}
"""What a failed write's errno means for the run directory, in plain words."""


def cause_of(error: BaseException) -> str:
    """Why a write failed, in one line naming the file: the OS's reason in plain words
    (not the errno, nor the internals of the library that wrote)."""
    os_error = os_error_of(error)
    if os_error is None:
        text = str(error).strip()
        return text.splitlines()[-1] if text else repr(error)
    path = os_error.filename if os_error.filename is not None else "the file"
    template = CAUSES.get(os_error.errno) if os_error.errno is not None else None
    return f"{os_error.strerror}: {path}" if template is None else template.format(path=path)


def os_error_of(error: BaseException) -> OSError | None:
    """The `OSError` (with an errno) behind `error`: itself, or the one a Ray task raised
    (the `cause` of the error a failed save of the replay actor comes back as)."""
    for candidate in (error, getattr(error, "cause", None)):
        if isinstance(candidate, OSError) and candidate.errno is not None:
            return candidate
    return None
