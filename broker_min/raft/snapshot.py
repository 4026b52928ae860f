"""Snapshots of the quorum log (KIP-630): ``<end offset>-<epoch>.checkpoint`` files next to the log.

A snapshot holds the state machine's state as of ``end offset`` (every entry below
it applied), written by the state machine itself through :meth:`RaftNode.snapshot`.
Its file, named as Kafka names them (``%020d-%010d.checkpoint``), holds record
batches v2: the state's records with offsets from 0, in the snapshot's epoch.
Kafka frames them with SnapshotHeader and SnapshotFooter control records, which are
not written here yet. The file is written to ``.checkpoint.part``, fsynced and
renamed, so a crash leaves either no snapshot or a whole one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kafkakit.broker.log.checkpoint import write_durably

from .log import LogEntry, SnapshotId, decode_entries, encode_entries, snapshot_ids


def encode_snapshot(snapshot: SnapshotId, records: Sequence[bytes]) -> bytes:
    """The bytes of a snapshot file holding ``records``."""
    return encode_entries([LogEntry(i, snapshot.epoch, r) for i, r in enumerate(records)])


def decode_snapshot(data: bytes) -> list[bytes]:
    """The records of a snapshot file's bytes."""
    entries, size = decode_entries(data)
    if size != len(data):
        raise ValueError("snapshot file has a corrupt or partial tail")
    return [e.value for e in entries]


def write_snapshot_file(directory: Path, snapshot: SnapshotId, data: bytes) -> Path:
    """Write a snapshot file atomically (part file, fsync, rename, fsync of the directory)."""
    path = directory / snapshot.file_name
    write_durably(path, data, tmp_suffix=".part")
    return path


def delete_older_snapshots(directory: Path, keep: SnapshotId) -> None:
    """Remove every snapshot older than ``keep`` (and stray part files)."""
    for snapshot in snapshot_ids(directory):
        if snapshot < keep:
            (directory / snapshot.file_name).unlink(missing_ok=True)
    for part in directory.glob("*.checkpoint.part"):
        part.unlink(missing_ok=True)
