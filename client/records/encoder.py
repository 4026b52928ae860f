"""Record batch v2 encoding: the producer's hot path.

Written by hand instead of using ``kio.records``: kio builds a datetime per
record and has no compression, which makes it far too slow for producing.
The loops below avoid per-record function calls: varints of small values come
from a precomputed tuple, every record is a handful of byte strings appended
to one list, and one ``bytes.join`` builds the records section.

Record layout (all varints zigzag)::

    length | attributes i8 (0) | timestampDelta | offsetDelta | keyLen (-1 = null) | key
    | valueLen | value | headerCount | [hKeyLen hKey hValLen hVal]...
"""

from __future__ import annotations

import struct
import time
from array import array
from collections.abc import Sequence
from itertools import chain
from typing import Any, Protocol

from crc32c import crc32c
from kafkakit.errors import KafkaConfigError

from .compression import Compression, compress
from .fastencode import encode_uniform_records, encode_uniform_values, record_columns
from .header import (
    CONTROL_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    MAGIC,
    TRANSACTIONAL_MASK,
)
from .varied_encode import VARIED_MIN_RECORDS, encode_varied_values
from .varint import SMALL, SMALL_LIMIT, encode_zigzag, zigzag

__all__ = [
    "RecordTuple",
    "BatchBuilder",
    "QueuedRecords",
    "encode_queued_batches",
    "encode_headers",
    "encode_batch",
    "encode_values",
    "build_control_batch",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
]

#: (key, value, timestamp_ms, headers) as accepted by :func:`encode_batch`.
RecordTuple = tuple[bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Java producers leave partitionLeaderEpoch at -1; the broker overwrites it.
NO_PARTITION_LEADER_EPOCH = -1
_NULL = b"\x01"  # zigzag(-1): null key/value
_ZERO = b"\x00"  # zigzag(0): attributes byte, zero delta, zero headers
_BYTES_LIKE = (bytes, bytearray, memoryview)
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_HEAD_CRC = struct.Struct(">I")

#: Records from which a batch goes to the uniform (numpy) encoder: its set-up costs about
#: 140 us a batch, against the loop's 0.6 us a record, so below this the loop is faster
#: (150 records: 209 against 188 us; 300: 242 against 374 us, on the 2026-11-27 VM).
UNIFORM_MIN_RECORDS = 192


def as_codec(compression: int | str | None) -> Compression:
    """A :class:`Compression` from a codec id, a setting name ("lz4") or None."""
    if compression is None or isinstance(compression, str):
        return Compression.from_name(compression)
    try:
        return Compression(compression)
    except ValueError:
        raise KafkaConfigError("compression_type", f"unknown codec id {compression!r}") from None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _as_bytes(data: object, what: str) -> bytes:
    """Slow path of the type checks: accept other bytes-like objects, reject the rest."""
    if isinstance(data, _BYTES_LIKE):
        return bytes(data)
    raise TypeError(f"record {what} must be bytes or None, not {type(data).__name__}")


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """The headerCount varint followed by every header, as stored in a record."""
    if not headers:
        return _ZERO
    parts = [zigzag(len(headers))]
    append = parts.append
    for name, value in headers:
        raw_name = name.encode("utf-8") if isinstance(name, str) else _as_bytes(name, "header key")
        append(zigzag(len(raw_name)))
        append(raw_name)
        if value is None:
            append(_NULL)
        else:
            if type(value) is not bytes:
                value = _as_bytes(value, "header value")
            append(zigzag(len(value)))
            append(value)
    return b"".join(parts)


def _finish_batch(
    records: bytes | memoryview,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int,
    attributes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Prefix the records section with a header (compressing it first) and set the CRC."""
    if compression:
        records = compress(compression, records)
        attributes |= compression
    header = HEADER_STRUCT.pack(
        base_offset,
        HEADER_SIZE - 12 + len(records),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c(records, crc32c(header[21:]))
    return b"".join((header[:17], _HEAD_CRC.pack(crc), header[21:], records))


class BatchBuilder:
    """Builds one batch record by record (the producer accumulator's unit).

    ``append`` refuses a record (returns None) once the uncompressed size would
    exceed ``max_size``; the first record is always accepted so an oversized
    record still travels alone.
    """

    __slots__ = (
        "_compression",
        "_max_size",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_transactional",
        "_parts",
        "_size",
        "_count",
        "_base_timestamp",
        "_max_timestamp",
    )

    def __init__(
        self,
        compression: int | str | None = Compression.NONE,
        max_size: int = 16384,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> None:
        self._compression = as_codec(compression)
        self._max_size = max_size
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._transactional = transactional
        self._parts: list[bytes] = []
        self._size = HEADER_SIZE
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = -1

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def estimated_size(self) -> int:
        """Uncompressed bytes appended so far plus the 61-byte header."""
        return self._size

    @property
    def max_size(self) -> int:
        """The uncompressed size limit given to the constructor."""
        return self._max_size

    @property
    def max_timestamp(self) -> int:
        """Largest timestamp appended so far (-1 while empty)."""
        return self._max_timestamp

    @property
    def base_timestamp(self) -> int:
        """Timestamp of the first record (0 while empty)."""
        return self._base_timestamp

    @property
    def compression(self) -> Compression:
        return self._compression

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer_epoch

    @property
    def base_sequence(self) -> int:
        return self._base_sequence

    @property
    def is_transactional(self) -> bool:
        return self._transactional

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool | None = None
    ) -> None:
        """Set the idempotence fields (and optionally the transactional flag) before :meth:`build`."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        if transactional is not None:
            self._transactional = transactional

    def append(
        self,
        timestamp_ms: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int | None:
        """Add a record; return its offset delta, or None when it does not fit in ``max_size``."""
        count = self._count
        if timestamp_ms is None:
            timestamp_ms = _now_ms()
        if count:
            delta = timestamp_ms - self._base_timestamp
            ts_delta = SMALL[delta] if 0 <= delta < SMALL_LIMIT else encode_zigzag(delta)
        else:
            ts_delta = _ZERO
        offset_delta = SMALL[count] if count < SMALL_LIMIT else encode_zigzag(count)
        if key is None:
            key_len, key_prefix, key = 0, _NULL, b""
        else:
            if type(key) is not bytes:
                key = _as_bytes(key, "key")
            key_len = len(key)
            key_prefix = SMALL[key_len] if key_len < SMALL_LIMIT else encode_zigzag(key_len)
        if value is None:
            value_len, value_prefix, value = 0, _NULL, b""
        else:
            if type(value) is not bytes:
                value = _as_bytes(value, "value")
            value_len = len(value)
            value_prefix = SMALL[value_len] if value_len < SMALL_LIMIT else encode_zigzag(value_len)
        header_bytes = encode_headers(headers) if headers else _ZERO
        body = (
            1
            + len(ts_delta)
            + len(offset_delta)
            + len(key_prefix)
            + key_len
            + len(value_prefix)
            + value_len
            + len(header_bytes)
        )
        length = SMALL[body] if body < SMALL_LIMIT else encode_zigzag(body)
        size = self._size + len(length) + body
        if size > self._max_size and count:
            return None
        self._parts.extend((length, _ZERO, ts_delta, offset_delta, key_prefix, key, value_prefix, value, header_bytes))
        self._size = size
        self._count = count + 1
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return count

    def build(self) -> bytes:
        """The complete batch: base offset 0, CRC set, records compressed when a codec is set."""
        if not self._count:
            raise ValueError("cannot build an empty record batch")
        return _finish_batch(
            b"".join(self._parts),
            self._count,
            self._base_timestamp,
            self._max_timestamp,
            self._compression,
            TRANSACTIONAL_MASK if self._transactional else 0,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
        )


def _encode_records(records: Sequence[RecordTuple]) -> tuple[bytes, int, int]:
    """Records section of ``records``; returns (bytes, base timestamp, max timestamp)."""
    if len(records) >= UNIFORM_MIN_RECORDS:
        uniform = encode_uniform_records(records)
        if uniform is not None:
            return uniform
    if len(records) >= VARIED_MIN_RECORDS:
        keys, values, stamps, headers = record_columns(records)
        if not any(headers):
            varied = encode_varied_values(values, stamps, keys=None if keys.count(None) == len(keys) else keys)
            if varied is not None:
                return varied
    return _encode_records_slowly(records)


def _encode_records_slowly(records: Sequence[RecordTuple]) -> tuple[bytes, int, int]:
    """The reference loop of :func:`_encode_records`: any records, one at a time."""
    base_ts = records[0][2]
    max_ts = base_ts
    parts: list[bytes] = []
    extend = parts.extend
    small, limit = SMALL, SMALL_LIMIT
    for offset_delta, (key, value, ts, headers) in enumerate(records):
        delta = ts - base_ts
        ts_delta = small[delta] if 0 <= delta < limit else encode_zigzag(delta)
        if ts > max_ts:
            max_ts = ts
        od = small[offset_delta] if offset_delta < limit else encode_zigzag(offset_delta)
        if key is None:
            key_len, key_prefix, key = 0, _NULL, b""
        else:
            if type(key) is not bytes:
                key = _as_bytes(key, "key")
            key_len = len(key)
            key_prefix = small[key_len] if key_len < limit else encode_zigzag(key_len)
        if value is None:
            value_len, value_prefix, value = 0, _NULL, b""
        else:
            if type(value) is not bytes:
                value = _as_bytes(value, "value")
            value_len = len(value)
            value_prefix = small[value_len] if value_len < limit else encode_zigzag(value_len)
        header_bytes = encode_headers(headers) if headers else _ZERO
        body = 1 + len(ts_delta) + len(od) + len(key_prefix) + key_len + len(value_prefix) + value_len + len(header_bytes)
        extend(
            (
                small[body] if body < limit else encode_zigzag(body),
                _ZERO,
                ts_delta,
                od,
                key_prefix,
                key,
                value_prefix,
                value,
                header_bytes,
            )
        )
    return b"".join(parts), base_ts, max_ts


def encode_batch(
    records: Sequence[RecordTuple],
    *,
    compression: int | str | None = Compression.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Encode ``(key, value, timestamp_ms, headers)`` tuples as one batch.

    The first record's timestamp becomes the base timestamp (deltas may be negative).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    data, base_ts, max_ts = _encode_records(records)
    return _finish_batch(
        data,
        len(records),
        base_ts,
        max_ts,
        as_codec(compression),
        TRANSACTIONAL_MASK if transactional else 0,
        producer_id,
        producer_epoch,
        base_sequence,
        base_offset,
        partition_leader_epoch,
    )


class QueuedRecords(Protocol):
    """Records held as columns, as the producer's batches hold them: what :func:`encode_queued_batches` takes.

    Record ``i`` has value ``values[i]`` and timestamp ``stamps[i]``. ``keys`` (None: no
    record has one) lists the keys in record order up to the last keyed record, None for a
    keyless one (``unkeyed`` counts those Nones); the records after it have none. ``headers`` (None: no record has any) maps
    a record's index to its headers, for the records that have them. A keyless record
    without headers then costs the producer's per-record path two list appends: a flat
    list of four items per record took a tuple and an ``extend`` (1.9x the time), and the
    encoder had to slice the columns back out of it. Keys were a dict by index, like
    headers, until a keyed record's two dict stores (send, then placing it by partition)
    cost 40 ns more than list appends.
    """

    values: list[Any]
    keys: list[Any] | None
    unkeyed: int
    headers: dict[int, Any] | None

    @property
    def stamps(self) -> Sequence[Any]:
        """One timestamp per record: a list, or the producer's ``array("q")`` of nanoseconds."""


def encode_queued_batches(
    parts: Sequence[QueuedRecords],
    *,
    compression: int | str | None = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    stamps_per_ms: int = 1,
) -> bytes:
    """The records of ``parts``, in order, as one batch: :func:`encode_batch` for records held as columns.

    The producer coalesces its queued batches of a partition this way. With
    ``stamps_per_ms`` (the producer's 1,000,000) the stamps are in that finer unit
    and are floored to milliseconds here, so the per-record path skips a division;
    such stamps must be ints (``send()`` checks them) and are not checked again.
    The columns are read list by list, never joined into one record list: a fresh
    list of a few hundred kilobytes per request made glibc hand memory back to the
    system and fault it in again for the batch bytes (2.2x the encoding time).
    """
    count = 0
    for part in parts:
        if len(part.stamps) != len(part.values):
            raise ValueError(f"{len(part.values)} values but {len(part.stamps)} timestamps")
        count += len(part.values)
    if not count:
        raise ValueError("a record batch needs at least one record")
    codec = as_codec(compression)
    attributes = TRANSACTIONAL_MASK if transactional else 0
    uniform: tuple[memoryview, int, int] | None = None
    section: tuple[bytes, int, int] | None = None  # the varied encoder's, else the loop's
    if count >= VARIED_MIN_RECORDS and not any(part.headers for part in parts):
        uniform, section = _encode_without_headers(parts, count, stamps_per_ms)
    data: bytes | memoryview
    if uniform is None:
        if section is None:
            section = _encode_records_slowly(_record_tuples(parts, stamps_per_ms))
        data, base_ts, max_ts = section
    else:
        view, base_ts, max_ts = uniform
        if not codec:  # the header goes in front of the records, in the same buffer: one copy out
            _pack_header(view, count, base_ts, max_ts, attributes, producer_id, producer_epoch, base_sequence)
            return view.tobytes()
        data = view[HEADER_SIZE:]
    return _finish_batch(
        data, count, base_ts, max_ts, codec, attributes, producer_id, producer_epoch, base_sequence
    )


def queued_columns(part: QueuedRecords) -> tuple[Sequence[Any], list[Any], list[Any]]:
    """``part``'s values, and its keys (None) and headers (()) as one entry per record."""
    count = len(part.values)
    keys: list[Any] = list(part.keys or ())
    keys += [None] * (count - len(keys))
    headers: list[Any] = [()] * count
    for index, record_headers in (part.headers or {}).items():
        headers[index] = record_headers
    return part.values, keys, headers


def _record_tuples(parts: Sequence[QueuedRecords], stamps_per_ms: int) -> list[RecordTuple]:
    """The records of ``parts`` as tuples, timestamps in milliseconds: the reference loop's input."""
    records: list[RecordTuple] = []
    for part in parts:
        _, keys, headers = queued_columns(part)
        stamps = part.stamps if stamps_per_ms == 1 else [_to_ms(ts, stamps_per_ms) for ts in part.stamps]
        records += zip(keys, part.values, stamps, headers, strict=True)
    return records


def _to_ms(stamp: Any, stamps_per_ms: int) -> Any:
    # The loop's checks (an int timestamp) still see what was stored.
    return stamp // stamps_per_ms if stamp.__class__ is int else stamp


def _encode_without_headers(
    parts: Sequence[QueuedRecords], count: int, stamps_per_ms: int
) -> tuple[tuple[memoryview, int, int] | None, tuple[bytes, int, int] | None]:
    """The records of ``parts`` (none with headers) by the uniform encoder (room for the header
    in front) when their values (and keys) are each of one length, else by the varied encoder;
    (None, None) when neither takes them (the loop then encodes or refuses them)."""
    values, stamps = _value_columns(parts)
    keys = _key_column(parts)
    try:
        lengths: list[int] | None = list(map(len, values))
    except TypeError:  # a null value, or one the loop refuses
        lengths = None
    if count >= UNIFORM_MIN_RECORDS and lengths is not None and lengths.count(lengths[0]) == count:
        if keys is None or all(len(part.keys or ()) == len(part.values) and not part.unkeyed for part in parts):
            uniform = encode_uniform_values(
                values, stamps, keys=keys, room=HEADER_SIZE, stamps_per_ms=stamps_per_ms, value_lengths=lengths
            )
            if uniform is not None:
                return uniform, None
    return None, encode_varied_values(values, stamps, keys=keys, stamps_per_ms=stamps_per_ms, value_lengths=lengths)


def _value_columns(parts: Sequence[QueuedRecords]) -> tuple[list[Any], Sequence[Any]]:
    """The values and the stamps of ``parts``' records, in order."""
    if len(parts) == 1:
        return parts[0].values, parts[0].stamps
    values: list[Any] = []
    for part in parts:
        values += part.values
    words = [part.stamps for part in parts if isinstance(part.stamps, array)]
    if len(words) == len(parts):  # the producer's: machine words, joined at C speed
        joined = array("q")
        for stamps_of_part in words:
            joined += stamps_of_part
        return values, joined
    stamps: list[Any] = []
    for part in parts:
        stamps += part.stamps
    return values, stamps


def _key_column(parts: Sequence[QueuedRecords]) -> list[Any] | None:
    """Every record's key (None where it has none), or None when no record has one."""
    if not any(part.keys for part in parts):
        return None
    if len(parts) == 1 and len(parts[0].keys or ()) == len(parts[0].values):
        return parts[0].keys  # (read, never changed)
    keys: list[Any] = []
    for part in parts:
        part_keys = part.keys or ()
        keys += part_keys
        keys += [None] * (len(part.values) - len(part_keys))
    return keys


def _pack_header(
    view: memoryview,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Write a batch header (base offset 0) into ``view[:HEADER_SIZE]`` for the records after it, CRC included."""
    HEADER_STRUCT.pack_into(
        view, 0, 0, len(view) - 12, NO_PARTITION_LEADER_EPOCH, MAGIC, 0, attributes, count - 1,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    )  # fmt: skip
    _HEAD_CRC.pack_into(view, 17, crc32c(view[21:]))


def _values_with_uniform_length(values: Sequence[bytes], length: int) -> bytes:
    """Records section for null keys and values all ``length`` long.

    Only the offset delta changes from record to record, so each record's prefix
    is ``head + offsetDelta + tail``; the headerCount byte of one record is folded
    into the prefix of the next.
    """
    small = SMALL
    value_prefix = zigzag(length)
    tail = _NULL + value_prefix
    prefixes: list[bytes] = []
    n = len(values)
    # Offset deltas take 1 byte below 64, 2 below 8192, 3 below 2**20, ...
    lo, width = 0, 1
    while lo < n:
        hi = min(n, 1 << (7 * width - 1))
        head = _ZERO + zigzag(4 + width + len(value_prefix) + length) + _ZERO + _ZERO
        table_end = min(hi, SMALL_LIMIT)
        prefixes.extend([head + od + tail for od in small[lo:table_end]])
        if hi > table_end:
            prefixes.extend([head + encode_zigzag(i) + tail for i in range(max(lo, table_end), hi)])
        lo, width = hi, width + 1
    prefixes[0] = prefixes[0][1:]
    return b"".join(chain.from_iterable(zip(prefixes, values, strict=True))) + _ZERO


def _values_section(values: Sequence[bytes], keys: Sequence[bytes | None] | None) -> bytes:
    """Records section for timestamp delta 0, no headers."""
    small, limit = SMALL, SMALL_LIMIT
    parts: list[bytes] = []
    extend = parts.extend
    if keys is None:
        for offset_delta, value in enumerate(values):
            if type(value) is not bytes:
                value = _as_bytes(value, "value")
            value_len = len(value)
            od = small[offset_delta] if offset_delta < limit else encode_zigzag(offset_delta)
            value_prefix = small[value_len] if value_len < limit else encode_zigzag(value_len)
            body = 4 + len(od) + len(value_prefix) + value_len
            extend((small[body] if body < limit else encode_zigzag(body), _ZERO, _ZERO, od, _NULL, value_prefix, value, _ZERO))
        return b"".join(parts)
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    for offset_delta, (key, value) in enumerate(zip(keys, values, strict=True)):
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        value_len = len(value)
        if key is None:
            key_len, key_prefix, key = 0, _NULL, b""
        else:
            if type(key) is not bytes:
                key = _as_bytes(key, "key")
            key_len = len(key)
            key_prefix = small[key_len] if key_len < limit else encode_zigzag(key_len)
        od = small[offset_delta] if offset_delta < limit else encode_zigzag(offset_delta)
        value_prefix = small[value_len] if value_len < limit else encode_zigzag(value_len)
        body = 3 + len(od) + len(key_prefix) + key_len + len(value_prefix) + value_len
        extend(
            (
                small[body] if body < limit else encode_zigzag(body),
                _ZERO,
                _ZERO,
                od,
                key_prefix,
                key,
                value_prefix,
                value,
                _ZERO,
            )
        )
    return b"".join(parts)


def encode_values(
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int | None = None,
    compression: int | str | None = Compression.NONE,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Fastest bulk path: one batch of ``values`` (optional ``keys``), one timestamp, no headers.

    ``timestamp_ms`` defaults to now. Values must not be None here (use
    :func:`encode_batch` for tombstones).
    """
    if not values:
        raise ValueError("a record batch needs at least one record")
    if timestamp_ms is None:
        timestamp_ms = _now_ms()
    data: bytes | None = None
    if keys is None and type(values[0]) is bytes:
        lengths = list(map(len, values))
        length = lengths[0]
        if min(lengths) == length == max(lengths):
            data = _values_with_uniform_length(values, length)
    if data is None and len(values) >= VARIED_MIN_RECORDS:
        varied = encode_varied_values(
            list(values), [timestamp_ms] * len(values), keys=None if keys is None else list(keys)
        )
        data = None if varied is None else varied[0]
    if data is None:
        data = _values_section(values, keys)
    return _finish_batch(
        data,
        len(values),
        timestamp_ms,
        timestamp_ms,
        as_codec(compression),
        TRANSACTIONAL_MASK if transactional else 0,
        producer_id,
        producer_epoch,
        base_sequence,
    )


def build_control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """A transaction marker batch: one control record, COMMIT or ABORT, never compressed."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    data, _, _ = _encode_records([(key, value, timestamp_ms, ())])
    return _finish_batch(
        data,
        1,
        timestamp_ms,
        timestamp_ms,
        Compression.NONE,
        TRANSACTIONAL_MASK | CONTROL_MASK,
        producer_id,
        producer_epoch,
        -1,
    )
