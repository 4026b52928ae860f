"""Per-partition record batches: linger, batch size, buffer memory, readiness.

The producer appends records to the open batch of their partition; the sender
drains batches that are *ready* (full, lingered long enough, or wanted now by
a flush or a sender waiting for buffer memory) and puts failed ones back for a
retry.  Records are kept as columns (a list of values, a list of timestamps)
and encoded only when their batch is drained, so ``send()`` does no encoding
work at all.  A batch refused as too large after growing past
``max_batch_size`` is resent in parts (:meth:`Accumulator.split`).

Results travel without a future per record: every batch has one
``asyncio.Future`` resolved with ``(base_offset, log_append_time,
log_start_offset)``, and a :class:`~kafkakit.producer.record_future.RecordFuture`
turns (batch, offset delta) into a RecordMetadata only when someone asks.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kafkakit.errors import KafkaError, KafkaTimeoutError
from kafkakit.producer.record_future import SENT_IN_PARTS, STAMPS_PER_MS, CancelledState, RecordFuture
from kafkakit.records import Compression, encode_queued_batches
from kafkakit.records.encoder import queued_columns
from kafkakit.records.gcpolicy import gc_paused
from kafkakit.structs import Header, TopicPartition

#: What a batch future resolves to: (base offset, log append time or -1, log start offset).
BatchResult = tuple[int, int, int]

#: Bytes a record adds to a batch besides key, value and headers (attributes,
#: timestamp/offset deltas, lengths, header count); a close estimate, not a bound.
RECORD_OVERHEAD = 14
#: What a record costs in memory beyond its wire size, charged to ``buffer_memory``: two
#: list slots and the lists' spare capacity (about 20 B), the value's bytes-object header and
#: allocator rounding (about 44 B) and the timestamp's int (32 B). That is about 96 B since
#: batches hold columns; 112 B (the figure for the flat list before) errs on the safe side.
#: Without it, 100-byte records held twice their budget while a broker was stalled.
RECORD_MEMORY_OVERHEAD = 112
#: What a record's key holds in memory beyond its bytes, charged on top: the bytes object's
#: header (about 40 B) and its entry in its batch's keys by index (an int and a dict slot,
#: about 80 B), with a margin (128 B still let RSS grow 3% past the buffer). Without it, a
#: producer of 100-byte records with 16-byte keys held 1.6x its buffer while a broker was
#: stalled (16 MiB buffer: RSS grew 33.7 MiB, against 22.9 without keys).
KEY_MEMORY_OVERHEAD = 160
#: The same for a record's headers (its entry in the batch's headers by index and the
#: list's own header: at least 64 B; the header tuples are the application's).
HEADERS_MEMORY_OVERHEAD = 64
#: Fixed size of a record batch header (magic v2).
BATCH_HEADER_SIZE = 61
#: Emptied value and timestamp lists kept for new batches, two per batch (see
#: ``Accumulator._spare_lists``).
SPARE_LISTS = 2048
#: Taken from ``Accumulator.free`` while a send waits for memory, so that the hot path's one
#: comparison (``free - charge >= 0``) also keeps later sends behind the waiting ones.
_WAITERS_GATE = 1 << 62


class Unplaced(Protocol):
    """Records queued before their partition is chosen (kafkakit.producer.key_placement)."""

    def place(self) -> None:
        """Append them to their partitions' batches, and stop being listed in ``Accumulator.unplaced``."""


class ProducerBatch:
    """Records bound for one partition, sent (and retried) together."""

    __slots__ = (
        "tp",
        "values",
        "stamps",
        "keys",
        "headers",
        "encoded",
        "record_count",
        "size",
        "created",
        "future",
        "seq",
        "attempts",
        "retry_at",
        "last_error",
        "timestamp",
        "solo",
        "reserved",
        "base_sequence",
        "followers",
        "split",
        "split_from",
        "waiters",
        "unkeyed",
    )

    def __init__(
        self,
        tp: TopicPartition,
        seq: int,
        created: float,
        future: asyncio.Future[BatchResult],
        values: list[Any] | None = None,
        stamps: array[int] | None = None,
    ) -> None:
        self.tp = tp
        # The records as columns (kafkakit.records.QueuedRecords): values and timestamps (in
        # nanoseconds: STAMPS_PER_MS) one list each; keys from the first keyed record on, in
        # record order (None for a keyless record before a keyed one, and none after the last
        # keyed one); headers only of the records that have them, by index. A keyless record
        # costs send() two list appends, and a keyed one a third.
        self.values: list[Any] = [] if values is None else values
        # Stamps are machine words, not int objects: converting a batch's ints for the
        # encoder read each from wherever send() had allocated it (a cache miss each), and
        # each lived, and was freed, with its batch.
        self.stamps: array[int] = array("q") if stamps is None else stamps
        self.keys: list[bytes | None] | None = None
        self.unkeyed = 0  # the Nones in ``keys``: keyless records before a keyed one
        self.headers: dict[int, Sequence[Header]] | None = None
        self.encoded: bytes | None = None
        self.record_count = 0  # set when the batch leaves its queue (the hot path only appends)
        self.size = BATCH_HEADER_SIZE
        self.created = created
        self.future = future
        self.seq = seq
        self.attempts = 0
        self.retry_at = 0.0
        self.last_error: BaseException | None = None
        self.timestamp = -1  # the one timestamp of a pre-encoded bulk batch
        self.reserved = -1  # buffer memory held; -1: size minus the header (record batches)
        self.solo = False  # never coalesce with neighbours (the broker found a coalesced batch too large)
        self.base_sequence = -1  # idempotence: assigned when first drained, kept across retries
        # Idempotence: batches sent inside this one's record batch (merged at first drain and
        # kept together across retries, so a resend is byte-identical); resolved with it.
        self.followers: list[ProducerBatch] | None = None
        # Record futures with callbacks; one callback on ``future`` fans out to them all.
        self.waiters: list[RecordFuture] | None = None
        # A batch the broker refused as too large, resent in parts (Accumulator.split): the
        # parts of this one, or the split this one is a part of.
        self.split: _Split | None = None
        self.split_from: _Split | None = None

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp.topic}-{self.tp.partition} #{self.seq} records={self.record_count} size={self.size}>"

    def add_key_and_headers(self, index: int, key: bytes | None, headers: Sequence[Header] | None) -> None:
        """Record ``index``'s key and headers (send() calls this only for records that have
        either, in record order)."""
        if key is not None:
            keys = self.keys
            if keys is None:
                keys = self.keys = []
            if len(keys) != index:
                self.pad_keys(index)
            keys.append(key)
        if headers:
            if self.headers is None:
                self.headers = {}
            self.headers[index] = headers

    def pad_keys(self, index: int) -> None:
        """Before record ``index``'s key goes in: None for the keyless records since the last
        keyed one (``keys`` must not be None)."""
        keys = self.keys
        assert keys is not None and len(keys) <= index
        missing = index - len(keys)
        keys += [None] * missing
        self.unkeyed += missing

    def add_waiter(self, record: RecordFuture) -> None:
        """Have ``record`` told when this batch completes (once per record)."""
        waiters = self.waiters
        if waiters is None:
            waiters = self.waiters = []
            self.future.add_done_callback(self._fan_out)
        waiters.append(record)

    def _fan_out(self, _future: asyncio.Future[BatchResult]) -> None:
        waiters, self.waiters = self.waiters or [], None
        # The callbacks (asyncio.gather's) build a RecordMetadata per record once the last
        # batch of a gather completes: the same policy as a large consumer decode applies.
        with gc_paused(len(waiters)):
            self._call_waiters(waiters)

    @staticmethod
    def _call_waiters(waiters: list[RecordFuture]) -> None:
        for record in waiters:
            # Inlined for the common case, one callback without a context (asyncio.gather's).
            state = record._state
            if state is None or type(state) is CancelledState:
                continue  # cancelled, or listed twice and already called
            if type(state) is list:
                record._batch_done()
                continue
            record._state = None
            try:
                state(record)  # type: ignore[operator]  # narrowed above by type() checks
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                record._report(state, exc)

    def encode(self, compression: int) -> bytes:
        """The wire bytes of this batch, built once and kept for retries."""
        data = self.encoded
        if data is None:
            data = self.encoded = encode_queued_batches([self], compression=compression, stamps_per_ms=STAMPS_PER_MS)
        return data


def _memory_held(batch: ProducerBatch) -> int:
    """The buffer memory ``batch`` holds until it completes (read it before ``_recycle`` empties the batch)."""
    if batch.reserved < 0:  # record batches: wire bytes plus each record's memory overhead
        return (
            batch.size
            - BATCH_HEADER_SIZE
            + len(batch.values) * RECORD_MEMORY_OVERHEAD
            + (len(batch.keys or ()) - batch.unkeyed) * KEY_MEMORY_OVERHEAD
            + len(batch.headers or ()) * HEADERS_MEMORY_OVERHEAD
        )
    return batch.reserved  # a pre-encoded bulk batch: what its caller took


class _Split:
    """A batch being resent in parts, and the base offsets of the parts acknowledged so far."""

    __slots__ = ("batch", "firsts", "parts", "offsets", "waiting")

    def __init__(self, batch: ProducerBatch, firsts: list[int]) -> None:
        self.batch = batch
        self.firsts = firsts  # the index in ``batch`` of each part's first record
        self.parts: list[ProducerBatch] = []
        self.offsets = [-1] * len(firsts)
        self.waiting = len(firsts)

    def sent(self, part: ProducerBatch, base_offset: int) -> None:
        self.offsets[self.parts.index(part)] = base_offset
        self.waiting -= 1

    def offset_of(self, index: int) -> int:
        """The offset of the batch's record ``index`` (-1: unknown, as with acks=0)."""
        part = bisect_right(self.firsts, index) - 1
        base = self.offsets[part]
        return base + index - self.firsts[part] if base >= 0 else -1

    @property
    def done(self) -> bool:
        return self.waiting == 0


def _queue_order(batch: ProducerBatch) -> tuple[int, int]:
    """Where ``batch`` belongs in its partition's queue: creation order, then (the parts of a
    split batch share its number) the part's place in the batch."""
    split = batch.split_from
    return (batch.seq, split.parts.index(batch) if split is not None else -1)


def _index_slice(by_index: dict[int, Any] | None, first: int, stop: int) -> dict[int, Any] | None:
    """The entries of ``by_index`` (keys or headers by record index) for records first..stop-1, re-indexed from 0."""
    if not by_index:
        return None
    part = {index - first: item for index, item in by_index.items() if first <= index < stop}
    return part or None


def _key_slice(keys: list[bytes | None] | None, first: int, stop: int) -> tuple[list[bytes | None] | None, int]:
    """The keys of records first..stop-1 (see ProducerBatch.keys), and the Nones among them."""
    part = keys[first:stop] if keys else None
    if not part:
        return None, 0
    unkeyed = part.count(None)
    return (None, 0) if unkeyed == len(part) else (part, unkeyed)


def _record_size(value: bytes | None, key: bytes | None, headers: Any) -> int:
    """A record's estimated size in a batch, as send() counts it."""
    size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
    for name, header_value in headers:  # as record_input.check_headers counts them
        size += 6 + len(name.encode("utf-8")) + (len(header_value) if header_value is not None else 0)
    return size


class PartitionQueue:
    """The batches of one partition waiting to be sent, oldest first."""

    __slots__ = ("tp", "batches", "open", "next_seq", "in_flight", "next_sequence", "acked_sequence")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.batches: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None  # the last batch while it still takes records
        self.next_seq = 0  # creation order of batches (not the wire sequence)
        self.in_flight = 0
        # Idempotence: the wire sequence of the next new batch, and the one the broker
        # expects next (the first sequence not yet acknowledged).
        self.next_sequence = 0
        self.acked_sequence = 0


class Accumulator:
    """Batches per partition plus the buffer-memory budget they draw from."""

    def __init__(
        self,
        *,
        max_batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        compression: int = Compression.NONE,
        wake_sender: Callable[[], None] = lambda: None,
    ) -> None:
        self.max_batch_size = max_batch_size
        #: Where an open batch stops taking records (the producer's batch limit: a full batch
        #: keeps growing until the sender takes it, see Producer._batch_limit).
        self.batch_limit = max_batch_size
        self.linger = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.wake_sender = wake_sender
        #: topic -> partition number -> queue; the producer's hot path indexes it directly.
        self.queues: dict[str, dict[int, PartitionQueue]] = {}
        #: Buffer memory not taken, less _WAITERS_GATE while sends wait for memory: the
        #: per-record path takes memory with one read, one comparison and one store
        #: (``free - charge >= 0``), a sixth of ``send()``'s cost when it read three fields.
        self.free = buffer_memory
        self._gated = False
        self.flushing = 0
        self.closed = False
        self.room_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._incomplete: set[ProducerBatch] = set()
        #: Nanoseconds send() calls spent waiting for buffer memory (bufferpool-wait-time-ns-total).
        self.wait_time_ns = 0
        #: Called with each batch that fails (the record-error metrics); None: nobody asks.
        self.on_fail: Callable[[ProducerBatch], None] | None = None
        # Record lists of completed batches, emptied, for new batches. A fresh list is young
        # when it fills, so each young-generation collection walked every record of the
        # batches opened since the last one (and the next generation walked them again): with
        # 16 KiB batches that was 6% of send()'s time. A reused list is old; filling it costs
        # the collector nothing until a full collection.
        self._spare_lists: list[list[Any]] = []
        self._spare_stamps: list[array[int]] = []
        #: Keyed records waiting for their partition (each places itself, and leaves this list).
        self.unplaced: list[Unplaced] = []

    # -- adding records --------------------------------------------------------

    def queue(self, topic: str, partition: int) -> PartitionQueue:
        """The queue of ``topic``/``partition``, created on first use."""
        by_partition = self.queues.get(topic)
        if by_partition is None:
            by_partition = self.queues[topic] = {}
        pq = by_partition.get(partition)
        if pq is None:
            pq = by_partition[partition] = PartitionQueue(TopicPartition(topic, partition))
        return pq

    def new_batch(self, pq: PartitionQueue) -> ProducerBatch:
        """Close ``pq``'s open batch (if any) and open a fresh one."""
        spare = self._spare_lists
        batch = ProducerBatch(
            pq.tp,
            pq.next_seq,
            time.monotonic(),
            asyncio.get_running_loop().create_future(),
            spare.pop() if spare else None,
            self._spare_stamps.pop() if self._spare_stamps else None,
        )
        pq.next_seq += 1
        pq.batches.append(batch)
        self._incomplete.add(batch)
        pq.open = batch
        # Once per batch: the previous batch is now full (ready), or the sender must
        # learn this batch's linger deadline (it may be asleep with nothing to wait for).
        self.wake_sender()
        return batch

    def place_unplaced(self) -> None:
        """Queue the records still waiting for a partition (before draining, failing or waiting for batches)."""
        unplaced = self.unplaced
        while unplaced:
            unplaced[0].place()

    def seal(self, pq: PartitionQueue) -> None:
        """Stop ``pq``'s open batch taking records: later ones open a new batch.

        The sender seals the ready batches it cannot send (no leader, no connection), so
        that during an outage a full batch stops growing (see Producer._batch_limit) and
        records sent later do not share its creation time, and so its delivery timeout.
        """
        pq.open = None

    def append(
        self,
        pq: PartitionQueue,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Any,
        size: int,
    ) -> RecordFuture:
        """Append one record (``size + RECORD_MEMORY_OVERHEAD`` of buffer memory already reserved) to ``pq``'s open batch.

        A key or headers take their ``KEY_MEMORY_OVERHEAD``/``HEADERS_MEMORY_OVERHEAD`` here, as ``send()`` does.

        ``Producer.send`` inlines this for speed; keep the two in step.  An open
        batch always holds a record, so an oversized record opens a batch of its own.
        """
        batch = pq.open
        if batch is None or batch.size + size > self.batch_limit:
            batch = self.new_batch(pq)
        batch.stamps.append(timestamp * STAMPS_PER_MS)  # first: an int64 overflow changes nothing
        values = batch.values
        values.append(value)
        if key is not None or headers:
            batch.add_key_and_headers(len(values) - 1, key, headers)
            self.free -= (KEY_MEMORY_OVERHEAD if key is not None else 0) + (HEADERS_MEMORY_OVERHEAD if headers else 0)
        batch.size += size
        return RecordFuture.of(batch, len(values) - 1, timestamp)

    def append_encoded(
        self, pq: PartitionQueue, data: bytes, record_count: int, timestamp: int, size: int, reserved: int
    ) -> ProducerBatch:
        """Queue an already-encoded batch (the bulk path) behind ``pq``'s current batches.

        ``reserved`` is the buffer memory the caller took for it, given back on completion.
        """
        pq.open = None  # records sent later must not jump ahead of this batch
        batch = ProducerBatch(
            pq.tp, pq.next_seq, time.monotonic(), asyncio.get_running_loop().create_future()
        )
        pq.next_seq += 1
        batch.encoded = data
        batch.record_count = record_count
        batch.size = size
        batch.timestamp = timestamp
        batch.reserved = reserved
        pq.batches.append(batch)
        self._incomplete.add(batch)
        self.wake_sender()
        return batch

    # -- buffer memory ---------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes of buffer memory taken."""
        return self.buffer_memory - self.free - (_WAITERS_GATE if self._gated else 0)

    def has_room(self, size: int) -> bool:
        return self.free >= size

    def _gate(self, closed: bool) -> None:
        """Close (a send waits for memory) or open (none waits) the hot path's way to memory."""
        if closed != self._gated:
            self._gated = closed
            self.free += -_WAITERS_GATE if closed else _WAITERS_GATE

    async def reserve(self, size: int) -> None:
        """Wait until ``size`` bytes of buffer memory are free, then take them (FIFO among waiters)."""
        if self.free >= size:
            self.free -= size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self.room_waiters.append(entry)
        self._gate(True)
        self.wake_sender()  # batches are sent at once while someone waits for memory
        started = time.perf_counter_ns()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(size)  # granted just as we were cancelled: give it back
            else:
                try:
                    self.room_waiters.remove(entry)
                except ValueError:
                    pass
                self._gate(bool(self.room_waiters))
            raise
        finally:
            self.wait_time_ns += time.perf_counter_ns() - started

    def release(self, size: int) -> None:
        """Return ``size`` bytes to the buffer and grant waiting reservations in order."""
        self.free += size
        waiters = self.room_waiters
        if not waiters:
            return
        while waiters:
            need, waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            buffered = self.buffered
            if buffered + need > self.buffer_memory and buffered > 0:
                break  # (an empty buffer always admits one reservation, whatever its size)
            waiters.popleft()
            self.free -= need
            waiter.set_result(None)
        self._gate(bool(waiters))

    @property
    def memory_wanted(self) -> bool:
        """Whether a send is blocked on buffer memory (then every batch counts as ready)."""
        return bool(self.room_waiters)

    def fail_waiters(self, error: BaseException) -> None:
        while self.room_waiters:
            _, waiter = self.room_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        self._gate(False)

    # -- draining --------------------------------------------------------------

    def is_ready(self, pq: PartitionQueue, now: float) -> bool:
        """Whether ``pq``'s head batch may be sent now."""
        head = pq.batches[0]
        if head.retry_at > now:
            return False
        if head is not pq.open or self.flushing or self.closed or self.room_waiters:
            return True
        return now - head.created >= self.linger or head.size >= self.max_batch_size

    def next_linger_deadline(self, pq: PartitionQueue) -> float:
        """When ``pq``'s head batch becomes ready without help (monotonic seconds)."""
        head = pq.batches[0]
        if head.retry_at:
            return head.retry_at
        return head.created + self.linger

    def take(self, pq: PartitionQueue) -> ProducerBatch:
        """Remove ``pq``'s head batch for sending."""
        batch = pq.batches.popleft()
        if batch is pq.open:
            pq.open = None
        if batch.encoded is None:
            batch.record_count = len(batch.values)
        pq.in_flight += 1
        return batch

    def take_follower(self, pq: PartitionQueue) -> ProducerBatch:
        """Remove ``pq``'s head batch to ride inside the batch just taken (not counted in flight)."""
        batch = pq.batches.popleft()
        if batch is pq.open:
            pq.open = None
        batch.record_count = len(batch.values)
        return batch

    def requeue(self, pq: PartitionQueue, batch: ProducerBatch) -> None:
        """Put a batch back for a retry, ahead of every younger batch of its partition."""
        pq.in_flight -= 1
        batches = pq.batches
        place = _queue_order(batch)
        index = 0
        for index, queued in enumerate(batches):  # noqa: B007 - index is used after the loop
            if _queue_order(queued) > place:
                break
        else:
            index = len(batches)
        batches.insert(index, batch)

    def split(self, pq: PartitionQueue, batch: ProducerBatch) -> bool:
        """Queue ``batch`` (sent, and refused as too large) again as batches of up to ``max_batch_size``.

        The parts take its place in the queue, each sent alone; the batch completes
        when they all have (each record's offset is its part's: SENT_IN_PARTS), or
        fails with the first part that fails. False, changing nothing, when it holds
        a single record, is pre-encoded, or is not larger than ``max_batch_size``.
        """
        cuts = self._cuts(batch)
        if len(cuts) < 2:
            return False
        loop = batch.future.get_loop()
        split = batch.split = _Split(batch, [first for first, _ in cuts])
        parts = []
        for first, stop in cuts:
            part = ProducerBatch(
                batch.tp, batch.seq, batch.created, loop.create_future(), batch.values[first:stop], batch.stamps[first:stop]
            )
            part.keys, part.unkeyed = _key_slice(batch.keys, first, stop)
            part.headers = _index_slice(batch.headers, first, stop)
            part.record_count = stop - first
            part.size = BATCH_HEADER_SIZE + sum(map(_record_size, *queued_columns(part)))
            part.reserved = 0  # the memory stays with the batch until it completes
            part.solo = True
            part.split_from = split
            parts.append(part)
        split.parts = parts
        batch.encoded = None
        pq.in_flight -= 1
        batches = pq.batches
        index = next((i for i, queued in enumerate(batches) if queued.seq > batch.seq), len(batches))
        for part in reversed(parts):
            batches.insert(index, part)
        return True

    def _cuts(self, batch: ProducerBatch) -> list[tuple[int, int]]:
        """``batch``'s records as (first, stop) runs of up to ``max_batch_size`` (a larger record alone)."""
        if batch.encoded is not None and not batch.values:
            return []  # a pre-encoded bulk batch
        cuts: list[tuple[int, int]] = []
        first, size = 0, BATCH_HEADER_SIZE
        for index, record_size in enumerate(map(_record_size, *queued_columns(batch))):
            if size + record_size > self.max_batch_size and index > first:
                cuts.append((first, index))
                first, size = index, BATCH_HEADER_SIZE
            size += record_size
        cuts.append((first, len(batch.values)))
        return cuts

    def _part_sent(self, part: ProducerBatch, base_offset: int, log_append_time: int, log_start_offset: int) -> None:
        """A part of a split batch was acknowledged: complete the batch once every part is."""
        split = part.split_from
        assert split is not None
        split.sent(part, base_offset)
        if split.done and not split.batch.future.done():
            self.complete(None, split.batch, (SENT_IN_PARTS, log_append_time, log_start_offset))

    # -- completion ------------------------------------------------------------

    def complete(self, pq: PartitionQueue | None, batch: ProducerBatch, result: BatchResult) -> None:
        """Resolve a sent batch's records and free its memory."""
        if pq is not None:
            pq.in_flight -= 1
        self._finish(batch)
        if not batch.future.done():
            batch.future.set_result(result)
        if batch.split_from is not None:
            self._part_sent(batch, *result)
        followers = batch.followers
        if followers:
            base_offset, log_append_time, log_start_offset = result
            offset = base_offset + batch.record_count if base_offset >= 0 else -1
            for follower in followers:
                self.complete(None, follower, (offset, log_append_time, log_start_offset))
                if offset >= 0:
                    offset += follower.record_count

    def complete_group(
        self,
        pq: PartitionQueue,
        group: list[ProducerBatch],
        base_offset: int,
        log_append_time: int,
        log_start_offset: int,
    ) -> None:
        """:meth:`complete` for the batches of ``pq`` sent as one record batch at ``base_offset``, in order.

        One pass and one :meth:`release` for the whole group: a coalesced request holds
        some sixty 16 KiB batches, and the per-batch calls were a visible part of the
        per-record path with default settings.
        """
        incomplete = self._incomplete
        held = 0
        offset = base_offset
        pq.in_flight -= len(group)
        for batch in group:
            if batch.followers:  # idempotent coalescing (groups of one): offsets run on into them
                pq.in_flight += 1
                self.complete(pq, batch, (offset, log_append_time, log_start_offset))
                continue
            if batch in incomplete:  # _finish, without its release
                incomplete.discard(batch)
                held += _memory_held(batch)
                self._recycle(batch)
            future = batch.future
            if not future.done():
                future.set_result((offset, log_append_time, log_start_offset))
            if batch.split_from is not None:
                self._part_sent(batch, offset, log_append_time, log_start_offset)
            if offset >= 0:
                offset += batch.record_count
        self.release(held)

    def fail(self, pq: PartitionQueue | None, batch: ProducerBatch, error: BaseException) -> None:
        """Fail every record of ``batch`` with ``error`` and free its memory."""
        if pq is not None:
            pq.in_flight -= 1
        split = batch.split_from
        if split is not None:  # a part of a split batch: the batch fails (and counts) instead
            batch.future.cancel()
            if not split.batch.future.done():
                self.fail(None, split.batch, error)
            return
        if self.on_fail is not None and not batch.future.done():
            self.on_fail(batch)
        self._finish(batch)
        future = batch.future
        if not future.done():
            future.set_exception(error)
            future.exception()  # the application may not await every record; we log instead
        for follower in batch.followers or ():
            self.fail(None, follower, error)

    def _finish(self, batch: ProducerBatch) -> None:
        if batch in self._incomplete:
            self._incomplete.discard(batch)
            held = _memory_held(batch)
            self._recycle(batch)
            self.release(held)

    def _recycle(self, batch: ProducerBatch) -> None:
        """Drop a finished batch's records and bytes, keeping its emptied lists for a new batch."""
        values, stamps = batch.values, batch.stamps
        batch.values, batch.stamps, batch.keys, batch.headers = [], array("q"), None, None
        batch.unkeyed = 0
        batch.encoded = None
        spare = self._spare_lists
        if values and len(spare) < SPARE_LISTS:
            values.clear()
            spare.append(values)
            del stamps[:]
            self._spare_stamps.append(stamps)

    def expire(self, pq: PartitionQueue, now: float, delivery_timeout: float) -> bool:
        """Fail queued batches of ``pq`` older than the delivery timeout.

        Returns whether one of them already had a sequence number (an idempotent
        producer then has a gap to repair).
        """
        batches = pq.batches
        sequenced = False
        while batches and now - batches[0].created >= delivery_timeout:
            batch = batches.popleft()
            sequenced = sequenced or batch.base_sequence >= 0
            if batch is pq.open:
                pq.open = None
            if batch.encoded is None:
                batch.record_count = len(batch.values)
            reason = f" (last error: {batch.last_error})" if batch.last_error is not None else ""
            self.fail(
                None,
                batch,
                KafkaTimeoutError(
                    f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
                    f"{(now - batch.created) * 1000:.0f} ms passed since the batch was created{reason}"
                ),
            )
        return sequenced

    def fail_queued(
        self, error: KafkaError, where: Callable[[PartitionQueue], bool] | None = None
    ) -> bool:
        """Fail every batch waiting in a queue (not those in flight): an aborted transaction,
        or, with ``where``, the partitions it selects (a broker that refused us).

        Returns whether one of them had a sequence number (a retry), i.e. left a gap.
        """
        sequenced = False
        self.place_unplaced()
        for by_partition in self.queues.values():
            for pq in by_partition.values():
                if where is not None and not where(pq):
                    continue
                while pq.batches:
                    batch = pq.batches.popleft()
                    sequenced = sequenced or batch.base_sequence >= 0
                    if batch.encoded is None:
                        batch.record_count = len(batch.values)
                    self.fail(None, batch, error)
                pq.open = None
        return sequenced

    def reset_sequences(self) -> None:
        """Forget every sequence number (after a new producer id or epoch): numbering restarts at 0."""
        for by_partition in self.queues.values():
            for pq in by_partition.values():
                pq.next_sequence = pq.acked_sequence = 0
                for batch in pq.batches:
                    batch.base_sequence = -1

    def pending_futures(self) -> list[asyncio.Future[BatchResult]]:
        """Futures of every batch not yet completed (queued or in flight)."""
        self.place_unplaced()
        return [b.future for b in self._incomplete]

    @property
    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def abort_all(self, error: KafkaError) -> None:
        """Fail every batch still queued (used when the producer is closed without flushing)."""
        self.place_unplaced()
        for by_partition in self.queues.values():
            for pq in by_partition.values():
                while pq.batches:
                    self.fail(None, pq.batches.popleft(), error)
                pq.open = None
        for batch in list(self._incomplete):
            self.fail(None, batch, error)
        self.fail_waiters(error)
