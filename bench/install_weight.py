"""What `ray[default]` (Ray's dashboard, job submission) weighs on a local run: builds two
virtual environments side by side, "light" (rayrl with `ray[tune]` only) and "cluster" (the
same plus `ray[default]`), and measures in each the install (size of site-packages, with
and without torch, which dominates; packages; install time) and a short fixed
`rayrl train` (wall time to the first chunk and of the whole command, CPU seconds of every
process the command started, and the processes Ray started, by kind).

Both environments install the same versions from one wheelhouse under --work, downloaded
once beforehand (not timed), so the install time is unpacking and byte-compiling, not the
network. torch is installed first, on its own (`torch==2.13.0`, the CPU wheel), so that
nothing pulls a CUDA torch. "cluster" is `rayrl[cluster]` where the pyproject has that
extra, else plain `rayrl` (whose dependency is then `ray[default,tune]`); "light" is plain
`rayrl` where a `cluster` extra exists, else rayrl without its dependencies plus its
dependency list with `default` taken out of ray's extras.

The runs alternate between the environments (light first in odd rounds, cluster first in
even ones) after one unrecorded warm-up run each. The command is started with this process
as a child subreaper, so every process it starts, Ray's daemons included, stays below it
whatever exits first. Their CPU seconds and resident memory are read by polling /proc
(every --poll-s): a process that exits loses up to a poll's worth of CPU, and one that lives
less than a poll may be missed. `getrusage(RUSAGE_CHILDREN)` would not do: the raylet
ignores SIGCHLD, so the processes it starts (the actors, the dashboard and runtime-env
agents) are reaped with their CPU time thrown away (measured: it saw 5.5 of 18 CPU-s).
Anything still running 5 s after the command exits is reported and killed. Linux only.
Compare only figures from one sitting. The wheel is built from the files git tracks, as
they are in the working tree (an uncommitted pyproject.toml counts).

Ray 2.60 starts the same processes in both: a minimal Ray (no `ray[default]`) also runs the
dashboard head (its usage-stats module only, with the dashboard off) and the dashboard
agent, both with `--minimal`; the per-kind table says what each costs in each.

    python bench/install_weight.py                       # build (or reuse) and measure
    python bench/install_weight.py --rebuild --install-reps 3 --reps 5
    python bench/install_weight.py --config cartpole_ppo --steps 4000
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import email.parser
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
TORCH_DIRS = ("torch", "torchgen", "functorch")
"""What torch itself puts in site-packages (its dependencies, sympy and the rest, count as
the rest)."""
DEFAULT_ONLY = ("aiohttp", "aiohttp-cors", "opencensus", "py-spy", "prometheus-client")
"""Packages that only `ray[default]` brings (one is enough to say it is installed)."""
PR_SET_CHILD_SUBREAPER = 36
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
VENVS = ("light", "cluster")


def sh(command: list[str], **kwargs) -> float:
    """Run `command`, failing loudly; its wall time."""
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.monotonic() - started


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---- building ------------------------------------------------------------------------------


def wheel_metadata(wheel: Path) -> tuple[list[str], set[str]]:
    """A wheel's unconditional requirements and its extras."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(archive.read(name).decode())
    requires = [r for r in message.get_all("Requires-Dist") or [] if "extra ==" not in r]
    return requires, set(message.get_all("Provides-Extra") or [])


def without_default(requirement: str) -> str:
    """`ray[default,tune]>=2.52` -> `ray[tune]>=2.52`; anything else unchanged."""
    found = re.match(r"\s*ray\s*\[([^\]]*)\](.*)", requirement, re.DOTALL)
    if not found:
        return requirement
    extras = [e.strip() for e in found.group(1).split(",") if e.strip() not in ("default", "")]
    return f"ray[{','.join(extras)}]{found.group(2)}" if extras else f"ray{found.group(2)}"


def plans(wheel: Path) -> dict[str, list[list[str]]]:
    """Per environment, the `pip install` argument lists after torch."""
    requires, extras = wheel_metadata(wheel)
    if "cluster" in extras:
        return {"light": [[str(wheel)]], "cluster": [[f"{wheel}[cluster]"]]}
    light = [without_default(r) for r in requires]
    return {"light": [["--no-deps", str(wheel)], light], "cluster": [[str(wheel)]]}


@dataclass
class Install:
    torch_s: list[float]
    rest_s: list[float]
    site_mb: float
    site_mb_no_torch: float
    packages: set[str]


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def du_mb(paths: list[Path]) -> float:
    if not paths:
        return 0.0
    out = subprocess.run(["du", "-sbc", *map(str, paths)], capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1].split()[0]) / 1e6


def measure_install(venv: Path, torch_s: list[float], rest_s: list[float]) -> Install:
    site = site_packages(venv)
    entries = list(site.iterdir())
    no_torch = [
        e
        for e in entries
        if e.name not in TORCH_DIRS and not re.match(r"torch-[^-]+\.dist-info$", e.name)
    ]
    listed = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    packages = {norm(p["name"]) for p in json.loads(listed.stdout)} - {"pip", "setuptools"}
    return Install(torch_s, rest_s, du_mb(entries), du_mb(no_torch), packages)


def build(work: Path, rebuild: bool, reps: int) -> dict[str, Install]:
    record = work / "installs.json"
    if not rebuild and record.is_file() and all((work / v / "bin/rayrl").is_file() for v in VENVS):
        print(f"reusing the environments under {work} (--rebuild to build them again)")
        saved = json.loads(record.read_text())
        return {v: measure_install(work / v, *saved[v]) for v in VENVS}
    for v in VENVS:
        shutil.rmtree(work / v, ignore_errors=True)
    wheels = work / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    constraints = work / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    pip = [sys.executable, "-m", "pip"]
    print(f"building the rayrl wheel from {REPO}, then the wheelhouse (network; not timed)")
    with tempfile.TemporaryDirectory() as source:
        # a copy of what git tracks, so that the wheel is the same whatever else lies there
        files = (
            subprocess.run(
                ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
            )
            .stdout.decode()
            .split("\0")
        )
        for name in filter(None, files):
            if (REPO / name).is_file():
                (Path(source) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, Path(source) / name)
        sh([*pip, "wheel", "--no-deps", "-q", "-w", str(wheels), source])
    wheel = next(wheels.glob("rayrl-*.whl"))
    plan = plans(wheel)
    print("  light:   pip install " + " ; ".join(" ".join(a) for a in plan["light"]))
    print("  cluster: pip install " + " ; ".join(" ".join(a) for a in plan["cluster"]))
    for arguments in plan["light"] + plan["cluster"]:
        # everything both need, one version of each (the cluster set is a superset)
        sh([*pip, "download", "-q", "-d", str(wheels), "-c", str(constraints), TORCH, *arguments])
    for wheel_file in wheels.iterdir():  # into the page cache: the first install reads no disk
        wheel_file.read_bytes()
    times: dict[str, tuple[list[float], list[float]]] = {v: ([], []) for v in VENVS}
    for rep in range(reps):
        for v in VENVS if rep % 2 == 0 else VENVS[::-1]:
            venv = work / v
            print(f"installing {v} (timed, {rep + 1} of {reps})", flush=True)
            shutil.rmtree(venv, ignore_errors=True)
            sh([sys.executable, "-m", "venv", str(venv)])
            venv_pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index"]
            venv_pip += ["--find-links", str(wheels), "-c", str(constraints)]
            times[v][0].append(sh([*venv_pip, TORCH]))
            times[v][1].append(sum(sh([*venv_pip, *arguments]) for arguments in plan[v]))
    record.write_text(json.dumps(times))
    return {v: measure_install(work / v, *times[v]) for v in VENVS}


# ---- running -------------------------------------------------------------------------------


class RunFailedError(Exception):
    """The command failed (a local Ray that did not start in time on a busy machine)."""


@dataclass
class Seen:
    kind: str
    cpu_s: float
    """At the last reading: a process that exits loses up to a poll's worth."""
    rss_mb: float
    """The most seen."""


@dataclass
class Kind:
    count: int = 0
    cpu_s: float = 0.0
    rss_mb: float = 0.0
    """The processes' peaks, summed."""


@dataclass
class Run:
    wall_s: float
    first_row_s: float
    """From the command's start to the first metrics row with env steps, as polled."""
    startup_s: float
    """rayrl's own start-up figure (`startup/total_s`), from its `train` command's start."""
    cpu_s: float
    """CPU seconds (user and system) of the command and every process below it."""
    others: float
    """Cores that the rest of the machine kept busy meanwhile, on average (other programs:
    a busy machine makes the wall times, and less so the CPU seconds, noisy)."""
    kinds: dict[str, Kind] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    """What was still running 5 s after the command exited (killed)."""

    @property
    def processes(self) -> int:
        return sum(kind.count for kind in self.kinds.values())


def kind_of(command: str) -> str:
    """A process's kind: an actor's title (`ray::WorkerService`), a Python script's last
    path parts, or a program's name."""
    if command.startswith("ray::"):  # ray::LearnerService.train, ray::<actor name>:<class>
        return "ray::" + command.split()[0].split(".")[0].rsplit(":", 1)[-1]
    parts = command.split()
    if not parts:
        return ""
    if not Path(parts[0]).name.startswith("python"):  # raylet, gcs_server
        return Path(parts[0]).name
    scripts = [p for p in parts if p.endswith(".py")]
    if scripts:
        return "/".join(Path(scripts[0]).parts[-3:])
    if Path(parts[0]).name.startswith("python") and "-m" in parts:
        return "-m " + parts[parts.index("-m") + 1]
    if len(parts) > 1 and Path(parts[1]).name == "rayrl":
        return "rayrl " + (parts[2] if len(parts) > 2 else "")
    return Path(parts[0]).name


def below(root: int) -> dict[tuple[int, str], tuple[str, float, float]]:
    """Every process below `root` (not `root` itself): (pid, start time) -> (kind, CPU
    seconds, resident MB)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        rss = int(fields[21]) * PAGE / 1e6
        table[int(entry.name)] = (int(fields[1]), fields[19], command, cpu, rss)
    children: dict[int, list[int]] = {}
    for pid, (parent, *_) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        _, started, command, cpu, rss = table[pid]
        found[(pid, started)] = (kind_of(command), cpu, rss)
        todo.extend(children.get(pid, []))
    return found


def busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (every core, /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICKS  # less idle and iowait


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def sampled(metrics: Path) -> dict | None:
    """The first metrics row with env steps, if written."""
    with contextlib.suppress(OSError):
        for line in metrics.read_text().splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if row.get("env_steps", 0) > 0:
                    return row
    return None


def run_once(venv: Path, overrides: list[str], config: str | None, poll_s: float) -> Run:
    me = os.getpid()
    with tempfile.TemporaryDirectory() as runs:
        command = [str(venv / "bin/rayrl"), "train", *(["--config", config] if config else [])]
        every = [*overrides, f"run.runs_dir={runs}", "run.name=w", "logging.console=false"]
        every.append("logging.log_interval_s=0.2")  # a first row soon after the first chunk
        command += [part for o in every for part in ("--set", o)]
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "VIRTUAL_ENV"))
        }
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        reap()
        machine_before = busy_s()
        seen: dict[tuple[int, str], Seen] = {}
        started = time.monotonic()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        first_row = None
        output = []
        os.set_blocking(process.stdout.fileno(), False)
        while process.poll() is None:
            for key, (kind, cpu, rss) in below(me).items():
                old = seen.get(key)
                if old is None:
                    seen[key] = Seen(kind, cpu, rss)
                else:  # a worker renames itself: ray::IDLE, then ray::<actor class>
                    old.cpu_s = cpu
                    old.rss_mb = max(old.rss_mb, rss)
                    if kind and not (kind == "ray::IDLE" and old.kind.startswith("ray::")):
                        old.kind = kind
            if first_row is None and sampled(Path(runs) / "w" / "metrics.jsonl"):
                first_row = time.monotonic() - started
            with contextlib.suppress(TypeError):
                output.append(process.stdout.read() or b"")
            time.sleep(poll_s)
        wall = time.monotonic() - started
        machine = busy_s() - machine_before
        os.set_blocking(process.stdout.fileno(), True)
        output.append(process.stdout.read())
        row = sampled(Path(runs) / "w" / "metrics.jsonl") or {}
    text = b"".join(output).decode(errors="replace")
    # what outlived the command: give it a moment to exit on its own, then kill it
    deadline = time.monotonic() + 5
    while below(me) and time.monotonic() < deadline:
        reap()
        time.sleep(0.1)
    left = below(me)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    reap()
    cpu = sum(one.cpu_s for one in seen.values())
    if process.returncode != 0:
        error = next((line for line in text.splitlines() if line.startswith("error")), text[-2000:])
        raise RunFailedError(f"exit {process.returncode}: {error}")
    kinds: dict[str, Kind] = {}
    for one in seen.values():
        kind = kinds.setdefault(one.kind or "(unnamed)", Kind())
        kind.count += 1
        kind.cpu_s += one.cpu_s
        kind.rss_mb += one.rss_mb
    return Run(
        wall,
        first_row if first_row is not None else float("nan"),
        row.get("startup/total_s", float("nan")),
        cpu,
        max(0.0, machine - cpu) / wall,
        kinds,
        sorted(f"{kind} (pid {pid})" for (pid, _), (kind, *_) in left.items()),
    )


# ---- reporting -----------------------------------------------------------------------------


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """ "median (min-max)", of the values that are not NaN (a first row not seen: the run
    ended within a poll of writing it)."""
    values = [x for x in values if x == x]
    if not values:
        return "-"
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def import_ray(venv: Path) -> tuple[float, int]:
    """CPU seconds of `python -c "import ray"` (one process, exact: os.wait4), and how many
    modules it leaves imported."""
    code = "import sys, ray; print(len(sys.modules))"
    process = subprocess.Popen([str(venv / "bin/python"), "-c", code], stdout=subprocess.PIPE)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{venv}: import ray failed")
    return usage.ru_utime + usage.ru_stime, int(output)


def med(runs: list[Run], kind: str, attribute: str) -> float:
    """The median over `runs` of one attribute of a kind of process (0 where absent)."""
    return statistics.median(getattr(r.kinds.get(kind, Kind()), attribute) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/rayrl-weight"))
    parser.add_argument("--rebuild", action="store_true", help="build the environments again")
    parser.add_argument("--reps", type=int, default=3, help="recorded runs per environment")
    parser.add_argument("--config", default=None, help="a preset (default: the default run)")
    parser.add_argument("--steps", type=int, default=2000, help="run.total_env_steps")
    parser.add_argument("--poll-s", type=float, default=0.1)
    parser.add_argument(
        "--install-reps", type=int, default=1, help="installs of each environment (alternating)"
    )
    parser.add_argument("--attempts", type=int, default=3, help="tries of a run that fails")
    parser.add_argument("--verbose", action="store_true", help="each run's processes")
    args = parser.parse_args()
    if sys.platform != "linux":
        raise SystemExit("Linux only (/proc, a child subreaper)")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")
    args.work.mkdir(parents=True, exist_ok=True)
    installs = build(args.work, args.rebuild, args.install_reps)
    light, cluster = (installs[v].packages for v in VENVS)
    if light & set(DEFAULT_ONLY) or not cluster & set(DEFAULT_ONLY):
        raise SystemExit(
            f"ray[default] is not (only) in cluster: light {light & set(DEFAULT_ONLY)}"
        )

    imports: dict[str, list[tuple[float, int]]] = {v: [] for v in VENVS}
    for rep in range(args.reps + 1):
        for v in VENVS if rep % 2 else VENVS[::-1]:
            one = import_ray(args.work / v)
            if rep:
                imports[v].append(one)

    overrides = [f"run.total_env_steps={args.steps}", "run.target_return=null"]
    runs: dict[str, list[Run]] = {v: [] for v in VENVS}
    for rep in range(args.reps + 1):  # round 0: the unrecorded warm-up
        for v in VENVS if rep % 2 else VENVS[::-1]:
            label = "warm-up" if rep == 0 else f"round {rep}"
            for attempt in range(1, args.attempts + 1):
                try:
                    one = run_once(args.work / v, overrides, args.config, args.poll_s)
                    break
                except RunFailedError as failed:
                    print(f"  {label} {v:8s} failed (attempt {attempt}): {failed}", flush=True)
            else:
                raise SystemExit(f"{v}: {args.attempts} attempts failed")
            print(
                f"  {label} {v:8s} wall {one.wall_s:5.1f} s, first row {one.first_row_s:5.1f} s, "
                f"start-up {one.startup_s:5.1f} s, {one.cpu_s:5.1f} CPU-s, "
                f"other load {one.others:.1f} cores, {one.processes} processes"
                + (f"; left running, killed: {', '.join(one.left)}" if one.left else ""),
                flush=True,
            )
            if args.verbose:
                print(
                    "    "
                    + ", ".join(
                        f"{k.count} x {n} {k.cpu_s:.2f}" for n, k in sorted(one.kinds.items())
                    )
                )
            if rep:
                runs[v].append(one)

    command = f"rayrl train{' --config ' + args.config if args.config else ''} " + " ".join(
        f"--set {o}" for o in overrides
    )
    print(f"\n`{command}`, {args.reps} rounds, median (min-max); install from a local wheelhouse\n")
    print("| | light (`ray[tune]`) | cluster (+ `ray[default]`) |")
    print("|---|---:|---:|")
    rows = [
        ("site-packages, MB", lambda v: f"{installs[v].site_mb:,.0f}"),
        ("site-packages without torch, MB", lambda v: f"{installs[v].site_mb_no_torch:,.0f}"),
        ("packages", lambda v: f"{len(installs[v].packages)}"),
        ("install time of torch, s", lambda v: spread(installs[v].torch_s)),
        ("install time of the rest, s", lambda v: spread(installs[v].rest_s)),
        (
            "`python -c 'import ray'`: CPU-s; modules",
            lambda v: f"{spread([x[0] for x in imports[v]], '{:.2f}')}; {imports[v][0][1]}",
        ),
        ("whole command, s", lambda v: spread([x.wall_s for x in runs[v]])),
        ("to the first metrics row, s", lambda v: spread([x.first_row_s for x in runs[v]])),
        (
            "rayrl's start-up (`startup/total_s`), s",
            lambda v: spread([x.startup_s for x in runs[v]]),
        ),
        ("CPU-s, all processes", lambda v: spread([x.cpu_s for x in runs[v]])),
        ("other programs' load meanwhile, cores", lambda v: spread([x.others for x in runs[v]])),
        (
            "processes (the command and below it)",
            lambda v: spread([x.processes for x in runs[v]], "{:.0f}"),
        ),
    ]
    for name, cell in rows:
        cells = [cell(v) for v in VENVS]
        print(f"| {name} | {cells[0]} | {cells[1]} |")

    print(
        "\nProcesses by kind, median per run: how many, their CPU-s (polled: a process that "
        "exits loses up to a poll's worth) and their peak resident memory, MB (* where the "
        "count or the CPU-s differ by 0.3 or more)\n"
    )
    print("| kind | light: n, CPU-s, MB | cluster: n, CPU-s, MB |\n|---|---:|---:|")
    kinds = {k for v in VENVS for r in runs[v] for k in r.kinds}
    for kind in sorted(kinds, key=lambda k: -max(med(runs[v], k, "cpu_s") for v in VENVS)):
        cells = [[med(runs[v], kind, a) for a in ("count", "cpu_s", "rss_mb")] for v in VENVS]
        differ = cells[0][0] != cells[1][0] or abs(cells[0][1] - cells[1][1]) >= 0.3
        text = [f"{n:g}, {cpu:.2f}, {mb:,.0f}" for n, cpu, mb in cells]
        print(f"| `{kind}`{' *' if differ else ''} | {text[0]} | {text[1]} |")
    only = sorted(cluster - light)
    print(f"\nPackages only in cluster ({len(only)}): {', '.join(only)}")


if __name__ == "__main__":
    main()
