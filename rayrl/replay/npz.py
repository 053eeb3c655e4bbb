"""Writing an .npz archive whose largest array is a ring buffer, without copying the ring.

`np.savez` needs every array whole and contiguous: the replay's frame ring (gigabytes of
Atari frames, oldest first only after a wrap-around) would have to be copied into a new
array first, doubling the store's memory while it saves, outside the memory Ray reserved
for it. Here an array may be given as parts (views into the ring) that follow each other
along its first axis: the archive holds one `.npy` member per array, its header written
for the whole shape and its data part by part, straight from the views. `np.load` reads the
result like any `np.savez` file (uncompressed members, as `np.savez` writes them).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

Parts = Sequence[np.ndarray]
"""Arrays with the same dtype and trailing shape, one array when joined along axis 0."""


def write_npz(file: IO[bytes], arrays: Mapping[str, np.ndarray | Parts]) -> None:
    """Write `arrays` (each an array, or its parts) to `file` as an .npz archive."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            parts = [value] if isinstance(value, np.ndarray) else list(value)
            _write_npy(zf, name, [np.asarray(part) for part in parts])


def _write_npy(zf: zipfile.ZipFile, name: str, parts: list[np.ndarray]) -> None:
    first = parts[0]
    if any(p.dtype != first.dtype or p.shape[1:] != first.shape[1:] for p in parts):
        raise ValueError(f"the parts of '{name}' differ in dtype or trailing shape")
    shape = (sum(len(p) for p in parts), *first.shape[1:]) if first.ndim else first.shape
    header = {"descr": np.lib.format.dtype_to_descr(first.dtype), "fortran_order": False}
    with zf.open(f"{name}.npy", mode="w", force_zip64=True) as member:
        np.lib.format.write_array_header_2_0(member, {**header, "shape": shape})
        for part in parts:
            member.write(np.ascontiguousarray(part).data.cast("B"))
