"""The README's "to | command" table (resume, debug, show the settings, sweep, submit to a
cluster, W&B) against the CLI as it is: each `rayrl` command parses with the options it
writes, and the settings it names resolve, so a renamed option, key or preset fails here.

Running them all would cost minutes (a sweep alone takes one); what each one does is tested
where it is built (`tests/integration/test_cli_ray.py` runs the train, evaluate and plot
block as written, `test_sweep.py` and `test_job_submission.py` the sweep and the job)."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from rayrl.cli import main
from rayrl.presets import load_config
from rayrl.sweeps.spec import load_sweep
from tests.conftest import REPO

README = REPO / "README.md"
PLACEHOLDERS = {"<run>": "some-run", "NAME": "cartpole_ppo", "=N": "=200000"}
"""What the table's placeholders stand for here: a run's name, a preset, a number."""


def table_commands() -> list[list[str]]:
    """Each `rayrl` command in the table, as words, with placeholders filled and optional
    parts (in square brackets) kept; a `ray job submit` row gives the command it submits."""
    text = README.read_text().split("| to | command |\n", 1)[1].split("\n\n", 1)[0]
    commands = []
    for row in text.splitlines()[1:]:  # below the header's rule
        for code in re.findall(r"`([^`]+)`", row.split("|")[2]):
            command = re.sub(r"^(.* -- )?python -m ", "", code)  # what a job runs, or python -m
            if not command.startswith("rayrl "):
                assert not re.search(r"\brayrl (train|sweep|show-config)", code), code
                continue  # Python, not the CLI (the API's own tests run it)
            for placeholder, value in PLACEHOLDERS.items():
                command = command.replace(placeholder, value)
            commands.append(shlex.split(command.replace("[", "").replace("]", "")))
    return commands


def test_the_table_names_each_command_a_user_needs():
    names = {" ".join(words[:2]) for words in table_commands()}
    assert names == {"rayrl train", "rayrl show-config", "rayrl sweep"}, names
    options = {word.split("=")[0] for words in table_commands() for word in words}
    assert {"--resume", "--runtime", "--doc", "--config"} <= options, options


@pytest.mark.parametrize("words", table_commands(), ids=" ".join)
def test_each_command_parses_and_its_settings_resolve(words):
    subcommand = main.commands[words[1]]
    context = subcommand.make_context(words[1], words[2:])  # a bad option raises here
    params = context.params
    overrides = list(params.get("overrides", ()))
    if params.get("runtime"):
        overrides.append(f"run.runtime={params['runtime']}")
    if words[1] == "sweep":
        load_sweep(params["spec"], overrides)
    elif params.get("resume") is None:  # a resume's base is the run's saved config
        load_config(params.get("config"), overrides)
    else:
        for override in overrides:
            load_config(None, [override])


def test_a_wrong_option_in_the_table_would_fail():
    with pytest.raises(click.UsageError, match="--no-such-option"):
        main.commands["train"].make_context("train", ["--no-such-option"])
