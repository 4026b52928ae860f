"""Records sections of uniform records built by numpy: the fast path of :mod:`.encoder`.

The producer's accumulator holds ``(key, value, timestamp_ms, headers)``
tuples, and the reference loop in :mod:`.encoder` spends about 0.6 us a
record on them. The commonest shape, null keys, no headers, values of one
length and timestamps less than 64 ms after the batch's first, makes every
record the same few bytes around its value::

    length | 0 | timestampDelta | offsetDelta | 0x01 (null key) | valueLength | value | 0

where only the timestamp and offset deltas change. Each run of records whose
offset delta has the same varint width is a 2-D array of identical rows, filled
column by column, and the values are copied in one ``bytes.join`` and one array
assignment. Anything else returns None and the caller runs the reference loop,
which produces the same bytes (tests compare them).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from .varint import zigzag

__all__ = ["MIN_RECORDS", "encode_uniform_records"]

#: Below this many records the numpy set-up costs more than the loop saves.
MIN_RECORDS = 32
# Timestamp deltas below this take one varint byte (zigzag < 128).
_ONE_BYTE = 64
_keys, _values, _stamps, _headers = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


def encode_uniform_records(records: Sequence[Any]) -> tuple[bytes, int, int] | None:
    """(records section, base timestamp, max timestamp), or None when the records are not uniform."""
    count = len(records)
    if count < MIN_RECORDS:
        return None
    if any(map(_headers, records)) or list(map(_keys, records)).count(None) != count:
        return None
    values = list(map(_values, records))
    try:
        lengths = set(map(len, values))
        joined = b"".join(values)  # bytearray/memoryview values join as their bytes, as the loop encodes them
    except TypeError:  # None, str, ...: the loop encodes or rejects them
        return None
    if len(lengths) != 1:
        return None
    (length,) = lengths
    if len(joined) != count * length:  # memoryviews whose len() is not their size in bytes
        return None
    try:
        stamps = np.array(list(map(_stamps, records)))
    except OverflowError:
        return None
    if stamps.dtype != np.int64:  # bool, float, beyond int64: the loop handles (or rejects) them
        return None
    base = int(stamps[0])
    deltas = stamps - base
    if int(deltas.min()) < 0 or int(deltas.max()) >= _ONE_BYTE:
        return None
    flat = np.frombuffer(joined, np.uint8).reshape(count, length)
    value_prefix = np.frombuffer(b"\x01" + zigzag(length), np.uint8)
    parts: list[bytes] = []
    first, width = 0, 1
    while first < count:  # offset deltas take 1 byte below 64, 2 below 8192, ...
        stop = min(count, 1 << (7 * width - 1))
        parts.append(_run(first, stop, width, deltas[first:stop], value_prefix, flat[first:stop]))
        first, width = stop, width + 1
    return b"".join(parts), base, base + int(deltas.max())


def _run(first: int, stop: int, width: int, deltas: Any, value_prefix: Any, values: Any) -> bytes:
    """Records ``first`` to ``stop`` - 1, whose offset deltas all take ``width`` varint bytes."""
    length = values.shape[1]
    body = 2 + 1 + width + len(value_prefix) + length  # attributes, ts delta, offset delta, key+length, value, headers
    head = np.frombuffer(zigzag(body), np.uint8)
    rows = np.zeros((stop - first, len(head) + body), np.uint8)
    col = len(head)
    rows[:, :col] = head
    # rows[:, col] = 0: attributes
    rows[:, col + 1] = deltas * 2  # zigzag of a delta in 0..63
    offsets = np.arange(first, stop, dtype=np.int64) * 2  # zigzag of the offset delta
    at = col + 2
    for i in range(width):
        byte = (offsets >> (7 * i)) & 0x7F
        rows[:, at + i] = byte | 0x80 if i < width - 1 else byte
    at += width
    rows[:, at : at + len(value_prefix)] = value_prefix
    at += len(value_prefix)
    rows[:, at : at + length] = values
    # last column = 0: no headers
    return rows.tobytes()
