"""Record batch v2 header: parsing, CRC checks and the in-place rewrites a broker does.

Layout (61 bytes, big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32
    | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64
    | producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32

``batchLength`` counts the bytes after itself; the CRC-32C covers everything
from ``attributes`` to the end, so baseOffset and partitionLeaderEpoch can be
rewritten without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c
from kafkakit.errors import CorruptRecordError, UnsupportedCompressionTypeError

from .compression import Compression

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "BatchHeader",
    "make_header",
    "read_batch_header",
    "iter_batch_headers",
    "verify_crc",
    "set_base_offset",
    "set_log_append_time",
]

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER_STRUCT.size  # 61
MAGIC = 2
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
# Byte offsets of fields inside a batch.
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
# batchLength of a batch with no records: header minus the 12 bytes before batchLength's end.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The fixed fields of one record batch (magic 2).

    A NamedTuple so that parsing one is a single C-level ``tuple.__new__`` over
    ``struct.unpack_from`` output (:func:`make_header`): the broker parses one
    per produced or stored batch.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        codec = self.attributes & CODEC_MASK
        if codec > Compression.ZSTD:
            raise UnsupportedCompressionTypeError(f"codec id {codec} in record batch attributes")
        return Compression(codec)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime (every record then carries max_timestamp)."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


_tuple_new = tuple.__new__


def make_header(fields: tuple[int, ...]) -> BatchHeader:
    """A BatchHeader from ``HEADER_STRUCT.unpack_from`` output, without validation."""
    return _tuple_new(BatchHeader, fields)


def read_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header of the batch starting at ``pos``.

    Raises CorruptRecordError when fewer than 61 bytes remain, the magic is not
    2, or batchLength is too small to hold a header.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"record batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} left")
    header = make_header(HEADER_STRUCT.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic} at position {pos}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {header.batch_length} is shorter than its header")
    return header


def iter_batch_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf``.

    Stops silently at a trailing partial batch: a Fetch response may cut the
    last batch short at max_bytes.
    """
    pos = 0
    end = len(buf)
    unpack_length = _I32.unpack_from
    while end - pos >= HEADER_SIZE:
        (batch_length,) = unpack_length(buf, pos + 8)
        if pos + LOG_OVERHEAD + batch_length > end:
            # Check the magic before trusting the length: garbage must not pass as "partial".
            if buf[pos + MAGIC_OFFSET] != MAGIC:
                raise CorruptRecordError(f"unsupported record batch magic {buf[pos + MAGIC_OFFSET]} at position {pos}")
            return
        header = read_batch_header(buf, pos)
        yield pos, header
        pos += LOG_OVERHEAD + batch_length


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches the bytes from attributes to the end of the batch."""
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        return False
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def set_base_offset(
    buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int | None = None
) -> None:
    """Rewrite baseOffset (and optionally partitionLeaderEpoch) in place; both lie outside the CRC."""
    _I64.pack_into(buf, pos, base_offset)
    if partition_leader_epoch is not None:
        _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its max timestamp, then re-CRC it.

    Records keep their deltas; readers use maxTimestamp for every record of such a batch.
    """
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    write_crc(buf, pos)


def write_crc(buf: bytearray | memoryview, pos: int) -> None:
    """Compute and store the CRC of the complete batch at ``pos``."""
    (batch_length,) = _I32.unpack_from(buf, pos + 8)
    end = pos + LOG_OVERHEAD + batch_length
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]))
