"""Configs as rayrl 0.1 saved them, to test that runs saved then still load."""

from __future__ import annotations

from rayrl.families import ReplayConfig


def rayrl_0_1_layout(config: dict) -> dict:
    """A config as rayrl 0.1 saved it: replay and the chunk length outside the algorithm,
    the learner count (and IMPALA's optimizer) inside it."""
    old = {key: dict(value) if isinstance(value, dict) else value for key, value in config.items()}
    algorithm = old["algorithm"]
    old["replay"] = algorithm.pop("replay", ReplayConfig().__dict__)
    old["workers"]["steps_per_chunk"] = algorithm.pop("steps_per_chunk", 32)
    algorithm["num_learners"] = old["learner"].pop("num_learners")
    if algorithm["name"] == "impala":  # IMPALA's optimizer was its own
        algorithm["optimizer"] = old["learner"].pop("optimizer")
        algorithm["rmsprop_alpha"] = old["learner"].pop("rmsprop_alpha")
    return old
