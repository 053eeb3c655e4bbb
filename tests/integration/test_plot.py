"""`rayrl plot`: a PNG whose curves are the metrics files' numbers."""

from __future__ import annotations

import json

import matplotlib.image
from click.testing import CliRunner

from rayrl.cli import main
from rayrl.files import read_jsonl
from rayrl.plot import draw_runs, read_curves


def fake_run(root, name, evals, train):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    with open(run / "metrics.jsonl", "w") as f:
        for steps, value in train:
            f.write(json.dumps({"env_steps": steps, "worker/episode_return": value}) + "\n")
        f.write(json.dumps({"env_steps": 99, "learner/loss": 1.0}) + "\n")  # no return: skipped
    with open(run / "eval.jsonl", "w") as f:
        for steps, mean in evals:
            row = {
                "env_steps": steps,
                "eval/return_mean": mean,
                "eval/return_min": mean - 1,
                "eval/return_max": mean + 1,
            }
            f.write(json.dumps(row) + "\n")
    return run


def test_curves_are_the_metrics_files(tmp_path):
    run = fake_run(tmp_path, "a", evals=[(100, 10.0), (200, 30.0)], train=[(50, 5.0), (150, 8.0)])
    curves = read_curves(run)
    assert curves.train_steps == [50, 150]
    assert curves.train_returns == [5.0, 8.0]
    assert curves.eval_steps == [100, 200]
    assert curves.eval_means == [10.0, 30.0]
    assert curves.eval_mins == [9.0, 29.0]


def test_plot_writes_a_png_of_several_runs(tmp_path, tiny):
    import rayrl

    real = rayrl.train(None, overrides=[*tiny, "run.runtime=local"])
    other = fake_run(tmp_path, "b", evals=[(1024, 50.0)], train=[(512, 20.0)])
    output = tmp_path / "curves.png"
    result = CliRunner().invoke(main, ["plot", str(real.run_dir), str(other), "-o", str(output)])
    assert result.exit_code == 0, result.output
    image = matplotlib.image.imread(output)
    assert image.shape[0] > 300
    assert image.shape[1] > 800

    # the drawn curves are the files' numbers, read here independently
    train_ax, eval_ax = draw_runs([real.run_dir, other]).axes
    rows = read_jsonl(real.run_dir / "metrics.jsonl")
    returns = [
        (r["env_steps"], r["worker/episode_return"]) for r in rows if "worker/episode_return" in r
    ]
    evals = read_jsonl(real.run_dir / "eval.jsonl")
    real_train, other_train = train_ax.get_lines()
    assert list(zip(*real_train.get_data(), strict=True)) == returns
    assert list(other_train.get_ydata()) == [20.0]
    real_eval = eval_ax.get_lines()[0]
    assert list(real_eval.get_xdata()) == [e["env_steps"] for e in evals]
    assert list(real_eval.get_ydata()) == [e["eval/return_mean"] for e in evals]


def test_plot_of_an_empty_run_is_a_clear_error(tmp_path):
    (tmp_path / "config.yaml").write_text("{}\n")
    result = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert result.exit_code == 2
    assert "no training or evaluation returns" in result.stderr


def test_plot_of_a_missing_run(tmp_path):
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "not a rayrl run directory" in result.stderr
