"""Kafka's ``__transaction_state`` record formats: TransactionLogKey v0 and TransactionLogValue v0.

Key:   version i16 (0) | transactional_id string
Value: version i16 (0) | producer_id i64 | producer_epoch i16 | transaction_timeout_ms i32
       | transaction_status i8 | transaction_partitions [topic string, [partition i32]] (nullable)
       | last_update_timestamp_ms i64 | start_timestamp_ms i64

A null value (tombstone) deletes the transactional id.  Status numbers are
Kafka's ``TransactionState`` ids.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kafkakit.broker.coordinators.group_records import java_string_hash

KEY_VERSION = 0
VALUE_VERSION = 0
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


def encode_txn_value(value: TxnLogValue) -> bytes:
    """``TransactionLogValue`` v0, partitions grouped by topic."""
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


def decode_txn_value(data: bytes) -> TxnLogValue:
    """Inverse of :func:`encode_txn_value` (v0; v1 tagged fields are not read)."""
    try:
        version, producer_id, epoch, timeout_ms, status = _HEAD.unpack_from(data, 0)
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
