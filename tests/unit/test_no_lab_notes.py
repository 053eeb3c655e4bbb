"""Comments and docstrings under `rayrl/` explain the code as it is. A date, an issue number,
a commit hash or one day's timing in one is lab history: what was measured or decided on a
day, for one change, which reads as current long after the code or the figures have moved
on. History is `git log`'s; figures live in the pages kept current (`docs/performance.md`
for speed, `docs/results.md` for what each preset learns, `bench/reports/` for the studies
behind them), to which a comment points instead of quoting them.

The scan fails, naming the file and line, on any of these in a comment under `rayrl/` (a
Python comment or docstring, a YAML comment, any line of a Markdown or text file):

- a date, YYYY-MM-DD with a 19xx or 20xx year;
- "issue <number>" (or "issues #<number>");
- a commit-hash-like token: 7 to 40 lowercase hex digits, at least one a digit and one a
  letter (plain numbers such as 1000000, versions such as 2.60 and words such as "effaced"
  are not hashes);
- one day's timing: a figure set against another ("0.31 ms against 0.61 ms", "263 vs 301
  updates/s"), which is a measurement, true of one machine on one day.

Code is not scanned: a string the program uses (a hex digest, a version, a date format) is
not a note."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "rayrl"
SUFFIXES = (".py", ".yaml", ".yml", ".md", ".txt")
"""The files scanned; every other kind under `rayrl/` holds no comments (py.typed)."""

MARKS = {
    "a date": re.compile(r"(?<!\d)(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?!\d)"),
    "an issue number": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a commit hash": re.compile(
        r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])"
    ),
    "a timing": re.compile(
        r"(?<![\w.])\d[\d.,]*(?:\s?(?:ms|us|s|x|%))?\s+(?:against|vs\.?|versus)\s+\d", re.IGNORECASE
    ),
}
"""What marks a note as history, by what it is called in a failure."""
YAML_COMMENT = re.compile(r"(?:^|\s)(#.*)")
"""A YAML comment: a `#` at the start of a line or after a space, to the line's end."""


def python_notes(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of the comments and docstrings of `source` (bare
    string statements: module, class, function and attribute docstrings)."""
    documentation = {
        (node.value.lineno, node.value.col_offset)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and token.start in documentation
        ):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line


def yaml_notes(text: str) -> Iterator[tuple[int, str]]:
    """(line number, comment) of each line of a YAML file that has a comment."""
    for number, line in enumerate(text.splitlines(), 1):
        comment = YAML_COMMENT.search(line)
        if comment is not None:
            yield number, comment.group(1)


def notes(text: str, suffix: str) -> Iterable[tuple[int, str]]:
    """The commented lines of a file's `text`, by the file's `suffix`."""
    if suffix == ".py":
        return python_notes(text)
    if suffix in (".yaml", ".yml"):
        return yaml_notes(text)
    return enumerate(text.splitlines(), 1)  # prose: every line is a note


def lab_notes(text: str, suffix: str) -> list[tuple[int, str, str]]:
    """(line number, what, the text it matched) of each date, issue number and commit hash
    in the notes of a file, in the order of its lines."""
    found = []
    for number, line in notes(text, suffix):
        for what, mark in MARKS.items():
            found += [(number, what, match.group()) for match in mark.finditer(line)]
    return sorted(found, key=lambda note: note[0])


def package_files() -> list[Path]:
    return sorted(
        file
        for file in PACKAGE.rglob("*")
        if file.suffix in SUFFIXES and file.is_file() and "__pycache__" not in file.parts
    )


def test_comments_in_rayrl_carry_no_dates_issue_numbers_commit_hashes_or_timings():
    files = package_files()
    assert len(files) > 50  # the scan saw the package
    assert PACKAGE / "configs" / "cartpole_dqn.yaml" in files  # and its presets
    problems = []
    for file in files:
        path = file.relative_to(REPO).as_posix()
        problems += [
            f"{path}:{number}: {what} ({text!r})"
            for number, what, text in lab_notes(file.read_text(), file.suffix)
        ]
    assert not problems, (
        f"{len(problems)} lab note(s) in comments under rayrl/: say what the code does and "
        "why as it is now, and point to docs/performance.md, docs/results.md or "
        "bench/reports/ for figures (history is git log's):\n" + "\n".join(problems)
    )


PLANTED_PYTHON = '''\
"""Measured on 2026-12-02 at 5f06ab9, for issue 23."""
DIGEST = "5f06ab9e"  # a digest in code is the program's
RELEASED = "2026-12-02"
STEPS = 1_000_000  # 1000000 steps, Ray 2.60, float64, sha256, 0x1f2e3d4c, effaced, 84x84
LAG = 1  # as Issue #7 says
COST = 2  # 0.31 ms against 0.61 ms; 263 vs 301 updates/s; 1.5x versus 2


def f() -> None:
    """Fine: 3e-4, 2.5e-4, 10-25 s, 19-26, 2026-13-01, issues with 5 seeds, v2 against v1."""
    # f06ab95c0d was the fix
'''

PLANTED_YAML = """\
# A preset, tuned 2019-03-01
env:
  id: "a#b 2026-01-01"  # not a comment before the quotes end, an issue 12 after
run:
  total_env_steps: 5000000  # 5000000, 1e-3
"""


def test_the_scan_finds_what_is_planted_and_nothing_else():
    assert [(number, what) for number, what, _ in lab_notes(PLANTED_PYTHON, ".py")] == [
        (1, "a date"),
        (1, "an issue number"),
        (1, "a commit hash"),
        (5, "an issue number"),
        (6, "a timing"),
        (6, "a timing"),
        (6, "a timing"),
        (11, "a commit hash"),
    ]
    assert [text for _, _, text in lab_notes(PLANTED_PYTHON, ".py")][:3] == [
        "2026-12-02",
        "issue 23",
        "5f06ab9",
    ]
    assert lab_notes(PLANTED_YAML, ".yaml") == [
        (1, "a date", "2019-03-01"),
        (3, "an issue number", "issue 12"),
    ]
    assert lab_notes("Measured 2026-12-02 (a1b2c3d).\n", ".md") == [
        (1, "a date", "2026-12-02"),
        (1, "a commit hash", "a1b2c3d"),
    ]
