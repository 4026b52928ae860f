"""Records sections of uniform records built by numpy: the fast path of :mod:`.encoder`.

The producer's accumulator holds ``key, value, timestamp_ms, headers`` flat
in one list per batch (no tuple per record for the garbage collector to
track), and the reference loop in :mod:`.encoder` spends about 0.6 us a
record on them. The commonest shape, null keys, no headers, values of one
length and timestamps less than 64 ms after the batch's first, makes every
record the same few bytes around its value::

    length | 0 | timestampDelta | offsetDelta | 0x01 (null key) | valueLength | value | 0

where only the timestamp and offset deltas change. Each run of records whose
offset delta has the same varint width is a 2-D array of identical rows, filled
column by column, and the values are copied in one ``bytes.join`` and one array
assignment, into a per-thread scratch buffer that the caller completes with the
batch header. Anything else returns None and the caller runs the reference loop,
which produces the same bytes (tests compare them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from .varint import zigzag

__all__ = ["MIN_RECORDS", "encode_uniform_columns", "encode_uniform_flat", "encode_uniform_records"]

#: Below this many records the numpy set-up costs more than the loop saves.
MIN_RECORDS = 32
# Timestamp deltas below this take one varint byte (zigzag < 128).
_ONE_BYTE = 64
_keys, _values, _stamps, _headers = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


def encode_uniform_records(records: Sequence[Any]) -> tuple[bytes, int, int] | None:
    """(records section, base timestamp, max timestamp), or None when the records are not uniform."""
    if len(records) < MIN_RECORDS:
        return None
    columns = (list(map(getter, records)) for getter in (_keys, _values, _stamps, _headers))
    encoded = encode_uniform_columns(*columns)
    return None if encoded is None else (encoded[0].tobytes(), encoded[1], encoded[2])


def encode_uniform_flat(flat: list[Any], *, room: int = 0) -> tuple[memoryview, int, int] | None:
    """:func:`encode_uniform_columns` for records stored flat (``key, value, timestamp, headers, key, ...``)."""
    if len(flat) < 4 * MIN_RECORDS:
        return None
    return encode_uniform_columns(flat[0::4], flat[1::4], flat[2::4], flat[3::4], room=room)


def encode_uniform_columns(
    keys: list[Any], values: list[Any], stamps: list[Any], headers: list[Any], *, room: int = 0
) -> tuple[memoryview, int, int] | None:
    """The uniform encoder over one list per record field; None when the records are not uniform.

    Returns (view, base timestamp, max timestamp). The records section starts
    ``room`` bytes into ``view`` (space for the caller's batch header), and the
    view is of this thread's scratch buffer: valid until the thread's next call.
    Writing into one reused buffer matters more than it seems: each fresh
    megabyte a batch passes through costs its page faults, which on a VM took
    more time than the encoding itself.
    """
    count = len(values)
    if count < MIN_RECORDS:
        return None
    if any(headers) or keys.count(None) != count:
        return None
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
        stamp_array = np.array(stamps)
    except OverflowError:
        return None
    if stamp_array.dtype != np.int64:  # bool, float, beyond int64: the loop handles (or rejects) them
        return None
    base = int(stamp_array[0])
    deltas = stamp_array - base
    if int(deltas.min()) < 0 or int(deltas.max()) >= _ONE_BYTE:
        return None
    value_rows = np.frombuffer(joined, np.uint8).reshape(count, length)
    value_prefix = np.frombuffer(b"\x01" + zigzag(length), np.uint8)
    runs: list[tuple[int, int, int, int]] = []  # (first, stop, width, position in the buffer)
    end = room
    first, width = 0, 1
    while first < count:  # offset deltas take 1 byte below 64, 2 below 8192, ...
        stop = min(count, 1 << (7 * width - 1))
        runs.append((first, stop, width, end))
        end += (stop - first) * _row_size(width, len(value_prefix), length)
        first, width = stop, width + 1
    buffer = _scratch(end)
    for first, stop, width, at in runs:
        _run(buffer, at, first, stop, width, deltas[first:stop], value_prefix, value_rows[first:stop])
    return buffer.data[:end], base, base + int(deltas.max())


class _Scratch(threading.local):
    buffer: np.ndarray[Any, Any] = np.empty(0, np.uint8)


_scratch_space = _Scratch()


def _scratch(size: int) -> np.ndarray[Any, Any]:
    """This thread's scratch buffer, at least ``size`` bytes (replaced, never resized: old views stay valid)."""
    buffer = _scratch_space.buffer
    if len(buffer) < size:
        buffer = _scratch_space.buffer = np.empty(max(size, 2 * len(buffer)), np.uint8)
    return buffer


def _row_size(width: int, prefix: int, length: int) -> int:
    body = 2 + 1 + width + prefix + length  # attributes, ts delta, offset delta, key+length, value, headers
    return len(zigzag(body)) + body


def _run(
    buffer: Any, at: int, first: int, stop: int, width: int, deltas: Any, value_prefix: Any, values: Any
) -> None:
    """Write records ``first`` to ``stop`` - 1 (offset deltas all ``width`` varint bytes) at ``buffer[at:]``."""
    length = values.shape[1]
    body = 2 + 1 + width + len(value_prefix) + length
    head = np.frombuffer(zigzag(body), np.uint8)
    row = len(head) + body
    rows = buffer[at : at + (stop - first) * row].reshape(stop - first, row)
    col = len(head)
    rows[:, :col] = head
    rows[:, col] = 0  # attributes
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
    rows[:, -1] = 0  # no headers
