"""Checkpoints: learner state, optimizer, counters and the resolved config, in one file.

Serialized in memory, then written to a temporary file that is moved into place with
`os.replace`, so a crash mid-write never leaves a truncated checkpoint where a good one was.
Loaded with `torch.load(weights_only=True)`: a checkpoint holds tensors and plain values only, so
loading one never runs code. The format carries a version number, checked on load: version 1
(rayrl 0.1) differs only in the layout of its embedded config, which
`rayrl.presets.saved_config` migrates.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rayrl.core import ModelInfo
from rayrl.errors import CheckpointError
from rayrl.files import atomic_path

FORMAT = "rayrl-checkpoint"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)


def save_checkpoint(
    path: Path,
    *,
    algorithm: str,
    learner: dict[str, Any],
    policy: dict[str, Any],
    counters: dict[str, float],
    config: dict[str, Any],
) -> None:
    """Atomically write a checkpoint to `path`.

    `learner` is the full learner state (networks, optimizer) that a resumed run continues
    from; `policy` ({"version", "weights"}) the acting weights that evaluation loads, which
    for `best.pt` are exactly the weights that were evaluated.

    A failed write (a full disk, a file-size limit) raises the OS's `OSError`, naming
    `path`: `torch.save` into a file would report a short write as its own RuntimeError
    ("unexpected pos ..."), which reads as a bug, so it serializes into memory and the
    bytes are written here.
    """
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "algorithm": algorithm,
        "learner": learner,
        "policy": policy,
        "counters": counters,
        "config": config,
    }
    serialized = io.BytesIO()
    torch.save(payload, serialized)
    with atomic_path(path) as tmp:
        tmp.write_bytes(serialized.getbuffer())


def load_checkpoint(path: Path, *, algorithm: str | None = None) -> dict[str, Any]:
    """Read and check a checkpoint; tensors are loaded onto the CPU."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(
            f"checkpoint '{path}' is corrupt or not a rayrl checkpoint ({exc.__class__.__name__})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"'{path}' is not a rayrl checkpoint")
    version = payload.get("format_version")
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"checkpoint '{path}' has format version {version}; this rayrl reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    if algorithm is not None and payload["algorithm"] != algorithm:
        raise CheckpointError(
            f"checkpoint '{path}' was written by algorithm '{payload['algorithm']}', "
            f"but the config uses '{algorithm}'"
        )
    return payload


def policy_of(payload: dict[str, Any]) -> ModelInfo:
    """The acting weights of a loaded checkpoint (what evaluation and warm starts use)."""
    policy = payload["policy"]
    weights = {k: v.numpy() for k, v in policy["weights"].items()}
    return ModelInfo(int(policy["version"]), weights)


def load_policy(path: Path, algorithm: str | None = None) -> ModelInfo:
    """The acting weights stored in the checkpoint at `path`."""
    return policy_of(load_checkpoint(path, algorithm=algorithm))


def warm_start(init_checkpoint: str | None, algorithm: str) -> ModelInfo | None:
    """The acting weights a fresh run starts from (`run.init_checkpoint`), if any."""
    if init_checkpoint is None:
        return None
    return load_policy(Path(init_checkpoint), algorithm)


def to_numpy_tree(tree: Any) -> Any:
    """Torch tensors in a nested dict/list as numpy arrays (what crosses Ray's object store:
    several times faster than tensors)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy()
    if isinstance(tree, dict):
        return {k: to_numpy_tree(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_numpy_tree(v) for v in tree)
    return tree


def to_torch_tree(tree: Any) -> Any:
    """The inverse of `to_numpy_tree`."""
    if isinstance(tree, np.ndarray):  # arrays from Ray's object store are read-only
        return torch.from_numpy(np.require(tree, requirements=("C", "W")))
    if isinstance(tree, dict):
        return {k: to_torch_tree(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_torch_tree(v) for v in tree)
    return tree


def load_learner_state(learner: Any, payload: dict[str, Any], path: Path) -> None:
    """Load a checkpoint's learner state, turning a shape mismatch into a clear error."""
    try:
        learner.load_state_dict(payload["learner"])
    except (RuntimeError, KeyError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise CheckpointError(
            f"checkpoint '{path}' does not fit the configured network: {first_line}"
        ) from None
