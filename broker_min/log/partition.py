"""One partition's log: a directory ``<topic>-<N>`` of segments, as Apache Kafka lays it out.

Appends validate each batch's header and CRC, assign offsets by rewriting the
16 bytes in front of the CRC-covered part, and write the batches as received
with one ``writev``.  Reads return :class:`FileSlice` ranges for ``sendfile``.
Nothing is fsync'ed unless the flush policy (flush.messages / flush.ms) or
:meth:`PartitionLog.flush` asks; ``close`` flushes and leaves a clean-shutdown
marker, without which the next open re-verifies every segment from the last
flushed offset (the recovery point) and truncates a torn tail.

Leader epochs: every appended batch is stamped with the partition's
:attr:`PartitionLog.leader_epoch` (outside the CRC, like the offset) and the
:class:`~.leader_epochs.LeaderEpochCache` (``leader-epoch-checkpoint``) records
where each epoch starts.  The cache is cut with the log: at its end when
recovery truncates a torn tail, at its start when retention or DeleteRecords
move the log start; it is validated against the log on every open and rebuilt
from the batches' partitionLeaderEpoch when its file is missing or unreadable.
Compaction keeps batches' offsets and epochs, so it leaves the cache alone.
A single node leads every partition in epoch 0 from its creation;
:meth:`PartitionLog.become_leader` is the hook for a later epoch.

High watermark: :attr:`PartitionLog.high_watermark` is kept apart from the log
end offset.  It is the bound of everything consumers see: Fetch reads below it
(or below the LSO, which never exceeds it), ListOffsets "latest" answers it and
timestamp lookups ignore offsets at or above it.  With ``single_replica`` (a
single node) every append is committed at once, so HW = LEO after each
append and after recovery; a replicated partition (cluster mode) opens at its
checkpointed HW (Kafka's ``replication-offset-checkpoint``, written by the
:class:`~.manager.LogManager`) and the replication layer moves it with
:meth:`PartitionLog.update_high_watermark`.

Followers (cluster mode, :mod:`kafkakit.broker.replication`): :meth:`PartitionLog.append_as_follower`
writes the leader's batches with their offsets and epochs, :meth:`PartitionLog.truncate_to`
cuts a tail the leader does not have and :meth:`PartitionLog.truncate_fully_and_start_at`
restarts an empty log at the leader's log start.
"""

from __future__ import annotations

import logging
import shutil
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .batch import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    BatchHeader,
    check_batches,
    log_append_time_header,
    offset_header,
)
from .checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    fsync_path,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from .config import LogConfig
from .errors import (
    InvalidPartitionDirectoryError,
    LogError,
    LogStorageError,
    OffsetOutOfRange,
)
from .layout import parse_partition_dir
from .leader_epochs import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from .recovery import fetched_batches, load_segments, remove_strays
from .segment import BytesLike, FileSlice, LogSegment
from .swap import SWAP_SUFFIX, recover_swaps, swap_failpoint

logger = logging.getLogger(__name__)

_OFFSET_HEADER_SIZE = 16  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC


class AppendedBatch(NamedTuple):
    """What the producer-state and transaction layers need to know of each appended batch."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    is_transactional: bool
    is_control: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets assigned by :meth:`PartitionLog.append`; ``log_append_time_ms`` is -1 under CreateTime."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    batches: list[AppendedBatch]


class PartitionLog:
    """The segments of one topic partition.  Use :meth:`open`; every method is synchronous."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        opened_ms: int,
        epochs: LeaderEpochCache | None = None,
        high_watermark: int | None = None,
        single_replica: bool = True,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._unflushed_messages = 0
        self._sealed_unflushed: list[LogSegment] = []
        self._last_flush_ms = opened_ms
        self._closed = False
        self._epochs = (
            epochs if epochs is not None else LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT_FILE)
        )
        #: The epoch stamped into appended batches: this node's current leader epoch for the partition.
        self.leader_epoch = max(self._epochs.latest_epoch, 0)
        self.single_replica = single_replica
        log_end = self.log_end_offset
        self._high_watermark = (
            log_end
            if single_replica or high_watermark is None
            else min(max(high_watermark, log_start_offset), log_end)
        )

    # ---- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: int | None = None,
        high_watermark: int | None = None,
        single_replica: bool = True,
    ) -> PartitionLog:
        """Open the log in ``directory`` (named ``<topic>-<partition>``), creating it if needed.

        Without a clean-shutdown marker every segment from the recovery point on is
        re-verified batch by batch (structure, offsets, CRC-32C), indexes rebuilt and a
        torn or corrupt tail truncated.  Indexes that are missing or fail a sanity check
        are rebuilt in any case.  The leader-epoch cache is loaded, cut to the
        recovered log and completed from the batches that recovery re-read (rebuilt
        from every batch if its file is missing).  ``high_watermark`` (a replicated
        partition's checkpointed HW) is ignored when ``single_replica``: HW = LEO then.
        """
        directory = Path(directory)
        parsed = parse_partition_dir(directory.name)
        if parsed is None:
            raise InvalidPartitionDirectoryError(
                f"{directory.name!r} is not a <topic>-<partition> directory name"
            )
        topic, partition = parsed
        now = now_ms if now_ms is not None else _now_ms()
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        swapped = recover_swaps(directory)
        if swapped:
            clean = False  # re-verify the swapped-in segments and rebuild their indexes
        remove_strays(directory)
        recovery_point = read_offset_checkpoint(directory / RECOVERY_POINT_FILE, topic, partition) or 0
        if swapped:
            recovery_point = min([recovery_point, *swapped])
        stored_start = read_offset_checkpoint(directory / LOG_START_OFFSET_FILE, topic, partition)
        segments = load_segments(directory, config, now, clean=clean, recovery_point=recovery_point)
        if segments:
            segments[-1].open_for_append()
        else:
            segments = [LogSegment.create(directory, max(stored_start or 0, 0), config, now)]
        log_end = segments[-1].next_offset
        log_start = min(max(stored_start or 0, segments[0].base_offset), log_end)
        if not clean:
            logger.info("recovered %s-%d: log start %d, log end %d", topic, partition, log_start, log_end)
        recovery_point = min(recovery_point, log_end)
        epochs = LeaderEpochCache.load(directory / LEADER_EPOCH_CHECKPOINT_FILE)
        log = cls(
            directory, topic, partition, config, segments, log_start, recovery_point, now,
            epochs if epochs is not None else LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT_FILE),
            high_watermark, single_replica,
        )  # fmt: skip
        log._load_epochs(rebuild=epochs is None, scan_from=None if clean else recovery_point)
        marker.unlink(missing_ok=True)  # from now on a crash must trigger recovery
        return log

    def _load_epochs(self, *, rebuild: bool, scan_from: int | None) -> None:
        """Make the epoch cache agree with the log just opened (Kafka's LogLoader does the same).

        Entries past the log end are dropped (a torn tail was cut, or the file is newer
        than the data); batches that recovery re-verified, or all of them when the file
        was missing, add their partitionLeaderEpoch; the first entry is moved up to the
        log start.  A log without any entry gets ``(leader_epoch, log end)``: the leader's
        epoch starts where it takes over (Kafka's makeLeader).
        """
        cache = self._epochs
        log_end = self.log_end_offset
        changed = rebuild or cache.truncate_from_end(log_end, write=False)
        if rebuild:
            cache.clear()
            scan_from = self.log_start_offset
        if scan_from is not None and scan_from < log_end:
            for header, _ in self.iter_batches(scan_from):
                if header.partition_leader_epoch >= 0:
                    changed |= cache.assign(header.partition_leader_epoch, header.base_offset, write=False)
        changed |= cache.truncate_from_start(self.log_start_offset)
        if not cache.entries:
            changed |= cache.assign(self.leader_epoch, log_end, write=False)
        self.leader_epoch = max(cache.latest_epoch, self.leader_epoch)
        if changed:
            cache.write()

    # ---- state -------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The end of the committed log: consumers read below it (see the module docstring)."""
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW (clamped to [log start, log end]) as replication decides it; returns it.

        A single-replica log moves it itself on every append; calling this is for the
        replication layer.  It may go down only as a leader change's truncation demands.
        """
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self._high_watermark

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The partition's leader-epoch cache (read it; change it through this log's methods)."""
        return self._epochs

    def become_leader(self, epoch: int) -> None:
        """This node leads the partition from ``epoch`` on: later appends are stamped with it and it
        starts at the log end offset in the cache (Kafka's maybeAssignEpochStartOffset)."""
        self._check_open()
        if epoch < self.leader_epoch:
            raise ValueError(f"leader epoch {epoch} is older than the current {self.leader_epoch}")
        self.leader_epoch = epoch
        if self._epochs.assign(epoch, self.log_end_offset, write=False):
            self._write_epochs()

    def _write_epochs(self) -> None:
        """Write the epoch cache just changed in memory.  A failure (disk full) is logged and the
        cache left dirty: :meth:`flush` and :meth:`close` write it before anything relies on it
        being on disk (the recovery point does not move past an epoch the file lacks)."""
        try:
            self._epochs.write()
        except OSError as exc:
            self._epochs.dirty = True
            logger.error(
                "writing the leader epoch checkpoint of %s-%d failed: %s", self.topic, self.partition, exc
            )

    def become_follower(self, epoch: int) -> None:
        """This node follows the partition's leader of ``epoch``: the epoch is remembered as the
        current one (Fetch/OffsetForLeaderEpoch checks) but not written to the cache, which learns
        epochs from the leader's batches (:meth:`append_as_follower`)."""
        self._check_open()
        self.leader_epoch = max(epoch, self.leader_epoch)

    def start_replication(self, high_watermark: int | None) -> None:
        """Stop committing appends at once: from now on only :meth:`update_high_watermark` moves the
        HW, which restarts at ``high_watermark`` (the checkpointed one; the log start when None)."""
        if not self.single_replica:
            return
        self.single_replica = False
        self.update_high_watermark(high_watermark if high_watermark is not None else self.log_start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` OffsetForLeaderEpoch answers for ``epoch``; ``(-1, -1)`` if unknown."""
        found = self._epochs.end_offset_for(epoch, self.log_end_offset)
        return found.epoch, found.start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch under which ``offset`` was written (-1 if the cache has none)."""
        return self._epochs.epoch_for_offset(offset)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs (index sizes apply to segments created from now on)."""
        self.config = config
        self._segments[-1].index_interval_bytes = config.index_interval_bytes

    # ---- append ------------------------------------------------------------------------------

    def append(self, data: BytesLike, *, now_ms: int | None = None) -> AppendResult:
        """Append one or more complete v2 batches as a client sent them (the buffer is not modified).

        Raises :class:`InvalidBatchError` (nothing written) for a malformed, corrupt or
        oversized batch, :class:`LogStorageError` if the write fails (rolled back).
        """
        if self._closed:
            self._check_open()
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        config = self.config
        checked = check_batches(view, config.max_message_bytes)
        now = now_ms if now_ms is not None else _now_ms()
        append_time = now if config.log_append_time else -1
        buffers, placed, batches = self._assign_offsets(view, checked, append_time)
        first, last = batches[0], batches[-1]
        # No-op unless become_leader's entry was lost: keeps the cache covering every batch.
        self._epochs.assign(self.leader_epoch, first.base_offset)
        max_timestamp = first.max_timestamp if len(batches) == 1 else max(b.max_timestamp for b in batches)
        segment = self._segments[-1]
        if segment.needs_roll(len(view), max_timestamp, last.last_offset, config, now):
            segment = self.roll(now_ms=now)
        segment.append(buffers, len(view), placed)
        if self.single_replica:
            self._high_watermark = last.last_offset + 1  # committed at once: no follower to wait for
        self._unflushed_messages += last.last_offset - first.base_offset + 1
        if config.flush_messages is not None and self._unflushed_messages >= config.flush_messages:
            self._flush_after_append(now)
        return AppendResult(first.base_offset, last.last_offset, append_time, self.log_start_offset, batches)

    def append_as_follower(
        self, data: BytesLike, *, high_watermark: int | None = None, now_ms: int | None = None
    ) -> AppendResult | None:
        """Append batches fetched from the leader as they are: the leader's offsets and partition
        leader epochs are kept (Kafka's appendAsFollower); None when ``data`` holds no whole batch.

        Each batch must pass its structure and CRC-32C checks and start at or after the log end
        (offsets may jump: the leader's log may be compacted); a partial batch at the end of
        ``data`` (the leader's size limit) is ignored.  Every epoch change among the batches is
        recorded in the epoch cache.  The HW becomes ``min(high_watermark, log end)`` when given
        (the leader's HW from the same Fetch answer).  Raises :class:`InvalidBatchError`.
        """
        self._check_open()
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        checked = fetched_batches(view, self.log_end_offset)
        if not checked:
            if high_watermark is not None:
                self.update_high_watermark(high_watermark)
            return None
        now = now_ms if now_ms is not None else _now_ms()
        placed: list[tuple[int, int, int, int]] = []
        batches: list[AppendedBatch] = []
        for _, header in checked:
            attributes = header.attributes
            placed.append((header.base_offset, header.last_offset, header.max_timestamp, header.size))
            batches.append(
                AppendedBatch(
                    header.base_offset, header.last_offset, header.max_timestamp, header.producer_id,
                    header.producer_epoch, header.base_sequence, header.record_count,
                    bool(attributes & TRANSACTIONAL_BIT), bool(attributes & CONTROL_BIT),
                )
            )  # fmt: skip
        first, last = batches[0], batches[-1]
        end = checked[-1][0] + checked[-1][1].size
        max_timestamp = max(b.max_timestamp for b in batches)
        segment = self._segments[-1]
        if segment.needs_roll(end, max_timestamp, last.last_offset, self.config, now):
            segment = self.roll(now_ms=now)
        segment.append([view[:end]], end, placed)
        epochs = self._epochs
        changed = False
        for _, header in checked:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch != epochs.latest_epoch:
                changed |= epochs.assign(epoch, header.base_offset, write=False)
        if changed:
            self._write_epochs()
        if high_watermark is not None:
            self.update_high_watermark(high_watermark)
        self._unflushed_messages += last.last_offset - first.base_offset + 1
        config = self.config
        if config.flush_messages is not None and self._unflushed_messages >= config.flush_messages:
            self._flush_after_append(now)
        return AppendResult(first.base_offset, last.last_offset, -1, self.log_start_offset, batches)

    def _flush_after_append(self, now_ms: int) -> None:
        """flush.messages after an append that is already in the file: a failed fsync or
        checkpoint is logged, not raised (the append stands; the recovery point stays where it
        was, so a crash re-verifies the unflushed batches, and the next flush tries again)."""
        try:
            self.flush(now_ms=now_ms)
        except OSError as exc:
            logger.error("flushing %s-%d failed: %s", self.topic, self.partition, exc)

    def _assign_offsets(
        self, view: memoryview, checked: list[tuple[int, BatchHeader]], append_time: int
    ) -> tuple[list[BytesLike], list[tuple[int, int, int, int]], list[AppendedBatch]]:
        """New leading bytes for each batch (offset, and LogAppendTime if configured) + the rest as is."""
        next_offset = self.log_end_offset
        epoch = self.leader_epoch
        buffers: list[BytesLike] = []
        placed: list[tuple[int, int, int, int]] = []
        batches: list[AppendedBatch] = []
        for pos, header in checked:
            end = pos + header.batch_length + LOG_OVERHEAD
            if append_time < 0:
                buffers.append(offset_header(header, next_offset, epoch))
                buffers.append(view[pos + _OFFSET_HEADER_SIZE : end])
                max_timestamp = header.max_timestamp
            else:
                head = log_append_time_header(view, pos, header, next_offset, append_time, epoch)
                buffers.append(head)
                buffers.append(view[pos + len(head) : end])
                max_timestamp = append_time
            last = next_offset + header.last_offset_delta
            placed.append((next_offset, last, max_timestamp, end - pos))
            attributes = header.attributes
            batches.append(
                AppendedBatch(
                    next_offset, last, max_timestamp, header.producer_id, header.producer_epoch,
                    header.base_sequence, header.record_count, bool(attributes & TRANSACTIONAL_BIT),
                    bool(attributes & CONTROL_BIT),
                )
            )  # fmt: skip
            next_offset = last + 1
        return buffers, placed, batches

    def roll(self, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        self._check_open()
        active = self._segments[-1]
        if active.size == 0:
            return active
        now = now_ms if now_ms is not None else _now_ms()
        # The new segment's files first, then the old one's final index entries: if either
        # fails (disk full) the old segment stays the active, writable one.
        try:
            segment = LogSegment.create(self.directory, active.next_offset, self.config, now)
        except OSError as exc:
            LogSegment(self.directory, active.next_offset, self.config, now).delete()
            raise LogStorageError(
                f"rolling a new segment of {self.topic}-{self.partition} failed: {exc}"
            ) from exc
        try:
            active.seal()
        except OSError as exc:
            segment.delete()
            raise LogStorageError(f"sealing {active.log_path} failed: {exc}") from exc
        self._sealed_unflushed.append(active)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    # ---- read --------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice:
        """Whole batches starting with the one that CONTAINS ``offset``, up to ``max_bytes``.

        At least one batch is returned even when it is larger (KIP-74) if
        ``min_one_batch``; batches whose base offset is >= ``max_offset`` (high watermark,
        LSO) are left out.  Reads stay within one segment; an empty slice at the log end.
        Raises :class:`OffsetOutOfRange` outside ``[log_start_offset, log_end_offset]``.
        """
        self._check_open()
        log_end = self.log_end_offset
        if offset < self.log_start_offset or offset > log_end:
            raise OffsetOutOfRange(offset, self.log_start_offset, log_end)
        if offset == log_end or (max_offset is not None and offset >= max_offset):
            return self._empty_slice()
        first = bisect_right(self._bases, offset) - 1
        for i in range(max(first, 0), len(self._segments)):
            found = self._segments[i].read(offset, max_bytes, max_offset, min_one_batch)
            if found is not None:
                return found
        return self._empty_slice()

    def _empty_slice(self) -> FileSlice:
        active = self._segments[-1]
        return FileSlice(active.reader(), active.size, 0)

    def iter_batches(self, start_offset: int | None = None) -> Iterator[tuple[BatchHeader, FileSlice]]:
        """Every stored batch from the one holding ``start_offset`` (default: log start) on, with
        its header as stored and a slice of its bytes; for rebuilding producer/transaction state."""
        self._check_open()
        offset = self.log_start_offset if start_offset is None else max(start_offset, self.log_start_offset)
        first = max(bisect_right(self._bases, offset) - 1, 0)
        for segment in list(self._segments[first:]):
            found = segment.locate(offset)
            if found is None:
                continue
            for position, header in segment.headers(found[0]):
                yield header, FileSlice(segment.reader(), position, header.size)

    # ---- timestamps --------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record whose timestamp is >= ``timestamp_ms``
        (ListOffsets semantics; records are decoded, compressed or not), or None if there is none."""
        self._check_open()
        for segment in self._segments:
            if segment.next_offset <= self.log_start_offset:
                continue
            found = segment.find_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        """``(offset, timestamp)`` of the first record with the largest timestamp (ListOffsets -3);
        ``(-1, -1)`` for an empty log."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and segment.next_offset > self.log_start_offset:
                if best is None or segment.max_timestamp > best.max_timestamp:
                    best = segment
        if best is None:
            return -1, -1
        return best.max_timestamp_record()

    # ---- retention ---------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms, retention.bytes and the log start offset, oldest
        first and never the active one (Kafka's rules).  Returns how many were deleted.

        Only segments wholly below the high watermark go (Kafka's deletableSegments): the log
        start never passes the HW, and a replicated log keeps what a follower may still need
        and what a leader change could still truncate.  A single-replica log's HW is its end.
        """
        self._check_open()
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        if not self.config.delete:  # cleanup.policy=compact: only the log start offset deletes
            retention_ms = retention_bytes = -1
        remaining = self.size_in_bytes
        count = 0
        while count < len(self._segments) - 1:
            segment, following = self._segments[count], self._segments[count + 1]
            if following.base_offset > self._high_watermark:
                break  # not all committed: a leader change may still truncate into it (Kafka's rule)
            below_start = following.base_offset <= self.log_start_offset
            expired = retention_ms >= 0 and now_ms - segment.largest_timestamp() > retention_ms
            too_big = retention_bytes >= 0 and remaining - segment.size >= retention_bytes
            if not (below_start or expired or too_big):
                break
            remaining -= segment.size
            count += 1
        self._delete_oldest(count)
        return count

    def delete_records_before(self, offset: int) -> None:
        """Move the log start offset up to ``offset`` (DeleteRecords) and drop whole segments below it."""
        self._check_open()
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        write_offset_checkpoint(self.directory / LOG_START_OFFSET_FILE, self.topic, self.partition, offset)
        self._epochs.truncate_from_start(offset)
        count = 0
        while count < len(self._segments) - 1 and self._segments[count + 1].base_offset <= offset:
            count += 1
        self._delete_oldest(count)

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from ``offset`` on (a follower cutting a tail its leader does not
        have; Kafka's truncateTo); returns whether anything was removed.

        Whole batches go: the log ends at ``offset`` or, if a batch straddles it, at that
        batch's base offset.  Later segments are deleted, the last kept one is cut and becomes
        the active segment, the epoch cache loses the entries past the new end, and the HW and
        recovery point are clamped; every step is on disk (fsync'ed) before this returns.
        Below the log start it empties the log to start at ``offset``
        (:meth:`truncate_fully_and_start_at`).
        """
        self._check_open()
        if offset >= self.log_end_offset:
            return False
        keep = bisect_left(self._bases, offset)  # segments starting below offset
        if offset < self.log_start_offset or keep == 0:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = self._segments[keep:]
        for segment in doomed:
            segment.delete()
        del self._segments[keep:]
        del self._bases[keep:]
        self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in doomed]
        active = self._segments[-1]
        active.open_for_append()
        active.truncate_to(offset)
        fsync_path(self.directory)
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment and restart the empty log at ``offset`` (a follower whose fetch
        position fell below the leader's log start; Kafka's truncateFullyAndStartAt)."""
        self._check_open()
        # The new start is written first: a crash before the segments go leaves the old data
        # with a moved start, which the next open accepts (and the follower truncates again).
        write_offset_checkpoint(
            self.directory / LOG_START_OFFSET_FILE, self.topic, self.partition, offset, fsync=True
        )
        for segment in self._segments:
            segment.delete()
        now = now_ms if now_ms is not None else _now_ms()
        segment = LogSegment.create(self.directory, offset, self.config, now)
        self._segments, self._bases, self._sealed_unflushed = [segment], [offset], []
        self.log_start_offset = offset
        self._unflushed_messages = 0
        fsync_path(self.directory)
        self._epochs.clear()
        self._epochs.write()
        self._after_truncation()

    def _after_truncation(self) -> None:
        """The log was cut: the epoch cache, the HW and the recovery point follow.  On a full disk
        the in-memory state is still made right; a recovery point checkpoint that cannot be
        rewritten is deleted (unlinking needs no space), so a crash re-verifies the whole log."""
        log_end = self.log_end_offset
        if self._epochs.truncate_from_end(log_end, write=False):
            self._write_epochs()
        self._high_watermark = min(max(self._high_watermark, self.log_start_offset), log_end)
        if self.recovery_point > log_end or self.recovery_point < self.log_start_offset:
            self.recovery_point = log_end
            path = self.directory / RECOVERY_POINT_FILE
            try:
                write_offset_checkpoint(path, self.topic, self.partition, log_end, fsync=True)
            except OSError as exc:
                path.unlink(missing_ok=True)
                logger.error(
                    "writing %s of %s-%d failed (%s): removed it", path.name, self.topic, self.partition, exc
                )

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> bool:
        """Swap the sealed segments ``old`` (consecutive, still in the log) for their cleaned copy
        ``new`` (files named ``<base>.*.cleaned``, sealed); see :mod:`.swap` for the crash safety.

        Returns False, changing nothing, if ``old`` is no longer a run of this log's
        non-active segments (retention or DeleteRecords removed one meanwhile).
        """
        self._check_open()
        try:
            first = next(i for i, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            return False
        end = first + len(old)
        if end >= len(self._segments) or any(
            a is not b for a, b in zip(self._segments[first:end], old, strict=True)
        ):
            return False
        directory = self.directory
        new.change_suffix(SWAP_SUFFIX)
        fsync_path(directory)
        swap_failpoint("after_swap_rename")
        for segment in old:
            segment.delete()
        swap_failpoint("after_delete_old")
        new.change_suffix("")
        fsync_path(directory)
        self._segments[first:end] = [new]
        self._bases[first:end] = [new.base_offset]
        self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in old]
        return True

    def _delete_oldest(self, count: int) -> None:
        if count <= 0:
            return
        doomed, self._segments = self._segments[:count], self._segments[count:]
        self._bases = self._bases[count:]
        for segment in doomed:
            logger.info("deleting segment %s", segment.log_path)
            segment.delete()
        self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in doomed]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self._epochs.truncate_from_start(self.log_start_offset)

    # ---- flush and close ---------------------------------------------------------------------

    def flush(self, *, now_ms: int | None = None) -> None:
        """fsync every segment written since the last flush and advance the recovery point."""
        self._check_open()
        for segment in self._sealed_unflushed:
            segment.fsync()
        self._sealed_unflushed.clear()
        self._segments[-1].fsync()
        if self._epochs.dirty:  # the epochs of the batches the recovery point moves past
            self._epochs.write()
        log_end = self.log_end_offset
        write_offset_checkpoint(
            self.directory / RECOVERY_POINT_FILE, self.topic, self.partition, log_end, fsync=True
        )
        self.recovery_point = log_end
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms if now_ms is not None else _now_ms()

    def flush_if_due(self, now_ms: int) -> bool:
        """Apply flush.ms; returns True if it flushed."""
        flush_ms = self.config.flush_ms
        if flush_ms is None or self._closed:
            return False
        dirty = self._unflushed_messages > 0 or bool(self._sealed_unflushed)
        if dirty and now_ms - self._last_flush_ms >= flush_ms:
            self.flush(now_ms=now_ms)
            return True
        return False

    def close(self) -> None:
        """Flush, seal the active segment and leave the clean-shutdown marker; idempotent."""
        if self._closed:
            return
        self._segments[-1].seal()
        self.flush()
        write_offset_checkpoint(
            self.directory / LOG_START_OFFSET_FILE, self.topic, self.partition, self.log_start_offset
        )
        if self._epochs.dirty:  # a start moved by retention is written only here (see leader_epochs)
            self._epochs.write()
        for segment in self._segments:
            segment.close()
        (self.directory / CLEAN_SHUTDOWN_FILE).touch()
        self._closed = True

    def delete(self) -> None:
        """Remove the partition directory and everything in it (open slices stay readable)."""
        for segment in self._segments:
            segment.delete()
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
