"""Kafka's ``__share_group_state`` record formats: ShareSnapshot and ShareUpdate keys and values.

Laid out as Apache Kafka 4.3's share coordinator writes them
(share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json):

- key: ``int16`` record type (0 ShareSnapshot, 1 ShareUpdate), then version 0 of the key
  (not flexible): GroupId string (int16 length), TopicId uuid, Partition int32;
- value: ``int16`` version 0, then a flexible body.  ShareSnapshotValue: SnapshotEpoch,
  StateEpoch, LeaderEpoch (int32), StartOffset, CreateTimestamp, WriteTimestamp (int64),
  StateBatches (compact array of FirstOffset int64, LastOffset int64, DeliveryState int8,
  DeliveryCount int16, tagged fields); ShareUpdateValue: SnapshotEpoch, LeaderEpoch, StartOffset
  (-1 when unchanged), StateBatches.  Both end with tagged fields, where tag 0 is
  DeliveryCompleteCount (KIP-1226, -1 = absent, so never written here).

Delivery states as persisted: 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED (ACQUIRED is never persisted).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
NO_START_OFFSET = -1
_DELIVERY_COMPLETE_COUNT_TAG = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """One share-partition: a share group's view of a topic partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset``..``last_offset`` (inclusive) in one delivery state and count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateValue:
    """A snapshot (the whole state) or an update (changed batches, maybe a new start offset)."""

    snapshot: bool
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    create_timestamp: int = -1
    write_timestamp: int = -1


def encode_key(record_type: int, key: ShareStateKey) -> bytes:
    """The record key for ``record_type`` (SNAPSHOT_TYPE or UPDATE_TYPE)."""
    group = key.group_id.encode()
    return _I16.pack(record_type) + _I16.pack(len(group)) + group + key.topic_id.bytes + _I32.pack(key.partition)


def decode_key(data: bytes) -> tuple[int, ShareStateKey] | None:
    """(record type, key), or None for a key of another type or a short one."""
    if len(data) < 4:
        return None
    (record_type,) = _I16.unpack_from(data, 0)
    if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
        return None
    (length,) = _I16.unpack_from(data, 2)
    pos = 4 + length
    if length < 0 or len(data) < pos + 20:
        return None
    group_id = data[4:pos].decode()
    topic_id = uuid.UUID(bytes=bytes(data[pos : pos + 16]))
    (partition,) = _I32.unpack_from(data, pos + 16)
    return record_type, ShareStateKey(group_id, topic_id, partition)


def encode_value(value: ShareStateValue) -> bytes:
    """The record value (version 0, flexible)."""
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I32.pack(value.snapshot_epoch)
    if value.snapshot:
        out += _I32.pack(value.state_epoch)
    out += _I32.pack(value.leader_epoch)
    out += _I64.pack(value.start_offset)
    if value.snapshot:
        out += _I64.pack(value.create_timestamp) + _I64.pack(value.write_timestamp)
    out += _uvarint(len(value.batches) + 1)
    for b in value.batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out += b"\0"  # the batch's tagged fields
    out += b"\0"  # tagged fields: DeliveryCompleteCount is left at its default
    return bytes(out)


def decode_value(record_type: int, data: bytes) -> ShareStateValue:
    """Inverse of :func:`encode_value` for a record of ``record_type``; raises ValueError when malformed."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != VALUE_VERSION:
            raise ValueError(f"unknown share state value version {version}")
        snapshot = record_type == SNAPSHOT_TYPE
        pos = 2
        (snapshot_epoch,) = _I32.unpack_from(data, pos)
        pos += 4
        state_epoch = 0
        if snapshot:
            (state_epoch,) = _I32.unpack_from(data, pos)
            pos += 4
        (leader_epoch,) = _I32.unpack_from(data, pos)
        (start_offset,) = _I64.unpack_from(data, pos + 4)
        pos += 12
        create_ts = write_ts = -1
        if snapshot:
            create_ts, write_ts = _I64.unpack_from(data, pos)[0], _I64.unpack_from(data, pos + 8)[0]
            pos += 16
        count, pos = _read_uvarint(data, pos)
        batches = []
        for _ in range(max(count - 1, 0)):
            first, last, delivery_state, delivery_count = _BATCH.unpack_from(data, pos)
            pos = _skip_tags(data, pos + _BATCH.size)
            batches.append(StateBatch(first, last, delivery_state, delivery_count))
        _skip_tags(data, pos)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"malformed share state value: {exc}") from None
    return ShareStateValue(
        snapshot, snapshot_epoch, state_epoch, leader_epoch, start_offset, tuple(batches), create_ts, write_ts
    )


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    return pos
