"""Record-level access to stored batches, for what the log must look inside a batch for:
the key check of compacted topics and the cleaner's batch rewriting.

A record (all varints zigzag)::

    length | attributes i8 | timestampDelta | offsetDelta | keyLen (-1 = null) | key
    | valueLen (-1 = null) | value | headerCount | headers

The cleaner keeps records byte for byte (offset deltas stay valid because a
cleaned batch keeps its base offset); only when it stamps a delete horizon
into a batch's base timestamp (KIP-534) are the timestamp deltas rewritten.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c
from kafkakit.errors import CorruptRecordError
from kafkakit.records.compression import compress, decompress
from kafkakit.records.varint import read_uvarint, zigzag

from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    make_header,
)
from .errors import INVALID_RECORD, InvalidBatchError

#: Attribute bit 6: the base timestamp holds the batch's delete horizon (KIP-534).
DELETE_HORIZON_BIT = 0x40
_U32 = struct.Struct(">I")
_tuple_new = tuple.__new__


class StoredRecord(NamedTuple):
    """One record of a batch's (decompressed) records section."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool
    start: int  # position of the length varint
    after_timestamp: int  # position of the offsetDelta varint
    end: int  # position after the record


def _zz(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def records_payload(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The records section of a stored batch (at position 0 of ``batch``), decompressed."""
    payload = bytes(batch[HEADER_SIZE : header.size])
    codec = header.attributes & COMPRESSION_MASK
    return decompress(codec, payload) if codec else payload


def parse_records(payload: bytes, count: int) -> list[StoredRecord]:
    """Every record of a records section; raises CorruptRecordError if it is malformed.

    The cleaner's hot loop: varints are decoded inline (one byte is the common case).
    """
    out: list[StoredRecord] = []
    append = out.append
    new = _tuple_new
    p = 0
    try:
        for _ in range(count):
            start = p
            raw = payload[p]
            if raw < 0x80:
                p += 2  # and the attributes byte
            elif payload[p + 1] < 0x80:
                raw = (raw & 0x7F) | (payload[p + 1] << 7)
                p += 3
            else:
                raw, p = read_uvarint(payload, p)
                p += 1
            end = p - 1 + ((raw >> 1) ^ -(raw & 1))
            raw = payload[p]
            if raw < 0x80:
                p += 1
            elif payload[p + 1] < 0x80:
                raw = (raw & 0x7F) | (payload[p + 1] << 7)
                p += 2
            else:
                raw, p = read_uvarint(payload, p)
            timestamp_delta = (raw >> 1) ^ -(raw & 1)
            after_timestamp = p
            raw = payload[p]
            if raw < 0x80:
                p += 1
            elif payload[p + 1] < 0x80:
                raw = (raw & 0x7F) | (payload[p + 1] << 7)
                p += 2
            else:
                raw, p = read_uvarint(payload, p)
            offset_delta = (raw >> 1) ^ -(raw & 1)
            raw = payload[p]
            if raw < 0x80:
                p += 1
            elif payload[p + 1] < 0x80:
                raw = (raw & 0x7F) | (payload[p + 1] << 7)
                p += 2
            else:
                raw, p = read_uvarint(payload, p)
            key_len = (raw >> 1) ^ -(raw & 1)
            if key_len < 0:
                key = None
            else:
                key = payload[p : p + key_len]
                p += key_len
            raw = payload[p]
            has_value = raw != 1  # zigzag(-1) == 1: a null value
            if end > len(payload) or p > end:
                raise CorruptRecordError("record runs past the end of its batch")
            append(
                new(
                    StoredRecord, (offset_delta, timestamp_delta, key, has_value, start, after_timestamp, end)
                )
            )
            p = end
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    return out


def check_keys(view: memoryview, checked: list[tuple[int, BatchHeader]], topic: str, partition: int) -> None:
    """Refuse a record without key for a compacted topic, as Kafka's LogValidator does."""
    for pos, header in checked:
        if header.attributes & CONTROL_BIT:
            continue
        payload = records_payload(view[pos : pos + header.size], header)
        p = 0
        for _ in range(header.record_count):
            raw, p = read_uvarint(payload, p)
            end = p + _zz(raw)
            _, p = read_uvarint(payload, p + 1)
            _, p = read_uvarint(payload, p)
            raw, p = read_uvarint(payload, p)
            if _zz(raw) < 0:
                raise InvalidBatchError(
                    INVALID_RECORD,
                    f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}.",
                )
            p = end


def check_record_set_keys(data: bytes | bytearray | memoryview, topic: str, partition: int) -> None:
    """:func:`check_keys` over a produced record set, before it is validated: a batch that
    cannot be parsed is left for the append's own checks to refuse."""
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    checked: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos + HEADER_SIZE <= len(view):
        header = make_header(HEADER.unpack_from(view, pos))
        if header.magic != 2 or header.batch_length < MIN_BATCH_LENGTH or pos + header.size > len(view):
            break
        checked.append((pos, header))
        pos += header.size
    try:
        check_keys(view, checked, topic, partition)
    except (CorruptRecordError, IndexError, ValueError):
        return  # malformed: PartitionLog.append refuses it with the right code


def record_timestamp(header: BatchHeader, record: StoredRecord) -> int:
    """A record's timestamp as a consumer sees it."""
    if header.attributes & TIMESTAMP_TYPE_BIT:
        return header.max_timestamp
    return header.base_timestamp + record.timestamp_delta


def rebuild_batch(
    header: BatchHeader, payload: bytes, kept: list[StoredRecord], delete_horizon_ms: int | None
) -> bytes:
    """A batch with only ``kept`` of ``header``'s records, same base and last offset, producer
    fields and codec (Kafka's buildRetainedRecordsInto); ``delete_horizon_ms`` (when not None)
    becomes the base timestamp, with the delete-horizon attribute bit set."""
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    parts: list[bytes] = []
    if delete_horizon_ms is not None and not attributes & DELETE_HORIZON_BIT:
        attributes |= DELETE_HORIZON_BIT
        base_timestamp = delete_horizon_ms
        for record in kept:
            timestamp = header.base_timestamp + record.timestamp_delta
            rest = payload[record.after_timestamp : record.end]
            body = b"\x00" + zigzag(timestamp - base_timestamp) + rest
            parts.append(zigzag(len(body)) + body)
    else:
        parts = [payload[r.start : r.end] for r in kept]
    records = b"".join(parts)
    codec = attributes & COMPRESSION_MASK
    if codec:
        records = compress(codec, records)
    if attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(header.base_timestamp + r.timestamp_delta for r in kept)
    return _pack(header, attributes, base_timestamp, max_timestamp, len(kept), records)


def empty_batch(header: BatchHeader) -> bytes:
    """A batch without records keeping base/last offset, producer id, epoch and base sequence:
    what the cleaner leaves of a producer's last batch (Kafka's writeEmptyHeader)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    return _pack(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _pack(
    header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int, records: bytes
) -> bytes:
    head = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        head, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), header.partition_leader_epoch,
        2, 0, attributes, header.last_offset_delta, base_timestamp, max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, count,
    )  # fmt: skip
    crc = crc32c(records, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(head, ATTRIBUTES_OFFSET - 4, crc)
    return bytes(head) + records
