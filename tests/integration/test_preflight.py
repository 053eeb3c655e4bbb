"""The pre-flight (`rayrl.ray.capacity.check_cluster`) against a real Ray: what no node can
hold is refused in one line with exit status 2 within seconds, even when the cluster's total
would do; what an autoscaler's node type can hold is accepted, and said; a learner left
without a GPU is said. The cluster.yaml scenario (GPU nodes from 0, `learner.num_gpus=1`)
runs against a real head without a GPU whose GCS holds an autoscaler's state, with the
cluster's config where `ray up` leaves it on the head node.

No autoscaler starts nodes here: the test reports to the GCS what an autoscaler reports (its
node groups, or its state), and a run accepted for a node that never comes ends on
`faults.start_timeout_s`."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray
import yaml
from click.testing import CliRunner
from ray._raylet import GcsClient
from ray.core.generated import autoscaler_pb2
from ray.core.generated.gcs_pb2 import GcsNodeInfo

import rayrl
from rayrl.cli import main
from rayrl.errors import ConfigError
from rayrl.presets import load_config
from rayrl.ray import factory
from rayrl.ray.capacity import (
    Capacity,
    autoscaler_node_types,
    bootstrap_node_types,
    check_learners,
    check_workers,
    learner_cpus,
    learner_gpus,
)
from tests.integration.test_cli_ray import ON_CPU
from tests.integration.test_job_submission import RAY_PORT_OPTIONS, cli_env
from tests.ports import free_ports
from tests.processes import wait_gone

REPO = Path(__file__).resolve().parents[2]
REFUSED_WITHIN_S = 60.0
START_TIMEOUT_S = 8
"""How long a learner that waits for the autoscaler waits here before the run stops."""
NEVER_WAIT = [f"faults.start_timeout_s={START_TIMEOUT_S}", "faults.no_workers_timeout_s=15"]
"""A run accepted by mistake ends within seconds on actors that never start, rather than
waiting half an hour for capacity."""


def waiting(gpus: int, timeout_s: int) -> str:
    """What a run says when its learner waits for the autoscaler's GPU node."""
    return (
        f"the Ray cluster has no node with {gpus} GPU(s) for each of 1 learner(s) now: the "
        "learner waits for the autoscaler to start a GPU node (up to "
        f"faults.start_timeout_s={timeout_s} s)"
    )


@pytest.fixture(scope="module")
def two_gpu_nodes(ray_cluster):
    """The suite's cluster (a head of 4 CPUs, a node of 1 CPU and 1 GPU) plus a node of 2
    CPUs and 1 GPU: 7 CPUs and 2 GPUs in all, but no more than 4 CPUs or 1 GPU on a node."""
    cluster, _ = ray_cluster
    node = cluster.add_node(num_cpus=2, num_gpus=1, object_store_memory=200 * 2**20)
    cluster.wait_for_nodes()
    yield
    cluster.remove_node(node)


@pytest.fixture
def autoscaler_reports(ray_cluster):
    """Report node groups to the GCS as an autoscaler does (the cluster config that Ray Data
    and Ray Train read too); the report is taken back after the test."""
    client = GcsClient(address=ray.get_runtime_context().gcs_address)

    def report(groups: dict[str, dict[str, int]]) -> None:
        config = autoscaler_pb2.ClusterConfig()
        for name, resources in groups.items():
            group = config.node_group_configs.add(name=name, max_count=1)
            group.resources.update(resources)
        client.report_cluster_config(config.SerializeToString())

    yield report
    client.report_cluster_config(autoscaler_pb2.ClusterConfig().SerializeToString())


def refused_by_the_cli(tmp_path: Path, overrides: list[str]) -> str:
    """`rayrl train` (in this process, so on the suite's Ray): exit status 2, one line,
    within seconds, and nothing written beside the runs directory."""
    args = ["train"]
    for override in overrides:
        args += ["--set", override]
    started = time.monotonic()
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    elapsed = time.monotonic() - started
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert elapsed < REFUSED_WITHIN_S
    assert {path.name for path in tmp_path.iterdir()} <= {"runs"}
    return lines[0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["workers.num_workers=1", "workers.cpus_per_worker=5"],
            "error: workers.cpus_per_worker=5: no Ray node has that many CPUs for a worker "
            "(the most on one node: 4); lower it, or add a node with more CPUs",
        ),
        (
            ["learner.num_gpus=2"],
            "error: learner.num_gpus=2: no Ray node has 2 GPU(s) for a learner (the "
            "most GPUs on one node: 1); lower it, or add a node with more GPUs",
        ),
    ],
    ids=["worker-cpus", "learner-gpus"],
)
def test_what_no_single_node_holds_is_refused_though_the_total_would_do(
    two_gpu_nodes, tiny, tmp_path, settings, message
):
    """Comparing with the cluster's total (7 CPUs, 2 GPUs) accepted these, and the actor
    waited for a node that would never come."""
    assert refused_by_the_cli(tmp_path, [*tiny, *NEVER_WAIT, *settings]) == message


def test_without_an_autoscaler_the_nodes_there_are_all(ray_cluster):
    assert autoscaler_node_types() == ()


def test_a_learner_an_autoscaler_node_type_can_hold_waits_for_it(autoscaler_reports, tiny, caplog):
    """No node has 4 GPUs, but the autoscaler can start one that has: the run starts and
    says so; its learner then waits for the node (here none comes, and the start timeout
    ends the run)."""
    autoscaler_reports({"gpu-big": {"CPU": 8, "GPU": 4}})
    with caplog.at_level(logging.INFO, logger="rayrl.ray.capacity"):
        result = rayrl.train(
            None,
            overrides=[*tiny, "learner.num_gpus=4", f"faults.start_timeout_s={START_TIMEOUT_S}"],
        )
    waits = [r.message for r in caplog.records if "waits for the autoscaler" in r.message]
    assert waits == [waiting(4, START_TIMEOUT_S)]
    assert result.failure is not None
    assert "the learner has waited" in result.failure


def test_learners_that_wait_to_form_their_group_say_so_and_what_they_wait_for(
    autoscaler_reports, tiny, caplog, monkeypatch
):
    """Two learners of two GPUs each, which no node of the suite's cluster has but an
    autoscaler's node type would: the driver waits for them to form their group, says once
    that they wait for room (sooner here), and at the start timeout stops the run saying for
    what."""
    monkeypatch.setattr(factory, "CAPACITY_NOTICE_S", 2.0)
    autoscaler_reports({"gpu-big": {"CPU": 8, "GPU": 4}})
    with caplog.at_level(logging.WARNING, logger="rayrl.ray.factory"):
        result = rayrl.train(
            None,
            overrides=[
                *tiny,
                "learner.num_learners=2",
                "learner.num_gpus=2",
                f"faults.start_timeout_s={START_TIMEOUT_S}",
            ],
        )
    (said,) = [r.message for r in caplog.records if r.name == "rayrl.ray.factory"]
    assert said.startswith("the 2 learners have waited ")
    assert said.endswith(
        f"for a node with 2 GPU(s) free; the run stops if it waits past "
        f"faults.start_timeout_s={START_TIMEOUT_S} s"
    )
    assert result.failure is not None
    assert result.failure.startswith("the 2 learners have waited ")
    assert "was a GPU node lost?" in result.failure


def test_a_learner_no_autoscaler_node_type_can_hold_is_refused(autoscaler_reports, tiny, tmp_path):
    autoscaler_reports({"gpu-small": {"CPU": 8, "GPU": 1}, "cpu": {"CPU": 32}})
    line = refused_by_the_cli(tmp_path, [*tiny, *NEVER_WAIT, "learner.num_gpus=4"])
    assert line.startswith("error: learner.num_gpus=4: no Ray node has 4 GPU(s)")
    assert "nor any node type its autoscaler can start (gpu-small, cpu)" in line


@pytest.fixture
def cluster_yaml_on_its_head(tmp_path) -> Path:
    """cluster/cluster.yaml as `ray up` leaves it for the autoscaler on the head node
    (`~/ray_bootstrap_config.yaml`, written as JSON), with each node type's resources
    filled in from its AWS instance type, as `ray up` does."""
    raw = yaml.safe_load((REPO / "cluster" / "cluster.yaml").read_text())
    detected = {
        "head": {"CPU": 8, "memory": 22 * 2**30},  # m6i.2xlarge
        "cpu_workers": {"CPU": 32, "memory": 45 * 2**30},  # c6i.8xlarge
        "gpu_workers": {"CPU": 8, "GPU": 1, "memory": 22 * 2**30},  # g5.2xlarge
    }
    for name, resources in detected.items():
        raw["available_node_types"][name]["resources"] = resources
    path = tmp_path / "ray_bootstrap_config.yaml"
    path.write_text(json.dumps(raw))
    return path


ALIVE = GcsNodeInfo.GcsNodeState.ALIVE


def head_env() -> dict[str, str]:
    """The CLI environment, without token authentication (which Ray turns on by itself when
    a token is saved, as the job-submission tests leave one in ~/.ray)."""
    return {**cli_env(), "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def head_with_an_autoscaler():
    """A real `ray start --head` without a GPU, on free ports and its own temp dir, whose GCS
    holds an autoscaler's state, as Ray's v2 autoscaler (`ray up`'s since Ray 2.50) reports
    it. Yields the GCS address."""
    ports = dict(zip(RAY_PORT_OPTIONS, free_ports(len(RAY_PORT_OPTIONS)), strict=True))
    temp_dir = tempfile.mkdtemp(prefix="rr-as-", dir="/tmp")  # short: socket paths
    command = ["ray", "start", "--head", "--block", "--node-ip-address=127.0.0.1"]
    command += [f"{option}={port}" for option, port in ports.items()]
    command += ["--num-cpus=4", "--num-gpus=0", f"--object-store-memory={300 * 2**20}"]
    command += ["--include-dashboard=false", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 -- closed below
    head = subprocess.Popen(
        command, env=head_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    address = f"127.0.0.1:{ports['--port']}"
    try:
        # up means the head's raylet has registered, not only its GCS: `ray start` starts
        # the raylet after the GCS and its other processes (26 s later beside two
        # benchmark runs), and a driver that connects first waits for it for at most
        # 60 s (Ray's `get_node_to_connect_for_driver`) and then fails with "Failed to
        # connect to Ray cluster"
        deadline = time.monotonic() + 180
        while True:
            assert head.poll() is None, (Path(temp_dir) / "ray-start.log").read_text()
            try:
                client = GcsClient(address=address)
                alive = client.get_all_node_info(timeout=5, state_filter=ALIVE)
            except Exception:  # the GCS is not up yet
                alive = {}
            if alive:
                break
            assert time.monotonic() < deadline, "the head's raylet never registered"
            time.sleep(1)
        state = autoscaler_pb2.AutoscalingState(autoscaler_state_version=1)
        client.report_autoscaling_state(state.SerializeToString())
        yield address
    finally:
        head.send_signal(signal.SIGTERM)  # --block: the head stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        assert wait_gone(temp_dir) == [], "processes of the test's Ray head outlived it"


def train_on(
    address: str, home: Path, tiny: list[str], *settings: str
) -> subprocess.CompletedProcess[str]:
    """`rayrl train --address` in its own process, whose home is `home` (where `ray up`
    leaves the cluster's config on a head node)."""
    args = [sys.executable, "-m", "rayrl", "train", "--address", address]
    for setting in (*tiny, *settings):
        args += ["--set", setting]
    env = {**head_env(), "HOME": str(home)}
    return subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False
    )


@pytest.mark.parametrize(
    ("with_config", "gpus"),
    [(True, 1), (False, 2)],
    ids=["cluster-yaml-gpu-node", "node-types-unknown"],
)
def test_on_a_head_with_an_autoscaler_the_learner_waits_for_a_gpu_node(
    head_with_an_autoscaler, cluster_yaml_on_its_head, tiny, tmp_path, with_config, gpus
):
    """The README's command on cluster/cluster.yaml's head (no GPU; GPU workers from 0):
    `learner.num_gpus=1` is accepted and said. Without the cluster's config (KubeRay keeps
    it elsewhere) the autoscaler's node types are unknown: accepted and said too."""
    home = tmp_path / "home"
    home.mkdir()
    if with_config:
        cluster_yaml_on_its_head.rename(home / "ray_bootstrap_config.yaml")
    done = train_on(
        head_with_an_autoscaler,
        home,
        tiny,
        f"learner.num_gpus={gpus}",
        f"faults.start_timeout_s={START_TIMEOUT_S}",
    )
    assert done.returncode == 1, done.stderr
    waits = [line for line in done.stderr.splitlines() if "waits for the autoscaler" in line]
    assert len(waits) == 1, done.stderr
    assert waits[0].endswith(waiting(gpus, START_TIMEOUT_S))
    assert "the learner has waited" in done.stdout + done.stderr


def test_on_a_head_with_an_autoscaler_what_no_node_type_holds_is_refused(
    head_with_an_autoscaler, cluster_yaml_on_its_head, tiny, tmp_path
):
    home = tmp_path / "home"
    home.mkdir()
    cluster_yaml_on_its_head.rename(home / "ray_bootstrap_config.yaml")
    started = time.monotonic()
    done = train_on(head_with_an_autoscaler, home, tiny, "learner.num_gpus=2")
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: learner.num_gpus=2: no Ray node has 2 GPU(s) for a learner (the "
        "most GPUs on one node: 0), nor any node type its autoscaler can start (cpu_workers, "
        "gpu_workers); lower it, or add a node with more GPUs"
    )
    assert {path.name for path in tmp_path.iterdir()} <= {"runs", "home"}
    # this head runs without token authentication (RAY_AUTH_MODE=disabled): said in one line
    unauthenticated = [line for line in done.stderr.splitlines() if "without a token" in line]
    assert len(unauthenticated) == 1, done.stderr
    assert "does not enforce token authentication" in unauthenticated[0]


def test_cluster_yaml_scenario_the_readme_command_waits_for_the_gpu_node(
    cluster_yaml_on_its_head, caplog
):
    """cluster/cluster.yaml starts the head and one CPU worker, GPU workers at 0; the
    README's submit command asks for `learner.num_gpus=1`: accepted, the learner waits for
    the autoscaler. Two GPUs per learner fit no node type: refused."""
    node_types = bootstrap_node_types(cluster_yaml_on_its_head)
    assert {(kind.name, kind.max_count) for kind in node_types} == {
        ("cpu_workers", 8),
        ("gpu_workers", 1),
    }
    capacity = Capacity(({"CPU": 8.0}, {"CPU": 32.0}), node_types)
    readme = load_config(None, ["workers.num_workers=16", "learner.num_gpus=1"])
    with caplog.at_level(logging.INFO, logger="rayrl.ray.capacity"):
        check_workers(readme, capacity, 1.0)
        check_learners(readme, 1.0, capacity)
    assert [r.message for r in caplog.records] == [waiting(1, 900)]
    with pytest.raises(ConfigError, match=r"nor any node type its autoscaler can start"):
        check_learners(readme, 2.0, capacity)
    with pytest.raises(ConfigError, match=r"workers.cpus_per_worker=33: no Ray node has"):
        check_workers(load_config(None, ["workers.cpus_per_worker=33"]), capacity, 0.0)


def test_a_null_gpu_request_takes_a_gpu_only_for_a_learner_that_may_use_it():
    """With a GPU in the cluster, a null request takes one; a learner.device=cpu learner
    takes none, and so asks Ray for its CPU (`learner_cpus`) rather than an idle GPU."""
    capacity = Capacity(({"CPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}), ())
    assert learner_gpus(load_config(), capacity) == 1.0
    assert learner_gpus(load_config(None, ["learner.device=cpu"]), capacity) == 0.0
    assert learner_cpus(1.0) == 0.0
    assert learner_cpus(0.0) == 1.0


def test_cluster_yaml_scenario_a_null_gpu_request_trains_on_cpu_and_says_how_to_wait(
    cluster_yaml_on_its_head, caplog
):
    capacity = Capacity(
        ({"CPU": 8.0}, {"CPU": 32.0}), bootstrap_node_types(cluster_yaml_on_its_head)
    )
    with caplog.at_level(logging.WARNING, logger="rayrl.ray.capacity"):
        assert learner_gpus(load_config(), capacity) == 0.0
    assert [r.message for r in caplog.records] == [
        f"{ON_CPU} (set learner.num_gpus=1 to wait for the autoscaler to start a GPU node)"
    ]
