"""Where the Ray runtime's actors go: anywhere in the cluster (a run of its own), or into the
bundles of the placement group the run is inside (a sweep's trial: Ray Tune starts each
trial in a placement group of its own).

One module holds both the bundles a trial reserves (`run_bundles`) and the bundle each actor
takes (`Placement`), so that the two cannot drift apart: an actor that asks for what no free
bundle of its group has waits forever, and an actor given a scheduling strategy of its own
(SPREAD, node affinity) leaves the group and waits for the resources the group holds (Ray
Tune's well-known "trial stuck in PENDING").

Bundle order: learner 0 (with the store's memory: the store, the evaluator and the trial's
driver share its node, as they share the driver's node in a run of its own), the other
learners, then one bundle per worker.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rayrl.config import Config
from rayrl.ray.capacity import Resources, learner_cpus


def run_bundles(config: Config, store_memory: float, learner_gpus: float) -> list[Resources]:
    """The bundles of a Ray-runtime run's actors, in `Placement`'s order (resources that are
    zero left out, as Ray wants them)."""
    learners: list[dict[str, float]] = [
        {"CPU": learner_cpus(learner_gpus), "GPU": learner_gpus}
        for _ in range(config.learner.num_learners)
    ]
    learners[0]["memory"] = store_memory
    workers = [{"CPU": config.workers.cpus_per_worker} for _ in range(config.workers.num_workers)]
    return [{key: amount for key, amount in b.items() if amount > 0} for b in learners + workers]


class Placement:
    """The scheduling options of each actor of a run: Ray's own choice outside a placement
    group, a fixed bundle of the group inside one (see the module docstring)."""

    def __init__(self, config: Config, group: PlacementGroup | None = None) -> None:
        """`group`: the placement group the run is inside (default: the current one, set
        when this process was started in one with its child tasks captured)."""
        self.config = config
        self.group: PlacementGroup | None = (
            group if group is not None else ray.util.get_current_placement_group()
        )

    @staticmethod
    def _bundle(group: PlacementGroup, index: int) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(
            group,
            placement_group_bundle_index=index,
            placement_group_capture_child_tasks=True,
        )
        return {"scheduling_strategy": strategy}

    def worker(self, index: int) -> dict[str, Any]:
        """Workers spread over the nodes (their CPUs are the run's), or each in its bundle."""
        if self.group is None:
            return {"scheduling_strategy": "SPREAD"}
        return self._bundle(self.group, self.config.learner.num_learners + index)

    def learner(self, rank: int) -> dict[str, Any]:
        return {} if self.group is None else self._bundle(self.group, rank)

    def store(self, outside: Any) -> dict[str, Any]:
        """`outside`: the strategy outside a group (on the driver's node)."""
        return (
            {"scheduling_strategy": outside} if self.group is None else self._bundle(self.group, 0)
        )

    def evaluator(self) -> dict[str, Any]:
        return {} if self.group is None else self._bundle(self.group, 0)
