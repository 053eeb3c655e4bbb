"""Shared fixtures: offline W&B, per-test run directories, tiny configs, one test Ray."""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from tests.local_runs import (
    BackgroundRuns,
    last,
    longest_first,
    run_key,
    runs_in_background,
    train_locally,
)

if TYPE_CHECKING:
    from rayrl.run_lifecycle import TrainResult

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO = Path(__file__).resolve().parent.parent
COMPILE_BACKENDS = ">=0:aot_eager"
"""Every graph `torch.compile` captures in the test Ray's actors, compiled by `aot_eager`
(see `ray_cluster`)."""


@contextmanager
def bench_script(name: str) -> Iterator[ModuleType]:
    """The script `bench/<name>.py` imported as a module, with `bench/` on the path while it is
    used: the scripts are run by hand and import each other by name (`from common import ...`),
    so `bench/` is a folder of scripts, not a package."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def tiny_run_overrides(runs_dir: Path) -> list[str]:
    """Overrides for a fast, small run of any algorithm, saved under `runs_dir`. One rollout
    worker: a second costs a small Ray run a third of its CPU and of its wall time (a
    process start-up that imports torch), and the tests that need several say so.

    The evaluator is left to `run.evaluator=auto`, the default users get: on a machine of up
    to 4 cores (CI's 2) the runs evaluate on a thread of the driver, on a bigger one in an
    actor of their own (the suite's two simulated nodes are one machine). The tests of the
    evaluator actor and of the driver's thread say which they test."""
    return [
        "logging.console=false",
        f"run.runs_dir={runs_dir}",
        "run.total_env_steps=2048",
        "run.eval_interval_env_steps=1024",
        "run.eval_episodes=2",
        "run.checkpoint_interval_env_steps=1024",
        "run.target_return=null",
        "workers.num_workers=1",
        "workers.envs_per_worker=4",
    ]


def tiny_overrides(runs_dir: Path) -> list[str]:
    """`tiny_run_overrides` for the default preset (DQN on CartPole), with a small replay."""
    return [
        *tiny_run_overrides(runs_dir),
        "algorithm.replay.min_size=256",
        "algorithm.replay.samples_per_insert=2",
        "learner.batch_size=32",
        "algorithm.steps_per_chunk=16",
    ]


@pytest.fixture
def tiny_run(tmp_path):
    """Overrides for a fast, small run of any algorithm in a temporary runs directory."""
    return tiny_run_overrides(tmp_path / "runs")


@pytest.fixture
def tiny(tmp_path):
    """`tiny_run` for the default preset (DQN on CartPole), with a small replay."""
    return tiny_overrides(tmp_path / "runs")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `local_run` last: their runs go on in the background meanwhile."""
    items[:] = last(items)


@pytest.fixture(scope="session", autouse=True)
def local_runs(request, tmp_path_factory) -> Iterator[BackgroundRuns[TrainResult]]:
    """The local-runtime runs of every selected test marked `local_run`, started in the
    background at idle priority when the session starts (`tests/local_runs.py`)."""
    keys, runs_dir = longest_first(request.session.items), tmp_path_factory.mktemp("local-runs")
    with runs_in_background(keys, runs_dir, train_locally) as runs:
        yield runs


@pytest.fixture
def local_run_result(request, local_runs) -> TrainResult:
    """The result of this test's `local_run`."""
    key = run_key(request.node)
    assert key is not None, "local_run_result needs a @local_run(preset, *overrides) marker"
    return local_runs.result(key)


@pytest.fixture(scope="session")
def hang_marker(tmp_path_factory):
    """A file whose existence makes `tests.fake_envs:HangingCartPole-v0` hang once."""
    return tmp_path_factory.mktemp("hang") / "hang-now"


@contextmanager
def ray_temp_dir(path: str) -> Iterator[None]:
    """RAY_TMPDIR set to `path` inside the block, and as it was after it."""
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = path
    try:
        yield
    finally:
        if before is None:
            del os.environ["RAY_TMPDIR"]
        else:
            os.environ["RAY_TMPDIR"] = before


@pytest.fixture(scope="session")
def ray_cluster(hang_marker):
    """One Ray for the whole suite: a head node and a second node that declares a GPU (no
    real one), as `ray.cluster_utils.Cluster` simulates on one machine, with the settings
    of a local Ray that rayrl starts (its actors at the suite's priority; no dashboard).
    Worker processes get the repository on their PYTHONPATH so that they can import
    `tests.fake_envs`.

    Two settings only save the suite CPU: without the dashboard an idle cluster costs 0.07
    of a core rather than 0.12; and Ray's prestart of a worker per CPU for the first driver
    is off: those workers lack the driver's runtime env (the PYTHONPATH above), so Ray never
    hands them an actor, and they would only sit idle for the whole suite.

    A third trades what is tested for time: the actors' `torch.compile` (`algorithm.
    compile`, `DistributedAgent(th_compile=True)`) hands its captured graphs to AOT
    autograd's eager backend (`TORCH_COMPILE_OVERRIDE_BACKENDS`, a torch debug setting;
    a torch without it compiles with inductor, only slower). Dynamo still traces and guards
    rayrl's network, and AOT autograd builds and runs its forward and backward graphs;
    inductor (decompositions, lowering, fusion, C++ code generation) is left out: torch's
    to test, and on 2 cores with an empty inductor cache (a fresh CI machine) about 33 CPU-s
    and 28 s for the one test that compiles.

    The cluster lives in a temp dir of its own (RAY_TMPDIR while it starts and stops):
    `Cluster` records its address in Ray's temp dir, where `ray start` records its own and
    which `ray.init()` and `--address auto` read, and deletes it when it stops. In /tmp/ray
    it would hand a `ray start` head's users the suite's Ray for the suite's duration, and
    then leave them no record of their head."""
    import ray
    from ray.cluster_utils import Cluster

    from rayrl.ray.connect import local_system_config

    temp_dir = tempfile.mkdtemp(prefix="rr-suite-", dir="/tmp")  # short: socket paths
    with ray_temp_dir(temp_dir):
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 4,
                "object_store_memory": 400 * 2**20,
                "include_dashboard": False,
                "_system_config": {
                    **local_system_config(),
                    "prestart_worker_first_driver": False,
                },
            },
        )
        gpu_node = cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=400 * 2**20)
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            logging_level=logging.WARNING,
            runtime_env={
                "env_vars": {
                    "PYTHONPATH": str(REPO),
                    "RAYRL_TEST_HANG_FILE": str(hang_marker),
                    "TORCH_COMPILE_OVERRIDE_BACKENDS": COMPILE_BACKENDS,
                }
            },
        )
    yield cluster, gpu_node
    ray.shutdown()
    with ray_temp_dir(temp_dir):
        cluster.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
