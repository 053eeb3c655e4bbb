"""Seeds for every component, derived from the one run seed.

Each component (a worker's envs, its exploration, the evaluator, the buffer) gets its own
independent stream from `numpy.random.SeedSequence`, so adding a worker changes no other
component's randomness and no two components share a stream.
"""

from __future__ import annotations

import numpy as np

_NAMESPACES = {"env": 1, "policy": 2, "eval": 3, "replay": 4, "learner": 5}


def derive_seed(run_seed: int, component: str, *indices: int) -> int:
    """A 31-bit seed for `component` number `indices` of a run seeded with `run_seed`."""
    sequence = np.random.SeedSequence(run_seed, spawn_key=(_NAMESPACES[component], *indices))
    return int(sequence.generate_state(1)[0] >> 1)
