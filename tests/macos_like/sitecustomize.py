"""A macOS-like `os` module on Linux: put this folder first on PYTHONPATH, and in every
Python process started with that environment (a rayrl command, the Ray it starts, each Ray
worker and actor, each Tune trial) the `os` functions and constants that macOS's Python does
not have are missing, as on a Mac: `AttributeError: module 'os' has no attribute
'sched_getaffinity'` where a Mac would say it.

    PYTHONPATH=tests/macos_like:$PYTHONPATH rayrl train

Python imports a module named `sitecustomize` at start-up (`site`), the first one found on
sys.path, before any other code of the process runs; PYTHONPATH's folders come before the
standard library's, so this one is found first. It then runs the `sitecustomize` that it
hides, if there is one further on the path (a distribution's own).

With RAYRL_MACOS_LIKE_MARKS naming a folder, each process also leaves an empty file there
named after its pid: a test's proof of which processes the names were removed in.

Only `os` (and `posix`, which `os` re-exports) is changed: `select.epoll`, `resource.prlimit`,
Linux's `socket`, `signal` and `time` constants and /proc are all still there. Imported under
another name (`tests.macos_like.sitecustomize`, as the unit tests import `LINUX_ONLY_OS_NAMES`)
the module changes nothing.
"""

from __future__ import annotations

import os
import sys

LINUX_ONLY_OS_NAMES = (
    # The names of `os` (and `posix`) that Python on Linux has and Python on macOS has not,
    # from the `os` documentation (docs.python.org/3/library/os.html, 3.11 to 3.15): those
    # marked "Availability: Linux", those marked "not macOS", and the ones it gives no
    # availability for that CPython builds only from what Linux's C library has and macOS's
    # has not (posixmodule.c's HAVE_SCHED_SETAFFINITY, HAVE_SCHED_SETSCHEDULER, ...; macOS's
    # <fcntl.h>, <sys/statvfs.h>, <dlfcn.h>). A name a Python version lacks is skipped.
    #
    # "Interface to the scheduler": macOS has sched_yield, sched_get_priority_min/max and
    # SCHED_OTHER, SCHED_FIFO and SCHED_RR, and none of these
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_getparam",
    "sched_setparam",
    "sched_rr_get_interval",
    "sched_param",  # POSIX_SPAWN_SETSCHEDPARAM is `#if 0` in macOS's <spawn.h>
    "SCHED_BATCH",
    "SCHED_IDLE",
    "SCHED_RESET_ON_FORK",
    "SCHED_DEADLINE",  # 3.14
    "SCHED_NORMAL",  # 3.14
    # "Availability: Unix, not macOS"
    "fdatasync",
    "posix_fallocate",
    "posix_fadvise",
    "POSIX_FADV_NORMAL",
    "POSIX_FADV_SEQUENTIAL",
    "POSIX_FADV_RANDOM",
    "POSIX_FADV_NOREUSE",
    "POSIX_FADV_WILLNEED",
    "POSIX_FADV_DONTNEED",
    "getresuid",
    "getresgid",
    "setresuid",
    "setresgid",
    "pipe2",  # "macOS >= 27.0": not the macOS that users have
    # "Availability: Linux"
    "pidfd_open",
    "pidfd_getfd",
    "PIDFD_NONBLOCK",
    "P_PIDFD",
    "memfd_create",
    "MFD_CLOEXEC",
    "MFD_ALLOW_SEALING",
    "MFD_HUGETLB",
    "MFD_HUGE_SHIFT",
    "MFD_HUGE_MASK",
    "MFD_HUGE_64KB",
    "MFD_HUGE_512KB",
    "MFD_HUGE_1MB",
    "MFD_HUGE_2MB",
    "MFD_HUGE_8MB",
    "MFD_HUGE_16MB",
    "MFD_HUGE_32MB",
    "MFD_HUGE_256MB",
    "MFD_HUGE_512MB",
    "MFD_HUGE_1GB",
    "MFD_HUGE_2GB",
    "MFD_HUGE_16GB",
    "eventfd",
    "eventfd_read",
    "eventfd_write",
    "EFD_CLOEXEC",
    "EFD_NONBLOCK",
    "EFD_SEMAPHORE",
    "timerfd_create",  # 3.13
    "timerfd_settime",
    "timerfd_settime_ns",
    "timerfd_gettime",
    "timerfd_gettime_ns",
    "TFD_NONBLOCK",
    "TFD_CLOEXEC",
    "TFD_TIMER_ABSTIME",
    "TFD_TIMER_CANCEL_ON_SET",
    "copy_file_range",
    "splice",
    "SPLICE_F_MOVE",
    "SPLICE_F_NONBLOCK",
    "SPLICE_F_MORE",
    "RWF_NOWAIT",  # preadv and pwritev themselves are on macOS 11 and later
    "RWF_HIPRI",
    "RWF_DSYNC",
    "RWF_SYNC",
    "RWF_APPEND",
    "RWF_DONTCACHE",
    "RWF_ATOMIC",
    "RWF_NOSIGNAL",
    "getrandom",  # macOS has getentropy
    "GRND_NONBLOCK",
    "GRND_RANDOM",
    "getxattr",  # "Linux extended attributes": "available on Linux only"
    "setxattr",
    "listxattr",
    "removexattr",
    "XATTR_SIZE_MAX",
    "XATTR_CREATE",
    "XATTR_REPLACE",
    "unshare",  # 3.12
    "setns",
    "CLONE_FILES",
    "CLONE_FS",
    "CLONE_NEWCGROUP",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWTIME",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "CLONE_SIGHAND",
    "CLONE_SYSVSEM",
    "CLONE_THREAD",
    "CLONE_VM",
    "statx",  # 3.15
    "statx_result",
    "AT_NO_AUTOMOUNT",
    "AT_STATX_FORCE_SYNC",
    "AT_STATX_DONT_SYNC",
    "AT_STATX_SYNC_AS_STAT",
    "STATX_TYPE",
    "STATX_MODE",
    "STATX_NLINK",
    "STATX_UID",
    "STATX_GID",
    "STATX_ATIME",
    "STATX_MTIME",
    "STATX_CTIME",
    "STATX_INO",
    "STATX_SIZE",
    "STATX_BLOCKS",
    "STATX_BASIC_STATS",
    "STATX_BTIME",
    "STATX_MNT_ID",
    "STATX_DIOALIGN",
    "STATX_MNT_ID_UNIQUE",
    "STATX_SUBVOL",
    "STATX_WRITE_ATOMIC",
    "STATX_DIO_READ_ALIGN",
    "ST_NODEV",  # statvfs flags: macOS has ST_RDONLY and ST_NOSUID only
    "ST_NOEXEC",
    "ST_SYNCHRONOUS",
    "ST_MANDLOCK",
    "ST_WRITE",
    "ST_APPEND",
    "ST_IMMUTABLE",
    "ST_NOATIME",
    "ST_NODIRATIME",
    "ST_RELATIME",
    # open(2) flags that macOS's <fcntl.h> does not define, and dlopen's glibc-only flag
    "O_DIRECT",
    "O_LARGEFILE",
    "O_NOATIME",
    "O_PATH",
    "O_TMPFILE",
    "O_RSYNC",
    "RTLD_DEEPBIND",
)

LINUX_ONLY_BEFORE_3_13 = ("waitid", "waitid_result")
"""On macOS from Python 3.13 only ("Changed in version 3.13: now available on macOS")."""

MARKS_ENV = "RAYRL_MACOS_LIKE_MARKS"


def removed_names() -> tuple[str, ...]:
    """The names this Python removes."""
    if sys.version_info < (3, 13):
        return LINUX_ONLY_OS_NAMES + LINUX_ONLY_BEFORE_3_13
    return LINUX_ONLY_OS_NAMES


def make_os_macos_like() -> None:
    import posix

    names = set(removed_names())
    for module in (os, posix):
        for name in names:
            module.__dict__.pop(name, None)
    # `from os import *` takes what os.__all__ lists
    os.__all__[:] = [name for name in os.__all__ if name not in names]
    # Python 3.13's os.process_cpu_count counts the affinity mask where `os` has
    # sched_getaffinity, and is os.cpu_count elsewhere (macOS): as `os` now stands
    if getattr(os, "process_cpu_count", os.cpu_count) is not os.cpu_count:
        os.process_cpu_count = os.cpu_count


def mark_this_process() -> None:
    marks = os.environ.get(MARKS_ENV)
    if marks and os.path.isdir(marks):
        try:
            with open(os.path.join(marks, str(os.getpid())), "w"):
                pass
        except OSError:  # never the reason a process fails to start
            pass


def run_the_hidden_sitecustomize() -> None:
    """The `sitecustomize` further on sys.path that this one hides, if any, run as Python
    would have run it."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec(__name__, rest)
    if spec is None or spec.loader is None:
        return
    hidden = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = hidden
    spec.loader.exec_module(hidden)


if __name__ == "sitecustomize":
    make_os_macos_like()
    mark_this_process()
    run_the_hidden_sitecustomize()
