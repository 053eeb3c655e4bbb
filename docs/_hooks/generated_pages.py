"""mkdocs hook: the site's pages that are generated rather than written in `docs/`.

- `index.md` is the README, so the home page and the repository's front page cannot
  disagree (its links to `docs/`, `cluster/README.md` and `CHANGELOG.md` become the
  site's pages);
- `cluster.md` is `cluster/README.md`, which sits beside the files it explains;
- `changelog.md` is `CHANGELOG.md`;
- `reference/configuration.md` is generated from the config fields' docstrings by
  `rayrl.config_reference`, the same text `rayrl show-config --doc` prints.

A hook rather than a plugin (mkdocs-gen-files, mkdocs-include-markdown): four pages need no
extra dependency, and `mkdocs build --strict` checks their links like any other page's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]

README_LINKS = {
    "](docs/": "](",
    "](cluster/README.md)": "](cluster.md)",
    "](CHANGELOG.md)": "](changelog.md)",
}
"""The README's links to the repository's files, and the site's pages they are."""


def _readme() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for repository_link, site_link in README_LINKS.items():
        text = text.replace(repository_link, site_link)
    return text


def _configuration_reference() -> str:
    from rayrl.config_reference import reference_markdown

    return reference_markdown()


PAGES = {
    "index.md": _readme,
    "cluster.md": lambda: (ROOT / "cluster" / "README.md").read_text(encoding="utf-8"),
    "changelog.md": lambda: (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
    "reference/configuration.md": _configuration_reference,
}


def on_files(files: Files, config: Any) -> Files:
    for src_uri, make in PAGES.items():
        existing = files.get_file_from_path(src_uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, src_uri, content=make()))
    return files
