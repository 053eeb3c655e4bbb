"""Samples-per-insert control, in the manner of Reverb's `SampleToInsertRatio` limiter.

After `min_size` transitions are stored, sampling may run at most `tolerance` transitions
ahead of `samples_per_insert * inserted`, and inserting may run at most `tolerance` ahead
of what sampling has consumed. The replay ratio is then a setting, not an accident of how
fast workers and learner happen to be. With `tolerance >= (samples_per_insert * chunk +
batch) / 2` the two sides can never wait on each other at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RateLimiter:
    samples_per_insert: float | None
    """Transitions sampled per transition inserted; None: no limit on either side."""
    min_size: int
    """Transitions stored before the first sample."""
    tolerance: float
    """How far (in sampled transitions) either side may run ahead of the ratio."""
    inserted: int = 0
    sampled: int = 0

    @classmethod
    def for_sizes(
        cls, samples_per_insert: float | None, min_size: int, chunk_size: int, batch_size: int
    ) -> RateLimiter:
        """A limiter whose tolerance lets one chunk and one sample request (`batch_size`
        transitions) through without deadlock."""
        spi = samples_per_insert or 0.0
        return cls(samples_per_insert, min_size, tolerance=spi * chunk_size + batch_size)

    def _expected_samples(self, inserted: int) -> float:
        assert self.samples_per_insert is not None
        return self.samples_per_insert * max(0, inserted - self.min_size)

    def can_sample(self, batch_size: int, size: int) -> bool:
        if size < self.min_size or size == 0:
            return False
        if self.samples_per_insert is None:
            return True
        return self.sampled + batch_size <= self._expected_samples(self.inserted) + self.tolerance

    def can_insert(self, count: int) -> bool:
        if self.samples_per_insert is None or self.inserted + count <= self.min_size:
            return True
        return self._expected_samples(self.inserted + count) - self.sampled <= self.tolerance

    def record_insert(self, count: int) -> None:
        self.inserted += count

    def record_sample(self, count: int) -> None:
        self.sampled += count

    def settle(self) -> None:
        """Count every sample the inserts so far allow as taken: neither side is ahead."""
        if self.samples_per_insert is not None:
            self.sampled = max(self.sampled, int(self._expected_samples(self.inserted)))

    def state_dict(self) -> dict[str, int]:
        return {"inserted": self.inserted, "sampled": self.sampled}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.inserted = int(state["inserted"])
        self.sampled = int(state["sampled"])
