"""The manual builds: `mkdocs build --strict` (mkdocs.yml) fails on a broken link, a page
left out of the navigation or an API reference that no longer resolves, so a change that
breaks the site fails here, in the README's test command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rayrl.config import preset_names

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strictly_with_every_generated_page(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    def page(name: str) -> str:
        return (site / name / "index.html").read_text(encoding="utf-8")

    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'id="quick-start"' in home  # the README is the home page
    assert 'id="presets-and-what-they-reach"' in home
    assert "workers.num_workers" in page("reference/configuration")
    assert "ray job submit" in page("cluster")
    assert "Unreleased" in page("changelog")
    api = page("reference/api")
    for name in (
        "api.train",
        "api.evaluate",
        "run_lifecycle.TrainResult",
        "agent.DistributedAgent",
    ):
        assert f'id="rayrl.{name}"' in api, name
    results = page("results")
    for preset in preset_names():
        assert preset in results, preset
