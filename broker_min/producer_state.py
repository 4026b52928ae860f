"""Idempotent producers: producer id allocation and per-partition sequence state.

Two pieces, both owned by :class:`~kafkakit.broker.state.BrokerState`:

* :class:`ProducerIdAllocator` hands out producer ids in blocks of
  :data:`PRODUCER_ID_BLOCK_SIZE`, as Kafka's controller does.  The end of the
  current block is persisted (fsynced) *before* any id of it is handed out, so
  ids stay unique across restarts and crashes; a restart skips the unused rest
  of a block.
* :class:`ProducerStateRegistry` keeps, per partition and producer id, the
  epoch and the last :data:`BATCHES_TO_RETAIN` batches' sequence and offset
  ranges (Kafka's ``ProducerStateManager``).  A partition's state is built on
  its first idempotent produce by scanning the batch headers of its log, so a
  restarted broker still recognises a retried batch, and partitions that only
  see non-idempotent traffic never pay for it.

The same state tracks transactions per partition (Kafka's ongoing-transaction
map and ``.txnindex``): the first offset of each producer's open transaction,
which gives the last stable offset, and the aborted transactions (producer id,
first offset, marker offset) that read_committed fetches report.  Both are
rebuilt by the same scan, reading each control batch's COMMIT/ABORT type.

Validation follows Apache Kafka's ``ProducerAppendInfo`` (3.x/4.x):

* a batch equal (epoch, first and last sequence) to one of the last five is a
  duplicate: acknowledged with the original offsets, nothing appended;
* an epoch older than the known one is INVALID_PRODUCER_EPOCH (Produce never
  answers PRODUCER_FENCED since Kafka 2.7);
* a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* the same epoch must continue at last sequence + 1 (wrapping after int32
  max), else OUT_OF_ORDER_SEQUENCE_NUMBER;
* an unknown producer id is accepted at any sequence (its state may have been
  removed with the log's head, KIP-360), so no UNKNOWN_PRODUCER_ID.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kafkakit.errors import CorruptRecordError
from kafkakit.records import CONTROL_COMMIT, read_control_type

if TYPE_CHECKING:
    from kafkakit.broker.log import AppendedBatch, BatchHeader, PartitionLog
    from kafkakit.broker.log.segment import FileSlice

log = logging.getLogger("kafkakit.broker")

BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_EPOCH = -1
NO_SEQUENCE = -1
MAX_EPOCH = 2**15 - 1
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47

PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_IDS_FILE = ".kafkakit-producer-ids"
_NEXT_BLOCK_KEY = "next.block.start"
# InitProducerId epoch bumps are remembered for this many producer ids; a
# forgotten one simply gets a fresh id, which is always safe.
MAX_TRACKED_EPOCHS = 100_000


# -- producer ids -----------------------------------------------------------------------------


class ProducerIdsUnavailableError(Exception):
    """No producer id block is at hand yet (cluster mode, before the controller sent one);
    answered as COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""


class ProducerIdBlockSource(Protocol):
    """Where a cluster's producer id blocks come from (kafkakit.broker.producer_id_blocks)."""

    def take_block(self) -> tuple[int, int]:
        """``(start, end)`` of a block no other broker holds; raises if none is at hand."""
        ...


class ProducerIdAllocator:
    """Unique producer ids for this data directory, and their epochs for KIP-360 bumps."""

    def __init__(self, data_dir: Path, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._path = data_dir / PRODUCER_IDS_FILE
        self._block_size = block_size
        self._next_block_start = _read_next_block_start(self._path)
        self._next_id = self._next_block_start
        self._block_end = self._next_block_start  # empty: the first allocation reserves a block
        self._epochs: dict[int, int] = {}
        self._block_source: ProducerIdBlockSource | None = None

    def allocate(self) -> int:
        """A producer id never handed out before by this data directory (epoch 0)."""
        if self._next_id >= self._block_end:
            self._reserve_block()
        producer_id = self._next_id
        self._next_id += 1
        self._remember(producer_id, 0)
        return producer_id

    def bump_epoch(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """``(id, epoch)`` for a producer that presents its current id and epoch (KIP-360).

        The same id with ``epoch + 1`` when this broker handed out exactly that
        pair and the epoch can still grow; otherwise a fresh id with epoch 0, as
        Kafka always does for non-transactional producers (it is never wrong:
        every partition accepts a new producer id at any sequence).
        """
        if self._epochs.get(producer_id) == epoch and epoch + 1 < MAX_EPOCH:
            self._remember(producer_id, epoch + 1)
            return producer_id, epoch + 1
        return self.allocate(), 0

    def _remember(self, producer_id: int, epoch: int) -> None:
        epochs = self._epochs
        epochs.pop(producer_id, None)
        epochs[producer_id] = epoch
        if len(epochs) > MAX_TRACKED_EPOCHS:
            del epochs[next(iter(epochs))]  # the least recently used id

    def use_block_source(self, source: ProducerIdBlockSource) -> None:
        """Take id blocks from ``source`` from now on (cluster mode: the controller hands them out)."""
        self._block_source = source
        self._next_id = self._block_end = 0

    def _reserve_block(self) -> None:
        if self._block_source is not None:
            self._next_id, self._block_end = self._block_source.take_block()
            return
        start = self._next_block_start
        end = start + self._block_size
        _write_next_block_start(self._path, end)
        self._next_block_start = end
        self._next_id, self._block_end = start, end


def _read_next_block_start(path: Path) -> int:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == _NEXT_BLOCK_KEY:
            try:
                start = int(value.strip())
            except ValueError:
                break
            if start >= 0:
                return start
    raise ValueError(f"{path} is corrupt: expected a line '{_NEXT_BLOCK_KEY}=<non-negative int>'")


def _write_next_block_start(path: Path, start: int) -> None:
    """Persist durably (temp file, fsync, rename, fsync dir) so no id is ever reused."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{_NEXT_BLOCK_KEY}={start}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- per-partition producer state -------------------------------------------------------------


class ProducerStateError(Exception):
    """A batch breaks its producer's epoch or sequence; ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class BatchMetadata(NamedTuple):
    """What is remembered of one of a producer's recent batches."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp as stored (the append time under LogAppendTime)


class _ProducerEntry:
    __slots__ = ("batches", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(batch)


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: sequences wrap to 0 after int32 max."""
    last = base_sequence + last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class AbortedTxn(NamedTuple):
    """An aborted transaction of one partition (Kafka's ``.txnindex`` entry, minus the LSO)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of its ABORT marker


def _is_commit(header: BatchHeader, data: FileSlice) -> bool:
    """Whether a stored control batch is a COMMIT marker; an unreadable one counts as ABORT (hides data)."""
    try:
        return read_control_type(data.read_bytes(), 0, header) == CONTROL_COMMIT
    except (CorruptRecordError, ValueError, IndexError) as exc:
        log.warning(
            "unreadable transaction marker at offset %d treated as ABORT: %s", header.base_offset, exc
        )
        return False


def _last_offset(aborted: AbortedTxn) -> int:
    return aborted.last_offset


class PartitionProducerState:
    """Producer id -> epoch and recent batches, for one partition, plus its transactions.

    Transactions: the first offset of each producer's open transaction (the
    last stable offset is the smallest of them, or the high watermark) and the
    aborted transactions in marker order, for read_committed fetches.
    """

    def __init__(self) -> None:
        self._producers: dict[int, _ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}
        self._aborted: list[AbortedTxn] = []

    def __len__(self) -> int:
        return len(self._producers)

    @classmethod
    def load(cls, partition_log: PartitionLog) -> PartitionProducerState:
        """Rebuild from the batch headers stored in ``partition_log`` (no sequence checks)."""
        state = cls()
        for header, data in partition_log.iter_batches():
            if header.producer_id >= 0:
                state._apply_header(header)
                if header.is_control:
                    state.complete_transaction(
                        header.producer_id, header.base_offset, _is_commit(header, data)
                    )
                elif header.is_transactional:
                    state._ongoing.setdefault(header.producer_id, header.base_offset)
        return state

    # -- transactions ------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the oldest open transaction, or the high watermark when none is open."""
        ongoing = self._ongoing
        if not ongoing:
            return high_watermark
        return min(high_watermark, min(ongoing.values()))

    def describe(self) -> list[tuple[int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp, open transaction's first offset or -1)."""
        return [
            (
                producer_id,
                entry.epoch,
                entry.last_seq,
                entry.batches[-1].timestamp if entry.batches else -1,
                self._ongoing.get(producer_id, -1),
            )
            for producer_id, entry in self._producers.items()
        ]

    def has_open_transaction(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has transactional data here not yet closed by a marker."""
        return producer_id in self._ongoing

    def in_open_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether ``producer_id`` at ``epoch`` has transactional data here not yet closed by a
        marker: a batch of that epoch continues that transaction. A newer epoch (transaction
        version 2 bumps it for every transaction) starts another one, even while the previous
        transaction's marker has not arrived yet."""
        entry = self._producers.get(producer_id)
        return producer_id in self._ongoing and entry is not None and entry.epoch == epoch

    def complete_transaction(self, producer_id: int, marker_offset: int, commit: bool) -> None:
        """A COMMIT/ABORT marker at ``marker_offset`` closes the producer's open transaction."""
        first = self._ongoing.pop(producer_id, None)
        if first is not None and not commit:
            self._aborted.append(AbortedTxn(producer_id, first, marker_offset))

    def aborted_transactions(self, start: int, end: int, log_start: int = 0) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping ``[start, end)``."""
        aborted = self._aborted
        if aborted and aborted[0].last_offset < log_start:
            # Retention removed their data: forget them.
            self._aborted = aborted = [a for a in aborted if a.last_offset >= log_start]
        # Markers are appended in offset order, so the entries ending before ``start`` form a prefix.
        first = bisect_left(aborted, start, key=_last_offset)
        return [(a.producer_id, a.first_offset) for a in aborted[first:] if a.first_offset < end]

    def check(self, headers: Sequence[BatchHeader]) -> BatchMetadata | None:
        """Validate the batches of one produced record set against this state, changing nothing.

        Returns the stored batch when one of them duplicates a recent batch (the
        whole record set is then acknowledged with its offsets and not
        appended, as Kafka does); raises :class:`ProducerStateError` for a
        fenced epoch or a sequence gap.
        """
        # Epoch and last sequence per producer as the earlier batches of this set leave them.
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0 or header.is_control:
                continue
            epoch, first_seq = header.producer_epoch, header.base_sequence
            last_seq = last_sequence(first_seq, header.last_offset_delta)
            entry = self._producers.get(producer_id)
            current = pending.get(producer_id)
            if current is None and entry is not None:
                duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
                current = (entry.epoch, entry.last_seq)
            if current is not None and current[0] != NO_EPOCH:
                _check_epoch_and_sequence(producer_id, epoch, first_seq, *current)
            pending[producer_id] = (epoch, last_seq)
        return None

    def record(self, batches: Iterable[AppendedBatch]) -> None:
        """Remember the batches just appended (after :meth:`check` passed and the log took them)."""
        for batch in batches:
            producer_id = batch.producer_id
            if producer_id < 0:
                continue
            entry = self._entry(producer_id, batch.producer_epoch)
            if batch.is_transactional and not batch.is_control:
                self._ongoing.setdefault(producer_id, batch.base_offset)
            if batch.is_control:
                if batch.producer_epoch > entry.epoch:
                    entry.epoch = batch.producer_epoch
                    entry.batches.clear()
                continue
            entry.add(
                batch.producer_epoch,
                BatchMetadata(
                    batch.base_sequence,
                    last_sequence(batch.base_sequence, batch.last_offset - batch.base_offset),
                    batch.base_offset,
                    batch.last_offset,
                    batch.max_timestamp,
                ),
            )

    def _apply_header(self, header: BatchHeader) -> None:
        entry = self._entry(header.producer_id, header.producer_epoch)
        if header.is_control:
            if header.producer_epoch > entry.epoch:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            return
        entry.add(
            header.producer_epoch,
            BatchMetadata(
                header.base_sequence,
                last_sequence(header.base_sequence, header.last_offset_delta),
                header.base_offset,
                header.base_offset + header.last_offset_delta,
                header.max_timestamp,
            ),
        )

    def _entry(self, producer_id: int, epoch: int) -> _ProducerEntry:
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = _ProducerEntry(epoch)
        return entry


def _check_epoch_and_sequence(
    producer_id: int, epoch: int, first_seq: int, current_epoch: int, current_last_seq: int
) -> None:
    if epoch < current_epoch:
        raise ProducerStateError(
            INVALID_PRODUCER_EPOCH,
            f"producer {producer_id} epoch {epoch} is older than the current epoch {current_epoch}",
        )
    if epoch != current_epoch:
        if first_seq != 0:
            raise ProducerStateError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} started epoch {epoch} at sequence {first_seq}, not 0",
            )
    elif not _in_sequence(current_last_seq, first_seq):
        raise ProducerStateError(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {producer_id} epoch {epoch} sent sequence {first_seq} after {current_last_seq}",
        )


class ProducerStateRegistry:
    """The :class:`PartitionProducerState` of every partition that has seen an idempotent batch."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], tuple[PartitionLog, PartitionProducerState]] = {}

    def for_log(self, partition_log: PartitionLog) -> PartitionProducerState:
        """The state of ``partition_log``'s partition, scanning the log on first use.

        The log object is part of the key, so a topic deleted and recreated
        under the same name starts from its new (empty) log.
        """
        key = (partition_log.topic, partition_log.partition)
        found = self._states.get(key)
        if found is not None and found[0] is partition_log:
            return found[1]
        state = PartitionProducerState.load(partition_log)
        self._states[key] = (partition_log, state)
        if len(state):
            log.info(
                "rebuilt state of %d producer(s) for %s-%d from the log",
                len(state),
                partition_log.topic,
                partition_log.partition,
            )
        return state

    def loaded(self, partition_log: PartitionLog) -> PartitionProducerState | None:
        """The state of ``partition_log`` if it was already built, else None (it will scan later)."""
        found = self._states.get((partition_log.topic, partition_log.partition))
        return found[1] if found is not None and found[0] is partition_log else None

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop one partition's state, to be rebuilt from its log on next use (cluster mode: a
        leadership change or a follower's truncation changed the log under it)."""
        self._states.pop((topic, partition), None)

    def forget_topic(self, topic: str) -> None:
        """Drop the state of a deleted topic's partitions."""
        for key in [k for k in self._states if k[0] == topic]:
            del self._states[key]
