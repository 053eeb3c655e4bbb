"""CPython's private names (see `rayrl.compat`): leaving the process as soon as a
command's work is done.

With torch and Ray loaded, the interpreter's own finalization (freeing every module and
object, running the extensions' destructors) takes about a second after the last atexit
handler, on top of a run that has already closed its files. Nothing a finished command
needs happens in that second, so the console script does the first two steps of the
interpreter's exit itself, in the interpreter's order, and skips the rest:

1. `threading._shutdown()`: what `Py_FinalizeEx` calls first. It stops thread pools
   (`concurrent.futures` registers its shutdown there, not with atexit) and waits for
   every non-daemon thread;
2. `atexit._run_exitfuncs()`: logging's flush, Ray's and W&B's teardown, any handler a
   user's env module registered (an error in one is printed and the next still runs);
3. the standard streams flushed, then `os._exit(code)`.

What `os._exit` skips: C-level exit handlers and the C library's stdio buffers (output
that a C extension left unflushed in a pipe), and the garbage collection of what is left.
An interrupt during these steps (a second Ctrl-C, a late SIGTERM) exits at once with 130,
as the CLI promises for a second interrupt. On a Python other than CPython or a CPython
outside `WRITTEN_FOR`, where either step is missing or fails, or with
`RAYRL_PUBLIC_API_ONLY` set, the process exits normally (`sys.exit`), a second later.

Only the console script and `python -m rayrl` do this; `rayrl.cli.main` called from Python
(a test's CliRunner, a notebook) returns or raises as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

from rayrl.compat import fell_back, refuse_if_public_only

EXIT_INTERRUPTED = 130
"""The shell's status for a process ended by Ctrl-C."""


def exit_code_of(code: object) -> int:
    """The status `sys.exit(code)` gives: None is 0, an int is itself, anything else is
    printed to stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


WRITTEN_FOR = ((3, 10), (3, 13))
"""The CPython versions whose exit runs these two steps first, in this order."""


def exit_now(code: int) -> NoReturn:
    """End the process with `code` as a normal exit would, without the interpreter's
    finalization where CPython's exit steps can be called; else a normal exit."""
    try:
        refuse_if_public_only("threading._shutdown, atexit._run_exitfuncs")
        oldest, newest = WRITTEN_FOR
        if sys.implementation.name != "cpython" or not oldest <= sys.version_info[:2] <= newest:
            raise RuntimeError(f"{sys.implementation.name} {sys.version.split()[0]}")
        shutdown_threads = threading._shutdown  # type: ignore[attr-defined]
        run_exit_handlers = atexit._run_exitfuncs
    except Exception as error:
        fell_back("CPython's exit steps", error, "a normal exit")
        sys.exit(code)
    try:
        shutdown_threads()
        run_exit_handlers()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as error:  # the steps themselves failed: what is left, the normal way
        fell_back("CPython's exit steps", error, "a normal exit")
        sys.exit(code)
    _flush_streams()
    os._exit(code)


def _flush_streams() -> None:
    """stdout and stderr, and the originals when something replaced them."""
    streams = []
    for stream in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__):
        if stream is not None and stream not in streams:
            streams.append(stream)
    for stream in streams:
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
