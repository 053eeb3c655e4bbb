"""The configuration reference (`rayrl.config_reference`): every config field documented where
it is declared, `rayrl show-config --doc` the same config as without it (its docstrings as
comments), and the docs site's reference naming every key of every algorithm's config."""

from __future__ import annotations

import re

import pytest
import yaml
from click.testing import CliRunner

from rayrl.cli import main
from rayrl.config import Config, config_to_dict, config_to_yaml, preset_names
from rayrl.config_reference import (
    COMMENT_WIDTH,
    config_fields,
    markdown_text,
    reference_markdown,
)
from rayrl.families import ReplayConfig
from rayrl.presets import ALGORITHM_CONFIGS, load_config

ALGORITHM_NAMES = list(ALGORITHM_CONFIGS)


def default_config(name: str) -> Config:
    """The dataclass defaults with algorithm `name`: every key its config has."""
    return Config(algorithm=ALGORITHM_CONFIGS[name]())


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_field_has_a_docstring(name):
    missing = [doc.key for doc in config_fields(default_config(name)) if not doc.doc]
    assert not missing, (
        f"config fields without a docstring (algorithm.name={name}): {', '.join(missing)}; "
        "document each with a string literal right below the field"
    )


def test_docstrings_and_annotations_are_read_from_the_source():
    docs = {doc.key: doc for doc in config_fields(default_config("sac"))}
    assert docs["algorithm.gamma"].doc == "Discount factor."
    assert docs["env.max_episode_steps"].type == "int | None"
    assert docs["algorithm.network"].type == "NetworkKind"  # as written, not expanded
    assert docs["learner.optimizer"].type == 'Literal["adam", "rmsprop"]'
    # a field SAC declares again has its own docstring and default...
    assert docs["algorithm.hidden_sizes"].doc.startswith("Hidden layers of the actor")
    assert docs["algorithm.hidden_sizes"].value == (256, 256)
    # ...and one declared again only for its default keeps its base's docstring
    assert docs["algorithm.name"].value == "sac"
    assert docs["algorithm.name"].doc.startswith("The algorithm:")
    # the family's nested section, and docstrings as one paragraph
    assert docs["algorithm.replay"].value == ReplayConfig()
    assert "\n" not in docs["algorithm.replay.samples_per_insert"].doc
    assert "  " not in docs["algorithm.replay.samples_per_insert"].doc


def test_fields_come_in_declaration_order_with_sections_expanded():
    config = default_config("dqn")
    keys = [doc.key for doc in config_fields(config)]
    assert [key for key in keys if "." not in key] == list(config_to_dict(config))
    assert keys[:3] == ["env", "env.id", "env.max_episode_steps"]
    atari, stack = keys.index("env.atari"), keys.index("env.atari.frame_stack")
    assert atari + 1 == stack < keys.index("env.repeat_action_probability")
    assert keys.index("algorithm.replay") + 1 == keys.index("algorithm.replay.capacity")


def show_config(*args: str) -> str:
    result = CliRunner().invoke(main, ["show-config", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("preset", preset_names())
def test_show_config_doc_is_the_same_config_with_comments(preset, tmp_path):
    overrides = ("learner.lr=0.5", "logging.wandb.tags=[a, 'b|c']")
    args = ["--config", preset]
    for override in overrides:
        args += ["--set", override]
    plain = show_config(*args)
    documented = show_config(*args, "--doc")
    config = load_config(preset, overrides)
    assert plain == config_to_yaml(config)  # unchanged without --doc
    assert yaml.safe_load(documented) == yaml.safe_load(plain)
    path = tmp_path / "documented.yaml"
    path.write_text(documented)
    assert load_config(path) == config  # what `rayrl train --config` reads
    assert "\n  # Discount factor.\n  gamma: " in documented
    assert "\n# The learner: batches" in documented
    comments = [line for line in documented.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) >= len(config_fields(config))
    assert max(len(line) for line in comments) <= COMMENT_WIDTH


def test_show_config_help_names_the_flag():
    assert "--doc" in show_config("--help")


def test_reference_names_every_key_of_every_algorithm():
    markdown = reference_markdown()
    configs = [load_config(), *(default_config(name) for name in ALGORITHM_NAMES)]
    for config in configs:
        keys = [doc.key for doc in config_fields(config) if "." in doc.key]  # sections: `##`
        missing = [key for key in keys if f"| `{key}` |" not in markdown]
        assert not missing, f"keys missing from the reference: {', '.join(missing)}"
    assert markdown.startswith("# Configuration reference\n\n")
    assert re.findall(r"^## (\S+)$", markdown, re.MULTILINE) == list(config_to_dict(Config()))
    assert re.findall(r"^### (\S+)$", markdown, re.MULTILINE) == ALGORITHM_NAMES


def algorithm_section(markdown: str, name: str) -> str:
    return markdown.split(f"\n### {name}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_each_algorithm_lists_its_own_and_its_familys_fields_with_their_defaults():
    markdown = reference_markdown()
    sac, dqn = algorithm_section(markdown, "sac"), algorithm_section(markdown, "dqn")
    capacity = ReplayConfig().capacity
    assert f"| `algorithm.replay.capacity` | `int` | `{capacity}` |" in dqn
    assert "| `algorithm.hidden_sizes` | `tuple[int, ...]` | `[256, 256]` |" in sac
    assert '| `algorithm.name` | `str` | `"sac"` |' in sac
    assert "`algorithm.gamma`" not in sac  # common: listed once, under `## algorithm`
    assert "`algorithm.gamma`" not in dqn
    assert "off-policy" in sac


def test_reference_tables_keep_four_cells():
    rows = [line for line in reference_markdown().splitlines() if line.startswith("|")]
    assert len(rows) > 100
    for row in rows:
        assert len(re.findall(r"(?<!\\)\|", row)) == 5, row
    assert "<code>int &#124; None</code>" in reference_markdown()


def test_docstrings_become_markdown_that_shows_them_as_written():
    text = "Added to |TD error|; eps**(1 + a * i) for `a|b` and `run.seed`, [x] <y> & z_"
    assert markdown_text(text) == (
        r"Added to \|TD error\|; eps\*\*(1 + a \* i) for <code>a&#124;b</code> and "
        r"`run.seed`, \[x\] &lt;y&gt; &amp; z\_"
    )
