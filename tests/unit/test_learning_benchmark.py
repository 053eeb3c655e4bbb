"""bench/learning.py's pages: figures at a budget, rows replacing the rows measured before
the records, the commands it lists, the records' compact rows, docs/results.md (a row for every
shipped preset as shipped, never a variant) beside bench/reports/learning.md (the studies),
and the presets of other families than MinAtar trained on their own env. The pages are what
the learning results are read from, so a wrong row would misreport them."""

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


def record(
    learning,
    seed=0,
    *,
    planned=1_000_000,
    scheduled=False,
    evals=(),
    game="Breakout",
    variant="minatar_dqn",
    overrides=(),
):
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
        "run": f"{variant}-{game}-s{seed}",
        "variant": variant,
        "overrides": list(overrides),
        "game": game,
        "seed": seed,
        "planned_env_steps": planned,
        "budget_scheduled": scheduled,
        "machine": "m",
        "measured": "2026-11-25",
        "evals": learning.columns(eval_rows, learning.EVALS),
        "metrics": learning.columns(metrics, learning.METRICS),
    }


def with_settings(learning, run: dict) -> dict:
    """`run` with the settings its preset and overrides train today on its game and budget
    (as a run of them writes into its record), so that the report takes it."""
    from rayrl.config import config_to_dict
    from rayrl.presets import load_config

    preset = learning.preset_of(run["variant"])
    overrides = [
        *run["overrides"],
        *learning.game_overrides(preset, run["game"]),
        f"run.total_env_steps={run['planned_env_steps']}",
    ]
    saved = config_to_dict(load_config(preset, overrides))
    return {**run, "settings": json.loads(json.dumps(learning.settings(saved)))}


def pages_in(learning, tmp_path, monkeypatch):
    """The report's pages and curves moved under `tmp_path` (docs/results.md, docs/results/,
    bench/reports/learning.md), with no notes and no earlier rows; the curves' drawing
    replaced by a file that names its runs' labels."""
    results = tmp_path / "docs" / "results.md"
    curves = tmp_path / "docs" / "results"
    studies = tmp_path / "bench" / "reports" / "learning.md"
    monkeypatch.setattr(learning, "RESULTS", results)
    monkeypatch.setattr(learning, "CURVES", curves)
    monkeypatch.setattr(learning, "STUDIES", studies)
    readme = tmp_path / "README.md"
    readme.write_text("# rayrl\n\n<!-- presets:start -->\nold\n<!-- presets:end -->\n\nmore\n")
    monkeypatch.setattr(learning, "README", readme)
    monkeypatch.setattr(learning, "NOTES", tmp_path / "no notes.md")
    monkeypatch.setattr(learning, "EARLIER", tmp_path / "no earlier rows.md")
    monkeypatch.setattr(learning, "small_figure", lambda drawn: [c.label for c in drawn])
    monkeypatch.setattr(
        learning, "save_png", lambda labels, path: path.write_text(" ".join(labels))
    )
    return results, curves, studies


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


def test_a_run_planned_for_a_short_budget_counts_there_past_its_slack(learning):
    """A 50k run whose last round of chunks ended at 50,560 env steps (more than 1% past
    its budget) is the run of that budget: its row takes its evaluation there."""
    run = record(learning, planned=50_000, scheduled=True, evals=[(50_560, -21.0)])
    run["metrics"] = learning.columns(
        [{"env_steps": 25_280, "run/wall_s": 60.0}, {"env_steps": 50_560, "run/wall_s": 120.0}],
        learning.METRICS,
    )
    found = learning.figures(run, 50_000)
    assert (found.env_steps, found.final_eval, found.wall_s) == (50_560, -21.0, 120.0)


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
    pages = pages_in(learning, tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match=re.escape("learner.lr: 0.0001")):
        learning.report(tmp_path / "no runs")
    assert not any(page.exists() for page in pages)  # neither page, nor a curve

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


def test_the_mpe_preset_is_set_beside_marllibs_ippo_on_mpe2s_reward(learning):
    """MARLlib's simple_spread_v2 charged each agent 0.5 a step for colliding with itself;
    its figure is set beside mpe2's v3 returns with that charge given back, and named."""
    value, source, differs = learning.published("ppo", "simple_spread")
    assert value == pytest.approx(-33.3 + 12.5)
    assert source == learning.MARLLIB
    assert "-33.3 on PettingZoo 1.12's simple_spread_v2" in differs
    assert learning.published_figure("ppo", "simple_spread") == (
        "-20.8 (IPPO, MARLlib, 20M env steps)"
    )
    assert learning.published_figure("ppo", "Breakout") == "17 (AC(lambda))"
    assert math.isnan(learning.published("appo", "simple_spread")[0])


def test_halfcheetah_ppo_is_set_beside_cleanrls_ppo_whose_settings_it_copies(learning):
    """The preset copies CleanRL's ppo_continuous_action.py; its figure is that script's,
    on training episodes, and the SAC presets on the same env have none."""
    value, source, differs = learning.published("ppo", "HalfCheetah")
    assert value == 1442.6
    assert source == learning.CLEANRL_PPO
    assert "training episodes" in differs
    assert learning.published_figure("ppo", "HalfCheetah") == "1442.6 (CleanRL's PPO, 1M env steps)"
    assert math.isnan(learning.published("sac", "HalfCheetah")[0])


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


def test_a_row_short_of_its_budget_costs_the_rest_at_its_second_halfs_pace(learning):
    """A run to 200k of a 2M budget, its first 100k fast (start-up, a replay's warm-up) and
    then 100 env steps/s: the row says 100 env steps/s and the whole budget's time as the
    time so far and the rest at that pace, not at the run's average."""
    run = record(learning, planned=200_000, evals=[(200_000, 5.0)])
    metrics = [
        {"env_steps": s, "run/wall_s": 20 * s / 100_000 if s <= 100_000 else 20 + (s - 1e5) / 100}
        for s in range(50_000, 200_001, 50_000)
    ]
    run["metrics"] = learning.columns(metrics, learning.METRICS)

    found = learning.figures(run, 200_000)

    assert found.pace == pytest.approx(100.0)
    # 1,020 s so far, 1.8M env steps more at 100 a second: 19,020 s
    assert learning.short_of_budget([found], 2_000_000) == (
        "200,000 (budget 2,000,000: about 5.3 h a seed here, at 100 env steps/s)"
    )
    # a seed whose record keeps no clock has no pace: the others' stand, or the budget alone
    untimed = dict(run, metrics=learning.columns([{"env_steps": 200_000}], learning.METRICS))
    unpaced = learning.figures(untimed, 200_000)
    assert math.isnan(unpaced.pace)
    assert learning.short_of_budget([found, unpaced], 2_000_000) == (
        learning.short_of_budget([found], 2_000_000)
    )
    assert learning.short_of_budget([unpaced], 2_000_000) == "200,000 (budget 2,000,000)"


def test_the_results_show_every_shipped_preset_as_shipped_and_the_studies_the_rest(
    learning, tmp_path, monkeypatch
):
    """docs/results.md has a row for every shipped preset on its own game (and a MinAtar one
    on SpaceInvaders), at its shipped settings and budget: measured runs with their command
    and curve, "not measured yet" with the command that would measure it otherwise, and
    never a variant; the variants' rows go to bench/reports/learning.md only."""
    from rayrl.config import config_to_dict, preset_names
    from rayrl.presets import load_config

    ppo_budget = load_config("minatar_ppo").run.total_env_steps
    kept = [
        record(
            learning,
            seed,
            planned=ppo_budget,
            evals=[(ppo_budget + 1216, mean)],
            game="SpaceInvaders",
            variant="minatar_ppo",
        )
        for seed, mean in [(0, 20.0), (1, 40.0)]
    ]
    # a variant of the same preset, on the same game and budget, far better: not shown
    kept.append(
        record(
            learning,
            planned=ppo_budget,
            evals=[(ppo_budget, 999.0)],
            game="SpaceInvaders",
            variant="minatar_ppo+fast",
            overrides=["algorithm.gamma=0.9"],
        )
    )
    # a run short of the preset's budget, with its schedules spread over its own
    kept.append(
        record(learning, scheduled=True, evals=[(1_000_000, 11.0)], variant="minatar_impala")
    )
    cartpole = load_config("cartpole_ppo").run.total_env_steps
    kept.append(
        record(
            learning,
            planned=cartpole,
            scheduled=learning.budget_scheduled(config_to_dict(load_config("cartpole_ppo"))),
            evals=[(cartpole, 500.0)],
            game="CartPole",
            variant="cartpole_ppo",
        )
    )
    records = tmp_path / "records"
    records.mkdir()
    for run in kept:
        (records / f"{run['run']}.json").write_text(json.dumps(with_settings(learning, run)))
    monkeypatch.setattr(learning, "RECORDS", records)
    results, curves, studies = pages_in(learning, tmp_path, monkeypatch)
    curves.mkdir(parents=True)
    (curves / "minatar_ppo+fast-SpaceInvaders.png").write_text("a row no longer shown")

    learning.report(tmp_path / "no runs")

    page = results.read_text()
    assert "generated" in "\n".join(page.splitlines()[:4])
    assert "`python bench/learning.py --report`" in "\n".join(page.splitlines()[:4])
    table = page.split("## Evaluation protocols")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    shown = [(row.split(" | ")[0].strip("| `"), row.split(" | ")[1]) for row in rows]
    expected = []
    for name in preset_names():
        own = load_config(name).env.id
        expected.append((name, f"`{own}`"))
        if own.startswith("MinAtar/"):
            expected.append((name, "`MinAtar/SpaceInvaders-v1`"))
    assert shown == expected
    assert "+fast" not in page
    assert "999.0" not in page
    assert (
        "| `minatar_ppo` | `MinAtar/SpaceInvaders-v1` | 30.0 ± 14.1 | sampled | 2 | "
        f"{ppo_budget + 1216:,} | 50 min | - | m | 185 (AC(lambda)) | `python bench/learning.py "
        "--preset minatar_ppo --games SpaceInvaders --seeds 0 1 --env-steps "
        f"{ppo_budget}` |" in rows
    )
    impala_budget = load_config("minatar_impala").run.total_env_steps
    assert (
        "| `minatar_impala` | `MinAtar/Breakout-v1` | 11.0 | sampled | 1 | "
        f"1,000,000 (budget {impala_budget:,}: about "
        f"{learning.duration(impala_budget * 0.6e-3)} a seed here, at 1,667 env steps/s) | "
        "10 min | - | m | 17 (AC(lambda), not IMPALA) | "
        "`python bench/learning.py --preset minatar_impala --games Breakout --seeds 0 "
        "--env-steps 1000000` |" in rows
    )
    assert (
        f"| `cartpole_ppo` | `CartPole-v1` | 500.0 | greedy | 1 | {cartpole:,} | "
        f"{0.6e-3 * cartpole:.0f} s | 475: {cartpole:,} env steps, {0.6e-3 * cartpole:.0f} s "
        "(1/1) | m | - | `python bench/learning.py --preset cartpole_ppo "
        f"--seeds 0 --env-steps {cartpole}` |" in rows
    )
    dqn_budget = load_config("minatar_dqn").run.total_env_steps
    assert (
        "| `minatar_dqn` | `MinAtar/Breakout-v1` | not measured yet | epsilon-greedy, 0.05 | "
        f"- | {dqn_budget:,} | - | - | - | 10 (DQN) | `python bench/learning.py --preset "
        f"minatar_dqn --games Breakout --seeds 0 1 2 --env-steps {dqn_budget}` |" in rows
    )
    pendulum = load_config("pendulum_sac").run.total_env_steps
    assert (
        f"`python bench/learning.py --preset pendulum_sac --seeds 0 1 2 --env-steps {pendulum}`"
        in page
    )
    # one curve per measured row, drawn from that row's runs only, and none left of others
    drawn = {
        "minatar_ppo-SpaceInvaders.png": "seed 0 seed 1",
        "minatar_impala-Breakout.png": "seed 0",
        "cartpole_ppo-CartPole.png": "seed 0",
    }
    assert {p.name: p.read_text() for p in curves.iterdir()} == drawn
    for name in drawn:
        assert f"](results/{name})" in page
    # the README's presets table: the same rows, shorter, and the rest of the README kept
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# rayrl\n\n<!-- presets:start -->\n| preset |")
    assert readme.endswith("<!-- presets:end -->\n\nmore\n")
    assert "old" not in readme
    readme_rows = [line for line in readme.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0].strip("| `") for row in readme_rows] == [p for p, _ in shown]
    assert (
        "| `minatar_ppo` | PPO | `MinAtar/SpaceInvaders-v1` | 30.0 ± 14.1 (sampled) | 2 | "
        f"{ppo_budget + 1216:,} | 50 min | - | m |" in readme_rows
    )
    # the studies: every row, the variant's too, and the protocols
    study = studies.read_text()
    assert "| `minatar_ppo+fast` | SpaceInvaders | 1 |" in study
    assert "`minatar_ppo+fast` is `minatar_ppo` with `algorithm.gamma=0.9`." in study
    assert "| `cartpole_ppo` | CartPole | 1 |" in study
    assert "](../../docs/results/minatar_ppo-SpaceInvaders.png)" in study
    assert "## Evaluation protocols" in page
    assert "| `cartpole_ppo` | greedy | 10 |" in page


def test_a_preset_of_another_family_trains_on_its_own_env(learning, tmp_path, monkeypatch):
    """CartPole, Pendulum, MuJoCo and Pong presets train on their own env, named in their runs
    by its id without namespace and version; a MinAtar preset on the games given."""
    from rayrl.config import preset_names

    assert learning.games_of("minatar_dqn", None) == ["Breakout", "SpaceInvaders"]
    assert learning.games_of("minatar_ppo", ["Asterix"]) == ["Asterix"]
    assert learning.games_of("pong_dqn", None) == ["Pong"]
    assert learning.games_of("pong_dqn", ["Pong"]) == ["Pong"]
    with pytest.raises(SystemExit, match=re.escape("own env (ALE/Pong-v5, Pong in run names)")):
        learning.games_of("pong_dqn", ["Breakout"])
    assert learning.games_of("cartpole_pomdp_ppo", None) == ["CartPoleNoVel"]
    assert learning.game_env_id("hopper_sac", "Hopper") == "Hopper-v5"
    assert learning.game_overrides("hopper_sac", "Hopper") == []
    assert learning.game_overrides("minatar_dqn", "Seaquest") == ["env.id=MinAtar/Seaquest-v1"]
    for name in preset_names():  # every shipped preset's runs have names the report reads
        for game in learning.result_games(name):
            parsed = learning.RUN_NAME.fullmatch(learning.run_name(name, game, 0, 100))
            assert (parsed["variant"], parsed["game"], parsed["budget"]) == (name, game, "100")

    records = tmp_path / "records"
    records.mkdir()
    monkeypatch.setattr(learning, "RECORDS", records)
    started: list[tuple] = []
    monkeypatch.setattr(learning.rayrl, "train", lambda *a, **k: started.append((a, k)))
    path = learning.train(tmp_path / "runs", "pendulum_sac", [], "Pendulum", 0, 40_000)
    assert path.name == "pendulum_sac-Pendulum-s0"
    ((args, kwargs),) = started
    assert args == ("pendulum_sac",)
    assert not any(o.startswith("env.id=") for o in kwargs["overrides"])  # its own env
    assert "run.total_env_steps=40000" in kwargs["overrides"]
    assert "run.target_return=null" in kwargs["overrides"]  # its whole budget
    with pytest.raises(SystemExit, match="own env"):
        learning.train(tmp_path / "runs", "pendulum_sac", [], "Breakout", 1, 40_000)
    assert len(started) == 1
    assert (
        learning.command("pendulum_sac", [], ["Pendulum"], [0, 1, 2], 40_000)
        == "python bench/learning.py --preset pendulum_sac --seeds 0 1 2 --env-steps 40000"
    )


def test_the_committed_pages_are_what_the_kept_records_give(learning, tmp_path, monkeypatch):
    """docs/results.md, bench/reports/learning.md, the README's presets table and the curves'
    names are what `bench/learning.py --report` writes from the committed records: a change
    that adds or changes a preset, or a record, without rewriting them fails here (a preset
    changed under its records stops the report and names them)."""
    from tests.conftest import REPO

    readme = tmp_path / "README.md"
    readme.write_text((REPO / "README.md").read_text())
    results = tmp_path / "docs" / "results.md"
    curves = tmp_path / "docs" / "results"
    studies = tmp_path / "bench" / "reports" / "learning.md"
    monkeypatch.setattr(learning, "README", readme)
    monkeypatch.setattr(learning, "RESULTS", results)
    monkeypatch.setattr(learning, "CURVES", curves)
    monkeypatch.setattr(learning, "STUDIES", studies)
    monkeypatch.setattr(learning, "small_figure", lambda drawn: None)
    monkeypatch.setattr(learning, "save_png", lambda figure, path: path.write_text(""))

    learning.report(tmp_path / "no runs")

    rewrite = "rewrite them with `python bench/learning.py --report`"
    assert results.read_text() == (REPO / "docs" / "results.md").read_text(), rewrite
    assert readme.read_text() == (REPO / "README.md").read_text(), rewrite
    assert studies.read_text() == (REPO / "bench" / "reports" / "learning.md").read_text(), rewrite
    shown = {p.name for p in (REPO / "docs" / "results").glob("*.png")}
    assert {p.name for p in curves.iterdir()} == shown, rewrite
