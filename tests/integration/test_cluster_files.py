"""What can be checked of `cluster/` and the Dockerfile without a cloud, a Kubernetes
cluster or a Docker engine: the launcher config against the autoscaler schema inside the
`ray` package, the KubeRay manifest against the Dockerfile and the CLI, the image against
the versions rayrl is tested with, and the job runtime env against Ray's own validation."""

from __future__ import annotations

import inspect
import re
import shlex
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import ray
import yaml
from click.testing import CliRunner
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from ray._private.runtime_env import packaging as ray_packaging
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.runtime_env import RuntimeEnv

from rayrl.cli import main

REPO = Path(__file__).resolve().parents[2]
PACKAGE = metadata.metadata("rayrl")  # pyproject.toml's [project], as installed
VERSION = PACKAGE["Version"]
SCRIPTS = {entry.name for entry in metadata.entry_points(group="console_scripts")}


def dockerfile_args() -> dict[str, str]:
    text = (REPO / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))


def ray_requirement(extra: str | None = None) -> tuple[set[str], SpecifierSet]:
    """Ray's extras and versions in rayrl's requirements (or in its `extra`'s)."""
    for requirement in PACKAGE.get_all("Requires-Dist"):
        name_extras, _, marker = requirement.partition(";")
        match = re.match(r"ray\[([\w,]*)\]\s*(.*)", name_extras.strip())
        wanted = not marker if extra is None else f'extra == "{extra}"' in marker
        if match and wanted:
            return set(match.group(1).split(",")), SpecifierSet(match.group(2).strip())
    raise AssertionError(f"pyproject.toml does not require ray (extra: {extra})")


def test_ray_dashboard_and_jobs_are_the_cluster_extra_at_the_same_versions():
    """A laptop's install leaves out Ray's dashboard (its agent starts with every local
    Ray); the image and the machine that submits jobs take it with `rayrl[cluster]`."""
    extras, versions = ray_requirement()
    assert "tune" in extras
    assert "default" not in extras
    cluster_extras, cluster_versions = ray_requirement("cluster")
    assert cluster_extras == {"default"}
    assert cluster_versions == versions
    assert "cluster" in dockerfile_args()["EXTRAS"].split(",")


def test_image_is_rays_official_image_at_the_tested_versions():
    args = dockerfile_args()
    text = (REPO / "Dockerfile").read_text()
    assert "FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${VARIANT}" in text
    assert args["RAY_VERSION"] == ray.__version__  # the Ray the suite runs against
    assert Version(args["RAY_VERSION"]) in ray_requirement()[1]
    assert args["PYTHON_TAG"] == f"py{sys.version_info.major}{sys.version_info.minor}"
    python = Version(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert python in SpecifierSet(PACKAGE["Requires-Python"])
    assert args["VARIANT"] == "cpu"


def test_image_installs_rayrl_with_the_readme_command():
    readme = (REPO / "README.md").read_text()
    quick_start = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.DOTALL)[0]
    install = quick_start.split("&&")[0].strip()
    assert install == "pip install ."
    assert f"RUN {install}" in (REPO / "Dockerfile").read_text().splitlines()
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    # everything but what the install needs stays out of the build context
    assert {"*", "!pyproject.toml", "!README.md", "!rayrl/"} <= set(ignored)


def test_launcher_config_passes_the_autoscaler_schema():
    config = yaml.safe_load((REPO / "cluster" / "cluster.yaml").read_text())
    validate_config(prepare_config(config))
    broken = {**config, "max_worker": 3}  # a typo the schema must catch
    with pytest.raises(Exception, match="max_worker"):
        validate_config(prepare_config(broken))


def test_launcher_config_places_the_learner_on_the_gpu_node_type_only():
    config = yaml.safe_load((REPO / "cluster" / "cluster.yaml").read_text())
    nodes = config["available_node_types"]
    assert "GPU" not in nodes[config["head_node_type"]]["resources"]
    image = config["docker"]["image"]
    assert nodes["gpu_workers"]["docker"]["worker_image"] == f"{image}-gpu"
    assert config["docker"]["image"].endswith(f":{VERSION}")
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])
    assert "--env RAY_AUTH_MODE=token" in config["docker"]["run_options"]


def ray_containers(manifest: dict) -> list[tuple[str, dict]]:
    cluster = manifest["spec"]["rayClusterSpec"]
    groups = [("head", cluster["headGroupSpec"])]
    groups += [(group["groupName"], group) for group in cluster["workerGroupSpecs"]]
    return [
        (name, container)
        for name, group in groups
        for container in group["template"]["spec"]["containers"]
    ]


def test_kuberay_manifest_agrees_with_the_dockerfile_and_the_cli():
    manifest = yaml.safe_load((REPO / "cluster" / "rayjob.yaml").read_text())
    assert manifest["kind"] == "RayJob"
    assert manifest["spec"]["rayClusterSpec"]["rayVersion"] == dockerfile_args()["RAY_VERSION"]
    for name, container in ray_containers(manifest):
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        suffix = "-gpu" if gpus else ""
        assert container["image"].endswith(f"/rayrl:{VERSION}{suffix}"), name
        env = {item["name"]: item for item in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token", name
        assert "secretKeyRef" in env["RAY_AUTH_TOKEN"]["valueFrom"], name
    assert any(container["resources"]["limits"].get("nvidia.com/gpu") for _, container in
               ray_containers(manifest))  # fmt: skip

    command = shlex.split(manifest["spec"]["entrypoint"])
    assert command[0] in SCRIPTS
    assert command[1] == "train"
    # a retry (backoffLimit) resumes the run it started instead of starting another
    assert manifest["spec"]["backoffLimit"] >= 1
    assert "--resume-if-exists" in command
    # the same options resolve to a valid config through the real CLI
    options = [arg for arg in command[2:] if arg != "--resume-if-exists"]
    resolved = CliRunner().invoke(main, ["show-config", *options])
    assert resolved.exit_code == 0, resolved.output
    config = yaml.safe_load(resolved.output)
    assert config["learner"]["num_gpus"] == 1
    assert config["run"]["runs_dir"] == "/runs"
    assert config["run"]["name"]


def test_job_runtime_env_is_valid_and_leaves_non_code_behind():
    runtime_env = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    RuntimeEnv(**runtime_env)  # Ray's own validation
    excludes = set(runtime_env["excludes"])
    assert {".git", "runs/", "wandb/", ".venv/", "venv/"} <= excludes
    assert "WANDB_API_KEY" not in runtime_env.get("env_vars", {})


def test_job_upload_leaves_secrets_behind(tmp_path, monkeypatch):
    """Ray's own packaging of a working directory, with the shipped excludes, keeps the code
    and drops the files that hold secrets and the run outputs."""
    runtime_env = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    work = tmp_path / "work"
    files = {
        "rayrl/train.py": True,
        "configs/mine.yaml": True,
        ".env": False,
        ".env.production": False,
        ".netrc": False,
        "deploy.pem": False,
        "tls/server.key": False,
        ".aws/credentials": False,
        ".ssh/id_ed25519": False,
        "gcloud-credentials.json": False,
        "runs/run-1/checkpoints/latest.pt": False,
        "wandb/run-1/files/output.log": False,
        "infra/terraform.tfstate": False,
        "infra/terraform.tfstate.backup": False,
        ".vault-token": False,
        "my-project-sa.json": False,
        "gcp-service-account.json": False,
        "keys/trainer-key.json": False,
        # runs under another run.runs_dir
        "experiments/pong-1/metrics.jsonl": False,
        "experiments/pong-1/eval.jsonl": False,
        "experiments/pong-1/checkpoints/step_000000002048.pt": False,
        "experiments/pong-1/checkpoints/replay.npz": False,
        "experiments/pong-1/videos/eval-000000002048.mp4": False,
        "experiments/pong-1/wandb_run_id": False,
    }
    for name in files:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("x")
    package = tmp_path / "package.zip"
    # the shipped excludes alone, not .gitignore's (an argument since Ray 2.53; the
    # environment variable before)
    monkeypatch.setenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
    without_gitignore = (
        {"include_gitignore": False}
        if "include_gitignore" in inspect.signature(ray_packaging.create_package).parameters
        else {}
    )
    ray_packaging.create_package(
        str(work), package, excludes=runtime_env["excludes"], **without_gitignore
    )
    with zipfile.ZipFile(package) as archive:
        uploaded = {name for name in archive.namelist() if not name.endswith("/")}
    assert uploaded == {name for name, kept in files.items() if kept}


def test_a_stopped_job_has_time_for_the_end_of_its_run():
    """`ray job stop` (runtime_env.yaml, the RayJob's runtimeEnvYAML) kills the job this
    long after its SIGTERM, and Kubernetes kills the head pod after its grace period: both
    leave room for the longest end of an interrupted run (the driver's waits for its
    actors), plus Ray's shutdown and W&B's (30 s)."""
    from rayrl.ray.driver import END_TIMEOUT_S

    runtime_env = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    manifest = yaml.safe_load((REPO / "cluster" / "rayjob.yaml").read_text())
    job_env = yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])
    RuntimeEnv(**job_env)
    for env_vars in (runtime_env["env_vars"], job_env["env_vars"]):
        assert float(env_vars["RAY_JOB_STOP_WAIT_TIME_S"]) >= END_TIMEOUT_S + 30
    head = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["terminationGracePeriodSeconds"] >= END_TIMEOUT_S + 30
    pre_stop = " ".join(head["containers"][0]["lifecycle"]["preStop"]["exec"]["command"])
    assert "pkill -TERM -f 'rayrl train'" in pre_stop
