"""Configs as earlier rayrl saved them, with every key of `rayrl.renamed_keys` under its old
name, to test that runs saved then still load."""

from __future__ import annotations

import copy

from rayrl.families import ReplayConfig

OLD_CHUNK_STEPS = 32
"""The `workers.steps_per_chunk` every earlier config held, which on-policy runs ignored."""


def older_layout(config: dict) -> dict:
    """`config` (as `config_to_dict` gives it) as earlier rayrl saved it: the replay and the
    chunk length outside the algorithm and the learner count (and IMPALA's optimizer) inside
    it; the on-policy unroll length and queue as `num_steps` and `num_storages`; the two
    hang timeouts as one, the write-error limit under its old name; the Atari settings in
    `env` itself."""
    old = copy.deepcopy(config)
    algorithm, workers, faults = old["algorithm"], old["workers"], old["faults"]
    if "queue_capacity" in algorithm:  # on-policy
        algorithm["num_steps"] = algorithm.pop("steps_per_chunk")
        algorithm["num_storages"] = algorithm.pop("queue_capacity")
        old["replay"] = dict(ReplayConfig().__dict__)
        workers["steps_per_chunk"] = OLD_CHUNK_STEPS
    else:
        old["replay"] = algorithm.pop("replay")
        workers["steps_per_chunk"] = algorithm.pop("steps_per_chunk")
    algorithm["num_learners"] = old["learner"].pop("num_learners")
    if algorithm["name"] == "impala":  # IMPALA's optimizer was its own
        algorithm["optimizer"] = old["learner"].pop("optimizer")
        algorithm["rmsprop_alpha"] = old["learner"].pop("rmsprop_alpha")
    assert faults["probe_timeout_s"] == faults["stall_timeout_s"], "one timeout held both"
    faults["call_timeout_s"] = faults.pop("probe_timeout_s")
    del faults["stall_timeout_s"]
    faults["max_storage_errors"] = faults.pop("max_write_errors")
    old["env"].update(old["env"].pop("atari"))
    return old
