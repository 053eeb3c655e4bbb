"""A run's metrics: the stats its parts report, made into metrics for the recorders, the
headline numbers and the end-of-run summary.

Both runtimes feed the same `RunMetrics` with the stats that workers (`ChunkStats`), the
learner (update metrics and timings) and the experience store (`StoreStats`) report; it
turns them into namespaced metrics every log interval, into the run's headline numbers
(`TrainResult.headline`) and into the summary table printed at the end of a run (the
counterpart of border's `stats.fmt()` and `actor_stats_fmt`).
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from rayrl.contract import StoreKind
from rayrl.core import ChunkStats, NonFiniteSteps, StoreStats


@dataclass
class WorkerTotals:
    env_steps: int = 0
    episodes: int = 0
    busy_s: float = 0.0
    act_s: float = 0.0
    step_s: float = 0.0
    process_s: float = 0.0
    restarts: int = 0
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=100))


STARTUP_PHASES = ("setup", "ray", "actors", "first_chunk")
"""How a run's start-up splits, in order: the command's own set-up (imports, config, run
directory, recorders), Ray's start or connection, the actors' creation (until the first
rollout worker has built its env and policy), and the first chunk of experience (its env
steps, and its way back to the driver). A phase a runtime does not have (the local runtime
starts no Ray) takes no time."""


class RunMetrics:
    def __init__(self, num_workers: int, store: StoreKind, started_at: float | None = None) -> None:
        """`started_at` is the `time.time()` at which the command started (start-up is
        measured from it)."""
        self.started = time.perf_counter()
        self.started_at = time.time() if started_at is None else started_at
        self.phase_ends: dict[str, float] = {}
        """Start-up phase -> `time.time()` at its end (`STARTUP_PHASES`)."""
        self.store = store
        """The experience store's kind: its metrics go under `store.namespace`."""
        self.workers: dict[int, WorkerTotals] = defaultdict(WorkerTotals)
        for i in range(num_workers):
            self.workers[i] = WorkerTotals()
        self.updates = 0
        self.update_s = 0.0
        self.learner_wall_s = 0.0
        self.inserted = 0
        self.sampled = 0
        self.store_size = 0
        self.dropped = 0
        self.lags: list[int] = []
        self.sync_latencies: list[float] = []
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.recent_losses: deque[float] = deque(maxlen=100)
        self.counters: dict[str, float] = defaultdict(float)
        self.nonfinite = NonFiniteSteps()
        self._interval_start = self.started
        self._interval = self._empty_interval()

    @staticmethod
    def _empty_interval() -> dict:
        return {
            "env_steps": 0,
            "returns": [],
            "lengths": [],
            "agent_returns": defaultdict(list),
            "updates": 0,
            "update_s": 0.0,
            "learner_wall_s": 0.0,
            "learner": defaultdict(list),
            "inserted": 0,
            "sampled": 0,
            "lags": [],
            "sync": [],
        }

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def phase_done(self, phase: str) -> None:
        """A start-up phase ended now (only its first end counts: a restarted worker's
        start is not start-up)."""
        assert phase in STARTUP_PHASES, phase
        self.phase_ends.setdefault(phase, time.time())

    @property
    def started_up(self) -> bool:
        """The first chunk has arrived."""
        return "first_chunk" in self.phase_ends

    def startup(self) -> dict[str, float]:
        """Seconds of each start-up phase, and `total` (command start to the first chunk),
        once the first chunk has arrived; {} before."""
        if not self.started_up:
            return {}
        seconds, previous = {}, self.started_at
        for phase in STARTUP_PHASES:
            end = max(previous, self.phase_ends.get(phase, previous))
            seconds[phase] = end - previous
            previous = end
        seconds["total"] = previous - self.started_at
        return seconds

    def add_chunk(self, stats: ChunkStats, learner_version: int) -> None:
        """A delivered chunk; `learner_version` is the learner's latest publication."""
        self.phase_done("first_chunk")
        worker = self.workers[stats.worker_index]
        worker.env_steps += stats.env_steps
        worker.episodes += len(stats.episode_returns)
        worker.act_s += stats.act_s
        worker.step_s += stats.step_s
        worker.process_s += stats.process_s
        worker.busy_s += stats.act_s + stats.step_s + stats.process_s
        worker.recent_returns.extend(stats.episode_returns)
        self.recent_returns.extend(stats.episode_returns)
        lag = max(0, learner_version - stats.policy_version)
        self.lags.append(lag)
        self.sync_latencies.extend(stats.sync_latencies_s)
        interval = self._interval
        interval["env_steps"] += stats.env_steps
        interval["returns"] += stats.episode_returns
        interval["lengths"] += stats.episode_lengths
        for agent, returns in stats.agent_returns.items():
            interval["agent_returns"][agent] += returns
        interval["lags"].append(lag)
        interval["sync"] += stats.sync_latencies_s

    def add_inserted(self, count: int) -> None:
        """Transitions that entered the replay buffer."""
        self.inserted += count
        self._interval["inserted"] += count

    def add_updates(
        self,
        metrics: dict[str, list[float]],
        updates: int,
        update_s: float,
        wall_s: float,
        sampled: int,
        nonfinite: NonFiniteSteps,
    ) -> None:
        """Learner updates: per-update metric values, time spent updating and in total, and
        the learner's count of skipped non-finite steps."""
        self.nonfinite = nonfinite
        if nonfinite.skipped:
            self.counters["learner/nonfinite_skipped"] = float(nonfinite.skipped)
        self.updates += updates
        self.update_s += update_s
        self.learner_wall_s += wall_s
        self.sampled += sampled
        interval = self._interval
        interval["updates"] += updates
        interval["update_s"] += update_s
        interval["learner_wall_s"] += wall_s
        interval["sampled"] += sampled
        for key, values in metrics.items():
            interval["learner"][key] += values
        self.recent_losses.extend(metrics.get("learner/loss", []))

    def add_worker_restart(self, worker_index: int) -> None:
        self.workers[worker_index].restarts += 1
        self.counters["worker/restarts"] += 1

    def count(self, key: str, amount: float = 1.0) -> None:
        """A run-level counter reported with every interval (e.g. `learner/restarts`)."""
        self.counters[key] += amount

    def interval_metrics(self, store: StoreStats | None = None) -> dict[str, float]:
        """Metrics since the last call, namespaced, and reset the interval."""
        now = time.perf_counter()
        seconds = max(now - self._interval_start, 1e-9)
        interval = self._interval
        ns = self.store.namespace
        metrics: dict[str, float] = {
            "worker/env_steps_per_s": interval["env_steps"] / seconds,
            "learner/updates_per_s": interval["updates"] / seconds,
            f"{ns}/inserts_per_s": interval["inserted"] / seconds,
            f"{ns}/samples_per_s": interval["sampled"] / seconds,
        }
        if interval["returns"]:
            metrics["worker/episode_return"] = float(np.mean(interval["returns"]))
            metrics["worker/episode_length"] = float(np.mean(interval["lengths"]))
            metrics["worker/episodes"] = float(len(interval["returns"]))
        for agent, returns in interval["agent_returns"].items():
            if returns:
                metrics[f"worker/agent_return/{agent}"] = float(np.mean(returns))
        if interval["learner_wall_s"] > 0:
            metrics["learner/utilization"] = interval["update_s"] / interval["learner_wall_s"]
        for key, values in interval["learner"].items():
            metrics[key] = float(np.mean(values))
        if interval["lags"]:
            metrics["worker/policy_lag_p50"] = float(np.median(interval["lags"]))
            metrics["worker/policy_lag_max"] = float(np.max(interval["lags"]))
        if interval["sync"]:
            metrics["worker/sync_latency_ms_p50"] = 1000 * float(np.median(interval["sync"]))
        if store is not None:
            self.store_size = store.size
            self.dropped = store.dropped
            metrics[f"{ns}/size"] = float(store.size)
            if self.store.drops_stale:
                metrics[f"{ns}/dropped_stale"] = float(store.dropped)
        metrics.update(self.counters)
        self._interval_start = now
        self._interval = self._empty_interval()
        return metrics

    def headline(self) -> dict[str, float]:
        """The run's headline numbers: throughput, learner utilization, policy lag and
        weight-sync latency percentiles (what the benchmarks report)."""
        wall = max(self.elapsed_s, 1e-9)
        headline = {
            "env_steps_per_s": sum(w.env_steps for w in self.workers.values()) / wall,
            "learner_updates_per_s": self.updates / wall,
            "learner_utilization": self.update_s / self.learner_wall_s
            if self.learner_wall_s
            else 0.0,
            "store_inserts_per_s": self.inserted / wall,
            "store_samples_per_s": self.sampled / wall,
            "syncs": float(len(self.sync_latencies)),
        }
        if self.lags:
            headline["policy_lag_p50"] = float(np.median(self.lags))
            headline["policy_lag_max"] = float(np.max(self.lags))
        if self.sync_latencies:
            latencies = 1000 * np.array(self.sync_latencies)
            headline["sync_latency_ms_p50"] = float(np.median(latencies))
            headline["sync_latency_ms_p95"] = float(np.percentile(latencies, 95))
        startup = self.startup()
        if startup:
            headline["startup_s"] = startup.pop("total")
            headline.update({f"startup_{phase}_s": value for phase, value in startup.items()})
        return headline

    def summary(self) -> str:
        """The end-of-run table: workers, learner, replay, policy lag and weight sync."""
        wall = max(self.elapsed_s, 1e-9)
        headline = self.headline()
        lines = []
        startup = self.startup()
        if startup:
            phases = ", ".join(
                f"{phase.replace('_', ' ')} {startup[phase]:.1f}" for phase in STARTUP_PHASES
            )
            lines.append(f"start-up: {startup['total']:.1f} s to the first chunk ({phases})")
        lines.append("workers:")
        lines.append(
            f"  {'worker':>6} {'env steps':>11} {'steps/s':>9} {'episodes':>9} "
            f"{'return(100)':>12} {'act/step/proc %':>16} {'restarts':>8}"
        )
        for index in sorted(self.workers):
            w = self.workers[index]
            recent = f"{np.mean(w.recent_returns):.1f}" if w.recent_returns else "-"
            busy = max(w.busy_s, 1e-9)
            shares = "/".join(f"{100 * s / busy:.0f}" for s in (w.act_s, w.step_s, w.process_s))
            lines.append(
                f"  {index:>6} {w.env_steps:>11,} {w.env_steps / wall:>9.0f} {w.episodes:>9} "
                f"{recent:>12} {shares:>16} {w.restarts:>8}"
            )
        total_steps = sum(w.env_steps for w in self.workers.values())
        lines.append(f"  {'all':>6} {total_steps:>11,} {headline['env_steps_per_s']:>9.0f}")
        loss = f", loss {np.mean(self.recent_losses):.4g} (last 100)" if self.recent_losses else ""
        lines.append(
            f"learner: {self.updates:,} updates, {headline['learner_updates_per_s']:.1f} "
            f"updates/s, {100 * headline['learner_utilization']:.0f}% of its time updating "
            f"(the rest waiting for batches){loss}"
        )
        dropped = ""
        if self.store.drops_stale:
            dropped = f", {self.dropped:,} stale {self.store.items} dropped"
        lines.append(
            f"{self.store.namespace}: size {self.store_size:,}, "
            f"{headline['store_inserts_per_s']:.0f} inserts/s, "
            f"{headline['store_samples_per_s']:.0f} samples/s{dropped}"
        )
        if self.lags:
            lines.append(
                f"policy lag (learner updates behind the oldest acting weights of a chunk): "
                f"p50 {headline['policy_lag_p50']:.0f}, max {headline['policy_lag_max']:.0f}"
            )
        if self.sync_latencies:
            lines.append(
                "weight sync (publish -> in use by a worker): p50 "
                f"{headline['sync_latency_ms_p50']:.1f} ms, p95 "
                f"{headline['sync_latency_ms_p95']:.1f} ms over {len(self.sync_latencies)} syncs"
            )
        for key, value in sorted(self.counters.items()):
            lines.append(f"{key}: {value:g}")
        return "\n".join(lines)
