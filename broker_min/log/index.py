"""Sparse offset and time indexes of one segment, in Kafka's file formats.

``.index``: entries of (relative offset i32, position i32), one per
``index.interval.bytes`` of log, pointing at the start of a batch whose LAST
offset is the entry's offset.  ``.timeindex``: entries of (timestamp i64,
relative offset i32) with strictly increasing timestamps: the largest
timestamp so far in the segment and the last offset of the batch holding it.

Entries are mirrored in compact arrays (an index is a few MB at most, like
Kafka's mmap) and appended to the file lazily: on roll, flush and close.
After a crash the active segment's indexes are rebuilt from the log anyway.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


def _append_to_file(path: Path, payload: bytes, *, fsync: bool) -> None:
    """Append ``payload`` whole or not at all: a failed or short write (disk full) is cut back
    off the file before the error is raised, so the file never ends in half an entry."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if payload:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, payload)
                while written < len(payload):
                    step = os.write(fd, payload[written:])
                    if step <= 0:
                        raise OSError(errno.EIO, f"writing {path} made no progress")
                    written += step
            except OSError:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass  # the sanity checks of the next load reject the file and rebuild it
                raise
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _strictly_increasing(values: array[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


class OffsetIndex:
    """Maps offsets to file positions of the batches that hold them."""

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._offsets: array[int] = array("i")  # relative to base_offset
        self._positions: array[int] = array("i")
        self._persisted = 0  # entries already in the file

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int, log_size: int) -> OffsetIndex | None:
        """Read an index file; None when it is missing or fails a sanity check."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % OFFSET_ENTRY.size:
            return None
        index = cls(path, base_offset, max_entries)
        for relative, position in OFFSET_ENTRY.iter_unpack(raw):
            index._offsets.append(relative)
            index._positions.append(position)
        index._persisted = len(index._offsets)
        if not index._sane(log_size):
            return None
        return index

    def _sane(self, log_size: int) -> bool:
        if not self._offsets:
            return True
        return (
            self._offsets[0] >= 0
            and self._positions[0] >= 0
            and self._positions[-1] < log_size
            and _strictly_increasing(self._offsets)
            and _strictly_increasing(self._positions)
        )

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the newest entry."""
        if not self._offsets:
            return None
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        self._offsets.append(offset - self.base_offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose last offset is <= ``offset`` (0 if none)."""
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        return self._positions[i] if i >= 0 else 0

    def batch_boundary_within(self, start: int, position_limit: int, max_offset: int | None) -> int:
        """A batch start in ``(start, position_limit]`` such that every batch before it has a base
        offset below ``max_offset``; ``start`` when the index knows none.  Lets reads skip scanning."""
        i = bisect_right(self._positions, position_limit) - 1
        if max_offset is not None:
            i = min(i, bisect_right(self._offsets, max_offset - self.base_offset) - 1)
        if i >= 0 and self._positions[i] > start:
            return self._positions[i]
        return start

    def persist(self, *, fsync: bool = False) -> None:
        """Append entries not yet on disk."""
        pending = range(self._persisted, len(self._offsets))
        payload = b"".join(OFFSET_ENTRY.pack(self._offsets[i], self._positions[i]) for i in pending)
        _append_to_file(self.path, payload, fsync=fsync)
        self._persisted = len(self._offsets)

    def reset(self) -> None:
        """Forget every entry and empty the file (before a rebuild)."""
        self._offsets = array("i")
        self._positions = array("i")
        self._persisted = 0
        self.path.write_bytes(b"")


class TimeIndex:
    """Maps timestamps to the offsets from which a timestamp search can start."""

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._timestamps: array[int] = array("q")
        self._offsets: array[int] = array("i")
        self._persisted = 0

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int) -> TimeIndex | None:
        """Read a time index file; None when it is missing or fails a sanity check."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % TIME_ENTRY.size:
            return None
        index = cls(path, base_offset, max_entries)
        for timestamp, relative in TIME_ENTRY.iter_unpack(raw):
            index._timestamps.append(timestamp)
            index._offsets.append(relative)
        index._persisted = len(index._timestamps)
        if index._offsets and (min(index._offsets) < 0 or not _strictly_increasing(index._timestamps)):
            return None
        return index

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the newest entry: the segment's max timestamp once rolled."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add an entry if ``timestamp`` is newer than the last one (and the index has room)."""
        last = self._timestamps[-1] if self._timestamps else -1
        if timestamp <= last or (self.is_full and not skip_full_check):
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset - self.base_offset)

    def offset_before(self, timestamp: int) -> int | None:
        """Offset of the newest entry with a timestamp strictly below ``timestamp``: no record
        at or before that offset can have a timestamp >= ``timestamp``."""
        i = bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset + self._offsets[i] if i >= 0 else None

    def max_offset(self) -> int:
        """Largest offset referenced, for sanity checks against the log."""
        return self.base_offset + max(self._offsets) if self._offsets else self.base_offset

    def persist(self, *, fsync: bool = False) -> None:
        pending = range(self._persisted, len(self._timestamps))
        payload = b"".join(TIME_ENTRY.pack(self._timestamps[i], self._offsets[i]) for i in pending)
        _append_to_file(self.path, payload, fsync=fsync)
        self._persisted = len(self._timestamps)

    def reset(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("i")
        self._persisted = 0
        self.path.write_bytes(b"")
