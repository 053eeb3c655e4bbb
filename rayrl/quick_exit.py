"""Leaving the process as soon as a command's work is done.

With torch and Ray loaded, the interpreter's own finalization (freeing every module and
object, running the extensions' destructors) takes about a second after the last atexit
handler, on top of a run that has already closed its files: `rayrl train` measured 1.2 s
from its last atexit handler to the process' exit on a 2-core machine. Nothing a finished
command needs happens in that second, so the console script ends the way the interpreter
would, minus that part: it waits for the threads the interpreter waits for, runs the atexit
handlers (logging's flush, Ray's, W&B's, any a user's env module registered), flushes the
standard streams, and exits with `os._exit`.

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


def exit_code_of(code: object) -> int:
    """The status `sys.exit(code)` gives: None is 0, an int is itself, anything else is
    printed to stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_now(code: int) -> NoReturn:
    """End the process with `code` as a normal exit would, without the interpreter's
    finalization."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # what the interpreter runs at exit (a private name, in every 3.x)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
    os._exit(code)
