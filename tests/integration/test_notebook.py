"""The quick-start notebook runs clean, top to bottom, on a tiny budget."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRL_NOTEBOOK_STEPS", "4096")
    monkeypatch.setenv("RAYRL_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook,
        timeout=360,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "total_env_steps reached after" in text
    assert "mean return" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
