"""Kafka's ``__transaction_state`` record formats: TransactionLogKey v0 and TransactionLogValue v0/v1.

Key:   version i16 (0) | transactional_id string
Value: version i16 (0) | producer_id i64 | producer_epoch i16 | transaction_timeout_ms i32
       | transaction_status i8 | transaction_partitions [topic string, [partition i32]] (nullable)
       | last_update_timestamp_ms i64 | start_timestamp_ms i64

Value v1 (what Kafka 4.x writes when transaction version 2 is enabled) is v0
made flexible (compact strings and arrays, tagged-field sections) with three
tagged fields: 0 PreviousProducerId i64, 1 NextProducerId i64 (both default
-1), 2 ClientTransactionVersion i16 (default 0).  Tagged fields at their
default are not written, as Kafka's serializer does.

A null value (tombstone) deletes the transactional id.  Status numbers are
Kafka's ``TransactionState`` ids.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkakit.broker.coordinators.group_records import java_string_hash
from kafkakit.records import decode_batch

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog

_log = logging.getLogger("kafkakit.broker")
#: Kafka's TransactionState ids a logged value may carry (Empty .. PrepareEpochFence).
_KNOWN_STATUSES = range(8)

#: The internal topic these records are logged to.
TRANSACTION_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TxnRecordError(ValueError):
    """A ``__transaction_state`` record that cannot be read."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One transactional id's state as logged."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_txn_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0."""
    data = transactional_id.encode("utf-8")
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def decode_txn_key(data: bytes) -> str:
    """The transactional id of a key record."""
    if len(data) < 4:
        raise TxnRecordError("transaction log key too short")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown transaction log key version {version}")
    (length,) = _I16.unpack_from(data, 2)
    if length < 0 or 4 + length != len(data):
        raise TxnRecordError("transaction log key has a bad string length")
    return data[4 : 4 + length].decode("utf-8")


def encode_txn_value(value: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    """``TransactionLogValue`` v0 (or v1, flexible), partitions grouped by topic."""
    if version == FLEXIBLE_VALUE_VERSION:
        return _encode_v1(value)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [
        _HEAD.pack(VALUE_VERSION, value.producer_id, value.producer_epoch, value.timeout_ms, value.status),
        _I32.pack(len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        name = topic.encode("utf-8")
        parts.append(_I16.pack(len(name)) + name + _I32.pack(len(partitions)))
        parts.append(b"".join(_I32.pack(p) for p in partitions))
    parts.append(_TIMES.pack(value.last_update_ms, value.start_ms))
    return b"".join(parts)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_v1(value: TxnLogValue) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [
        _HEAD.pack(
            FLEXIBLE_VALUE_VERSION, value.producer_id, value.producer_epoch, value.timeout_ms, value.status
        ),
        _uvarint(len(by_topic) + 1),
    ]
    for topic, partitions in by_topic.items():
        name = topic.encode("utf-8")
        parts.append(_uvarint(len(name) + 1) + name + _uvarint(len(partitions) + 1))
        parts.append(b"".join(_I32.pack(p) for p in partitions))
        parts.append(b"\x00")  # the partition entry's (empty) tagged fields
    parts.append(_TIMES.pack(value.last_update_ms, value.start_ms))
    tagged: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        tagged.append((_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        tagged.append((_TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tagged.append((_TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(value.client_transaction_version)))
    parts.append(_uvarint(len(tagged)))
    for tag, data in tagged:
        parts.append(_uvarint(tag) + _uvarint(len(data)) + data)
    return b"".join(parts)


class _Cursor:
    """Reads v1's varints and skips unknown tagged fields."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise TxnRecordError("truncated varint in transaction log value")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 35:
                raise TxnRecordError("varint longer than 5 bytes in transaction log value")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TxnRecordError("truncated transaction log value")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def skip_tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def _decode_v1(data: bytes) -> TxnLogValue:
    _, producer_id, epoch, timeout_ms, status = _HEAD.unpack_from(data, 0)
    cur = _Cursor(data, _HEAD.size)
    partitions: list[tuple[str, int]] = []
    for _ in range(max(cur.uvarint() - 1, 0)):  # 0 = null array
        topic = cur.take(cur.uvarint() - 1).decode("utf-8")
        for _ in range(cur.uvarint() - 1):
            partitions.append((topic, _I32.unpack(cur.take(4))[0]))
        cur.skip_tagged()
    last_update, start = _TIMES.unpack(cur.take(_TIMES.size))
    fields = {_TAG_PREVIOUS_PRODUCER_ID: -1, _TAG_NEXT_PRODUCER_ID: -1, _TAG_CLIENT_TRANSACTION_VERSION: 0}
    for _ in range(cur.uvarint()):
        tag, size = cur.uvarint(), cur.uvarint()
        raw = cur.take(size)
        if tag in (_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID) and size == 8:
            fields[tag] = _I64.unpack(raw)[0]
        elif tag == _TAG_CLIENT_TRANSACTION_VERSION and size == 2:
            fields[tag] = _I16.unpack(raw)[0]
    return TxnLogValue(
        producer_id,
        epoch,
        timeout_ms,
        status,
        tuple(partitions),
        last_update,
        start,
        fields[_TAG_PREVIOUS_PRODUCER_ID],
        fields[_TAG_NEXT_PRODUCER_ID],
        fields[_TAG_CLIENT_TRANSACTION_VERSION],
    )


def decode_txn_value(data: bytes) -> TxnLogValue:
    """Inverse of :func:`encode_txn_value`, v0 or v1."""
    try:
        version, producer_id, epoch, timeout_ms, status = _HEAD.unpack_from(data, 0)
        if version == FLEXIBLE_VALUE_VERSION:
            return _decode_v1(data)
        if version != VALUE_VERSION:
            raise TxnRecordError(f"unsupported transaction log value version {version}")
        pos = _HEAD.size
        (topic_count,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: list[tuple[str, int]] = []
        for _ in range(max(topic_count, 0)):
            (length,) = _I16.unpack_from(data, pos)
            topic = data[pos + 2 : pos + 2 + length].decode("utf-8")
            pos += 2 + length
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(count):
                partitions.append((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
        last_update, start = _TIMES.unpack_from(data, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise TxnRecordError(f"truncated transaction log value: {exc}") from None
    return TxnLogValue(producer_id, epoch, timeout_ms, status, tuple(partitions), last_update, start)


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's rule: ``Utils.abs(transactionalId.hashCode()) % partitions``."""
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % num_partitions


def partition_pairs(partitions: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Sorted, de-duplicated (topic, partition) pairs."""
    return tuple(sorted(set(partitions)))


def replay_partition(txn_log: PartitionLog, partition: int) -> Iterator[tuple[str, TxnLogValue | None]]:
    """(transactional id, value or None for a tombstone) of every readable record of one
    ``__transaction_state`` partition, in log order; unreadable ones are logged and skipped."""
    for header, data in txn_log.iter_batches():
        if header.is_control:
            continue
        for record in decode_batch(data.read_bytes(), 0, header, txn_log.topic, partition):
            if record.key is None:
                continue
            try:
                tid = decode_txn_key(bytes(record.key))
                value = None if record.value is None else decode_txn_value(bytes(record.value))
                if value is not None and value.status not in _KNOWN_STATUSES:
                    raise TxnRecordError(f"unknown transaction status {value.status}")
            except (TxnRecordError, UnicodeDecodeError, ValueError) as exc:
                _log.warning("skipping unreadable __transaction_state record: %s", exc)
                continue
            yield tid, value
