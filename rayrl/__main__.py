"""`python -m rayrl ...`: the CLI, importing rayrl from the current directory first.

Ray jobs submitted with `--working-dir` run in a copy of that directory, so
`python -m rayrl train` trains with the code that was uploaded, not an older installed copy.
"""

from rayrl.cli import run

run(prog_name="rayrl")
