"""Writes into the run directory that survive a flaky disk: retried, counted, and stopping
the run only when they keep failing.

A network file system that hiccups, or a disk that fills, makes a write raise `OSError`.
One failed metrics line or checkpoint is not worth losing hours of training for; many in a
row of one kind (checkpoints, the replay, metrics lines...) mean the run can no longer keep
that, so it stops (with what was written before intact: every file is replaced atomically,
and appended lines are cut back to whole lines on failure). Kinds count apart: metrics
lines that still fit must not hide checkpoints that no longer do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rayrl.errors import RunFailedError

logger = logging.getLogger(__name__)

ATTEMPTS = 3
"""Tries of one write before it counts as failed."""
RETRY_DELAY_S = 0.5
"""Wait before the second try; doubled before each later one."""


class Storage:
    """Runs the run directory's writes: `write` retries, `failed` counts a write that failed
    elsewhere (the replay saved by its actor); `max_errors` failed writes of one kind in a
    row raise `RunFailedError`."""

    def __init__(self, max_errors: int, sleep: Callable[[float], None] = time.sleep) -> None:
        self.max_errors = max_errors
        self.sleep = sleep
        self.errors_in_a_row: dict[str, int] = {}
        """Failed writes in a row, by kind."""
        self.errors = 0
        """Failed writes in this segment (the `run/storage_errors` metric)."""
        self.gave_up = False
        """The run was stopped for failed writes."""

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
                logger.warning("writing %s failed (%s); trying again", what, error)
                self.sleep(delay)
                attempt, delay = attempt + 1, delay * 2
            else:
                self.errors_in_a_row[kind] = 0
                return True

    def failed(self, kind: str, what: str, error: BaseException) -> None:
        """Count a write that failed; stop the run after `max_errors` of its kind in a row."""
        in_a_row = self.errors_in_a_row[kind] = self.errors_in_a_row.get(kind, 0) + 1
        self.errors += 1
        cause = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        if in_a_row >= self.max_errors and not self.gave_up:
            self.gave_up = True  # once: the end of the run still writes what it can
            raise RunFailedError(
                f"{in_a_row} writes of the {kind} failed in a row "
                f"(faults.max_storage_errors={self.max_errors}); the last, {what}: {cause}"
            )
        stops = "" if self.gave_up else f"; the run stops at {self.max_errors}"
        logger.error(
            "could not write %s: %s (%d failed write(s) of the %s in a row%s)",
            what,
            cause,
            in_a_row,
            kind,
            stops,
        )
