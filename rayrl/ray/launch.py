"""Launching and connecting: joining a Ray cluster or starting a local Ray sized to the
machine, and checking that the cluster can host the run before any actor starts (CPUs,
the learner's GPUs, and memory for the experience store)."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from typing import Any

import ray

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError, UserError

logger = logging.getLogger(__name__)

LEARNER_CPUS = 1.0


def requested_cpus(config: Config) -> float:
    workers, learners = config.workers, config.learner.num_learners
    return workers.num_workers * workers.cpus_per_worker + learners * LEARNER_CPUS


def connect(config: Config, address: str | None, dashboard: bool = False) -> bool:
    """Join the Ray at `address` (or $RAY_ADDRESS), or start a local one sized to this
    machine.

    Returns True when this call connected (so the caller disconnects, and a local Ray it
    started is shut down with it); False when Ray was already initialized in this process
    (a notebook, the test suite), which is then left as it is.
    """
    if ray.is_initialized():
        return False
    if address is None and os.environ.get("RAY_ADDRESS"):
        # inside a Ray job (`ray job submit`), or a user who points every Ray program at a
        # cluster: join it rather than start a second Ray
        address = os.environ["RAY_ADDRESS"]
        logger.info("joining the Ray cluster at RAY_ADDRESS=%s", address)
    if address is None:
        cpus = os.cpu_count() or 1
        needed = math.ceil(requested_cpus(config))
        if needed > cpus:
            logger.info(
                "the run asks for %d CPUs and this machine has %d: starting a local Ray with "
                "%d logical CPUs (workers share cores)",
                needed,
                cpus,
                needed,
            )
        _init_keeping_sigterm_handler(
            address="local",  # a new Ray even when another one runs on this machine
            num_cpus=max(cpus, needed),
            include_dashboard=dashboard,
            logging_level=logging.WARNING,
        )
        return True
    try:
        _init_keeping_sigterm_handler(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserError(f"cannot connect to the Ray cluster at '{address}': {exc}") from None
    return True


def _init_keeping_sigterm_handler(**kwargs: Any) -> None:
    """`ray.init`, which installs its own SIGTERM handler (log and exit at once); a handler
    the caller installed before (the CLI's: stop like Ctrl-C, with a final checkpoint) is
    put back. Without one, Ray's stays."""
    previous = signal.getsignal(signal.SIGTERM)
    ray.init(**kwargs)
    if callable(previous) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def check_cluster(config: Config, spec: EnvSpec) -> float:
    """Raise if the cluster cannot host the run; returns the learner's GPU request."""
    check_store_memory(config, spec)
    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    if requested_cpus(config) > cpus:
        raise ConfigError(
            f"the Ray cluster has {cpus:g} CPUs but the run asks for "
            f"{requested_cpus(config):g} (workers.num_workers={config.workers.num_workers} x "
            f"workers.cpus_per_worker={config.workers.cpus_per_worker:g} + 1 per learner); "
            "lower them or add nodes"
        )
    learners = config.learner.num_learners
    num_gpus = config.learner.num_gpus
    if num_gpus is None:
        num_gpus = 1.0 if gpus >= learners else 0.0
    elif num_gpus * learners > gpus:
        raise ConfigError(
            f"learner.num_gpus={num_gpus:g} for {learners} learner(s) but the Ray cluster has "
            f"{gpus:g} GPUs; use null to take one per learner only when there are enough"
        )
    device = config.learner.device
    if device.startswith("cuda") and num_gpus == 0:
        # Ray hides every GPU from an actor that asked for none: the learner would fail at
        # every start
        raise ConfigError(
            f"learner.device={device!r} but the learner gets no GPU from Ray (the cluster has "
            f"{gpus:g} GPUs for {learners} learner(s), learner.num_gpus={config.learner.num_gpus}"
            "); use 'auto' or 'cpu', or give the cluster a GPU per learner"
        )
    return num_gpus


def check_store_memory(config: Config, spec: EnvSpec) -> None:
    """Refuse a replay (or unroll queue) larger than any node's memory for actors: it would
    fail, or be killed by the OOM killer, only once it has filled, hours into the run."""
    family = ALGORITHMS[config.algorithm.name].family
    needed = family.store_memory(config, spec)
    nodes = [node["Resources"].get("memory", 0.0) for node in ray.nodes() if node["Alive"]]
    largest = max(nodes, default=0.0)
    if needed > largest:
        gib = 2**30
        key = (
            "algorithm.replay.capacity"
            if family.store.namespace == "replay"
            else ("algorithm.num_storages")
        )
        raise ConfigError(
            f"the {family.store.namespace} needs about {needed / gib:.1f} GiB when full, but the "
            f"largest Ray node has {largest / gib:.1f} GiB of memory for actors; lower {key} "
            "or add a node with more memory"
        )
