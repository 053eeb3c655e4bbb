"""Sweeps on Ray Tune (`rayrl sweep`): a spec's trials as real rayrl runs, scheduled by
ASHA or population-based training, resumable, with a ranked table and the best settings."""

from rayrl.sweeps.results import SweepResult
from rayrl.sweeps.runner import sweep

__all__ = ["SweepResult", "sweep"]
