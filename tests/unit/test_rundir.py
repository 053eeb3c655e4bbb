"""The run directory: created atomically, held by one process, cut back on resume."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from rayrl.errors import UserError
from rayrl.files import read_jsonl
from rayrl.presets import load_config
from rayrl.rundir import RunDirectory


def config(runs_dir, *overrides: str):
    return load_config(None, [f"run.runs_dir={runs_dir}", *overrides])


def create_run(runs_dir: str, start, created) -> None:
    """In a separate process: wait until every process is ready, then create an unnamed
    run; put its directory's name, or what failed, on `created`."""
    try:
        start.wait(timeout=600)
        created.put(str(RunDirectory.create(config(runs_dir), "cartpole-dqn").root))
    except Exception as error:  # the parent says what failed, rather than time out
        created.put(f"failed: {error!r}")


def test_runs_started_at_once_get_a_directory_each(tmp_path):
    """Four processes create unnamed runs at the same instant (the same second, the same
    name): each gets its own directory."""
    context = multiprocessing.get_context("spawn")
    start, created = context.Barrier(4), context.Queue()  # all four create at once
    procs = [
        context.Process(target=create_run, args=(str(tmp_path), start, created), daemon=True)
        for _ in range(4)
    ]
    for proc in procs:
        proc.start()
    # each process is a cold start that imports torch (this module's imports): seconds on
    # an idle machine, over a minute on a loaded 2-core one, which a shorter wait failed on
    roots = {created.get(timeout=660) for _ in procs}
    for proc in procs:
        proc.join(timeout=60)
    assert not [root for root in roots if root.startswith("failed")], roots
    assert len(roots) == 4
    for root in roots:
        assert (tmp_path / root).joinpath("config.yaml").is_file()


def test_a_directory_in_use_cannot_be_taken_by_a_second_run(tmp_path):
    first = RunDirectory.create(config(tmp_path, "run.name=shared"), "x")
    with pytest.raises(UserError, match=r"'.*shared' is in use by another rayrl process \(pid"):
        RunDirectory.create(config(tmp_path, "run.name=shared"), "x")
    with pytest.raises(UserError, match="is in use by another rayrl process"):
        RunDirectory.open(first.root).lock()  # a second --resume
    first.release()
    with pytest.raises(UserError, match=r"already exists and is not empty; .* --resume"):
        RunDirectory.create(config(tmp_path, "run.name=shared"), "x")
    resumed = RunDirectory.open(first.root)
    resumed.lock()  # free again
    resumed.release()


def test_cut_back_drops_rows_after_the_checkpoint_and_half_written_lines(tmp_path):
    """metrics.jsonl is stamped with the run's clock: the rows from the checkpoint's count on
    go (the resumed run records that count again); eval.jsonl with the evaluated weights':
    evaluations of weights up to the checkpoint stay."""
    run = RunDirectory.create(config(tmp_path), "x")
    rows = [{"env_steps": steps, "x": 1.0} for steps in (100, 200, 300, 400)]
    run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"env_st')
    run.append_eval({"env_steps": 200, "eval/return_mean": 1.0})
    run.append_eval({"env_steps": 400, "eval/return_mean": 2.0})
    run.cut_back(200)
    assert run.metrics_path.read_text() == json.dumps(rows[0]) + "\n"  # the half line too
    evals = [row["env_steps"] for row in read_jsonl(run.eval_path)]
    assert evals == [200]
    assert run.last_evaluated_env_steps() == 200


def test_a_run_started_again_from_the_beginning_keeps_no_row(tmp_path):
    """Killed before its first checkpoint: its rows (at env step 0 and later) would sit
    beside the new segment's, with env steps and time going back."""
    run = RunDirectory.create(config(tmp_path), "x")
    run.metrics_path.write_text('{"env_steps": 0, "time_s": 5.0}\n{"env_steps": 512}\n')
    run.append_eval({"env_steps": 512, "eval/return_mean": 1.0})
    run.cut_back(0)
    assert run.metrics_path.read_text() == ""
    assert run.eval_path.read_text() == ""
    assert run.last_evaluated_env_steps() is None


def test_a_run_stopped_while_its_directory_is_made_leaves_none(tmp_path, monkeypatch):
    """An interrupt (SIGTERM turned into KeyboardInterrupt) as the config is written."""

    def interrupted(self, config):
        (self.root / "config.yaml").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(RunDirectory, "write_config", interrupted)
    with pytest.raises(KeyboardInterrupt):
        RunDirectory.create(config(tmp_path, "run.name=stopped"), "x")
    assert not (tmp_path / "stopped").exists()


def test_a_refused_new_run_leaves_no_directory_but_a_used_one_stays(tmp_path):
    refused = RunDirectory.create(config(tmp_path, "run.name=refused"), "x")
    refused.remove_if_unused()
    assert not refused.root.exists()
    used = RunDirectory.create(config(tmp_path, "run.name=used"), "x")
    used.metrics_path.write_text('{"env_steps": 0}\n')
    used.remove_if_unused()
    assert used.metrics_path.is_file()
    resumed = RunDirectory.open(used.root)  # not made by this process: never removed
    used.metrics_path.unlink()
    resumed.remove_if_unused()
    assert resumed.config_path.is_file()


def test_both_files_drop_an_evaluation_recorded_after_the_checkpoint(tmp_path):
    """The Ray runtime evaluates the weights at 200 while training goes on, and records it
    at 300, after the checkpoint at 200: metrics.jsonl's row at 300 goes, and so does
    eval.jsonl's row, though it evaluated weights from before the checkpoint."""
    run = RunDirectory.create(config(tmp_path), "x")
    run.metrics_path.write_text('{"env_steps": 100}\n{"env_steps": 300, "eval/env_steps": 200}\n')
    run.append_eval({"env_steps": 100, "recorded_at_env_steps": 100})
    run.append_eval({"env_steps": 200, "recorded_at_env_steps": 300})
    run.cut_back(200)
    assert [row["env_steps"] for row in read_jsonl(run.metrics_path)] == [100]
    assert run.last_evaluated_env_steps() == 100


def test_an_interrupt_a_library_swallowed_while_the_run_started_stops_it(tmp_path):
    """Ray's Cython modules ignore a KeyboardInterrupt raised while they are imported; the
    flag the CLI's handler sets still stops the run before it joins Ray, leaving nothing."""
    import rayrl
    from rayrl import run_lifecycle

    run_lifecycle._interrupted.set()  # what the CLI's handler sets before it raises
    try:
        with pytest.raises(KeyboardInterrupt):
            rayrl.train("cartpole_dqn", overrides=[f"run.runs_dir={tmp_path}"])
    finally:
        run_lifecycle._interrupted.clear()
    assert not any(tmp_path.iterdir())
