"""Record batch v2 decoding: the consumer's hot path.

Hand-written rather than ``kio.records`` (which builds a datetime per record
and cannot decompress). Sections with enough records go to the vectorised
decoder in :mod:`.fastdecode` (all the batches of a fetch at once); the
pure-Python loop :func:`_decode_records` is the fallback for small or odd
batches and the reference the fast path is tested against. The loop inlines
1- and 2-byte varints (nearly every length, delta and count in practice) and
falls back to :func:`read_uvarint` only for longer ones; slicing never checks
bounds because the final position check (and the CRC) catch truncation.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable
from functools import partial
from typing import Any

from kafkakit.errors import CorruptRecordError
from kafkakit.structs import ConsumerRecord, Header

from .compression import decompress
from .fastdecode import MIN_RECORDS, Section, decode_sections, decode_sections_in_ranges
from .gcpolicy import gc_paused
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

__all__ = [
    "RawRecord",
    "decode_batch",
    "decode_batch_list",
    "decode_batches",
    "decode_batches_in_ranges",
    "decode_raw_records",
    "read_control_type",
]

#: (offset_delta, timestamp_delta, key, value, headers) of one record, as stored.
RawRecord = tuple[int, int, bytes | None, bytes | None, list[Header]]

_CONTROL_KEY = struct.Struct(">hh")
# Signed value of every 1-byte zigzag varint, indexed by the byte.
_ZIGZAG_1: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(128))
_NO_HEADERS: tuple[Header, ...] = ()  # shared by every record without headers
_new_record = partial(tuple.__new__, ConsumerRecord)  # skips NamedTuple's Python-level __new__


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


# Public name for column-oriented decoders (kafkakit.records.fastdecode.decode_columns callers).
read_headers = _read_headers


def _records_section(buf: bytes, pos: int, header: BatchHeader) -> Section:
    """The batch's records section (decompressed when needed)."""
    start = pos + HEADER_SIZE
    end = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & CODEC_MASK
    if codec:
        buf = decompress(codec, buf[start:end])
        start, end = 0, len(buf)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return Section(buf, start, end, header.record_count, header.base_offset, header.base_timestamp, log_append_time)


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
    record = _new_record
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
                header_list, p = _read_headers(data, p)
                headers = tuple(header_list)
            else:
                headers = _NO_HEADERS
                p += 1
            append(record((topic, partition, offset, timestamp, timestamp_type, key, value, headers, key_size, value_size)))
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
    with gc_paused(header.record_count):
        return _decode_sections([_records_section(_as_bytes(buf), pos, header)], topic, partition, min_offset)


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
    return decode_batch_list(data, iter_batch_headers(data), topic, partition, check_crc=check_crc, min_offset=min_offset)


def decode_batch_list(
    data: bytes,
    batches: Iterable[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
    *,
    check_crc: bool = True,
    min_offset: int = 0,
) -> list[ConsumerRecord[Any, Any]]:
    """Like :func:`decode_batches`, for the given ``(position, header)`` batches of ``data`` only.

    The consumer decodes a fetch response a few batches at a time with this,
    so the records it hands out are still in the CPU cache when the
    application reads them.
    """
    batches = list(batches)
    with gc_paused(sum(header.record_count for _, header in batches)):
        sections = _data_sections(data, batches, topic, partition, check_crc, min_offset)
        return _decode_sections(sections, topic, partition, min_offset)


def decode_batches_in_ranges(
    buf: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    ranges: Iterable[tuple[int, int]],
    *,
    check_crc: bool = True,
) -> list[ConsumerRecord[Any, Any]]:
    """The data records of ``buf`` whose offsets fall in ``ranges`` (inclusive ``(first, last)``
    pairs, disjoint), in offset order.

    A share-group member is sent whole batches of which it acquired a part: batches outside
    every range are not parsed, and record objects are built for the wanted offsets only.
    """
    wanted = sorted(ranges)
    if not wanted:
        return []
    data = _as_bytes(buf)
    firsts = [first for first, _ in wanted]
    batches = []
    for pos, header in iter_batch_headers(data):
        # The last range starting at or before the batch's last offset is the only one that can
        # overlap it without an earlier range doing so (the ranges are disjoint).
        k = bisect_right(firsts, header.base_offset + header.last_offset_delta) - 1
        if k >= 0 and wanted[k][1] >= header.base_offset:
            batches.append((pos, header))
    with gc_paused(sum(header.record_count for _, header in batches)):
        sections = _data_sections(data, batches, topic, partition, check_crc, firsts[0])
        if sum(s.record_count for s in sections) >= MIN_RECORDS:
            fast = decode_sections_in_ranges(sections, topic, partition, wanted, _read_headers)
            if fast is not None:
                return fast
        records = _decode_sections(sections, topic, partition, firsts[0])
    return [r for r in records if _in_ranges(r.offset, firsts, wanted)]


def _in_ranges(offset: int, firsts: list[int], ranges: list[tuple[int, int]]) -> bool:
    k = bisect_right(firsts, offset) - 1
    return k >= 0 and offset <= ranges[k][1]


def _data_sections(
    data: bytes, batches: list[tuple[int, BatchHeader]], topic: str, partition: int, check_crc: bool, min_offset: int
) -> list[Section]:
    """The record sections of the data batches (control batches and batches wholly below
    ``min_offset`` left out), CRCs checked."""
    sections: list[Section] = []
    for pos, header in batches:
        if header.is_control or header.base_offset + header.last_offset_delta < min_offset:
            continue
        if check_crc and not verify_crc(data, pos, header):
            raise CorruptRecordError(
                f"CRC mismatch in record batch at offset {header.base_offset} of {topic}-{partition}"
            )
        sections.append(_records_section(data, pos, header))
    return sections


def _decode_sections(
    sections: list[Section], topic: str, partition: int, min_offset: int
) -> list[ConsumerRecord[Any, Any]]:
    """Decode ``sections``: all at once vectorised when possible, else section by section."""
    if sum(s.record_count for s in sections) >= MIN_RECORDS:
        fast = decode_sections(sections, topic, partition, min_offset, _read_headers)
        if fast is not None:
            return fast
    out: list[ConsumerRecord[Any, Any]] = []
    for section in sections:
        fast = None
        if len(sections) > 1 and section.record_count >= MIN_RECORDS:
            fast = decode_sections([section], topic, partition, min_offset, _read_headers)
        if fast is not None:
            out.extend(fast)
        else:
            _decode_section_slowly(out, section, topic, partition, min_offset)
    return out


def _decode_section_slowly(
    out: list[ConsumerRecord[Any, Any]], section: Section, topic: str, partition: int, min_offset: int
) -> None:
    """Append the section's records to ``out`` with the pure-Python reference loop."""
    first = len(out)
    log_append_time = section.log_append_time
    _decode_records(
        out,
        section.data,
        section.start,
        section.end,
        section.record_count,
        topic,
        partition,
        section.base_offset,
        section.base_timestamp,
        0 if log_append_time is None else 1,
    )
    if min_offset > section.base_offset:  # a fetch may start in the middle of a batch
        kept = [r for r in out[first:] if r.offset >= min_offset]
        del out[first:]
        out.extend(kept)
    if log_append_time is not None:
        out[first:] = [r._replace(timestamp=log_append_time) for r in out[first:]]


def decode_raw_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> list[RawRecord]:
    """Every record of the batch (control ones included) as stored, deltas not resolved.

    Slower than :func:`decode_batch`; meant for control records, compaction and tests.
    """
    data, p, end = _records_section(_as_bytes(buf), pos, header)[:3]
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
