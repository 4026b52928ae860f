"""What the log checks and rewrites in record batches (v2, magic 2); the header itself is kafkakit.records'.

Batches are opaque to the log apart from their 61-byte header; records are
only walked to answer a ListOffsets-by-timestamp query exactly.  Layout::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
    17 crc u32 (CRC-32C of bytes 21..end) | 21 attributes i16 | 23 lastOffsetDelta i32
    27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16
    53 baseSequence i32 | 57 recordCount i32 | 61 records
"""

from __future__ import annotations

import struct
from typing import NoReturn

from crc32c import crc32c
from kafkakit.records.compression import decompress
from kafkakit.records.header import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    make_header,
)
from kafkakit.records.varint import read_zigzag

from .errors import CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, InvalidBatchError

__all__ = [
    "ATTRIBUTES_OFFSET",
    "CRC_OFFSET",
    "HEADER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "COMPRESSION_MASK",
    "MAX_CODEC",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "CONTROL_BIT",
    "LOG_APPEND_TIME",
    "BatchHeader",
    "make_header",
    "read_batch_header",
    "structural_problem",
    "check_batches",
    "offset_header",
    "log_append_time_header",
    "record_timestamps",
]

HEADER = HEADER_STRUCT
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")

COMPRESSION_MASK = CODEC_MASK
MAX_CODEC = 4  # zstd
TIMESTAMP_TYPE_BIT = TIMESTAMP_TYPE_MASK
TRANSACTIONAL_BIT = TRANSACTIONAL_MASK
CONTROL_BIT = CONTROL_MASK
LOG_APPEND_TIME = 1


def read_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` without validating it; the caller guarantees 61 bytes are there."""
    return make_header(HEADER.unpack_from(buf, pos))


def structural_problem(header: BatchHeader) -> str | None:
    """Why a stored or received header cannot be a v2 batch, or None if it can."""
    if header.magic != 2:
        return f"magic {header.magic} is not 2"
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"batchLength {header.batch_length} is shorter than a header"
    if header.last_offset_delta < 0:
        return f"lastOffsetDelta {header.last_offset_delta} is negative"
    if header.attributes & COMPRESSION_MASK > MAX_CODEC:
        return f"unknown compression codec {header.attributes & COMPRESSION_MASK}"
    return None


def check_batches(data: memoryview, max_message_bytes: int) -> list[tuple[int, BatchHeader]]:
    """Validate a produced record set; return ``(position, header)`` of each batch.

    Raises :class:`InvalidBatchError` with Kafka's code: CORRUPT_MESSAGE for
    truncation, bad structure or a CRC mismatch; INVALID_RECORD for an old
    magic or inconsistent counts/sequences; MESSAGE_TOO_LARGE for a batch above
    ``max_message_bytes``.
    """
    end = len(data)
    if end == 0:
        raise InvalidBatchError(CORRUPT_MESSAGE, "empty record set")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatchError(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
        header = make_header(HEADER.unpack_from(data, pos))
        size = header[1] + LOG_OVERHEAD
        # One expression for the common all-good case; _raise_invalid explains a failure.
        if (
            header[3] != 2
            or size < HEADER_SIZE
            or header[5] & COMPRESSION_MASK > MAX_CODEC
            or size > end - pos
            or size > max_message_bytes
            or header[12] <= 0
            or header[6] != header[12] - 1
            or (header[9] >= 0 and header[11] < 0 and not header[5] & CONTROL_BIT)
            or (header[5] & TRANSACTIONAL_BIT and header[9] < 0)
            or crc32c(data[pos + ATTRIBUTES_OFFSET : pos + size]) != header[4]
        ):
            _raise_invalid(data, pos, header, end - pos, max_message_bytes)
        batches.append((pos, header))
        pos += size
    return batches


def _raise_invalid(
    data: memoryview, pos: int, header: BatchHeader, available: int, max_message_bytes: int
) -> NoReturn:
    """Raise the error Kafka would give for the first problem of a rejected batch."""
    if header.magic in (0, 1):
        raise InvalidBatchError(
            INVALID_RECORD, f"magic {header.magic} batches are not accepted (need magic 2)"
        )
    problem = structural_problem(header)
    if problem is not None:
        raise InvalidBatchError(CORRUPT_MESSAGE, f"batch at byte {pos}: {problem}")
    if header.size > available:
        raise InvalidBatchError(
            CORRUPT_MESSAGE, f"batch at byte {pos} is truncated ({available} of {header.size} bytes)"
        )
    if header.size > max_message_bytes:
        raise InvalidBatchError(
            MESSAGE_TOO_LARGE, f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}"
        )
    if crc32c(data[pos + ATTRIBUTES_OFFSET : pos + header.size]) != header.crc:
        raise InvalidBatchError(CORRUPT_MESSAGE, f"batch at byte {pos} fails its CRC-32C check")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidBatchError(
            INVALID_RECORD,
            f"recordCount {header.record_count} does not match lastOffsetDelta {header.last_offset_delta}",
        )
    if header.is_transactional and header.producer_id < 0:
        raise InvalidBatchError(INVALID_RECORD, "transactional batch without a producer id")
    raise InvalidBatchError(
        INVALID_RECORD, f"producer {header.producer_id} sent baseSequence {header.base_sequence}"
    )


def offset_header(header: BatchHeader, base_offset: int, leader_epoch: int = 0) -> bytes:
    """The first 16 bytes of a stored batch: new baseOffset, its length, the leader's epoch
    (producers send -1 or anything; the leader overwrites it, as Kafka's does).

    These bytes are outside the CRC, so the rest of the batch is written as received.
    """
    return _OFFSET_AND_EPOCH.pack(base_offset, header.batch_length, leader_epoch)


def log_append_time_header(
    data: memoryview, pos: int, header: BatchHeader, base_offset: int, now_ms: int, leader_epoch: int = 0
) -> bytearray:
    """The 61-byte header of a batch restamped with LogAppendTime, CRC recomputed over the records."""
    head = bytearray(data[pos : pos + HEADER_SIZE])
    _OFFSET_AND_EPOCH.pack_into(head, 0, base_offset, header.batch_length, leader_epoch)
    _I16.pack_into(head, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(head, MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])
    crc = crc32c(data[pos + HEADER_SIZE : pos + header.size], crc)
    _U32.pack_into(head, CRC_OFFSET, crc)
    return head


def record_timestamps(batch: bytes, header: BatchHeader) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of every record of a stored batch, decompressing if needed.

    LogAppendTime batches report maxTimestamp for every record, as consumers do.
    Raises ``kafkakit.errors.CorruptRecordError`` (or ValueError/IndexError on
    malformed records) when the records cannot be read.
    """
    payload = batch[HEADER_SIZE : header.size]
    if header.compression != 0:
        payload = decompress(header.compression, payload)
    log_append_time = header.timestamp_type == LOG_APPEND_TIME
    out: list[tuple[int, int]] = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_zigzag(payload, pos)
        body_end = pos + length
        timestamp_delta, after_timestamp = read_zigzag(payload, pos + 1)  # skip the attributes byte
        offset_delta, _ = read_zigzag(payload, after_timestamp)
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        out.append((header.base_offset + offset_delta, timestamp))
        pos = body_end
    return out
