"""Read an offline W&B run back (its `run-<id>.wandb` transaction log), for tests.

wandb >= 0.19 no longer ships a Python reader for this file (its writer moved to the Go
`wandb-core`), so this follows the format: a 7-byte file header (":W&B", magic 0xBEE1,
version 0), then LevelDB-log records in 32 KiB blocks, each with a 7-byte header (CRC32,
length, type: full/first/middle/last), whose payloads are protobuf `Record`s.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    """The log's complete records, in order; one still being written at the end of the file
    is left out."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), "not a W&B transaction log"
    offset, pending = HEADER, b""
    while offset + HEADER <= len(data):
        space = BLOCK - offset % BLOCK
        if space < HEADER:  # block trailer padding
            offset += space
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + HEADER])
        if kind == 0 and length == 0:
            break
        if offset + HEADER + length > len(data):
            break  # a record wandb-core is still writing: `wait_for_exit_record` reads again
        payload = data[offset + HEADER : offset + HEADER + length]
        offset += HEADER + length
        if kind == FULL:
            yield _parse(payload)
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield _parse(pending + payload)
            pending = b""


def _parse(payload: bytes):
    record = wandb_internal_pb2.Record()
    record.ParseFromString(payload)
    return record


def wait_for_exit_record(log: Path, timeout_s: float = 60.0) -> list:
    """The records of a finished run. wandb-core writes the log asynchronously and may
    still be flushing it when `wandb.finish()` returns; the `exit` record comes last."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = list(records(log))
        if found and found[-1].WhichOneof("record_type") == "exit":
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{log} has no exit record after {timeout_s} s")
        time.sleep(0.2)


def read_offline_run(run_dir: Path) -> dict[str, Any]:
    """{"run_id", "tags", "group", "config", "history", "artifacts"} of the single offline
    run under `run_dir/wandb`; history is a list of {key: value} rows as logged (nested
    values, such as a video's, flattened to "key/field"); artifacts are {"name", "type",
    "aliases", "files"}."""
    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    out: dict[str, Any] = {"config": {}, "history": [], "artifacts": []}
    for record in wait_for_exit_record(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run_id"] = record.run.run_id
            out["tags"] = list(record.run.tags)
            out["group"] = record.run.run_group
            for item in record.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
        elif kind == "artifact":
            out["artifacts"].append(
                {
                    "name": record.artifact.name,
                    "type": record.artifact.type,
                    "aliases": list(record.artifact.aliases),
                    "files": [entry.path for entry in record.artifact.manifest.contents],
                }
            )
    return out
