"""rayrl: scalable actor-learner reinforcement learning on Ray.

    import rayrl
    result = rayrl.train("cartpole_dqn")          # or a Config, or a YAML path
    rayrl.evaluate(result.run_dir, episodes=10)
    rayrl.sweep("cartpole_ppo_sweep")             # a study on Ray Tune (docs/sweeps.md)

The public names are imported on first use, so that `rayrl --help` and config errors do
not wait for torch and Ray to import.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "DistributedAgent": "rayrl.agent",
    "train": "rayrl.api",
    "evaluate": "rayrl.api",
    "sweep": "rayrl.sweeps",
    "Config": "rayrl.config",
    "load_config": "rayrl.presets",
    "ALGORITHMS": "rayrl.algorithms",
    "TrainResult": "rayrl.run_lifecycle",
    "StopReason": "rayrl.run_lifecycle",
    "EvalResult": "rayrl.core",
    "ModelInfo": "rayrl.core",
    "UserError": "rayrl.errors",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rayrl' has no attribute {name!r}")
