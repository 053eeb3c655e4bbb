"""The pre-flight: once Ray is connected and before any actor starts, a run that the
cluster can never host is refused in one line (`check_cluster`).

An actor runs on one node, so capacity is counted per node as well as over the cluster: a
worker's `workers.cpus_per_worker` CPUs, and a learner's `learner.num_gpus` GPUs (or its
CPU, when it has none: `learner_cpus`), must fit on one node (a cluster whose total is
enough but whose every node is too small would leave the actor pending forever), and all
of them in the cluster. This is not a packing of every actor onto the nodes: a run refused
is one that can never start, and one accepted may still wait for capacity (the start and
no-worker timeouts of `faults` bound that). The experience store's memory is checked
against the largest node there now (`check_store_memory`), and every actor process's
(each imports torch) with the store's against the cluster's memory for actors
(`check_actor_memory`).

An autoscaler can add nodes. What no node holds now is accepted when a node type the
autoscaler can start would hold it: the run logs that it waits for the autoscaler, and
`faults.start_timeout_s` bounds the learner's wait. Ray gives a driver no public way to
read the autoscaler's node types, so `autoscaler_node_types` reads, most reliable first
(the first two through `rayrl.compat.ray_internals`):

1. the cluster config in the GCS: each node group's resources and maximum count, as an
   autoscaler reports them (Anyscale's does; Ray 2.60's own autoscalers do not yet); Ray
   Data and Ray Train read it for the same question;
2. when an autoscaler reports its state to the GCS (Ray's v2 autoscaler: the default of
   `ray up` since Ray 2.50, and KubeRay's with autoscaler v2), the autoscaling config that
   `ray up` leaves for it on the head node, `~/ray_bootstrap_config.yaml` (the driver of
   `ray job submit` runs there; `ray cluster-dump` looks for it there too);
3. an autoscaler that reports its state but whose node types neither gives (KubeRay keeps
   them in the RayCluster resource, which a driver cannot read): what no node holds now is
   accepted with the same log line, since refusing would make such a cluster unusable.

Without an autoscaler's state in the GCS (a local Ray, nodes started by hand, Ray's v1
autoscaler, whose status in the GCS's key-value store a read-only monitor on every cluster
writes too) the nodes there now are all there will be. Where the GCS cannot be asked
(another Ray version), whether an autoscaler runs is not known, and the run is accepted as
it would be with an autoscaler of unknown node types: a check that fails never refuses a
valid run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import ray
import torch
import yaml

from rayrl.algorithms import ALGORITHMS
from rayrl.compat import ray_internals
from rayrl.config import Config
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.host import usable_cores

logger = logging.getLogger(__name__)


ACTOR_MEMORY = 400 * 2**20
"""About what one actor's process holds once it has imported torch and built its envs and
policy (a CartPole or MinAtar worker, the learner): the memory checks' unit."""


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

    def accepts(self, one: Resources, total: Resources, waiting: str, *args: object) -> bool:
        """Whether a run asking for `one` on a node and `total` in all starts now, or once
        the autoscaler makes room, which is logged (`waiting % args`); False when it never
        can (the caller says why)."""
        if self.fits_now(one, total):
            return True
        if self.fits_later(one, total):
            logger.info(waiting, *args)
            return True
        return False

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


def check_cluster(config: Config, spec: EnvSpec, local: bool = False) -> float:
    """Raise if the cluster can never host the run (`local`: a Ray this process started,
    which has no autoscaler); returns each learner's GPU request. What only the autoscaler
    can make room for is accepted with a log line."""
    check_store_memory(config, spec)
    capacity = Capacity(alive_nodes(), () if local else autoscaler_node_types())
    num_gpus = learner_gpus(config, capacity)
    check_workers(config, capacity, num_gpus)
    if not local:  # a local Ray's size was checked against this machine's memory (connect)
        check_actor_memory(config, spec, capacity)
    check_learners(config, num_gpus, capacity)
    check_device(config, num_gpus, capacity)
    return num_gpus


def alive_nodes() -> tuple[Resources, ...]:
    """The resources of each node of the cluster alive now."""
    return tuple(node["Resources"] for node in ray.nodes() if node["Alive"])


SMALL_MACHINE_CPUS = 4
"""`run.evaluator="auto"` evaluates in the driver's process on a Ray that is this machine
alone, with at most this many cores: there, an evaluator process of its own (a Python and
Ray start-up, a cold torch import: seconds of CPU) is a large share of what a run costs the
machine. On more cores, a process of its own keeps evaluation off the driver's interpreter
lock; on a cluster, off the node the driver runs on."""


def evaluates_in_driver(setting: str, cores_alone: int | None) -> bool:
    """Whether the run's evaluations run in the driver's process (`run.evaluator`:
    `setting`; `cores_alone`: `cores_if_alone()`)."""
    if setting != "auto":
        return setting == "driver"
    return cores_alone is not None and cores_alone <= SMALL_MACHINE_CPUS


def cores_if_alone(local: bool = False) -> int | None:
    """This machine's cores when the Ray cluster is this machine alone, for good: every alive
    node at the driver's node's address (one node, or several that `ray.cluster_utils` or a
    second `ray start` put on this machine: they share its cores), that no autoscaler can add
    to, joined directly (through Ray Client the driver runs elsewhere); None otherwise. Cores,
    not Ray's CPUs: a local Ray that rayrl starts declares as many CPUs as the run asks for,
    more than a small machine has. `local`: a Ray this process started, which is this
    machine alone."""
    if local:
        return usable_cores()
    if ray.util.client.ray.is_connected():
        return None
    nodes = [node for node in ray.nodes() if node["Alive"]]
    here = ray.get_runtime_context().get_node_id()
    address = next((n["NodeManagerAddress"] for n in nodes if n["NodeID"] == here), None)
    if address is None or any(node["NodeManagerAddress"] != address for node in nodes):
        return None
    if autoscaler_node_types() != ():  # asks the GCS: only once the nodes are all here
        return None
    return usable_cores()


def check_workers(config: Config, capacity: Capacity, num_gpus: float) -> None:
    """One worker's CPUs on one node, and every actor's CPUs in the cluster (learners with
    `num_gpus` each)."""
    one = {"CPU": config.workers.cpus_per_worker}
    total = {"CPU": requested_cpus(config, num_gpus)}
    waiting = (
        "the Ray cluster has no room for all the run's CPUs now: workers wait for the "
        "autoscaler to start nodes"
    )
    if capacity.accepts(one, total, waiting):
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


def check_actor_memory(config: Config, spec: EnvSpec, capacity: Capacity) -> None:
    """Refuse a run whose actor processes (`ACTOR_MEMORY` each) and experience store, when
    full, need more memory than the cluster has for actors, unless its autoscaler may add it
    or `workers.oversubscribe`: Ray reserves no memory for an actor that does not ask for it,
    so such a run would start, and its nodes would run out of memory."""
    workers = config.workers
    if workers.oversubscribe or not any("memory" in node for node in capacity.nodes):
        return
    store = ALGORITHMS[config.algorithm.name].family.store_memory(config, spec)
    # and the store and the evaluator (on a joined cluster, an actor: `evaluates_in_driver`)
    processes = workers.num_workers + config.learner.num_learners + 2
    needed = processes * ACTOR_MEMORY + store
    waiting = "the Ray cluster has not the memory for all the run's actors now: they wait for "
    if capacity.accepts({}, {"memory": needed}, waiting + "the autoscaler to start nodes"):
        return
    have, gib = capacity.total()["memory"], 2**30
    fits = max(0, int((have - store) // ACTOR_MEMORY) - processes + workers.num_workers)
    raise ConfigError(
        f"workers.num_workers={workers.num_workers}: the run's {processes} actor processes "
        f"(about {ACTOR_MEMORY / gib:.1f} GiB each, with torch) and its "
        f"{ALGORITHMS[config.algorithm.name].family.store.namespace} need about "
        f"{needed / gib:.1f} GiB and the Ray cluster has {have / gib:.1f} GiB of memory for "
        f"actors{capacity.autoscaler_note()}, enough for workers.num_workers <= {fits}; lower "
        "it, add nodes, or set workers.oversubscribe=true to start it anyway"
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
    waiting = (
        "the Ray cluster has no node with %g GPU(s) for each of %d learner(s) now: the "
        "learner waits for the autoscaler to start a GPU node (up to "
        "faults.start_timeout_s=%g s)"
    )
    if capacity.accepts(one, total, waiting, num_gpus, learners, config.faults.start_timeout_s):
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
    reports_state = ray_internals.autoscaler_reports_state()
    if reports_state is None:  # the GCS cannot be asked: no refusal on a guess
        return None
    if not reports_state:
        return ()
    return bootstrap_node_types(Path(BOOTSTRAP_CONFIG).expanduser())


def reported_node_types() -> tuple[NodeType, ...] | None:
    """The node groups in the GCS's cluster config; None when none was reported."""
    groups = ray_internals.cluster_node_groups()
    if groups is None:
        return None
    return tuple(NodeType(*group) for group in groups if group[2] != 0)


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
