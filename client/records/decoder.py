"""Record batch v2 decoding: the consumer's hot path.

Hand-written rather than ``kio.records`` (which builds a datetime per record
and cannot decompress). The record loop inlines 1- and 2-byte varints (nearly
every length, delta and count in practice) and falls back to
:func:`read_uvarint` only for longer ones; slicing never checks bounds because
the final position check (and the CRC) catch truncation.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafkakit.errors import CorruptRecordError
from kafkakit.structs import ConsumerRecord, Header

from .compression import decompress
from .header import (
    CODEC_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    iter_batch_headers,
    verify_crc,
)
from .varint import read_uvarint

__all__ = ["RawRecord", "decode_batch", "decode_batches", "decode_raw_records", "read_control_type"]

#: (offset_delta, timestamp_delta, key, value, headers) of one record, as stored.
RawRecord = tuple[int, int, bytes | None, bytes | None, list[Header]]

_CONTROL_KEY = struct.Struct(">hh")
# Signed value of every 1-byte zigzag varint, indexed by the byte.
_ZIGZAG_1: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(128))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while decoding.

    A large fetch allocates hundreds of thousands of acyclic objects (records and
    their header lists); each allocation burst would trigger collections that
    rescan them all, halving decode throughput. Refcounting frees them anyway.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _as_bytes(buf: bytes | bytearray | memoryview) -> bytes:
    return buf if type(buf) is bytes else bytes(buf)


def _read_headers(data: bytes, p: int) -> tuple[list[Header], int]:
    """Parse headerCount and the headers at ``p``; return (headers, next pos)."""
    raw, p = read_uvarint(data, p)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        raw, p = read_uvarint(data, p)
        if raw & 1:
            raise CorruptRecordError("null header key")
        end = p + (raw >> 1)
        name = data[p:end].decode("utf-8", "replace")
        raw, p = read_uvarint(data, end)
        if raw == 1:
            headers.append((name, None))
        elif raw & 1:
            raise CorruptRecordError("negative header value length")
        else:
            end = p + (raw >> 1)
            headers.append((name, data[p:end]))
            p = end
    return headers, p


def _records_section(buf: bytes, pos: int, header: BatchHeader) -> tuple[bytes, int, int]:
    """(data, start, end) of the batch's records, decompressed when needed."""
    start = pos + HEADER_SIZE
    end = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & CODEC_MASK
    if codec:
        data = decompress(codec, buf[start:end])
        return data, 0, len(data)
    return buf, start, end


def _decode_records(
    out: list[ConsumerRecord[Any, Any]],
    data: bytes,
    p: int,
    end: int,
    count: int,
    topic: str,
    partition: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_type: int,
) -> None:
    """Append the ``count`` records stored in ``data[p:end]`` to ``out`` (the hot loop).

    Indexing bytes is the dominant cost here, so each varint is read with as few
    ``data[i]`` as possible: 1-byte values via the ``zz`` table, 2-byte values inline.
    """
    append = out.append
    record = ConsumerRecord
    slow = read_uvarint
    zz = _ZIGZAG_1
    try:
        for _ in range(count):
            # Record length (skipped: the end-position check validates the whole) + attributes.
            if data[p] < 128:
                p += 2
            elif data[p + 1] < 128:
                p += 3
            else:
                p = slow(data, p)[1] + 1
            # Timestamp delta.
            u = data[p]
            if u < 128:
                timestamp = base_timestamp + zz[u]
                p += 1
            else:
                u, p = slow(data, p)
                timestamp = base_timestamp + ((u >> 1) ^ -(u & 1))
            # Offset delta.
            u = data[p]
            if u < 128:
                offset = base_offset + zz[u]
                p += 1
            else:
                u2 = data[p + 1]
                if u2 < 128:
                    u = (u & 127) | (u2 << 7)
                    p += 2
                else:
                    u, p = slow(data, p)
                offset = base_offset + ((u >> 1) ^ -(u & 1))
            # Key (length -1 = null).
            u = data[p]
            if u == 1:
                key = None
                key_size = -1
                p += 1
            else:
                if u < 128:
                    p += 1
                else:
                    u2 = data[p + 1]
                    if u2 < 128:
                        u = (u & 127) | (u2 << 7)
                        p += 2
                    else:
                        u, p = slow(data, p)
                if u & 1:
                    raise CorruptRecordError(f"negative key length at offset {offset}")
                key_size = u >> 1
                key = data[p : p + key_size]
                p += key_size
            # Value (length -1 = null).
            u = data[p]
            if u < 128:
                if u == 1:
                    value = None
                    value_size = -1
                    p += 1
                else:
                    if u & 1:
                        raise CorruptRecordError(f"negative value length at offset {offset}")
                    value_size = u >> 1
                    p += 1
                    value = data[p : p + value_size]
                    p += value_size
            else:
                u2 = data[p + 1]
                if u2 < 128:
                    u = (u & 127) | (u2 << 7)
                    p += 2
                else:
                    u, p = slow(data, p)
                if u & 1:
                    raise CorruptRecordError(f"negative value length at offset {offset}")
                value_size = u >> 1
                value = data[p : p + value_size]
                p += value_size
            # Headers.
            if data[p]:
                headers, p = _read_headers(data, p)
            else:
                headers = []
                p += 1
            append(record(topic, partition, offset, timestamp, timestamp_type, key, value, headers, key_size, value_size))
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    if p != end:
        raise CorruptRecordError(f"records section of {end - p} bytes does not match its {count} records")


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    topic: str,
    partition: int,
    *,
    min_offset: int = 0,
) -> list[ConsumerRecord[Any, Any]]:
    """Records of the batch at ``pos`` (decompressed) as ConsumerRecords; control batches give [].

    Does not check the CRC (see :func:`verify_crc`). LogAppendTime batches give
    every record the batch's max timestamp.
    """
    if header.is_control:
        return []
    out: list[ConsumerRecord[Any, Any]] = []
    with _gc_paused():
        _decode_into(out, _as_bytes(buf), pos, header, topic, partition, min_offset)
    return out


def _decode_into(
    out: list[ConsumerRecord[Any, Any]],
    buf: bytes,
    pos: int,
    header: BatchHeader,
    topic: str,
    partition: int,
    min_offset: int,
) -> None:
    data, start, end = _records_section(buf, pos, header)
    first = len(out)
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
    _decode_records(
        out,
        data,
        start,
        end,
        header.record_count,
        topic,
        partition,
        header.base_offset,
        header.base_timestamp,
        1 if log_append_time else 0,
    )
    if min_offset > header.base_offset:  # a fetch may start in the middle of a batch
        kept = [r for r in out[first:] if r.offset >= min_offset]
        del out[first:]
        out.extend(kept)
    if log_append_time:
        max_timestamp = header.max_timestamp
        for i in range(first, len(out)):
            out[i].timestamp = max_timestamp


def decode_batches(
    buf: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    *,
    check_crc: bool = True,
    min_offset: int = 0,
) -> list[ConsumerRecord[Any, Any]]:
    """Every data record in ``buf`` (a Fetch response's records) with offset >= ``min_offset``.

    Skips control batches and batches wholly below ``min_offset``, stops at a
    trailing partial batch, and raises CorruptRecordError on a CRC mismatch.
    """
    data = _as_bytes(buf)
    out: list[ConsumerRecord[Any, Any]] = []
    with _gc_paused():
        for pos, header in iter_batch_headers(data):
            if header.is_control or header.base_offset + header.last_offset_delta < min_offset:
                continue
            if check_crc and not verify_crc(data, pos, header):
                raise CorruptRecordError(
                    f"CRC mismatch in record batch at offset {header.base_offset} of {topic}-{partition}"
                )
            _decode_into(out, data, pos, header, topic, partition, min_offset)
    return out


def decode_raw_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> list[RawRecord]:
    """Every record of the batch (control ones included) as stored, deltas not resolved.

    Slower than :func:`decode_batch`; meant for control records, compaction and tests.
    """
    data, p, end = _records_section(_as_bytes(buf), pos, header)
    out: list[RawRecord] = []
    try:
        for _ in range(header.record_count):
            _, p = read_uvarint(data, p)
            p += 1
            raw, p = read_uvarint(data, p)
            ts_delta = (raw >> 1) ^ -(raw & 1)
            raw, p = read_uvarint(data, p)
            offset_delta = (raw >> 1) ^ -(raw & 1)
            key, p = _read_nullable(data, p)
            value, p = _read_nullable(data, p)
            headers, p = _read_headers(data, p)
            out.append((offset_delta, ts_delta, key, value, headers))
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    if p != end:
        raise CorruptRecordError(f"records section has {end - p} bytes more than its records")
    return out


def _read_nullable(data: bytes, p: int) -> tuple[bytes | None, int]:
    raw, p = read_uvarint(data, p)
    if raw == 1:
        return None, p
    if raw & 1:
        raise CorruptRecordError("negative length")
    end = p + (raw >> 1)
    if end > len(data):
        raise CorruptRecordError("record field runs past the end of its batch")
    return data[p:end], end


def read_control_type(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    """The marker type of a control batch: 0 = ABORT, 1 = COMMIT."""
    if not header.is_control:
        raise CorruptRecordError("not a control batch")
    records = decode_raw_records(buf, pos, header)
    if not records or records[0][2] is None or len(records[0][2]) < 4:
        raise CorruptRecordError("control batch without a valid control record key")
    _version, control_type = _CONTROL_KEY.unpack_from(records[0][2], 0)
    return int(control_type)
