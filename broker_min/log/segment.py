"""One log segment: ``<base>.log`` holding batches as produced, plus its two sparse indexes.

The OS page cache is the only data cache: reads return file ranges
(:class:`FileSlice`) for ``sendfile`` and only batch headers are ever read
into Python, except when a timestamp search must look inside one batch.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import resource
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from .batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    make_header,
    record_timestamps,
    structural_problem,
)
from .config import INT_MAX, LogConfig
from .errors import LogStorageError
from .index import OFFSET_ENTRY, TIME_ENTRY, OffsetIndex, TimeIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_CRC_CHUNK = 1 << 20
_SCAN_WINDOW = 8192  # bytes read at a time when walking batch headers
_IOV_MAX = 1024

BytesLike = bytes | bytearray | memoryview


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's naming: the base offset in 20 digits, e.g. ``00000000000000000000.log``."""
    return f"{base_offset:020d}{suffix}"


class SegmentFile(io.FileIO):
    """Read-only handle on a segment's ``.log``, shared by the segment and every FileSlice.

    It is never closed while someone may still send from it: it closes itself
    when the last reference goes, so a slice stays readable after retention
    unlinked its segment (the inode lives while a descriptor is open).
    """

    def __del__(self) -> None:
        if not self.closed:
            try:
                self.close()
            except OSError:
                pass


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file holding whole batches; ``length == 0`` means no data.

    Serve it with ``loop.sendfile(transport, s.file, s.position, s.length)`` (zero copy),
    or :meth:`read_bytes` where sendfile is not possible.
    """

    file: SegmentFile
    position: int
    length: int

    def read_bytes(self) -> bytes:
        """The slice's bytes, read with ``pread`` (never moves the shared file position)."""
        if self.length == 0:
            return b""
        data = os.pread(self.file.fileno(), self.length, self.position)
        if len(data) == self.length:
            return data
        parts, got = [data], len(data)
        while got < self.length:
            chunk = os.pread(self.file.fileno(), self.length - got, self.position + got)
            if not chunk:
                raise LogStorageError(f"segment file ends {self.length - got} bytes early")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)


class LogSegment:
    """A segment's data file, its offset/time indexes and what the partition needs to know of it."""

    def __init__(
        self, directory: Path, base_offset: int, config: LogConfig, now_ms: int, suffix: str = ""
    ) -> None:
        self.base_offset = base_offset
        self.suffix = suffix  # "" for a live segment; ".cleaned"/".swap" while the cleaner builds one
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        self.index_path = directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix)
        self.time_index_path = directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix)
        self.offset_index = OffsetIndex(
            self.index_path, base_offset, config.segment_index_bytes // OFFSET_ENTRY.size
        )
        self.time_index = TimeIndex(
            self.time_index_path, base_offset, config.segment_index_bytes // TIME_ENTRY.size
        )
        self.index_interval_bytes = config.index_interval_bytes
        self.size = 0  # bytes of valid batches
        self.next_offset = base_offset  # offset after the last batch
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding max_timestamp
        self.rolling_timestamp: int | None = None  # first batch's maxTimestamp, for segment.ms
        self.created_ms = now_ms
        self._bytes_since_index_entry = 0
        self.truncated_bytes = 0  # cut off by the last recovery
        #: A failed append could not be cut back off the file (see :meth:`append`).
        self.torn = False
        self._reader: SegmentFile | None = None
        self._writer: int | None = None

    # ---- opening -----------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, suffix: str = ""
    ) -> LogSegment:
        """A new empty, writable segment (any leftover files of that name are emptied)."""
        segment = cls(directory, base_offset, config, now_ms, suffix)
        segment.offset_index.reset()
        segment.time_index.reset()
        segment._writer = os.open(
            segment.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644
        )
        return segment

    @classmethod
    def load(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, *, recover: bool
    ) -> LogSegment:
        """Open an existing segment read-only; see :meth:`recover` for what ``recover`` does.

        Indexes that are missing or fail their sanity checks are rebuilt from the log.
        """
        segment = cls(directory, base_offset, config, now_ms)
        segment.size = os.path.getsize(segment.log_path)
        if recover:
            segment.recover()
        elif not segment._load_indexes():
            logger.warning("rebuilding the indexes of %s", segment.log_path)
            segment.recover()
        segment._reader = None  # reopened on first read: idle segments hold no descriptor
        return segment

    def _load_indexes(self) -> bool:
        """Adopt the index files and find the segment's end; False if anything looks wrong."""
        offset_index = OffsetIndex.load(
            self.index_path, self.base_offset, self.offset_index.max_entries, self.size
        )
        time_index = TimeIndex.load(self.time_index_path, self.base_offset, self.time_index.max_entries)
        if offset_index is None or time_index is None:
            return False
        self.offset_index, self.time_index = offset_index, time_index
        last = offset_index.last_entry()
        if last is not None:
            header = self._header_at(last[1])
            if header is None or header.last_offset != last[0]:
                return False
        if not self._scan_tail(last[1] if last is not None else 0):
            return False
        time_entry = time_index.last_entry()
        if time_entry is not None:
            if time_index.max_offset() >= self.next_offset:
                return False
            if time_entry[0] > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = time_entry
        if self.size:
            first = self._header_at(0)
            self.rolling_timestamp = first.max_timestamp if first is not None else None
        return True

    def _scan_tail(self, position: int) -> bool:
        """Walk headers from an indexed batch to the end to learn next_offset; False if malformed."""
        start = position
        while position < self.size:
            header = self._header_at(position)
            if header is None or position + header.size > self.size:
                return False
            self._note_timestamp(header.max_timestamp, header.last_offset)
            self.next_offset = header.next_offset
            position += header.size
        self._bytes_since_index_entry = self.size - start
        return True

    def recover(self) -> int:
        """Rebuild both indexes by walking every batch, checking structure, offsets and CRC-32C;
        truncate the file at the first bad batch.  Returns the number of bytes cut off."""
        self.offset_index.reset()
        self.time_index.reset()
        file_size = os.fstat(self.reader().fileno()).st_size
        self.size, self.next_offset, self.max_timestamp = 0, self.base_offset, -1
        self.offset_of_max_timestamp, self.rolling_timestamp = self.base_offset, None
        self._bytes_since_index_entry = 0
        position = 0
        while position < file_size:
            header = self._header_at(position)
            if header is None or not self._recoverable(header, position, file_size):
                break
            self._track(header.base_offset, header.last_offset, header.max_timestamp, header.size)
            position += header.size
        truncated = file_size - position
        if truncated:
            logger.warning(
                "truncating %d bytes of torn or corrupt data at byte %d of %s",
                truncated,
                position,
                self.log_path,
            )
            os.truncate(self.log_path, position)
        self.truncated_bytes = truncated
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.persist_indexes()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Cut the batch holding ``offset`` and everything after it (Kafka's LogSegment.truncateTo,
        for a follower whose log diverged from its leader's); returns the bytes removed.

        The file is cut and fsync'ed and both indexes are rebuilt from the remaining batch
        headers (their files rewritten and fsync'ed), so the change survives a crash.
        """
        found = self.locate(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        fd = self._writer if self._writer is not None else os.open(self.log_path, os.O_WRONLY)
        try:
            os.ftruncate(fd, position)
            os.fsync(fd)
            self.torn = False
        finally:
            if fd != self._writer:
                os.close(fd)
        kept = list(self.headers(0, end=position))
        self.offset_index.reset()
        self.time_index.reset()
        self.size, self.next_offset, self.max_timestamp = 0, self.base_offset, -1
        self.offset_of_max_timestamp, self.rolling_timestamp = self.base_offset, None
        self._bytes_since_index_entry = 0
        for _, header in kept:
            self._track(header.base_offset, header.last_offset, header.max_timestamp, header.size)
        if self._writer is None:  # a sealed segment keeps its final time index entry
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        try:
            self.persist_indexes(fsync=True)
        except OSError as exc:  # disk full: the files keep fewer entries (still valid), memory is right
            logger.error("writing the indexes of %s after a truncation failed: %s", self.log_path, exc)
        return removed

    def _recoverable(self, header: BatchHeader, position: int, file_size: int) -> bool:
        return (
            position + header.size <= file_size
            and header.base_offset >= self.next_offset
            and header.last_offset - self.base_offset <= INT_MAX
            and self._crc_ok(header, position)
        )

    def _crc_ok(self, header: BatchHeader, position: int) -> bool:
        fd = self.reader().fileno()
        crc, offset, remaining = 0, position + ATTRIBUTES_OFFSET, header.size - ATTRIBUTES_OFFSET
        while remaining:
            chunk = os.pread(fd, min(remaining, _CRC_CHUNK), offset)
            if not chunk:
                return False
            crc = crc32c(chunk, crc)
            offset += len(chunk)
            remaining -= len(chunk)
        return crc == header.crc

    # ---- writing -----------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self._writer is not None

    def open_for_append(self) -> None:
        """Make a loaded segment the active one."""
        if self._writer is None:
            self._writer = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)

    def append(self, buffers: list[BytesLike], total: int, batches: list[tuple[int, int, int, int]]) -> None:
        """Write ``buffers`` (``total`` bytes) in one ``writev``; ``batches`` lists each batch's
        (base offset, last offset, max timestamp, size) for the indexes.

        On an I/O error (ENOSPC, EFBIG, EIO; possibly after part of the data was written) the
        file is cut back to its last whole batch and LogStorageError is raised.  If even that
        fails, the segment refuses every later append (its file may end in a torn batch that
        the O_APPEND writer would write after); a restart's recovery truncates the tail.
        """
        assert self._writer is not None, "append to a read-only segment"
        if self.torn:
            raise LogStorageError(f"{self.log_path} ends in a failed write that could not be rolled back")
        try:
            _write_fully(self._writer, buffers, total)
        except OSError as exc:
            try:
                os.ftruncate(self._writer, self.size)
                self.torn = os.fstat(self._writer).st_size != self.size
            except OSError:
                self.torn = True
            if self.torn:
                logger.error("cannot roll back a failed append to %s: no appends until restart", self.log_path)
            else:
                logger.error("append to %s failed and was rolled back: %s", self.log_path, exc)
            raise LogStorageError(f"append to {self.log_path} failed: {exc}") from exc
        for base_offset, last_offset, max_timestamp, size in batches:
            self._track(base_offset, last_offset, max_timestamp, size)

    def _track(self, base_offset: int, last_offset: int, max_timestamp: int, size: int) -> None:
        """Account for a batch just placed at the end of the segment (Kafka's index policy)."""
        position = self.size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.rolling_timestamp is None:
            self.rolling_timestamp = max_timestamp
        if self._bytes_since_index_entry > self.index_interval_bytes and not self.offset_index.is_full:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self.size = position + size
        self.next_offset = last_offset + 1

    def _note_timestamp(self, max_timestamp: int, last_offset: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset

    def needs_roll(
        self,
        incoming_bytes: int,
        incoming_max_timestamp: int,
        last_offset: int,
        config: LogConfig,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rules: size, age (segment.ms), full index, or relative offset overflow."""
        if self.size == 0:
            return False
        if self.size + incoming_bytes > config.segment_bytes:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        if last_offset - self.base_offset > INT_MAX:
            return True
        if self.rolling_timestamp is not None and self.rolling_timestamp >= 0 and incoming_max_timestamp >= 0:
            waited = incoming_max_timestamp - self.rolling_timestamp
        else:
            waited = now_ms - self.created_ms
        return waited > config.roll_ms

    def seal(self) -> None:
        """Stop being the active segment: record the final max timestamp and write the indexes."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.persist_indexes()
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None

    def persist_indexes(self, *, fsync: bool = False) -> None:
        self.offset_index.persist(fsync=fsync)
        self.time_index.persist(fsync=fsync)

    def fsync(self) -> None:
        """Force data and indexes to disk."""
        self.persist_indexes(fsync=True)
        if self._writer is not None:
            os.fsync(self._writer)
        else:
            os.fsync(self.reader().fileno())

    def change_suffix(self, suffix: str) -> None:
        """Rename the three files to ``<name><suffix>`` (the cleaner's .cleaned -> .swap -> live).

        The indexes are renamed first and the ``.log`` last: the log file's name is
        what recovery trusts, an index can always be rebuilt from it.
        """
        assert self._writer is None, "rename of the active segment"
        directory = self.log_path.parent
        names = (
            segment_file_name(self.base_offset, INDEX_SUFFIX),
            segment_file_name(self.base_offset, TIME_INDEX_SUFFIX),
            segment_file_name(self.base_offset, LOG_SUFFIX),
        )
        old_paths = (self.index_path, self.time_index_path, self.log_path)
        new_paths = tuple(directory / (name + suffix) for name in names)
        for old, new in zip(old_paths, new_paths, strict=True):
            if old.exists():
                os.replace(old, new)
        self.index_path, self.time_index_path, self.log_path = new_paths
        self.offset_index.path, self.time_index.path = self.index_path, self.time_index_path
        self.suffix = suffix

    # ---- reading -----------------------------------------------------------------------------

    def reader(self) -> SegmentFile:
        """The shared read-only handle (opened on first use; closed again when unused for long)."""
        reader = self._reader
        if reader is None or reader.closed:
            reader = self._reader = SegmentFile(self.log_path, "rb")
        OPEN_READERS.touch(self)
        return reader

    def drop_reader(self) -> None:
        """Let go of the read handle (it closes once no FileSlice in flight uses it)."""
        self._reader = None

    def _header_at(self, position: int) -> BatchHeader | None:
        """The batch header at ``position``, or None if it is cut short or malformed."""
        raw = os.pread(self.reader().fileno(), HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        header = make_header(HEADER.unpack_from(raw))
        return None if structural_problem(header) else header

    def headers(self, position: int = 0, *, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from ``position`` to the end (or to byte ``end``).

        Reads the file in small windows so that walking many small batches costs
        one ``pread`` per window, not one per batch.
        """
        fd = self.reader().fileno()
        size = self.size if end is None else min(self.size, end)
        window, window_start = b"", position
        while position < size:
            at = position - window_start
            if at + HEADER_SIZE > len(window):
                window, window_start, at = (
                    os.pread(fd, min(_SCAN_WINDOW, size - position), position),
                    position,
                    0,
                )
                if len(window) < HEADER_SIZE:
                    raise LogStorageError(f"{self.log_path} ends inside the batch header at byte {position}")
            header = make_header(HEADER.unpack_from(window, at))
            if header.magic != 2 or header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                raise LogStorageError(f"{self.log_path} is corrupt at byte {position}")
            yield position, header
            position += header.batch_length + LOG_OVERHEAD

    def locate(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset`` (the one holding it, if any)."""
        for position, header in self.headers(self.offset_index.lookup(offset)):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> FileSlice | None:
        """Whole batches from the one holding ``offset``; None if ``offset`` is past this segment."""
        found = self.locate(offset)
        if found is None:
            return None
        start, first = found
        reader = self.reader()
        if max_offset is not None and first.base_offset >= max_offset:
            return FileSlice(reader, start, 0)
        if first.size >= max_bytes:
            fits = first.size == max_bytes or min_one_batch
            return FileSlice(reader, start, first.size if fits else 0)
        limit = start + max_bytes
        end = self.size
        boundary = self.offset_index.batch_boundary_within(
            start + first.size, min(limit, self.size), max_offset
        )
        for position, header in self.headers(boundary):
            if position + header.size > limit or (
                max_offset is not None and header.base_offset >= max_offset
            ):
                end = position
                break
        return FileSlice(reader, start, end - start)

    def find_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``min_offset`` whose timestamp is
        >= ``timestamp``, or None if this segment has none."""
        if self.max_timestamp < timestamp:
            return None
        start_offset = max(min_offset, self.time_index.offset_before(timestamp) or self.base_offset)
        for position, header in self.headers(self.offset_index.lookup(start_offset)):
            if header.last_offset < min_offset or header.max_timestamp < timestamp:
                continue
            for offset, record_timestamp in self.record_timestamps(position, header):
                if offset >= min_offset and record_timestamp >= timestamp:
                    return offset, record_timestamp
        return None

    def record_timestamps(self, position: int, header: BatchHeader) -> list[tuple[int, int]]:
        """(offset, timestamp) of each record in the batch at ``position``; if its records cannot
        be decoded, the batch's own (last offset, max timestamp) stands in for all of them."""
        batch = os.pread(self.reader().fileno(), header.size, position)
        try:
            return record_timestamps(batch, header)
        except Exception:  # the codecs raise assorted types; the batch itself passed its CRC
            logger.warning("cannot decode the records of the batch at %d in %s", position, self.log_path)
            return [(header.last_offset, header.max_timestamp)]

    def max_timestamp_record(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record carrying this segment's max timestamp."""
        for position, header in self.headers(self.offset_index.lookup(self.offset_of_max_timestamp)):
            if header.max_timestamp == self.max_timestamp:
                for offset, record_timestamp in self.record_timestamps(position, header):
                    if record_timestamp == self.max_timestamp:
                        return offset, record_timestamp
                return header.last_offset, header.max_timestamp
        return self.offset_of_max_timestamp, self.max_timestamp

    def last_modified_ms(self) -> int:
        return int(os.path.getmtime(self.log_path) * 1000)

    def largest_timestamp(self) -> int:
        """Kafka's retention clock: the max record timestamp, or the file's mtime without one."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms()

    # ---- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Seal and release this segment's handles (open slices keep the shared reader alive)."""
        if self._writer is not None:
            self.seal()
        self._reader = None
        OPEN_READERS.forget(self)

    def delete(self) -> None:
        """Remove the files; in-flight FileSlices still read the unlinked data."""
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None
        self._reader = None
        OPEN_READERS.forget(self)
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)


def _write_fully(fd: int, buffers: list[BytesLike], total: int) -> None:
    """``writev`` everything, coping with partial writes and the IOV_MAX limit."""
    written = 0
    if len(buffers) <= _IOV_MAX:
        written = os.writev(fd, buffers)
        if written == total:
            return
    views = [view for view in (memoryview(b).cast("B") for b in buffers) if len(view)]
    _drop_written(views, written)
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        if written <= 0:
            raise OSError(errno.EIO, "writev made no progress")
        _drop_written(views, written)


def _drop_written(views: list[memoryview], written: int) -> None:
    while written and views:
        first = views[0]
        if written >= len(first):
            written -= len(first)
            views.pop(0)
        else:
            views[0] = first[written:]
            written = 0


class _ReaderCache:
    """Segments whose shared read handle is open, least recently used first.

    A broker with thousands of partitions would otherwise keep a read
    descriptor for every segment it ever served, on top of each active
    segment's write descriptor: 10,000 partitions used up a 20,000-descriptor
    limit and the broker could accept no connection. Past ``limit`` open
    readers, the least recently used one is dropped (and reopened on its
    next read).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._segments: OrderedDict[int, LogSegment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._segments)

    def touch(self, segment: LogSegment) -> None:
        key = id(segment)
        segments = self._segments
        if key in segments:
            segments.move_to_end(key)
            return
        segments[key] = segment
        while len(segments) > self.limit:
            _, oldest = segments.popitem(last=False)
            oldest.drop_reader()

    def forget(self, segment: LogSegment) -> None:
        self._segments.pop(id(segment), None)


def _reader_limit() -> int:
    """A quarter of the descriptor limit (writers, index files and sockets need the rest)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, (soft if soft != resource.RLIM_INFINITY else 1 << 16) // 4)


#: Every segment reader of this process (see _ReaderCache).
OPEN_READERS = _ReaderCache(_reader_limit())


def raise_descriptor_limit() -> int:
    """Raise this process's soft descriptor limit to the hard one (as the JVM does for Kafka)
    and size the reader cache to it; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            logger.debug("cannot raise the descriptor limit from %s to %s", soft, hard)
    OPEN_READERS.limit = _reader_limit()
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
