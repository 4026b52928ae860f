"""Records sections of uniform records built by numpy: the fast path of :mod:`.encoder`.

The producer's accumulator holds each batch's values and timestamps in
one list each (its timestamps in nanoseconds, floored here through
``stamps_per_ms``), and the reference loop in :mod:`.encoder` spends about 0.6 us a
record on them. The commonest shapes, no headers, values of one length,
keys all null or all of one length, and timestamps at or after the batch's
first (up to about 17 minutes), make every record the same few bytes around
its key and value::

    length | 0 | timestampDelta | offsetDelta | 0x01 (null key) | valueLength | value | 0
    length | 0 | timestampDelta | offsetDelta | keyLength | key | valueLength | value | 0

where only the timestamp and offset deltas change. Each run of records whose
timestamp and offset deltas have the same varint widths is a 2-D array of
identical rows, filled column by column, and the keys and values are copied
in one ``bytes.join`` and one array assignment each, into a per-thread scratch buffer that
the caller completes with the batch header. Anything else returns None: records
without headers go on to the varied encoder (:mod:`.varied_encode`, values and keys
of many lengths), the rest to the reference loop; all three produce the same bytes
(tests compare them).

Timestamp deltas of 2 and 3 varint bytes matter: a producer that falls behind
(a loaded machine, a slow broker) coalesces requests spanning more than 64 ms,
and sending those through the loop made it fall further behind (1.2M -> 0.35M
records/s on a busy 2-core VM).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from .varint import zigzag

_NULL = b"\x01"  # zigzag(-1): a null key

__all__ = [
    "MIN_RECORDS",
    "THREE_BYTES",
    "delta_runs",
    "encode_uniform_columns",
    "encode_uniform_records",
    "encode_uniform_values",
    "int64_stamps",
    "offset_varints",
    "put_varints",
    "record_columns",
]

#: Below this many records the numpy set-up costs more than the loop saves.
MIN_RECORDS = 32
# Timestamp deltas below this take at most three varint bytes (zigzag < 2**21): about 17 minutes.
THREE_BYTES = 1 << 20
# More runs than this (timestamps whose varint width goes up and down): the loop is as quick.
_MAX_RUNS = 64
_FIELDS = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


def record_columns(records: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(key, value, timestamp, headers) tuples as four lists: keys, values, timestamps, headers."""
    keys, values, stamps, headers = (list(map(field, records)) for field in _FIELDS)
    return keys, values, stamps, headers


def encode_uniform_records(records: Sequence[Any]) -> tuple[bytes, int, int] | None:
    """(records section, base timestamp, max timestamp), or None when the records are not uniform."""
    if len(records) < MIN_RECORDS:
        return None
    encoded = encode_uniform_columns(*record_columns(records))
    return None if encoded is None else (encoded[0].tobytes(), encoded[1], encoded[2])


def encode_uniform_columns(
    keys: list[Any],
    values: list[Any],
    stamps: Sequence[Any],
    headers: list[Any],
    *,
    room: int = 0,
    stamps_per_ms: int = 1,
) -> tuple[memoryview, int, int] | None:
    """The uniform encoder over one list per record field; None when the records are not uniform.

    Returns (view, base timestamp, max timestamp). The records section starts
    ``room`` bytes into ``view`` (space for the caller's batch header), and the
    view is of this thread's scratch buffer: valid until the thread's next call.
    Writing into one reused buffer matters more than it seems: each fresh
    megabyte a batch passes through costs its page faults, which on a VM took
    more time than the encoding itself.
    """
    if len(values) < MIN_RECORDS or any(headers):
        return None
    null_keys = keys.count(None)
    if null_keys not in (0, len(values)):
        return None
    keyed = keys if null_keys == 0 else None
    return encode_uniform_values(values, stamps, keys=keyed, room=room, stamps_per_ms=stamps_per_ms)


def encode_uniform_values(
    values: list[Any],
    stamps: Sequence[Any],
    *,
    keys: list[Any] | None = None,
    room: int = 0,
    stamps_per_ms: int = 1,
    value_lengths: list[int] | None = None,
) -> tuple[memoryview, int, int] | None:
    """:func:`encode_uniform_columns` for records known to have no headers.

    ``keys``: None when every key is null, else one key per record, all of one
    length (keyed records: the key is one more fixed-width column of the rows).
    ``value_lengths``: ``len()`` of each value, when the caller has them.
    """
    count = len(values)
    if count < MIN_RECORDS:
        return None
    value_rows = _fixed_width_rows(values, count, value_lengths)
    if value_rows is None:
        return None
    value_length = zigzag(value_rows.shape[1])
    # What follows each record's deltas: constant bytes and per-record columns (adjacent
    # constants are one segment: each segment is one pass over the rows).
    if keys is None:
        segments = [_constant(_NULL + value_length), value_rows]
    else:
        key_rows = _fixed_width_rows(keys, count)
        if key_rows is None:
            return None
        segments = [_constant(zigzag(key_rows.shape[1])), key_rows, _constant(value_length), value_rows]
    # Finer stamps (the producer's nanoseconds) come from a caller that checked them: no guard.
    stamp_array = int64_stamps(stamps, guarded=stamps_per_ms == 1)
    if stamp_array is None:
        return None
    if stamps_per_ms != 1:  # floored to milliseconds
        stamp_array //= stamps_per_ms
    base = int(stamp_array[0])
    deltas = stamp_array - base
    if int(deltas.min()) < 0 or int(deltas.max()) >= THREE_BYTES:
        return None  # (a negative delta, or one of four varint bytes: the loop)
    max_delta = int(deltas.max())
    runs = delta_runs(deltas, count, max_delta)
    if runs is None:
        return None
    tail = sum(segment.shape[-1] for segment in segments)
    placed: list[tuple[int, int, int, int, int]] = []  # (first, stop, ts width, offset width, position)
    end = room
    for first, stop, ts_width, offset_width in runs:
        placed.append((first, stop, ts_width, offset_width, end))
        end += (stop - first) * _row_size(ts_width + offset_width, tail)
    buffer = _scratch(end)
    for first, stop, ts_width, offset_width, at in placed:
        _run(buffer, at, first, stop, ts_width, offset_width, deltas[first:stop], segments, tail)
    return buffer.data[:end], base, base + max_delta


def _constant(data: bytes) -> Any:
    """Bytes every record has at the same place, as a row segment."""
    return np.frombuffer(data, np.uint8)


def _fixed_width_rows(items: list[Any], count: int, lengths: list[int] | None = None) -> Any:
    """``items`` (bytes-like, all one length) as a count x length array, or None if they are not
    (``lengths``: their ``len()``, when the caller has them)."""
    if lengths is None:
        try:
            lengths = list(map(len, items))  # and count(): 15 ns a record less than a set
        except TypeError:  # None, str, ...: the loop encodes or rejects them
            return None
    length = lengths[0]
    if lengths.count(length) != count:
        return None  # (before joining: varied lengths go on to the varied encoder)
    try:
        joined = b"".join(items)  # bytearray/memoryview items join as their bytes, as the loop encodes them
    except TypeError:
        return None
    if len(joined) != count * length:  # memoryviews whose len() is not their size in bytes
        return None
    return np.frombuffer(joined, np.uint8).reshape(count, length)


def int64_stamps(stamps: Sequence[Any], *, guarded: bool = True) -> Any:
    """``stamps`` as an int64 array, or None unless every one is an int (bools count) within int64.

    ``np.array(stamps, dtype=np.int64)`` takes half the time of letting numpy find the type
    (0.33 against 0.75 ms for 9,000 stamps) but would truncate floats and parse strings:
    their sum's type says whether any stamp is not an int, at a tenth of that cost (but 0.39
    ms for nanosecond stamps, beyond a machine word: ``guarded=False`` for stamps the caller
    has checked, the producer's).
    """
    if isinstance(stamps, array) and stamps.typecode == "q":
        return np.array(stamps, dtype=np.int64)  # a copy: the caller may scale it in place
    if not guarded:
        try:
            return np.array(stamps, dtype=np.int64)
        except (OverflowError, TypeError, ValueError):
            return None
    try:
        total = sum(stamps)
        if total.__class__ is not int:
            return None
        words = np.array(stamps, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        return None
    # numpy's sum wraps modulo 2**64 (nanosecond stamps overflow it); the comparison still
    # catches a stamp that did not convert exactly.
    return words if (int(words.sum()) - total) % (1 << 64) == 0 else None


def _varint_widths(zigzagged: Any) -> Any:
    """Varint byte count (1-3) of each non-negative value below 2**21."""
    return 1 + (zigzagged >= 1 << 7).astype(np.int8) + (zigzagged >= 1 << 14).astype(np.int8)


def delta_runs(deltas: Any, count: int, max_delta: int) -> list[tuple[int, int, int, int]] | None:
    """Split records into runs of equal timestamp- and offset-delta varint widths, or None if too many.

    Offset deltas widen at 64, 8192 and 2**20 records; timestamp deltas wherever their
    varint width changes (once or twice for a clock that only moves forward; never when
    every delta is below 64 ms, the common case, which skips the search).
    """
    cuts = {0, count}
    if max_delta < 64:
        ts_widths = None
    else:
        ts_widths = _varint_widths(deltas * 2)
        cuts.update(int(i) + 1 for i in np.flatnonzero(np.diff(ts_widths)))
    cuts.update(edge for edge in (64, 8192, 1 << 20) if edge < count)
    if len(cuts) > _MAX_RUNS + 1:
        return None
    edges = sorted(cuts)
    runs = []
    for first, stop in zip(edges, edges[1:], strict=False):
        offset_width = 1 + (first >= 64) + (first >= 8192) + (first >= 1 << 20)
        runs.append((first, stop, 1 if ts_widths is None else int(ts_widths[first]), offset_width))
    return runs


def offset_varints(stop: int) -> np.ndarray[Any, Any]:
    """Row i: the varint bytes of offset delta i (zigzag 2i), for i below at least ``stop``.

    Offset deltas are the same in every batch: one table (grown by doubling) replaces
    three array operations per varint byte in each run.
    """
    table = _offset_table.table
    if len(table) < stop:
        size = max(stop, 2 * len(table), 1024)
        zigzagged = np.arange(size, dtype=np.int64) * 2
        table = np.empty((size, 3), np.uint8)
        for i in range(3):
            byte = (zigzagged >> (7 * i)) & 0x7F
            more = zigzagged >= 1 << (7 * (i + 1))  # another byte follows
            table[:, i] = np.where(more, byte | 0x80, byte)
        _offset_table.table = table
    return table


class _OffsetTable:
    table: np.ndarray[Any, Any] = np.empty((0, 3), np.uint8)


_offset_table = _OffsetTable()  # replaced whole, never resized in place: safe for threads


class _Scratch(threading.local):
    buffer: np.ndarray[Any, Any] = np.empty(0, np.uint8)


_scratch_space = _Scratch()


def _scratch(size: int) -> np.ndarray[Any, Any]:
    """This thread's scratch buffer, at least ``size`` bytes (replaced, never resized: old views stay valid)."""
    buffer = _scratch_space.buffer
    if len(buffer) < size:
        buffer = _scratch_space.buffer = np.empty(max(size, 2 * len(buffer)), np.uint8)
    return buffer


def _row_size(delta_bytes: int, tail: int) -> int:
    body = 2 + delta_bytes + tail  # attributes, deltas, key and value with their lengths, header count
    return len(zigzag(body)) + body


def put_varints(rows: Any, at: int, zigzagged: Any, width: int) -> None:
    """Write ``zigzagged`` (each ``width`` varint bytes long) into columns ``at`` onwards."""
    for i in range(width):
        byte = (zigzagged >> (7 * i)) & 0x7F
        rows[:, at + i] = byte | 0x80 if i < width - 1 else byte


def _run(
    buffer: Any,
    at: int,
    first: int,
    stop: int,
    ts_width: int,
    offset_width: int,
    deltas: Any,
    segments: list[Any],
    tail: int,
) -> None:
    """Write records ``first`` to ``stop`` - 1 (their deltas of the given varint widths) at ``buffer[at:]``.

    ``tail``: the bytes of ``segments`` in a row (the caller sized the rows with it).
    """
    body = 2 + ts_width + offset_width + tail
    head = np.frombuffer(zigzag(body) + b"\x00", np.uint8)  # the length, then attributes 0
    row = len(head) - 1 + body
    rows = buffer[at : at + (stop - first) * row].reshape(stop - first, row)
    col = len(head)
    rows[:, :col] = head
    if ts_width == 1:  # zigzag of a delta below 64: its one varint byte
        rows[:, col] = deltas * 2
    else:
        put_varints(rows, col, deltas * 2, ts_width)
    at = col + ts_width
    rows[:, at : at + offset_width] = offset_varints(stop)[first:stop, :offset_width]
    at += offset_width
    for segment in segments:
        width = segment.shape[-1]
        rows[:, at : at + width] = segment if segment.ndim == 1 else segment[first:stop]
        at += width
    rows[:, -1] = 0  # no headers
