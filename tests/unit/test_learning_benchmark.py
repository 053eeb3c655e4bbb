"""bench/learning.py's table: figures at a budget, rows replacing the rows measured before
the records, the commands it lists, and the records' compact rows. The table is what the
learning results are read from, so a wrong row would misreport them."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.conftest import bench_script


@pytest.fixture(scope="module")
def learning():
    with bench_script("learning") as script:
        yield script


def record(learning, seed=0, *, planned=1_000_000, scheduled=False, evals=(), game="Breakout"):
    """A record with a metrics row every 50k env steps (wall 60 s per 100k, training return
    = steps / 100k, learner busy 0.5) and evaluations (env steps, mean) as given."""
    metrics = [
        {
            "env_steps": steps,
            "run/wall_s": 0.6e-3 * steps,
            "worker/episode_return": steps / 1e5,
            "learner/utilization": 0.5,
        }
        for steps in range(50_000, planned + 1, 50_000)
    ]
    eval_rows = [
        {"env_steps": s, "eval/return_mean": m, "eval/return_min": m, "eval/return_max": m}
        for s, m in evals
    ]
    return {
        "run": f"minatar_dqn-{game}-s{seed}",
        "variant": "minatar_dqn",
        "overrides": [],
        "game": game,
        "seed": seed,
        "planned_env_steps": planned,
        "budget_scheduled": scheduled,
        "machine": "m",
        "measured": "2026-11-25",
        "evals": learning.columns(eval_rows, learning.EVALS),
        "metrics": learning.columns(metrics, learning.METRICS),
    }


def test_figures_at_a_budget_use_the_evaluation_there_not_a_later_one(learning):
    run = record(learning, planned=2_000_000, evals=[(1_000_064, 3.0), (2_000_128, 9.0)])
    at_1m = learning.figures(run, 1_000_000)
    assert at_1m.env_steps == 1_000_064
    assert at_1m.final_eval == 3.0
    assert at_1m.wall_s == pytest.approx(600.0)
    assert at_1m.final_training == pytest.approx(7.75)  # the last 10 rows: 5.5 ... 10
    assert at_1m.learner_share == 0.5
    assert learning.figures(run, 2_000_000).final_eval == 9.0
    assert learning.figures(run, 3_000_000) is None  # not reached


def test_a_run_whose_schedules_span_its_budget_counts_only_at_that_budget(learning):
    run = record(learning, planned=2_000_000, scheduled=True, evals=[(1_000_000, 3), (2e6, 9)])
    assert learning.figures(run, 1_000_000) is None
    assert learning.figures(run, 2_000_000).final_eval == 9


def test_records_replace_the_earlier_rows_of_their_budget_only(learning, tmp_path, monkeypatch):
    earlier = tmp_path / "earlier.md"
    earlier.write_text(
        "# t\n\nprose\n\n"
        "| `minatar_dqn` | Breakout | 3 | 1,003,520 | 1.0 | x |\n"
        "| `minatar_dqn` | Breakout | 1 | 5,001,216 | 2.0 | x |\n"
    )
    monkeypatch.setattr(learning, "EARLIER", earlier)
    groups = {("minatar_dqn", "Breakout"): [record(learning, evals=[(1_000_064, 4.0)])]}
    made = learning.table_rows(groups)
    assert list(made) == [("minatar_dqn", "Breakout", 1_000_000)]
    assert "| 1,000,064 | 4.0 |" in made["minatar_dqn", "Breakout", 1_000_000]
    assert learning.earlier_rows(set(made)) == [
        "| `minatar_dqn` | Breakout | 1 | 5,001,216 | 2.0 | x |"
    ]
    assert learning.earlier_text() == ["prose"]


def test_seeds_across_one_row_give_mean_std_standard_error_and_the_worst_seed(learning):
    members = [record(learning, seed, evals=[(1_000_000, m)]) for seed, m in enumerate([2, 4])]
    (row,) = learning.table_rows({("minatar_dqn", "Breakout"): members}).values()
    # standard error across seeds: 1.414 / sqrt(2); the worst seed's return: 2
    assert "| 2 | 1,000,000 | 3.0 ± 1.4 | 1.0 | 2.0 |" in row


def test_one_seed_gives_its_evaluations_standard_error_where_the_record_has_its_spread(learning):
    run = record(learning, evals=[(1_000_000, 30.0)])
    run["evals"] = learning.columns(
        [
            {
                "env_steps": 1_000_000,
                "eval/return_mean": 30.0,
                "eval/return_std": 20.0,
                "eval/episodes": 100,
            }
        ],
        learning.EVALS,
    )
    (row,) = learning.table_rows({("minatar_dqn", "Breakout"): [run]}).values()
    assert "| 1 | 1,000,000 | 30.0 | 2.0 | 30.0 |" in row  # 20 / sqrt(100 - 1)
    # a record written before the spread was kept: four evaluation columns, no error
    run["evals"] = [[1_000_000, 30.0, 0.0, 60.0]]
    (row,) = learning.table_rows({("minatar_dqn", "Breakout"): [run]}).values()
    assert "| 1 | 1,000,000 | 30.0 | - | 30.0 |" in row


def test_commands_name_only_the_games_and_seeds_that_ran_together(learning):
    breakout = [record(learning, seed) for seed in (0, 1, 2)]
    invaders = [record(learning, 0, planned=2_000_000, game="SpaceInvaders")]
    for r in [*breakout, *invaders]:
        r["variant"], r["overrides"] = "minatar_dqn+fast", ["algorithm.gamma=0.9"]
    groups = {("minatar_dqn+fast", "Breakout"): breakout}
    groups["minatar_dqn+fast", "SpaceInvaders"] = invaders
    assert learning.commands(groups) == [
        "python bench/learning.py --preset minatar_dqn --label fast --set algorithm.gamma=0.9 "
        "--games Breakout --seeds 0 1 2 --env-steps 1000000",
        "python bench/learning.py --preset minatar_dqn --label fast --set algorithm.gamma=0.9 "
        "--games SpaceInvaders --seeds 0 --env-steps 2000000",
    ]


def test_compact_rows_keep_env_steps_exact_and_drop_what_a_row_lacked(learning):
    rows = [{"env_steps": 700_064, "run/wall_s": 12.345678}, {"env_steps": 1, "run/wall_s": None}]
    kept = learning.expand(learning.columns(rows, learning.METRICS), learning.METRICS)
    assert kept == [{"env_steps": 700_064, "run/wall_s": 12.35}, {"env_steps": 1}]


@pytest.mark.parametrize(
    ("label", "overrides", "error"),
    [
        (None, ["algorithm.gamma=0.9"], "--set needs --label"),
        ("fast", [], "names no variant"),
        ("a-b", ["algorithm.gamma=0.9"], "letters, digits"),
    ],
)
def test_a_variant_needs_a_plain_label_and_its_settings(learning, label, overrides, error):
    with pytest.raises(SystemExit, match=error):
        learning.check_label(label, overrides)


def test_a_record_whose_preset_changed_since_is_refused(learning, tmp_path, monkeypatch):
    """A row is labeled by its preset and overrides; if the preset changes after the run,
    the label would misname the run, so the report refuses it and says what changed."""
    from rayrl.config import LearnerConfig, config_to_dict
    from rayrl.presets import load_config

    game = ["env.id=MinAtar/SpaceInvaders-v1"]
    trained = config_to_dict(load_config("minatar_ppo", ["learner.lr=0.0001", *game]))
    run = {
        **record(learning, game="SpaceInvaders"),
        "run": "minatar_ppo+ent-SpaceInvaders-s0",
        "variant": "minatar_ppo+ent",
        "overrides": ["algorithm.entropy_coef=0.03"],
        "settings": learning.settings(trained),
    }
    now = load_config("minatar_ppo").learner.lr
    stale = ["algorithm.entropy_coef: 0.01, now 0.03", f"learner.lr: 0.0001, now {now!r}"]
    assert learning.stale_settings(run) == stale
    records = tmp_path / "records"
    records.mkdir()
    (records / f"{run['run']}.json").write_text(json.dumps(run))
    monkeypatch.setattr(learning, "RECORDS", records)
    monkeypatch.setattr(learning, "DOC", tmp_path / "learning.md")
    with pytest.raises(SystemExit, match=re.escape("learner.lr: 0.0001")):
        learning.report(tmp_path / "no runs")
    assert not (tmp_path / "learning.md").exists()

    exact = load_config("minatar_ppo", ["algorithm.entropy_coef=0.03", *game])
    run["settings"] = json.loads(json.dumps(learning.settings(config_to_dict(exact))))
    assert learning.stale_settings(run) == []
    # a field added to the config since the run counts at its default, which the run had:
    # no change where the preset keeps the default, a change where it sets another value
    del run["settings"]["algorithm.clip_coef"]
    assert learning.stale_settings(run) == []
    lr = run["settings"].pop("learner.lr")
    default = LearnerConfig().lr
    assert learning.stale_settings(run) == [f"learner.lr: {default!r}, now {now!r}"]
    run["settings"]["learner.lr"] = lr
    # a record made before a key was renamed is read under today's name
    run["settings"]["algorithm.num_steps"] = run["settings"].pop("algorithm.steps_per_chunk")
    assert learning.stale_settings(run) == []
    run["settings"]["algorithm.num_steps"] += 1
    assert learning.stale_settings(run)[0].startswith("algorithm.steps_per_chunk: ")


def test_a_rate_scaled_for_the_budget_makes_the_run_one_of_its_budget(learning):
    """A constant rate scaled for the budget (`algorithm.lr_reference_env_steps`) is a rate of
    that budget: a 1M run is not continued to 5M under the same name."""
    constant = {"algorithm": {"lr_decay": False}}
    scaled = {"algorithm": {"lr_decay": False, "lr_reference_env_steps": 1_000_000}}
    assert not learning.budget_scheduled(constant)
    assert learning.budget_scheduled(scaled)


def test_a_rate_given_directly_names_the_row_of_the_same_rate_scaled_for_the_budget(learning):
    """An on-policy run given learner.lr x (1M / 5M) ** 0.5 directly trains as the same preset
    with `algorithm.lr_reference_env_steps=1000000` and the exponent 0.5 does at 5M: its
    record names that row. A 5M run at the unscaled rate does not, and at 1M the reference
    changes nothing."""
    from rayrl.config import config_to_dict
    from rayrl.presets import load_config

    game = ["env.id=MinAtar/SpaceInvaders-v1"]
    scaled = 0.002 * math.sqrt(1_000_000 / 5_000_000)

    def trained_as(lr: float, budget: int) -> dict:
        overrides = [
            f"learner.lr={lr!r}",
            "algorithm.lr_reference_env_steps=null",  # the rate given directly
            f"run.total_env_steps={budget}",
            *game,
        ]
        saved = config_to_dict(load_config("minatar_impala", overrides))
        return {
            **record(learning, planned=budget, game="SpaceInvaders"),
            "variant": "minatar_impala+ref",
            "overrides": [
                "learner.lr=0.002",
                "algorithm.lr_reference_env_steps=1000000",
                "algorithm.lr_budget_exponent=0.5",
            ],
            "settings": json.loads(json.dumps(learning.settings(saved))),
        }

    assert learning.stale_settings(trained_as(float(f"{scaled:.16g}"), 5_000_000)) == []
    assert learning.stale_settings(trained_as(0.002, 5_000_000)) == [
        f"learner.lr: 0.002, now {float(f'{scaled:.12g}')!r}"
    ]
    assert learning.stale_settings(trained_as(0.002, 1_000_000)) == []


def test_a_setting_of_speed_alone_leaves_a_record_what_it_was(learning):
    """A run with `learner.compile_optimizer` (the same arithmetic, faster) still names its
    preset's row; a change of what it learns does not."""
    from rayrl.config import config_to_dict
    from rayrl.presets import load_config

    run = record(learning)
    trained = load_config("minatar_dqn", ["env.id=MinAtar/Breakout-v1"])
    run["settings"] = json.loads(json.dumps(learning.settings(config_to_dict(trained))))
    run["settings"]["learner.compile_optimizer"] = True
    assert learning.stale_settings(run) == []
    run["settings"]["learner.rmsprop_centered"] = False
    assert learning.stale_settings(run) == ["learner.rmsprop_centered: False, now True"]


def test_a_record_without_settings_is_named(learning):
    run = record(learning)
    with pytest.raises(
        SystemExit, match=re.escape("minatar_dqn-Breakout-s0.json keeps no settings")
    ):
        learning.stale_settings(run)


def test_a_run_evaluated_at_its_end_on_more_episodes_reports_that_evaluation(learning):
    """The final checkpoint's evaluation on FINAL_EPISODES episodes replaces the run's own
    last evaluation of the same weights (its env steps), and only that one."""
    run = record(learning, planned=2_000_000, evals=[(1_000_064, 3.0), (2_000_128, 9.0)])
    final = {"env_steps": 2_000_128, "eval/return_mean": 7.0, "eval/return_std": 5.0}
    run["final_eval"] = learning.columns([{**final, "eval/episodes": 100}], learning.EVALS)[0]
    at_end = learning.figures(run, 2_000_000)
    assert at_end.final_eval == 7.0
    assert at_end.final_eval_se == pytest.approx(5.0 / 99**0.5)
    assert learning.figures(run, 1_000_000).final_eval == 3.0
    run["final_eval"][0] = 1_900_000  # another checkpoint's: not this evaluation
    assert learning.figures(run, 2_000_000).final_eval == 9.0


def test_every_minatar_game_has_the_papers_figure_beside_it(learning):
    """The other three games' rows (the presets run unchanged) carry the paper's figure
    too, with the action sets compared, and Seaquest's older game version named."""
    rows = learning.table_rows(
        {("minatar_dqn", "Seaquest"): [record(learning, game="Seaquest", evals=[(1_000_064, 4.0)])]}
    )
    assert (
        "| 20 | MinAtar paper (Young & Tian 2019, Fig. 2), 5M frames: DQN; training "
        "returns; 6 actions, ours 6; before MinAtar 1.0.11's oxygen fix |"
        in rows["minatar_dqn", "Seaquest", 1_000_000]
    )
    assert learning.published("impala", "Asterix") == (
        19.0,
        learning.PAPER,
        "AC(lambda), not IMPALA; training returns; 6 actions, ours 5",
    )
    assert learning.published("ppo", "Freeway")[0] == 47.0
    value, source, _ = learning.published("sac", "Breakout")
    assert math.isnan(value)
    assert source == "-"


def test_a_run_whose_schedules_span_its_budget_is_named_by_it(learning, tmp_path):
    """minatar_impala decays its learning rate over the budget, so one seed's runs to 1M and
    to 5M are two runs with two names (and two records); minatar_ppo's is one run,
    continued."""
    runs = tmp_path / "runs"
    impala = [
        learning.run_path(runs, "minatar_impala", [], "Breakout", 0, b).name
        for b in (1_000_000, 5_000_000)
    ]
    assert impala == ["minatar_impala-Breakout-s0-1000000", "minatar_impala-Breakout-s0-5000000"]
    ppo = learning.run_path(runs, "minatar_ppo", [], "Breakout", 0, 5_000_000).name
    assert ppo == "minatar_ppo-Breakout-s0"
    decayed = learning.run_path(
        runs, "minatar_ppo+decay", ["algorithm.lr_decay=true"], "Breakout", 0, 5_000_000
    )
    assert decayed.name == "minatar_ppo+decay-Breakout-s0-5000000"
    entropy = ["algorithm.entropy_coef=0.02", "algorithm.entropy_coef_final=0.01"]
    annealed = learning.run_path(runs, "minatar_ppo+ent", entropy, "Breakout", 0, 1_000_000)
    assert annealed.name == "minatar_ppo+ent-Breakout-s0-1000000"
    parsed = learning.RUN_NAME.fullmatch(impala[1])
    assert (parsed["variant"], parsed["game"], parsed["seed"]) == (
        "minatar_impala",
        "Breakout",
        "0",
    )
    assert learning.RUN_NAME.fullmatch(ppo)


def kept_elsewhere(learning, tmp_path, monkeypatch, planned: int):
    """A record of seed 0's minatar_ppo Breakout run to `planned` env steps, its run
    directory on another machine; `rayrl.train` replaced by a list of its calls."""
    records = tmp_path / "records"
    records.mkdir()
    kept = records / "minatar_ppo-Breakout-s0.json"
    kept.write_text(f'{{"planned_env_steps": {planned}}}')
    monkeypatch.setattr(learning, "RECORDS", records)
    started: list[dict] = []
    monkeypatch.setattr(learning.rayrl, "train", lambda *a, **k: started.append(k))
    return kept, started


def test_a_fresh_run_never_replaces_a_kept_record(learning, tmp_path, monkeypatch):
    """A record whose run directory is elsewhere (another machine ran it) would be
    overwritten by a fresh run of the same name: that run is refused before it starts."""
    kept, started = kept_elsewhere(learning, tmp_path, monkeypatch, 5_000_000)
    with pytest.raises(SystemExit, match="keeps a run named minatar_ppo-Breakout-s0 whose"):
        learning.train(tmp_path / "runs", "minatar_ppo", [], "Breakout", 0, 5_000_000)
    assert started == []
    assert kept.read_text() == '{"planned_env_steps": 5000000}'
    learning.train(tmp_path / "runs", "minatar_ppo", [], "Breakout", 1, 1_000_000)
    assert len(started) == 1  # another seed starts


def test_a_longer_run_than_a_kept_record_is_a_run_of_its_own(learning, tmp_path, monkeypatch):
    """A 1M run kept only as a record cannot be continued to 5M: the 5M run starts afresh
    under a name with its budget, and the 1M record stays as it was."""
    kept, started = kept_elsewhere(learning, tmp_path, monkeypatch, 1_000_000)
    path = learning.train(tmp_path / "runs", "minatar_ppo", [], "Breakout", 0, 5_000_000)
    assert path.name == "minatar_ppo-Breakout-s0-5000000"
    assert "run.name=minatar_ppo-Breakout-s0-5000000" in started[0]["overrides"]
    assert kept.read_text() == '{"planned_env_steps": 1000000}'
    parsed = learning.RUN_NAME.fullmatch(path.name)
    assert (parsed["variant"], parsed["seed"], parsed["budget"]) == ("minatar_ppo", "0", "5000000")


def test_a_row_takes_each_seeds_run_planned_nearest_its_budget(learning):
    """Seed 0 ran to 1M and again to 5M: the 1M row takes the 1M run's final evaluation,
    the 5M row the 5M run; seed 1 ran to 5M only and counts in both."""
    short = record(learning, 0, planned=1_000_000, evals=[(1_000_000, 10.0)])
    long = record(learning, 0, planned=5_000_000, evals=[(1_000_000, 4.0), (5_000_000, 30.0)])
    other = record(learning, 1, planned=5_000_000, evals=[(1_000_000, 6.0), (5_000_000, 20.0)])
    rows = learning.table_rows({("minatar_dqn", "Breakout"): [long, short, other]})
    at_1m = rows["minatar_dqn", "Breakout", 1_000_000].split(" | ")
    at_5m = rows["minatar_dqn", "Breakout", 5_000_000].split(" | ")
    assert at_1m[2:5] == ["2", "1,000,000", "8.0 ± 2.8"]
    assert at_5m[2:5] == ["2", "5,000,000", "25.0 ± 7.1"]
