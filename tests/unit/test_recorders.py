"""The metrics file's order, a property its readers rely on: `env_steps` strictly increases
from row to row (so each metric appears at most once per count, in order), evaluation rows
included, whenever they end."""

from __future__ import annotations

import time

import numpy as np

from rayrl.contract import StoreKind
from rayrl.core import EvalResult
from rayrl.files import read_jsonl
from rayrl.presets import load_config
from rayrl.recorders import JsonlRecorder, Recorders
from rayrl.run_writer import RunWriter
from rayrl.rundir import RunDirectory
from rayrl.session import Counters, TrainingSession


def test_records_at_one_count_are_merged_into_one_row_written_in_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    recorder = JsonlRecorder(path, RunWriter(3))
    recorder.record({"run/wall_s": 1.0}, 0)
    recorder.record({"run/wall_s": 2.0, "startup/total_s": 9.0}, 0)  # no experience yet
    assert not path.exists()  # held until a later count, or the end
    recorder.record({"worker/episode_return": 10.0}, 512)
    recorder.record({"eval/return_mean": 20.0}, 512)  # an evaluation ended in that round
    recorder.record({"worker/episode_return": 30.0}, 1024)
    assert [row["env_steps"] for row in read_jsonl(path)] == [0, 512]
    recorder.close()
    written = read_jsonl(path)
    assert [row["env_steps"] for row in written] == [0, 512, 1024]
    assert written[0]["run/wall_s"] == 2.0  # the newer value wins
    assert written[0]["startup/total_s"] == 9.0
    assert written[1]["eval/return_mean"] == 20.0
    assert written[1]["worker/episode_return"] == 10.0
    assert list(written[2])[:2] == ["env_steps", "time_s"]


def test_an_evaluation_that_ends_late_is_recorded_at_the_runs_clock(tmp_path):
    """The Ray runtime evaluates while training goes on: an evaluation of the weights at
    1,024 env steps may end at 1,536. Its metrics row is written at 1,536 and names the
    weights in `eval/env_steps`; eval.jsonl keeps the weights' count."""
    config = load_config(None, ["logging.console=false"])
    run_dir = RunDirectory(tmp_path)
    recorder = JsonlRecorder(run_dir.metrics_path, RunWriter(3))
    kind = StoreKind(namespace="replay", items="transitions", drops_stale=False)
    session = TrainingSession(config, run_dir, Recorders([recorder]), Counters(), time.time(), kind)
    session.counters.env_steps = 1024
    session.log_if_due(force=True)
    session.counters.env_steps = 1536
    session.log_if_due(force=True)
    session.record_eval(EvalResult(np.array([5.0]), np.array([9])), 1024)
    session.counters.env_steps = 2048
    session.log_if_due(force=True)
    recorder.close()
    written = read_jsonl(run_dir.metrics_path)
    assert [row["env_steps"] for row in written] == [1024, 1536, 2048]
    assert written[1]["eval/return_mean"] == 5.0
    assert written[1]["eval/env_steps"] == 1024
    assert [row["env_steps"] for row in read_jsonl(run_dir.eval_path)] == [1024]
    assert session.evaluated_env_steps == 1024
    assert not session.evaluated_now()
    session.record_eval(EvalResult(np.array([6.0]), np.array([9])), 2048)
    assert session.evaluated_now()  # the weights at the run's count: no final one again
