"""Launching and connecting: joining a Ray cluster or starting a local Ray sized to the
machine, and the pre-flight: once Ray is connected and before any actor starts, a run that
the cluster can never host is refused in one line (`check_cluster`).

An actor runs on one node, so capacity is counted per node as well as over the cluster: a
worker's `workers.cpus_per_worker` CPUs, and a learner's `learner.num_gpus` GPUs (or its
CPU, when it has none: `learner_cpus`), must fit on one node (a cluster whose total is
enough but whose every node is too small would leave the actor pending forever), and all
of them in the cluster. This is not a packing of every actor onto the nodes: a run refused
is one that can never start, and one accepted may still wait for capacity (the start and
no-worker timeouts of `faults` bound that). The experience store's memory is checked
against the largest node there now (`check_store_memory`).

An autoscaler can add nodes. What no node holds now is accepted when a node type the
autoscaler can start would hold it: the run logs that it waits for the autoscaler, and
`faults.start_timeout_s` bounds the learner's wait. Ray 2.60 gives a driver no public way to
read the autoscaler's node types, so `autoscaler_node_types` reads, most reliable first:

1. the cluster config in the GCS (`ray._private.state.state.get_cluster_config()`): each
   node group's resources and maximum count, as an autoscaler reports them (Anyscale's does;
   Ray 2.60's own autoscalers do not yet); Ray Data and Ray Train read it for the same
   question;
2. when an autoscaler reports its state to the GCS (Ray's v2 autoscaler: the default of
   `ray up` since Ray 2.50, and KubeRay's with autoscaler v2), the autoscaling config that
   `ray up` leaves for it on the head node, `~/ray_bootstrap_config.yaml` (the driver of
   `ray job submit` runs there; `ray cluster-dump` looks for it there too);
3. an autoscaler that reports its state but whose node types neither gives (KubeRay keeps
   them in the RayCluster resource, which a driver cannot read): what no node holds now is
   accepted with the same log line, since refusing would make such a cluster unusable.

Without an autoscaler's state in the GCS (a local Ray, nodes started by hand, Ray's v1
autoscaler, whose status in the GCS's key-value store a read-only monitor on every cluster
writes too) the nodes there now are all there will be. A private
reading that fails (another Ray version) counts as "not known", never as an error.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import ray
import torch
import yaml

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError, UserError
from rayrl.ray.address import AUTO, check_reachable, connect_failure, given, resolve_auto

logger = logging.getLogger(__name__)

WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""Ray's environment variable for its workers' priority (Ray's default: 15 below normal)."""


def learner_cpus(num_gpus: float) -> float:
    """The CPUs a learner asks Ray for: one when it trains on a CPU, none beside its GPUs
    (RLlib's learners do the same). A GPU learner that also asked for a CPU could be kept
    from the GPU node by workers, which SPREAD over every node: one that takes the node's
    last free CPU first (the lease requests race) would leave the learner waiting for
    `faults.start_timeout_s`. The learner's process still runs on that node's cores; Ray's
    CPUs are only its bookkeeping."""
    return 0.0 if num_gpus > 0 else 1.0


def requested_cpus(config: Config, learner_gpus: float) -> float:
    """The CPUs of every actor of the run, its learners asking for `learner_gpus` each."""
    workers, learners = config.workers, config.learner.num_learners
    return workers.num_workers * workers.cpus_per_worker + learners * learner_cpus(learner_gpus)


def connect(
    config: Config, address: str | None, dashboard: bool = False, cpus: float | None = None
) -> bool:
    """Join the Ray at `address` (or $RAY_ADDRESS; `auto` is the Ray that `ray start`
    started on this machine, never another program's own: `rayrl.ray.address`), or start a
    local one sized to this machine, or to `cpus` (default: the run's actors') where that is
    more.

    Returns True when this call connected (so the caller disconnects, and a local Ray it
    started is shut down with it); False when Ray was already initialized in this process
    (a notebook, the test suite), which is then left as it is.
    """
    if ray.is_initialized():
        return False
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
        cores = os.cpu_count() or 1
        # a learner whose GPU request is decided once Ray is up counts as one on a CPU
        learner_gpus = config.learner.num_gpus or 0.0
        needed = math.ceil(requested_cpus(config, learner_gpus) if cpus is None else cpus)
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
                _system_config=local_system_config(),
            )
        except Exception as exc:
            if LOCAL_START_TIMEOUT not in str(exc):
                raise
            raise UserError(local_start_timed_out(cores)) from None
        return True
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
    if token_auth_enabled() is False:
        logger.warning(
            "the Ray cluster at %s let this driver in without a token: it does not enforce "
            "token authentication, so anyone who can reach it can run code on it; start it "
            "with RAY_AUTH_MODE=token (cluster/README.md, Security)",
            address,
        )
    return True


LOCAL_START_TIMEOUT = "timed out during startup"
"""What Ray 2.60's `ray.init` raises (a bare `Exception`) when the local Ray it started has
not registered its raylet within 30 s, a limit fixed in Ray's code (`ray._private.node`)."""


def local_start_timed_out(cores: int) -> str:
    """The one line a run ends with when its local Ray did not start in time. Ray raises a
    bare `Exception`, shown with its traceback; on a user's machine it means the machine was
    too busy to start Ray's processes within Ray's 30 s (two busy loops on 2 cores, as
    `bench/loaded_ci.sh` makes, did not do it; two other Ray runs beside the test suite on 2
    cores, a load average of 17-26, did), which the user can act on: a `UserError`."""
    load = os.getloadavg()[0]
    return (
        f"the local Ray did not start: its raylet did not register within Ray's 30 s "
        f"(load average {load:.1f} on {cores} cores); nothing was trained. Run again when "
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

    A user who sets `RAY_worker_niceness` gets Ray's reading of it: a `_system_config`
    would override the environment. A cluster that rayrl joins keeps its own settings."""
    if WORKER_NICENESS_ENV in os.environ:
        return {}
    return {"worker_niceness": 0}


def disconnect() -> None:
    """`ray.shutdown()`, about a second sooner when this process started the local Ray.

    Ray stops the processes it started one after another, giving each a second to exit on
    SIGTERM; its autoscaler monitor never exits within that second once the GCS is gone
    (Ray 2.60: `ray.shutdown` took 1.2 s, 1.0 of them on the monitor; 0.4 s with the monitor
    gone first). The monitor only reports the cluster's state, so it is killed first here,
    as Ray would a second later (SIGTERM while the GCS lives makes it print a traceback). A
    driver that joined a cluster started nothing: Ray stops nothing there, neither does
    this. A private reading that fails leaves it all to Ray."""
    try:
        node = ray._private.worker._global_node
        processes: list[Any] = node.all_processes.get("monitor", []) if node is not None else []
        for info in processes:
            info.process.kill()
    except Exception as error:  # another Ray version: its own shutdown, at its own pace
        logger.debug("the autoscaler monitor is left to ray.shutdown: %r", error)
    ray.shutdown()


def token_auth_enabled() -> bool | None:
    """Whether this process talks to Ray with token authentication (Ray 2.52+). A driver
    without it that could connect means the cluster does not require it: a cluster that
    does refuses it. None when this Ray does not say (its private API moved)."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except Exception:  # another Ray version: no answer, no warning
        return None


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
    started (a raylet's dashboard and runtime-env agents outlived the driver, measured)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


Resources = Mapping[str, float]
"""Ray resources by name ("CPU", "GPU", "memory", ...)."""

BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"
"""Where `ray up` puts the cluster's autoscaling config on the head node."""


@dataclass(frozen=True)
class NodeType:
    """A kind of node the autoscaler can start."""

    name: str
    resources: Resources
    max_count: float
    """How many it may start (math.inf: no limit)."""


@dataclass(frozen=True)
class Capacity:
    """What the cluster has now, and what its autoscaler can add."""

    nodes: tuple[Resources, ...]
    """The resources of each node alive now."""
    node_types: tuple[NodeType, ...] | None
    """The node types the autoscaler can start: none without an autoscaler, None for an
    autoscaler whose node types are not known."""

    def fits_now(self, one: Resources, total: Resources) -> bool:
        """Whether a node holds `one` and the nodes together hold `total`, now."""
        return any(holds(node, one) for node in self.nodes) and holds(self.total(), total)

    def fits_later(self, one: Resources, total: Resources) -> bool:
        """Whether the autoscaler may make room for `one` on a node and `total` in all."""
        if self.node_types is None:
            return True
        one_fits = any(holds(node, one) for node in self.nodes) or any(
            holds(kind.resources, one) for kind in self.node_types
        )
        return one_fits and holds(self.total(with_autoscaler=True), total)

    def total(self, with_autoscaler: bool = False) -> dict[str, float]:
        """Each resource summed over the nodes (and, with the autoscaler, over as many nodes
        of each type as it may start: an upper bound)."""
        sums: dict[str, float] = {}
        for node in self.nodes:
            for key, amount in node.items():
                sums[key] = sums.get(key, 0.0) + amount
        if with_autoscaler:
            for kind in self.node_types or ():
                for key, amount in kind.resources.items():
                    if amount > 0:  # (0 x an unlimited count is no resource, not NaN)
                        sums[key] = sums.get(key, 0.0) + amount * kind.max_count
        return sums

    def largest(self, key: str) -> float:
        """The most of a resource on one node now."""
        return max((node.get(key, 0.0) for node in self.nodes), default=0.0)

    def autoscaler_note(self) -> str:
        """What a refusal says about the autoscaler, when there is one."""
        if not self.node_types:
            return ""
        names = ", ".join(kind.name for kind in self.node_types)
        return f", nor any node type its autoscaler can start ({names})"


def holds(have: Resources, need: Resources) -> bool:
    return all(have.get(key, 0.0) >= amount for key, amount in need.items() if amount > 0)


def check_cluster(config: Config, spec: EnvSpec) -> float:
    """Raise if the cluster can never host the run; returns each learner's GPU request.
    What only the autoscaler can make room for is accepted with a log line."""
    check_store_memory(config, spec)
    capacity = Capacity(alive_nodes(), autoscaler_node_types())
    num_gpus = learner_gpus(config, capacity)
    check_workers(config, capacity, num_gpus)
    check_learners(config, num_gpus, capacity)
    check_device(config, num_gpus, capacity)
    return num_gpus


def alive_nodes() -> tuple[Resources, ...]:
    """The resources of each node of the cluster alive now."""
    return tuple(node["Resources"] for node in ray.nodes() if node["Alive"])


SMALL_MACHINE_CPUS = 4
"""`run.evaluator="auto"` evaluates in the driver's process on a Ray that is this machine
alone, with at most this many cores: there, an evaluator process of its own (a Python and
Ray start-up, a cold torch import: about 3 CPU-s) is a large share of what a run costs the
machine. On more cores, a process of its own keeps evaluation off the driver's interpreter
lock; on a cluster, off the node the driver runs on."""


def evaluates_in_driver(setting: str, cores_alone: int | None) -> bool:
    """Whether the run's evaluations run in the driver's process (`run.evaluator`:
    `setting`; `cores_alone`: `cores_if_alone()`)."""
    if setting != "auto":
        return setting == "driver"
    return cores_alone is not None and cores_alone <= SMALL_MACHINE_CPUS


def cores_if_alone() -> int | None:
    """This machine's cores when the Ray cluster is this machine alone, for good: every alive
    node at the driver's node's address (one node, or several that `ray.cluster_utils` or a
    second `ray start` put on this machine: they share its cores), that no autoscaler can add
    to, joined directly (through Ray Client the driver runs elsewhere); None otherwise. Cores,
    not Ray's CPUs: a local Ray that rayrl starts declares as many CPUs as the run asks for,
    more than a small machine has."""
    if ray.util.client.ray.is_connected():
        return None
    nodes = [node for node in ray.nodes() if node["Alive"]]
    here = ray.get_runtime_context().get_node_id()
    address = next((n["NodeManagerAddress"] for n in nodes if n["NodeID"] == here), None)
    if address is None or any(node["NodeManagerAddress"] != address for node in nodes):
        return None
    if autoscaler_node_types() != ():  # asks the GCS: only once the nodes are all here
        return None
    return len(os.sched_getaffinity(0))


def check_workers(config: Config, capacity: Capacity, num_gpus: float) -> None:
    """One worker's CPUs on one node, and every actor's CPUs in the cluster (learners with
    `num_gpus` each)."""
    one = {"CPU": config.workers.cpus_per_worker}
    total = {"CPU": requested_cpus(config, num_gpus)}
    if capacity.fits_now(one, total):
        return
    if capacity.fits_later(one, total):
        logger.info(
            "the Ray cluster has no room for all the run's CPUs now: workers wait for the "
            "autoscaler to start nodes"
        )
        return
    if not any(holds(node, one) for node in capacity.nodes):
        raise ConfigError(
            f"workers.cpus_per_worker={config.workers.cpus_per_worker:g}: no Ray node has "
            f"that many CPUs for a worker (the most on one node: {capacity.largest('CPU'):g})"
            f"{capacity.autoscaler_note()}; lower it, or add a node with more CPUs"
        )
    raise ConfigError(
        f"the Ray cluster has {capacity.total()['CPU']:g} CPUs but the run asks for "
        f"{requested_cpus(config, num_gpus):g} (workers.num_workers="
        f"{config.workers.num_workers} x workers.cpus_per_worker="
        f"{config.workers.cpus_per_worker:g} + {learner_cpus(num_gpus):g} per learner)"
        f"{capacity.autoscaler_note()}; lower them or add nodes"
    )


def learner_demand(num_gpus: float, learners: int) -> tuple[Resources, Resources]:
    """What one learner needs on one node, and all learners in the cluster."""
    return {"CPU": learner_cpus(num_gpus), "GPU": num_gpus}, {"GPU": num_gpus * learners}


def learner_gpus(config: Config, capacity: Capacity, say: bool = True) -> float:
    """`learner.num_gpus`; when null, none for a `learner.device="cpu"` learner, else one GPU
    per learner if the cluster has them now, else none, which is said unless not `say` (a
    learner on a CPU is the slow part of a run)."""
    if config.learner.num_gpus is not None:
        return config.learner.num_gpus
    if config.learner.device == "cpu":  # it trains on a CPU whatever the cluster has
        return 0.0
    learners = config.learner.num_learners
    if capacity.fits_now(*learner_demand(1.0, learners)):
        return 1.0
    if config.learner.device != "cpu" and say:
        hint = ""
        if capacity.node_types and capacity.fits_later(*learner_demand(1.0, learners)):
            hint = " (set learner.num_gpus=1 to wait for the autoscaler to start a GPU node)"
        logger.warning(
            "learner.num_gpus is null and the Ray cluster has no GPU for each of the %d "
            "learner(s): the learner trains on CPU%s",
            learners,
            hint,
        )
    return 0.0


def check_learners(config: Config, num_gpus: float, capacity: Capacity) -> None:
    """One learner's resources on one node, and every learner's GPUs in the cluster."""
    learners = config.learner.num_learners
    one, total = learner_demand(num_gpus, learners)
    if capacity.fits_now(one, total):
        return
    if capacity.fits_later(one, total):
        logger.info(
            "the Ray cluster has no node with %g GPU(s) for each of %d learner(s) now: the "
            "learner waits for the autoscaler to start a GPU node (up to "
            "faults.start_timeout_s=%g s)",
            num_gpus,
            learners,
            config.faults.start_timeout_s,
        )
        return
    if not any(holds(node, one) for node in capacity.nodes):
        raise ConfigError(
            f"learner.num_gpus={num_gpus:g}: no Ray node has {num_gpus:g} GPU(s) for a "
            "learner (the most GPUs on one node: "
            f"{capacity.largest('GPU'):g}){capacity.autoscaler_note()}; lower it, or add a "
            "node with more GPUs"
        )
    raise ConfigError(
        f"learner.num_gpus={num_gpus:g} for {learners} learner(s) but the Ray cluster has "
        f"{capacity.total().get('GPU', 0.0):g} GPUs{capacity.autoscaler_note()}; use null "
        "to take one per learner only when there are enough"
    )


def check_device(config: Config, num_gpus: float, capacity: Capacity) -> None:
    """A CUDA device the learner will see: Ray shows an actor only the GPUs it was given,
    numbered from 0, and none to an actor that asked for none (the learner would fail at
    every start)."""
    device = torch.device("cpu" if config.learner.device == "auto" else config.learner.device)
    if device.type != "cuda":
        return
    if num_gpus == 0:
        raise ConfigError(
            f"learner.device={config.learner.device!r} but the learner gets no GPU from Ray "
            f"(the cluster has {capacity.total().get('GPU', 0.0):g} GPUs for "
            f"{config.learner.num_learners} learner(s), learner.num_gpus="
            f"{config.learner.num_gpus}); use 'auto' or 'cpu', or give the cluster a GPU per "
            "learner"
        )
    visible = max(1, math.ceil(num_gpus))
    if device.index is not None and device.index >= visible:
        raise ConfigError(
            f"learner.device={config.learner.device!r} but a learner sees {visible} GPU(s) "
            f"from Ray (learner.num_gpus={num_gpus:g}), numbered from 0; use 'cuda' or "
            f"'cuda:0' to 'cuda:{visible - 1}'"
        )


def autoscaler_node_types() -> tuple[NodeType, ...] | None:
    """The node types the cluster's autoscaler can start: none without an autoscaler, None
    for one whose node types are not known (see the module's docstring for the sources)."""
    reported = reported_node_types()
    if reported is not None:
        return reported
    if not autoscaler_reports_state():
        return ()
    return bootstrap_node_types(Path(BOOTSTRAP_CONFIG).expanduser())


def reported_node_types() -> tuple[NodeType, ...] | None:
    """The node groups in the GCS's cluster config; None when none was reported."""
    try:
        from ray._private.state import state

        cluster_config = state.get_cluster_config()
    except Exception:  # a private reading: any failure means "not known"
        logger.debug("no cluster config from the GCS", exc_info=True)
        return None
    if cluster_config is None or not cluster_config.node_group_configs:
        return None
    return tuple(
        NodeType(
            group.name, dict(group.resources), math.inf if group.max_count < 0 else group.max_count
        )
        for group in cluster_config.node_group_configs
        if group.max_count != 0
    )


def autoscaler_reports_state() -> bool:
    """Whether an autoscaler reports its state to the GCS (Ray's v2 autoscaler does)."""
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined, unused-ignore]  # private, no stubs
        from ray.core.generated.autoscaler_pb2 import (  # type: ignore[attr-defined, unused-ignore]
            GetClusterStatusReply,  # generated protobuf code: no stubs
        )

        client = GcsClient(address=ray.get_runtime_context().gcs_address)
        reply = GetClusterStatusReply.FromString(client.get_cluster_status())
    except Exception:  # a private reading: any failure means "not known"
        logger.debug("no autoscaler state from the GCS", exc_info=True)
        return False
    return reply.HasField("autoscaling_state")


def bootstrap_node_types(path: Path) -> tuple[NodeType, ...] | None:
    """The worker node types of a cluster-launcher config (`available_node_types`, each up
    to its `max_workers`, all up to the cluster's); None when there is no such file."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("available_node_types"), dict):
        return None
    cap = raw.get("max_workers", math.inf)
    kinds = (
        NodeType(name, dict(spec.get("resources") or {}), min(spec.get("max_workers", 0), cap))
        for name, spec in raw["available_node_types"].items()
        if isinstance(spec, dict) and name != raw.get("head_node_type")
    )
    return tuple(kind for kind in kinds if kind.max_count > 0)


def check_store_memory(config: Config, spec: EnvSpec) -> None:
    """Refuse a replay (or unroll queue) larger than any node's memory for actors: it would
    fail, or be killed by the OOM killer, only once it has filled, hours into the run. A
    replay saved with checkpoints runs on the driver's node (it writes and reads the run
    directory there): that node must hold it, and the driver must be on a node of the
    cluster (not a Ray Client: its run directory is on another machine than the store)."""
    family = ALGORITHMS[config.algorithm.name].family
    needed = family.store_memory(config, spec)
    gib = 2**30
    key = (
        "algorithm.replay.capacity"
        if family.store.namespace == "replay"
        else ("algorithm.queue_capacity")
    )
    alive = [node for node in ray.nodes() if node["Alive"]]
    if family.persists(config.algorithm):
        from ray.util.client import ray as ray_client

        if ray_client.is_connected():
            raise ConfigError(
                "algorithm.replay.save_with_checkpoint=true needs the driver on a node of the "
                "cluster (the replay is written into the run directory by an actor on the "
                "driver's node), and a Ray Client driver is not: submit the run with `ray "
                "job submit` (cluster/README.md), or set it to false"
            )
        here = ray.get_runtime_context().get_node_id()
        available = sum(n["Resources"].get("memory", 0.0) for n in alive if n["NodeID"] == here)
        if needed > available:
            raise ConfigError(
                f"the {family.store.namespace} needs about {needed / gib:.1f} GiB when full and "
                "algorithm.replay.save_with_checkpoint=true keeps it on the driver's node, "
                f"which has {available / gib:.1f} GiB of memory for actors; lower {key}, run "
                "the driver on a larger node, or set save_with_checkpoint=false"
            )
        return
    largest = max((node["Resources"].get("memory", 0.0) for node in alive), default=0.0)
    if needed > largest:
        raise ConfigError(
            f"the {family.store.namespace} needs about {needed / gib:.1f} GiB when full, but the "
            f"largest Ray node has {largest / gib:.1f} GiB of memory for actors; lower {key} "
            "or add a node with more memory"
        )
