"""Connecting: joining a Ray cluster, or starting a local Ray sized to the machine, and
stopping it again.

A local Ray's start is interruptible (Ctrl-C, SIGTERM) without leaving Ray's processes
behind; an address that does not answer is refused before Ray spends minutes retrying it
(`rayrl.ray.address`).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import logging
import math
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import psutil
import ray

from rayrl.compat import ray_internals
from rayrl.config import Config
from rayrl.errors import ConfigError, UserError
from rayrl.host import load_average, usable_cores
from rayrl.ray.address import (
    AUTO,
    CLIENT_SCHEME,
    check_reachable,
    connect_failure,
    given,
    resolve_auto,
)
from rayrl.ray.capacity import ACTOR_MEMORY, requested_cpus

logger = logging.getLogger(__name__)

WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""Ray's environment variable for its workers' priority (Ray's default: 15 below normal)."""


class Connected(enum.IntEnum):
    """What `connect` did; false only when it did nothing."""

    ALREADY = 0
    """Ray was initialized in this process before (a notebook, the test suite): it is left
    as it is, and what it is made of is not known."""
    JOINED = 1
    """It joined a running Ray."""
    STARTED_LOCAL = 2
    """It started a local Ray of this machine alone, with no autoscaler."""


CLUSTER_EXTRA = 'pip install "rayrl[cluster]"'


def connect(
    config: Config, address: str | None, dashboard: bool = False, cpus: float | None = None
) -> Connected:
    """Join the Ray at `address` (or $RAY_ADDRESS; `auto` is the Ray that `ray start`
    started on this machine, never another program's own: `rayrl.ray.address`), or start a
    local one sized to this machine, or to `cpus` (default: the run's actors') where that is
    more.

    Returns what it did: a caller that connected (`JOINED`, `STARTED_LOCAL`) disconnects,
    and a local Ray it started is shut down with it.
    """
    if ray.is_initialized():
        return Connected.ALREADY
    source = "--address"
    from_environment = os.environ.get("RAY_ADDRESS")
    if address in (None, AUTO) and from_environment and from_environment != AUTO:
        # inside a Ray job (`ray job submit`), or a user who points every Ray program at a
        # cluster: join it rather than start a second Ray (Ray's own `auto` takes it first)
        address, source = from_environment, "RAY_ADDRESS"
        logger.info("joining the Ray cluster at RAY_ADDRESS=%s", address)
    elif address is None and from_environment == AUTO:
        address, source = AUTO, "RAY_ADDRESS"
    if address is None:
        if dashboard and importlib.util.find_spec("aiohttp") is None:
            raise UserError(f"--dashboard needs Ray's dashboard packages: {CLUSTER_EXTRA}")
        cores = usable_cores()
        # a learner whose GPU request is decided once Ray is up counts as one on a CPU
        learner_gpus = config.learner.num_gpus or 0.0
        needed = math.ceil(requested_cpus(config, learner_gpus) if cpus is None else cpus)
        check_local_size(config, needed, cores)
        if needed > cores:
            logger.info(
                "the run asks for %d CPUs and this machine has %d: starting a local Ray with "
                "%d logical CPUs (workers share cores)",
                needed,
                cores,
                needed,
            )
        try:
            _init_keeping_sigterm_handler(
                address="local",  # a new Ray even when another one runs on this machine
                num_cpus=max(cores, needed),
                include_dashboard=dashboard,
                logging_level=logging.WARNING,
                **ray_internals.system_config_argument(local_system_config()),
            )
        except Exception as exc:
            if LOCAL_START_TIMEOUT not in str(exc):
                raise
            raise UserError(local_start_timed_out(cores)) from None
        return Connected.STARTED_LOCAL
    if address.startswith(CLIENT_SCHEME) and importlib.util.find_spec("grpc") is None:
        raise UserError(
            f"{given(address, source)}: a Ray Client address needs Ray's client packages: "
            f"{CLUSTER_EXTRA}"
        )
    shown, joined = given(address, source), address
    if address == AUTO:
        address = resolve_auto(source)
        shown = given(AUTO, source, address)
        logger.info("joining the Ray that `ray start` started on this machine, at %s", address)
    check_reachable(address, source, shown=shown)
    try:
        # `auto` itself, now known to stand for the recorded address (Ray reads the record
        # first), so that Ray turns on token authentication as it does for `auto` only
        _init_keeping_sigterm_handler(address=joined, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise connect_failure(address, source, exc, shown=shown) from None
    if ray_internals.token_auth_enabled() is False:
        logger.warning(
            "the Ray cluster at %s let this driver in without a token: it does not enforce "
            "token authentication, so anyone who can reach it can run code on it; start it "
            "with RAY_AUTH_MODE=token (cluster/README.md, Security)",
            address,
        )
    return Connected.JOINED


CPUS_PER_CORE = 4
"""The most Ray CPUs a local Ray that rayrl starts declares per core of the machine (unless
`workers.oversubscribe`): actors that share cores four to one still each make progress at a
quarter of a core, within the watchdogs' default timeouts, and a run's workers are rarely
worth more; ten times the machine (a typo's extra zero) would start more processes than
it can schedule."""


def check_local_size(config: Config, needed: int, cores: int) -> None:
    """Refuse, in one line naming `workers.num_workers`, a local Ray asked for more than
    `CPUS_PER_CORE` CPUs per core of this machine, or for more actor processes than its
    available memory holds, unless `workers.oversubscribe`."""
    workers = config.workers
    if workers.oversubscribe:
        return
    limit = CPUS_PER_CORE * cores
    others = needed - workers.num_workers * workers.cpus_per_worker
    valid = max(0, math.floor((limit - others) / workers.cpus_per_worker))
    if needed > limit:
        raise ConfigError(
            f"workers.num_workers={workers.num_workers}: the run asks a local Ray for "
            f"{needed} CPUs and this machine has {cores} cores; at most {limit} "
            f"({CPUS_PER_CORE} per core) are allowed, which is workers.num_workers <= "
            f"{valid} at workers.cpus_per_worker={workers.cpus_per_worker:g}; set "
            "workers.oversubscribe=true to start it anyway, or join a cluster (--address)"
        )
    processes = workers.num_workers + config.learner.num_learners + 1  # and the store
    available = psutil.virtual_memory().available
    if processes * ACTOR_MEMORY > available:
        fits = max(0, int(available // ACTOR_MEMORY) - processes + workers.num_workers)
        raise ConfigError(
            f"workers.num_workers={workers.num_workers}: {processes} actor processes need "
            f"about {processes * ACTOR_MEMORY / 2**30:.0f} GiB and this machine has "
            f"{available / 2**30:.1f} GiB available, enough for workers.num_workers <= {fits}; "
            "set workers.oversubscribe=true to start it anyway, or join a cluster (--address)"
        )


LOCAL_START_TIMEOUT = "timed out during startup"
"""What Ray 2.60's `ray.init` raises (a bare `Exception`) when the local Ray it started has
not registered its raylet within 30 s, a limit fixed in Ray's code."""


def local_start_timed_out(cores: int) -> str:
    """The one line a run ends with when its local Ray did not start in time. Ray raises a
    bare `Exception`, shown with its traceback; on a user's machine it means the machine was
    too busy to start Ray's processes within Ray's 30 s (a load several times the machine's
    cores, not a busy program or two beside the run), which the user can act on: a
    `UserError`."""
    load = load_average()
    busy = f"load average {load:.1f} on {cores} cores" if load is not None else f"{cores} cores"
    return (
        f"the local Ray did not start: its raylet did not register within Ray's 30 s "
        f"({busy}); nothing was trained. Run again when "
        "the machine is less busy, or start Ray once (`ray start --head`) and pass --address"
    )


def local_system_config() -> dict[str, Any]:
    """The Ray settings of a local Ray that rayrl starts: its actors at the priority of the
    command that started them.

    Ray lowers every worker process's priority by 15 (`worker_niceness`), so that on a busy
    cluster node its GCS and raylet keep the CPU they need. On the user's own machine the
    actors are the work the user asked for: at nice 15 each gets about 1/28 of the share of
    any ordinary process beside it (a build, a browser, a single-process trainer), so one
    busy program slows a run several times over, while the driver, which mostly waits,
    keeps full priority. At 0 the whole run has the priority the user gave the command:
    `nice rayrl train` makes all of it yield, not the driver alone. A local Ray holds a
    handful of actors, which leave Ray's own processes their fair share.

    A user who sets `RAY_worker_niceness` gets Ray's reading of it: Ray's system config
    would override the environment. A cluster that rayrl joins keeps its own settings."""
    if WORKER_NICENESS_ENV in os.environ:
        return {}
    return {"worker_niceness": 0}


def disconnect() -> None:
    """`ray.shutdown()`, about a second sooner when this process started the local Ray.

    Ray stops the processes it started one after another, giving each a second to exit on
    SIGTERM; its autoscaler monitor never exits within that second once the GCS is gone.
    The monitor only reports the cluster's state, so it is killed first
    (`rayrl.compat.ray_internals.kill_autoscaler_monitor`), as Ray would a second later
    (SIGTERM while the GCS lives makes it print a traceback). A driver that joined a
    cluster started nothing: Ray stops nothing there, neither does this."""
    ray_internals.kill_autoscaler_monitor()
    ray.shutdown()


def _init_keeping_sigterm_handler(**kwargs: Any) -> None:
    """`ray.init`, which installs its own SIGTERM handler first thing (`sys.exit(15)`); a
    handler the caller installed before (the CLI's: stop like Ctrl-C, with a final
    checkpoint) is put back. Without one, Ray's stays.

    An interrupt while Ray starts (Ctrl-C, or SIGTERM under Ray's handler) stops what Ray
    had started of a local Ray (its agents would outlive this process). A SIGTERM is then
    handed to the caller's handler, as if Ray had not taken it: one that raises (the CLI's
    raises `KeyboardInterrupt`) stops the start with its exception; one that returns (a
    handler that only notes the request, for the caller to act on later) keeps the process
    going, so Ray is started again rather than the process ending with Ray's 15."""
    previous = signal.getsignal(signal.SIGTERM)
    main_thread = threading.current_thread() is threading.main_thread()
    callers = previous if callable(previous) and main_thread else None
    while not _init_once(callers, **kwargs):
        logger.warning(
            "SIGTERM arrived while Ray was starting and its handler let the process go on: "
            "Ray's partial start was stopped, and Ray is starting again"
        )


def _init_once(callers: Callable[[int, Any], Any] | None, **kwargs: Any) -> bool:
    """One `ray.init` under `_init_keeping_sigterm_handler`'s rules; False when a SIGTERM
    cut it short and the caller's handler returned (Ray is to be started again)."""
    starts_local = kwargs.get("address") == "local"
    before = _ray_descendants() if starts_local else set()
    try:
        ray.init(**kwargs)
    except (KeyboardInterrupt, SystemExit) as interrupt:
        if callers is not None:
            signal.signal(signal.SIGTERM, callers)
        started = _ray_descendants() - before if starts_local else set()
        try:
            with contextlib.suppress(Exception):  # a Ray stopped half-started may not stop
                ray.shutdown()
        finally:  # also when a second interrupt cuts the shutdown short
            _kill(started)
        ray_took_sigterm = isinstance(interrupt, SystemExit) and interrupt.code == signal.SIGTERM
        if callers is None or not ray_took_sigterm:
            raise
        callers(signal.SIGTERM, None)  # raises to stop the start, or returns to go on
        return False
    if callers is not None:
        signal.signal(signal.SIGTERM, callers)
    return True


RAY_PACKAGE = os.path.dirname(ray.__file__)


def _ray_descendants() -> set[psutil.Process]:
    """This process's children and theirs that are Ray's: the processes a local Ray starts
    (its GCS and raylet, binaries in Ray's package; the raylet's agents and Ray's monitors,
    Ray's Python files; workers, titled `ray::...`), not the caller's own (a notebook's, a
    data loader's)."""
    found = set()
    with contextlib.suppress(psutil.Error):
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                command = process.cmdline()
                if any(part.startswith(("ray::", RAY_PACKAGE)) for part in command):
                    found.add(process)
    return found


def _kill(processes: set[psutil.Process]) -> None:
    """Kill what a `ray.init` that was interrupted had started and `ray.shutdown` did not
    stop: interrupted while it built its node, Ray has no record of the processes it
    started (a raylet's dashboard and runtime-env agents outlive the driver)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
