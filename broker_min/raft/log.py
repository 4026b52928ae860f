"""The replicated log of the quorum: entries with (offset, epoch), on disk, plus the epoch cache.

File format: Kafka's own. The log lives in ``<dir>/__cluster_metadata-0/`` as one
segment file ``00000000000000000000.log`` of record batches v2, one batch per run
of entries of one epoch, the epoch in each batch's ``partitionLeaderEpoch`` (as
Kafka's KafkaMetadataLog writes them). Each entry is one record whose value is the
caller's bytes. A leader's first entry of an epoch is a control batch (attributes
bit 5) with the key of Kafka's LEADER_CHANGE control record (version 0, type 2);
its value is empty here, where Kafka writes a LeaderChangeMessage.

It does not reuse broker_min/log: that machinery assigns offsets itself, keeps
producer state and rolls/retains segments, while the quorum log must truncate an
arbitrary uncommitted tail and is small. Metadata logs are small, so the entries
are also kept in memory; there is one segment and no index: snapshots
(:mod:`.snapshot`) bound both, as the log restarts at each snapshot's end.

The epoch cache (Kafka's LeaderEpochFileCache, ``leader-epoch-checkpoint``) is
derived from the batches on load instead of being checkpointed.
"""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c
from kafkakit.records import decode_raw_records, encode_batch, iter_batch_headers, verify_crc

TOPIC = "__cluster_metadata"
PARTITION_DIR = f"{TOPIC}-0"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_CONTROL_ATTRIBUTE = 0x20
_ATTRIBUTES_AT = 21
#: The key of Kafka's LEADER_CHANGE control record: int16 version 0, int16 type 2.
LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of the quorum log."""

    offset: int
    epoch: int
    value: bytes
    control: bool = False


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot's end offset (exclusive) and the epoch of its last entry."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        """Kafka's snapshot file name: ``%020d-%010d.checkpoint``."""
        return f"{self.end_offset:020d}-{self.epoch:010d}.checkpoint"


def snapshot_ids(directory: Path) -> list[SnapshotId]:
    """The complete snapshots in ``directory``, oldest first."""
    found = []
    for path in directory.glob("*.checkpoint"):
        match = _SNAPSHOT_NAME.match(path.name)
        if match:
            found.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return sorted(found)


def segment_name(base_offset: int) -> str:
    """Kafka's segment file name for ``base_offset``."""
    return f"{base_offset:020d}.log"


class CorruptLogError(Exception):
    """Bytes from a peer that are not well-formed record batches of the quorum log."""


def encode_entries(entries: Sequence[LogEntry]) -> bytes:
    """Entries as record batches v2, one batch per run of same-epoch, same-kind entries."""
    out: list[bytes] = []
    i = 0
    now = int(time.time() * 1000)
    while i < len(entries):
        j = i + 1
        while (
            j < len(entries)
            and entries[j].epoch == entries[i].epoch
            and entries[j].control == entries[i].control
        ):
            j += 1
        run = entries[i:j]
        key = LEADER_CHANGE_KEY if run[0].control else None
        batch = encode_batch(
            [(key, e.value, now, ()) for e in run],
            base_offset=run[0].offset,
            partition_leader_epoch=run[0].epoch,
        )
        if run[0].control:
            # encode_batch writes data batches only: set the control bit and re-sign the batch.
            raw = bytearray(batch)
            (attributes,) = struct.unpack_from(">h", raw, _ATTRIBUTES_AT)
            struct.pack_into(">h", raw, _ATTRIBUTES_AT, attributes | _CONTROL_ATTRIBUTE)
            struct.pack_into(">I", raw, 17, crc32c(bytes(raw[_ATTRIBUTES_AT:])))
            batch = bytes(raw)
        out.append(batch)
        i = j
    return b"".join(out)


def decode_entries(data: bytes) -> tuple[list[LogEntry], int]:
    """The entries of the complete, CRC-valid batches at the start of ``data``, and the bytes they span."""
    entries: list[LogEntry] = []
    end = 0
    for pos, header in iter_batch_headers(data):
        if pos != end or header.magic != 2 or not verify_crc(data, pos, header):
            break
        control = bool(header.attributes & _CONTROL_ATTRIBUTE)
        for offset_delta, _ts, _key, value, _headers in decode_raw_records(data, pos, header):
            entries.append(
                LogEntry(
                    header.base_offset + offset_delta, header.partition_leader_epoch, value or b"", control
                )
            )
        end = pos + header.size
    return entries, end


class RaftLog:
    """The quorum's log: append, truncate, read, and the epoch cache for divergence checks."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / PARTITION_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = sorted(self.directory.glob("*.log"))
        self.path = segments[-1] if segments else self.directory / segment_name(0)
        #: The log start offset; entries below it live only in the snapshot ending there.
        self._start = int(self.path.name[:20]) if segments else 0
        snapshot = next((s for s in snapshot_ids(self.directory) if s.end_offset == self._start), None)
        #: The epoch of the entry just below the start (the snapshot's epoch), 0 at offset 0.
        self._base_epoch = snapshot.epoch if snapshot is not None else 0
        self._entries: list[LogEntry] = []
        #: (base offset, file position) of every batch, to truncate inside the file.
        self._batches: list[tuple[int, int]] = []
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), ascending
        self._load()
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the log's lifetime

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        pos = 0
        for batch_pos, header in iter_batch_headers(data):
            if batch_pos != pos or not verify_crc(data, batch_pos, header):
                break
            entries, size = decode_entries(data[batch_pos : batch_pos + header.size])
            if size != header.size or not entries or entries[0].offset != self.end_offset:
                break
            self._batches.append((entries[0].offset, batch_pos))
            for e in entries:
                self._remember(e)
            pos = batch_pos + header.size
        if pos != len(data):
            # A torn or corrupt tail (a crash mid-append): drop it; it was never acknowledged.
            with open(self.path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())

    def _remember(self, entry: LogEntry) -> None:
        self._entries.append(entry)
        if not self._epochs or self._epochs[-1][0] != entry.epoch:
            self._epochs.append((entry.epoch, entry.offset))

    def close(self) -> None:
        """Close the segment file."""
        self._file.close()

    @property
    def start_offset(self) -> int:
        """The log start offset (0, or the end offset of the snapshot the log continues)."""
        return self._start

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next entry gets."""
        return self._start + len(self._entries)

    @property
    def last_epoch(self) -> int:
        """The epoch of the last entry (0 for an empty log, the snapshot's after a snapshot)."""
        return self._epochs[-1][0] if self._epochs else self._base_epoch

    def entry(self, offset: int) -> LogEntry:
        """The entry at ``offset`` (at least the start offset)."""
        if offset < self._start:
            raise IndexError(f"offset {offset} is below the log start offset {self._start}")
        return self._entries[offset - self._start]

    def entries(self, start: int, end: int | None = None) -> list[LogEntry]:
        """Entries with ``start <= offset < end`` (those still in the log, above its start offset)."""
        low = max(start - self._start, 0)
        high = None if end is None else max(end - self._start, 0)
        return self._entries[low:high]

    def epoch_start_offset(self, epoch: int) -> int | None:
        """The first offset of ``epoch`` in this log, None when it has no entry of that epoch."""
        for e, start in self._epochs:
            if e == epoch:
                return start
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's ``endOffsetForEpoch``: the largest epoch <= ``epoch`` here and the offset where it ends.

        (-1, 0) when no entry has an epoch <= ``epoch``.
        """
        found = (self._base_epoch, self._start) if self._start > 0 and self._base_epoch <= epoch else (-1, 0)
        for i, (e, _start) in enumerate(self._epochs):
            if e > epoch:
                break
            end = self._epochs[i + 1][1] if i + 1 < len(self._epochs) else self.end_offset
            found = (e, end)
        return found

    def diverging(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """For a follower at (``fetch_offset``, ``last_fetched_epoch``): None if its log is a prefix of
        this one, else the (epoch, end offset) it must truncate to (Fetch's DivergingEpoch)."""
        if fetch_offset == 0:
            return None
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch != last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Append entries that continue the log (offsets from :attr:`end_offset`), durably."""
        if not entries:
            return
        if entries[0].offset != self.end_offset:
            raise ValueError(f"append at {entries[0].offset} to a log ending at {self.end_offset}")
        if entries[0].epoch < self.last_epoch:
            raise ValueError(f"append of epoch {entries[0].epoch} after epoch {self.last_epoch}")
        data = encode_entries(entries)
        position = self._file.tell()
        for pos, header in iter_batch_headers(data):
            self._batches.append((header.base_offset, position + pos))
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        for e in entries:
            self._remember(e)

    def append_values(self, epoch: int, values: Sequence[bytes], control: bool = False) -> tuple[int, int]:
        """Append ``values`` as new entries of ``epoch``; the (first, last) offsets they got."""
        base = self.end_offset
        self.append([LogEntry(base + i, epoch, v, control) for i, v in enumerate(values)])
        return base, self.end_offset - 1

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at ``offset`` or above (a divergent, uncommitted tail)."""
        if offset >= self.end_offset:
            return
        if offset < self._start:
            raise ValueError(f"truncation to {offset}, below the log start offset {self._start}")
        # The batch holding ``offset`` is cut at its start; its entries below ``offset`` are rewritten.
        index = max(i for i, (base, _pos) in enumerate(self._batches) if base <= offset)
        cut_base, cut_pos = self._batches[index]
        keep_batches = self._batches[:index]
        survivors = self._entries[cut_base - self._start : offset - self._start]
        self._file.flush()
        self._file.truncate(cut_pos)
        self._file.seek(cut_pos)
        self._batches = keep_batches
        self._entries = self._entries[: cut_base - self._start]
        self._epochs = [(e, s) for e, s in self._epochs if s < cut_base]
        if self._entries and (not self._epochs or self._epochs[-1][0] != self._entries[-1].epoch):
            self._epochs.append((self._entries[-1].epoch, self._entries[-1].offset))
        if survivors:
            self.append(survivors)  # the kept head of the cut batch, rewritten (fsyncs)
        else:
            os.fsync(self._file.fileno())

    def read(self, start: int, max_bytes: int) -> bytes:
        """Record batches of the entries from ``start``, about ``max_bytes`` at most (at least one entry)."""
        chosen: list[LogEntry] = []
        size = 0
        for e in self.entries(start):
            size += len(e.value) + 32
            if chosen and size > max_bytes:
                break
            chosen.append(e)
        return encode_entries(chosen)

    def restart_at(self, start: int, base_epoch: int) -> None:
        """Make ``start`` the log start offset (a snapshot now ends there), keeping the entries above it.

        The kept entries move to a new segment named by its base offset, written and
        fsynced before the old segment is removed.
        """
        keep = self.entries(start)
        if keep and keep[0].offset != start:
            raise ValueError(f"the log does not reach offset {start}")
        new_path = self.directory / segment_name(start)
        part = new_path.with_name(new_path.name + ".part")
        data = encode_entries(keep)
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._file.close()
        os.replace(part, new_path)
        if self.path != new_path:
            self.path.unlink(missing_ok=True)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.path = new_path
        self._start, self._base_epoch = start, base_epoch
        self._entries, self._batches, self._epochs = [], [], []
        for pos, header in iter_batch_headers(data):
            self._batches.append((header.base_offset, pos))
        for e in keep:
            self._remember(e)
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the log's lifetime
