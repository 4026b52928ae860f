"""Log compaction: rewrite a log's closed segments keeping the latest record per key.

This is Apache Kafka's Cleaner (storage/.../log/Cleaner.java, LogCleanerManager,
CleanedTransactionMetadata, KIP-534 delete horizons) re-done for broker_min;
:mod:`.cleaner_task` runs it in the background.  One pass over a log:

1. **Range.**  The *dirty* section starts at the cleaner checkpoint (or the log
   start offset) and ends at the first *uncleanable* offset: the smallest of the
   active segment's base offset (the active segment is never cleaned), the high
   watermark and the first offset of a still-open transaction (together the LSO; a
   transaction whose marker is not below the HW yet counts as open), and the base
   offset of the first dirty segment holding a record newer than
   ``min.compaction.lag.ms``.  On a replicated log nothing a leader change could
   still truncate is compacted away or lets an older record go (Kafka's rule).  A log is
   cleaned when dirty / (clean + dirty) bytes exceeds ``min.cleanable.dirty.ratio``,
   or when its oldest dirty segment started more than ``max.compaction.lag.ms`` ago
   (a compacted log also rolls its active segment by that age, see LogConfig.roll_ms).
2. **Offset map.**  Key -> offset of its last record in the dirty section, skipping
   control batches and aborted transactional data.  The map holds at most
   ``log.cleaner.dedupe.buffer.size`` / 24 * 0.9 keys (Kafka's 16-byte MD5 + 8-byte
   offset slots at load factor 0.9); when it is full the pass ends there.
3. **Rewrite.**  Every segment from the start of the log up to the end of the map
   is rewritten, small adjacent segments grouped into one (``segment.bytes`` and
   ``segment.index.bytes`` bound a group).  A record survives if its offset is past
   the map, or it is the latest for its key and is not a tombstone whose batch's
   delete horizon has passed.  Records keep their offsets: a rewritten batch keeps
   its base and last offset (so the producer's last sequence stays), producer id,
   epoch, base sequence and codec.
4. **Tombstones and markers.**  A batch that keeps a tombstone, or a transaction
   marker whose transaction has no data left, gets a delete horizon (now +
   ``delete.retention.ms``) in its base timestamp the first time it is cleaned; a
   later pass after the horizon removes the tombstone / marker.  Aborted
   transactional data is always removed; an ABORT marker is kept while any batch of
   its transaction is still in the log, a COMMIT marker likewise.
5. **Producers.**  The batch holding a producer's last data offset (or its last
   marker, when a marker bumped its epoch) is never removed: with all its records
   gone it stays as an empty batch, so that the producer state rebuilt from the log
   after a restart has the right epoch and last sequence.
6. **Swap.**  Each group's cleaned copy is written as ``.cleaned`` files, fsync'ed,
   and swapped in by :meth:`PartitionLog.replace_segments` (see :mod:`.swap`).

Deviation from Kafka: one transaction-tracking state spans the whole pass (Kafka
starts one per segment group), so a COMMIT marker is never dropped while data of its
transaction survives in an earlier group — broker_min rebuilds transaction state
from the log on restart and would otherwise see that data as an open transaction.

Concurrency: this module only reads sealed segments through its own descriptors and
writes new ``.cleaned`` files, so it runs in a worker thread while the event loop
appends and fetches.  What it reads is fixed when the pass starts (a
:class:`LogSnapshot` of the segment list and the active segment's size).  Appends
only touch the active segment (never cleaned) or roll new segments (not in the
snapshot); retention, DeleteRecords and topic deletion may remove snapshot segments,
which :meth:`PartitionLog.replace_segments` detects on the event loop (the swap is
then skipped and the cleaned files deleted).  A fetch that holds a slice of a
replaced segment keeps reading the unlinked file.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafkakit.errors import CorruptRecordError

from .batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader, make_header
from .checkpoint import fsync_path
from .config import INT_MAX, LogConfig
from .errors import LogStorageError
from .index import OFFSET_ENTRY, TIME_ENTRY
from .partition import PartitionLog
from .records import (
    DELETE_HORIZON_BIT,
    StoredRecord,
    empty_batch,
    parse_records,
    rebuild_batch,
    records_payload,
)
from .segment import LogSegment
from .swap import CLEANED_SUFFIX, swap_failpoint

logger = logging.getLogger("kafkakit.broker.log.cleaner")

#: Kafka's log.cleaner.dedupe.buffer.size default, and its bytes per map slot (MD5 + offset).
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
MAP_BYTES_PER_ENTRY = 24
MAP_LOAD_FACTOR = 0.9
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_ABORT, _COMMIT = 0, 1


class CleanerAborted(Exception):
    """The broker is stopping: the pass gave up (its .cleaned files are removed)."""


class Throttler:
    """Keeps the cleaner's read + write rate under ``bytes_per_second`` by sleeping.

    ``log.cleaner.io.max.bytes.per.second`` bounds the average from the start of the
    pass: after every chunk, if more bytes went through than the budget allows for the
    time spent, the thread sleeps the difference (Kafka's Throttler checks every 300 ms
    instead; checking every chunk bounds short passes too).
    """

    def __init__(
        self,
        bytes_per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep = clock, sleep
        self._start = clock()
        self.observed = 0
        self.throttled_seconds = 0.0

    def maybe_throttle(self, n: int) -> None:
        self.observed += n
        if self.bytes_per_second <= 0 or self.bytes_per_second >= 2**62:
            return
        ahead = self.observed / self.bytes_per_second - (self._clock() - self._start)
        if ahead > 0.001:
            self._sleep(ahead)
            self.throttled_seconds += ahead


@dataclass
class CleanerStats:
    """What one pass did (logged like Kafka's log-cleaner.log summary)."""

    topic: str = ""
    partition: int = 0
    first_dirty_offset: int = 0
    end_offset: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    segments_before: int = 0
    segments_after: int = 0
    elapsed_seconds: float = 0.0
    throttled_seconds: float = 0.0

    def summary(self) -> str:
        mb = self.bytes_read / 1e6
        rate = mb / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0
        return (
            f"cleaned {self.topic}-{self.partition} offsets [{self.first_dirty_offset}, {self.end_offset}): "
            f"{mb:.2f} MB read in {self.elapsed_seconds:.3f}s ({rate:.2f} MB/s, "
            f"{self.throttled_seconds:.3f}s throttled), {self.bytes_written / 1e6:.2f} MB written, "
            f"{self.records_read} -> {self.records_kept} records, "
            f"{self.segments_before} -> {self.segments_after} segments"
        )


@dataclass(frozen=True)
class LogSnapshot:
    """What a pass reads, captured on the event loop: sealed segments and where the log ends."""

    topic: str
    partition: int
    directory: Path
    config: LogConfig
    segments: tuple[LogSegment, ...]  # every segment, the active one last
    sizes: tuple[int, ...]  # each segment's size when the snapshot was taken
    log_start_offset: int
    log_end_offset: int
    checkpoint: int | None
    #: The log's high watermark (its end for a single replica): nothing at or above it is cleaned.
    high_watermark: int = 2**63 - 1

    @classmethod
    def of(cls, log: PartitionLog, checkpoint: int | None) -> LogSnapshot:
        """Capture ``log`` now (event loop); the pass reads nothing the event loop may change."""
        segments = log.segments
        return cls(
            log.topic, log.partition, log.directory, log.config, segments,
            tuple(s.size for s in segments), log.log_start_offset, log.log_end_offset, checkpoint,
            log.high_watermark,
        )  # fmt: skip


@dataclass
class CleanableRange:
    """Kafka's LogToClean: the dirty section and whether it is worth cleaning."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def worth_cleaning(self, min_ratio: float) -> bool:
        if self.cleanable_bytes <= 0:
            return False
        return self.compaction_delay_ms > 0 or self.ratio > min_ratio


# ---- reading batches ------------------------------------------------------------------------


def iter_stored_batches(
    fd: int, size: int, throttler: Throttler | None = None, *, with_data: bool = True
) -> Iterator[tuple[BatchHeader, bytes]]:
    """``(header, batch bytes)`` of each whole batch in ``[0, size)`` of a segment file."""
    position = 0
    chunk, chunk_start = b"", 0
    while position < size:
        at = position - chunk_start
        if at + HEADER_SIZE > len(chunk):
            chunk = os.pread(fd, min(_READ_CHUNK, size - position), position)
            chunk_start, at = position, 0
            if throttler is not None:
                throttler.maybe_throttle(len(chunk))
            if len(chunk) < HEADER_SIZE:
                return
        header = make_header(HEADER.unpack_from(chunk, at))
        batch_size = header.batch_length + LOG_OVERHEAD
        if header.magic != 2 or header.batch_length < MIN_BATCH_LENGTH or position + batch_size > size:
            raise LogStorageError(f"segment is corrupt at byte {position}")
        if with_data or header.is_control:
            if at + batch_size > len(chunk):
                chunk = os.pread(fd, max(batch_size, min(_READ_CHUNK, size - position)), position)
                chunk_start, at = position, 0
                if throttler is not None:
                    throttler.maybe_throttle(len(chunk))
            yield header, chunk[at : at + batch_size]
        else:
            yield header, b""
        position += batch_size


def control_type(header: BatchHeader, batch: bytes) -> int | None:
    """0 ABORT / 1 COMMIT of a control batch, None when it has no record (already cleaned)."""
    if header.record_count == 0:
        return None
    try:
        payload = records_payload(batch, header)
        records = parse_records(payload, header.record_count)
        key = records[0].key
    except (CorruptRecordError, ValueError, IndexError):
        return _ABORT
    if key is None or len(key) < 4:
        return _ABORT
    return int.from_bytes(key[2:4], "big", signed=True)


class _Files:
    """Read descriptors of the snapshot's segments, opened by this pass (not the shared readers)."""

    def __init__(self, snapshot: LogSnapshot) -> None:
        self._snapshot = snapshot
        self._fds: dict[int, int] = {}

    def fd(self, index: int) -> int:
        fd = self._fds.get(index)
        if fd is None:
            fd = self._fds[index] = os.open(self._snapshot.segments[index].log_path, os.O_RDONLY)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


# ---- producers and transactions ---------------------------------------------------------------


@dataclass
class _ProducerLast:
    epoch: int
    last_data_offset: int | None


@dataclass
class LogScan:
    """Transactions and producers of the whole snapshot, from its batch headers."""

    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first offset, marker offset)
    first_unstable_offset: int | None = None
    producers: dict[int, _ProducerLast] = field(default_factory=dict)


def scan_log(snapshot: LogSnapshot, files: _Files, stop: threading.Event | None = None) -> LogScan:
    """Walk every batch header (and read every control batch) of the snapshot."""
    scan = LogScan()
    ongoing: dict[int, int] = {}
    for index, size in enumerate(snapshot.sizes):
        if stop is not None and stop.is_set():
            raise CleanerAborted
        for header, batch in iter_stored_batches(files.fd(index), size, with_data=False):
            pid = header.producer_id
            if pid < 0:
                continue
            entry = scan.producers.get(pid)
            if header.is_control and header.base_offset >= snapshot.high_watermark:
                continue  # not replicated yet: its transaction is still unstable (Kafka's unreplicatedTxns)
            if header.is_control:
                kind = control_type(header, batch)
                first = ongoing.pop(pid, None)
                if kind == _ABORT and first is not None:
                    scan.aborted.append((pid, first, header.base_offset))
                if entry is None:
                    scan.producers[pid] = _ProducerLast(header.producer_epoch, None)
                elif header.producer_epoch > entry.epoch:
                    entry.epoch, entry.last_data_offset = header.producer_epoch, None
                continue
            if header.is_transactional:
                ongoing.setdefault(pid, header.base_offset)
            if entry is None:
                scan.producers[pid] = _ProducerLast(header.producer_epoch, header.last_offset)
            else:
                entry.epoch, entry.last_data_offset = header.producer_epoch, header.last_offset
    scan.aborted.sort(key=lambda a: a[1])
    scan.first_unstable_offset = min(ongoing.values()) if ongoing else None
    return scan


class TransactionTracker:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions and
    which markers no longer have data of their transaction before them."""

    def __init__(self, aborted: Sequence[tuple[int, int, int]]) -> None:
        self._pending = list(aborted)  # sorted by first offset
        self._next = 0
        self._ongoing_aborted: dict[int, list[int]] = {}  # pid -> [observed batch count]
        self._ongoing_committed: set[int] = set()

    def _activate_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= offset:
            self._ongoing_aborted.setdefault(pending[self._next][0], [0])
            self._next += 1

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it is aborted transactional data (to discard)."""
        self._activate_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted[0] += 1
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, kind: int | None) -> bool:
        """A marker: True when its transaction has no batch left before it (it may go)."""
        self._activate_up_to(header.last_offset)
        pid = header.producer_id
        if kind is None:
            return True
        if kind == _ABORT:
            aborted = self._ongoing_aborted.pop(pid, None)
            return not (aborted is not None and aborted[0] > 0)
        if kind == _COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


# ---- range selection ----------------------------------------------------------------------------


def cleanable_range(snapshot: LogSnapshot, now_ms: int, first_unstable_offset: int | None) -> CleanableRange:
    """Kafka's LogCleanerManager.cleanableOffsets + maxCompactionDelay for one snapshot."""
    config, segments, sizes = snapshot.config, snapshot.segments, snapshot.sizes
    start, end = snapshot.log_start_offset, snapshot.log_end_offset
    checkpoint = snapshot.checkpoint
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    active_base = segments[-1].base_offset
    uncleanable = [active_base, snapshot.high_watermark]
    if first_unstable_offset is not None:
        uncleanable.append(first_unstable_offset)
    dirty_non_active = [
        s for i, s in enumerate(segments[:-1]) if _next_base(segments, i) > first_dirty and sizes[i] >= 0
    ]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty_non_active:
            if segment.largest_timestamp() > now_ms - config.min_compaction_lag_ms:
                uncleanable.append(segment.base_offset)
                break
    first_uncleanable = min(uncleanable)
    clean_bytes = cleanable_bytes = 0
    for i, segment in enumerate(segments):
        following = _next_base(segments, i)
        if following <= start:
            continue
        if following <= first_dirty:
            clean_bytes += sizes[i]
        elif segment.base_offset < first_uncleanable and first_dirty < first_uncleanable:
            cleanable_bytes += sizes[i]
    delay = 0
    if config.max_compaction_lag_ms < 2**63 - 1:
        firsts = [
            s.rolling_timestamp for s in dirty_non_active if s.rolling_timestamp and s.rolling_timestamp > 0
        ]
        if firsts:
            clean_until = now_ms - config.max_compaction_lag_ms
            delay = max(clean_until - min(firsts), 0)
    return CleanableRange(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, delay)


def _next_base(segments: Sequence[LogSegment], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else 2**63 - 1


def map_capacity(dedupe_buffer_size: int) -> int:
    """How many keys the offset map may hold (Kafka's SkimpyOffsetMap slots * load factor)."""
    return max(int(dedupe_buffer_size // MAP_BYTES_PER_ENTRY * MAP_LOAD_FACTOR), 1)


def build_offset_map(
    snapshot: LogSnapshot,
    files: _Files,
    scan: LogScan,
    start: int,
    end: int,
    capacity: int,
    throttler: Throttler,
    stats: CleanerStats,
    stop: threading.Event | None = None,
) -> tuple[dict[bytes, int], int]:
    """Key -> last offset over ``[start, end)`` and the map's latest offset (-1 if empty)."""
    offsets: dict[bytes, int] = {}
    latest = -1
    tracker = TransactionTracker(scan.aborted)
    segments = snapshot.segments
    for index, segment in enumerate(segments[:-1]):
        if _next_base(segments, index) <= start:
            continue
        if segment.base_offset >= end:
            break
        if stop is not None and stop.is_set():
            raise CleanerAborted
        for header, batch in iter_stored_batches(files.fd(index), snapshot.sizes[index], throttler):
            if header.last_offset >= end:
                break  # only whole batches below the bound (the HW may fall inside a batch)
            if header.is_control:
                tracker.on_control(header, control_type(header, batch))
            elif not tracker.on_batch(header) and header.last_offset >= start:
                payload = records_payload(batch, header)
                base = header.base_offset
                for record in parse_records(payload, header.record_count):
                    offset = base + record.offset_delta
                    if record.key is not None and offset >= start:
                        if len(offsets) >= capacity and record.key not in offsets:
                            return offsets, latest
                        offsets[record.key] = offset
                        stats.map_records += 1
            if header.last_offset >= start:
                latest = max(latest, header.last_offset)
    return offsets, latest


def group_segments_by_size(
    segments: Sequence[LogSegment], sizes: Sequence[int], max_size: int, max_index_size: int
) -> list[list[int]]:
    """Kafka's groupSegmentsBySize: indexes of consecutive segments whose cleaned copies fit
    one segment (log and index sizes, relative offsets within an int)."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        log_size = sizes[i]
        index_size = len(segments[i].offset_index) * OFFSET_ENTRY.size
        time_size = len(segments[i].time_index) * TIME_ENTRY.size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            nxt_index = len(nxt.offset_index) * OFFSET_ENTRY.size
            nxt_time = len(nxt.time_index) * TIME_ENTRY.size
            nxt_last = nxt.next_offset - 1 if sizes[i] else nxt.base_offset
            if (
                log_size + sizes[i] > max_size
                or index_size + nxt_index > max_index_size
                or time_size + nxt_time > max_index_size
                or (sizes[i] and nxt_last - segments[group[0]].base_offset > INT_MAX)
            ):
                break
            group.append(i)
            log_size += sizes[i]
            index_size += nxt_index
            time_size += nxt_time
            i += 1
        groups.append(group)
    return groups


# ---- rewriting -------------------------------------------------------------------------------------


@dataclass
class CleanContext:
    """Everything the record filter of one pass needs."""

    offsets: dict[bytes, int]
    latest_offset: int
    now_ms: int
    delete_retention_ms: int
    producers: dict[int, _ProducerLast]
    tracker: TransactionTracker


def _is_last_of_producer(header: BatchHeader, producers: dict[int, _ProducerLast]) -> bool:
    last = producers.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.epoch


def _has_horizon(header: BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_BIT)


def filter_batch(header: BatchHeader, batch: bytes, ctx: CleanContext, stats: CleanerStats) -> bytes | None:
    """The bytes to keep of one stored batch (itself, a rebuilt or an empty batch), or None."""
    now = ctx.now_ms
    if header.is_control:
        can_discard = ctx.tracker.on_control(header, control_type(header, batch))
        discard_records = can_discard and _has_horizon(header) and header.base_timestamp <= now
    else:
        can_discard = ctx.tracker.on_batch(header)
        discard_records = can_discard
    retain_empty = header.producer_id >= 0 and _is_last_of_producer(header, ctx.producers)
    stats.records_read += header.record_count
    if discard_records and not retain_empty:
        return None  # Kafka's BatchRetention.DELETE
    marker_for_empty_txn = can_discard and header.is_control
    if discard_records or header.record_count == 0:
        kept_count = 0
        payload, records, kept = b"", [], []
    else:
        payload = records_payload(batch, header)
        records = parse_records(payload, header.record_count)
        if header.is_control:
            kept = records
        else:
            kept = [r for r in records if _retain_record(header, r, ctx)]
        kept_count = len(kept)
    if kept_count:
        tombstones = any(not r.has_value for r in kept) and not header.is_control
        set_horizon = (tombstones or marker_for_empty_txn) and not _has_horizon(header)
        stats.records_kept += kept_count
        if kept_count == len(records) and not set_horizon:
            return batch
        horizon = now + ctx.delete_retention_ms if set_horizon else None
        return rebuild_batch(header, payload, kept, horizon)
    if retain_empty:
        return empty_batch(header) if header.record_count else batch
    return None


def _retain_record(header: BatchHeader, record: StoredRecord, ctx: CleanContext) -> bool:
    """Kafka's shouldRetainRecord for a data batch."""
    offset = header.base_offset + record.offset_delta
    if offset > ctx.latest_offset:
        return True
    if record.key is None:
        return False
    if offset < ctx.offsets.get(record.key, -1):
        return False
    if record.has_value:
        return True
    return not _has_horizon(header) or ctx.now_ms < header.base_timestamp


def clean_group(
    snapshot: LogSnapshot,
    files: _Files,
    group: list[int],
    ctx: CleanContext,
    throttler: Throttler,
    stats: CleanerStats,
    stop: threading.Event | None = None,
) -> LogSegment:
    """Write the cleaned copy of the segments ``group`` as ``<base>.*.cleaned`` files."""
    segments = snapshot.segments
    first = segments[group[0]]
    cleaned = LogSegment.create(
        snapshot.directory, first.base_offset, snapshot.config, ctx.now_ms, CLEANED_SUFFIX
    )
    try:
        pending: list[bytes] = []
        placed: list[tuple[int, int, int, int]] = []
        pending_bytes = 0
        for index in group:
            for header, batch in iter_stored_batches(files.fd(index), snapshot.sizes[index], throttler):
                if stop is not None and stop.is_set():
                    raise CleanerAborted
                stats.bytes_read += header.size
                out = filter_batch(header, batch, ctx, stats)
                if out is None:
                    continue
                if out is batch:
                    max_timestamp = header.max_timestamp
                else:
                    max_timestamp = HEADER.unpack_from(out)[8]
                pending.append(out)
                placed.append((header.base_offset, header.last_offset, max_timestamp, len(out)))
                pending_bytes += len(out)
                if pending_bytes >= _WRITE_CHUNK:
                    cleaned.append(list(pending), pending_bytes, placed)
                    throttler.maybe_throttle(pending_bytes)
                    stats.bytes_written += pending_bytes
                    pending, placed, pending_bytes = [], [], 0
        if pending:
            cleaned.append(list(pending), pending_bytes, placed)
            throttler.maybe_throttle(pending_bytes)
            stats.bytes_written += pending_bytes
        cleaned.fsync()
        cleaned.seal()
        for path in (cleaned.index_path, cleaned.time_index_path):
            fsync_path(path)
        mtime = max(os.path.getmtime(segments[i].log_path) for i in group)
        os.utime(cleaned.log_path, (mtime, mtime))
    except BaseException:
        cleaned.delete()
        raise
    return cleaned


@dataclass
class CleanResult:
    """A finished pass, ready to swap: each group's old segments and their cleaned copy."""

    snapshot: LogSnapshot
    groups: list[tuple[list[LogSegment], LogSegment]]
    end_offset: int
    stats: CleanerStats

    def discard(self) -> None:
        """Delete the cleaned files (the swap did not happen)."""
        for _old, new in self.groups:
            new.delete()


def clean_snapshot(
    snapshot: LogSnapshot,
    now_ms: int,
    *,
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
    throttler: Throttler | None = None,
    stop: threading.Event | None = None,
    force: bool = False,
) -> CleanResult | None:
    """One cleaning pass over ``snapshot`` (run it in a worker thread); None when there is
    nothing worth cleaning (``force`` ignores min.cleanable.dirty.ratio)."""
    started = time.monotonic()
    throttler = throttler if throttler is not None else Throttler(float("inf"))
    files = _Files(snapshot)
    stats = CleanerStats(snapshot.topic, snapshot.partition)
    try:
        scan = scan_log(snapshot, files, stop)
        span = cleanable_range(snapshot, now_ms, scan.first_unstable_offset)
        if span.cleanable_bytes <= 0 or not (
            force or span.worth_cleaning(snapshot.config.min_cleanable_dirty_ratio)
        ):
            return None
        start, upper = span.first_dirty_offset, span.first_uncleanable_offset
        offsets, latest = build_offset_map(
            snapshot, files, scan, start, upper, map_capacity(dedupe_buffer_size), throttler, stats, stop
        )
        if latest < start:
            return None
        end_offset = latest + 1
        segments = snapshot.segments
        chosen = [i for i in range(len(segments) - 1) if segments[i].base_offset < end_offset]
        groups = group_segments_by_size(
            [segments[i] for i in chosen],
            [snapshot.sizes[i] for i in chosen],
            snapshot.config.segment_bytes,
            snapshot.config.segment_index_bytes,
        )
        ctx = CleanContext(
            offsets, latest, now_ms, snapshot.config.delete_retention_ms, scan.producers,
            TransactionTracker(scan.aborted),
        )  # fmt: skip
        result = CleanResult(snapshot, [], end_offset, stats)
        try:
            for group in groups:
                indexes = [chosen[i] for i in group]
                cleaned = clean_group(snapshot, files, indexes, ctx, throttler, stats, stop)
                result.groups.append(([segments[i] for i in indexes], cleaned))
        except BaseException:
            result.discard()
            raise
        swap_failpoint("after_cleaned_written")
        stats.first_dirty_offset, stats.end_offset = start, end_offset
        stats.segments_before, stats.segments_after = len(chosen), len(groups)
        stats.elapsed_seconds = time.monotonic() - started
        stats.throttled_seconds = throttler.throttled_seconds
        return result
    finally:
        files.close()
