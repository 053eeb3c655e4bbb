"""What a trial reserves (its placement group's bundles), and the check, before any trial
starts, that the cluster can ever hold the largest trial of the space: a trial that cannot
fit is refused with what it needs, never left PENDING.

A local-runtime trial is one process: one CPU, the memory of its store, and a GPU when the
Ray runtime's learner would get one (`learner.num_gpus`, or one when the cluster has GPUs
and `learner.device` is not "cpu"). A Ray-runtime trial's driver takes no resources of its
own (Tune's empty head bundle) and its actors take the bundles of
`rayrl.ray.placement.run_bundles`.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Mapping
from typing import Any

import ray

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config, config_to_dict
from rayrl.envs import env_spec
from rayrl.errors import ConfigError, UserError
from rayrl.ray.capacity import Capacity, Resources, autoscaler_node_types, holds, learner_gpus
from rayrl.ray.placement import run_bundles
from rayrl.sweeps.spec import Sweep

logger = logging.getLogger(__name__)

UNPLACED = Capacity(({"CPU": 1.0},), ())
"""A stand-in cluster for sizing bundles before Ray runs (a GPU-less one: a learner with
`learner.num_gpus` null then asks for none)."""

MAX_CHECKED_TRIALS = 256
"""The most combinations of resource-changing values the up-front check builds."""


def cluster_capacity(local: bool = False) -> Capacity:
    """The cluster's capacity (`local`: a Ray this process started, with no autoscaler)."""
    nodes = tuple(node["Resources"] for node in ray.nodes() if node["Alive"])
    return Capacity(nodes, () if local else autoscaler_node_types())


def trial_bundles(config: Config, capacity: Capacity) -> list[Resources]:
    """The bundles of a trial of this config; the first is the trial's own process."""
    gpus = learner_gpus(config, capacity, say=False)  # each trial's run says it once
    if config.run.runtime == "local":  # one process: the learner's GPU, the store's memory
        gpus = 0.0 if config.learner.device == "cpu" else gpus
        bundle = {"CPU": 1.0, "GPU": gpus, "memory": store_memory(config)}
        return [{key: amount for key, amount in bundle.items() if amount > 0}]
    return [{}, *run_bundles(config, store_memory(config), gpus)]


def store_memory(config: Config) -> float:
    """What the trial's store holds when full (its env built once per config)."""
    return _store_memory(json.dumps(config_to_dict(config), sort_keys=True))


@functools.lru_cache(maxsize=64)
def _store_memory(config_json: str) -> float:
    from rayrl.presets import config_from_dict

    config = config_from_dict(json.loads(config_json))
    family = ALGORITHMS[config.algorithm.name].family
    return float(family.store_memory(config, env_spec(config.env)))


def total(bundles: list[Resources]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            sums[key] = sums.get(key, 0.0) + amount
    return sums


def packs(bundles: list[Resources], nodes: tuple[Resources, ...]) -> bool:
    """Whether the bundles fit the nodes together (first fit, largest bundles first)."""
    free = [dict(node) for node in nodes]
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        node = next((n for n in free if holds(n, bundle)), None)
        if node is None:
            return False
        for key, amount in bundle.items():
            node[key] = node.get(key, 0.0) - amount
    return True


def largest_trial_cpus(sweep: Sweep) -> float:
    """The most CPUs one trial of the sweep asks for."""
    return max(total(trial_bundles(c, UNPLACED)).get("CPU", 0.0) for c in candidates(sweep))


def check_fit(sweep: Sweep, capacity: Capacity) -> None:
    """Refuse a sweep with a trial the cluster can never hold (see the module docstring);
    what only its autoscaler can make room for is accepted with a log line."""
    for config in candidates(sweep):
        bundles = trial_bundles(config, capacity)
        if packs(bundles, capacity.nodes):
            continue
        if all(capacity.fits_later(b, total(bundles)) for b in bundles if b):
            logger.info("the Ray cluster has no room for a whole trial now: it waits for nodes")
            continue
        needs = ", ".join(f"{k}: {v:g}" for k, v in sorted(total(bundles).items()))
        has = ", ".join(f"{k}: {v:g}" for k, v in sorted(capacity.total().items()))
        settings = describe_settings(sweep, config)
        raise UserError(
            f"a trial with {settings} needs {{{needs}}} in {len([b for b in bundles if b])} "
            f"bundle(s) ({_bundle_text(bundles)}), which the Ray cluster ({{{has}}}, the most "
            f"on one node: {capacity.largest('CPU'):g} CPUs, {capacity.largest('GPU'):g} "
            f"GPUs){capacity.autoscaler_note()} can never hold; narrow the space or add nodes"
        )


def _bundle_text(bundles: list[Resources]) -> str:
    return "; ".join(
        ", ".join(f"{k} {v:g}" for k, v in sorted(bundle.items())) for bundle in bundles if bundle
    )


def describe_settings(sweep: Sweep, config: Config) -> str:
    data = config_to_dict(config)
    values = [f"{d.key}={_lookup(data, d.key)!r}" for d in sweep.domains]
    return " ".join(values) if values else "the base config"


def _lookup(data: Mapping[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


def check_pbt_keeps_resources(sweep: Sweep) -> None:
    """Refuse a PBT space with a key that changes what a trial reserves: a trial's placement
    group is made once, and a perturbed worker count would ask for bundles it does not have."""
    if sweep.spec.scheduler.name != "pbt":
        return
    for key in resource_keys(sweep):
        raise ConfigError(
            f"space.{key}: it changes what a trial reserves, which PBT cannot perturb (a "
            "trial's placement group is made once); vary it with another scheduler, or set "
            "it in `set`"
        )


def resource_keys(sweep: Sweep) -> list[str]:
    """The space's keys whose values change what a trial reserves."""
    base = trial_bundles(sweep.base, UNPLACED)
    return [
        d.key
        for d in sweep.domains
        if any(trial_bundles(sweep.config_with({d.key: v}), UNPLACED) != base for v in d.values)
    ]


def candidates(sweep: Sweep) -> list[Config]:
    """The base config, and each combination of the space's values (every choice, both ends
    of each range) that changes what a trial reserves: the trials the cluster must hold."""
    changing_keys = resource_keys(sweep)
    changing = [[(d.key, v) for v in d.values] for d in sweep.domains if d.key in changing_keys]
    combos = itertools.islice(itertools.product(*changing), MAX_CHECKED_TRIALS)
    return [sweep.base, *(sweep.config_with(dict(combo)) for combo in combos if combo)]
