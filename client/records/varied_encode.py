"""Records sections of records whose keys and values vary in length, built by numpy.

The uniform encoder (:mod:`.fastencode`) takes records whose values (and keys) are
all of one length. Real payloads (JSON, Avro, protobuf) vary from record to
record, and the reference loop in :mod:`.encoder` spends about 1.7 us a record on
them: a producer of such records ran at half librdkafka's rate on a 2-core VM.
Each record is::

    length | 0 | timestampDelta | offsetDelta | keyLength | key | valueLength | value | 0

Everything between one record's value and the next one's (the previous record's
headerCount, the length varint, attributes, the deltas, the key length, and the key
and the value length when every key has one length) is one row of a numpy matrix:

- the rows are written column by column over each run of records whose timestamp and
  offset deltas have one varint width (as the uniform encoder's), as if every length
  varint were as narrow as the narrowest, then shifted right where it is wider (each
  row read as a little-endian integer of 64-bit lanes: the shift is a bit shift);
- one ``tolist()`` of the matrix viewed as fixed-width byte strings makes the rows bytes
  objects, dropping each row's zero padding (the few rows whose last byte is a real
  zero, an empty value or key, get it back);
- one ``bytes.join`` interleaves the rows with the values (and, for keys of several
  lengths, with the keys and the value lengths, from the shared small-varint table).

Records with headers, timestamps before the batch's first or more than about 17
minutes after it, or keys and values of 32 KiB or more return None, and the caller
runs the reference loop, which produces the same bytes (tests compare them).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from .fastencode import THREE_BYTES, delta_runs, int64_stamps, offset_varints, put_varints
from .varint import SMALL, SMALL_LIMIT

__all__ = ["VARIED_MIN_RECORDS", "encode_varied_values"]

#: Below this many records the numpy set-up costs more than the loop saves.
VARIED_MIN_RECORDS = 224
_NULL = b"\x01"  # zigzag(-1): the length of a null key or value
_NULL_LENGTH = -1
_NOT_BYTES = -2  # an item without a length: the loop refuses it
# Keys of one length up to this many bytes go in the rows with the bytes around them.
_MAX_KEY_COLUMNS = 64


def encode_varied_values(
    values: list[Any],
    stamps: Sequence[Any],
    *,
    keys: list[Any] | None = None,
    stamps_per_ms: int = 1,
    value_lengths: list[int] | None = None,
) -> tuple[bytes, int, int] | None:
    """(records section, base timestamp, max timestamp) of records without headers, or None.

    ``values`` and ``keys`` (None: every key is null) hold bytes-like objects or
    None (a null); ``stamps`` are ints, ``stamps_per_ms`` to the millisecond (the
    producer's nanoseconds come from a caller that checked them). ``value_lengths``:
    ``len()`` of each value, when the caller has them (then no value is None).
    """
    count = len(values)
    if sys.byteorder != "little":  # rows are shifted as little-endian integers (_record_heads)
        return None
    value_pieces: list[Any] = values
    if value_lengths is None:
        value_lengths, value_pieces = _lengths_and_pieces(values)
        if value_lengths is None:
            return None
    key_lengths: list[int] | None = None
    key_pieces: list[Any] = []
    if keys is not None:
        key_lengths, key_pieces = _lengths_and_pieces(keys)
        if key_lengths is None:
            return None
    stamp_array = int64_stamps(stamps, guarded=stamps_per_ms == 1)
    if stamp_array is None:
        return None
    if stamps_per_ms != 1:
        stamp_array //= stamps_per_ms
    base = int(stamp_array[0])
    deltas = stamp_array - base
    max_delta = int(deltas.max())
    if int(deltas.min()) < 0 or max_delta >= THREE_BYTES:
        return None
    runs = delta_runs(deltas, count, max_delta)
    if runs is None:
        return None
    vl = np.array(value_lengths, dtype=np.int64)
    if int(vl.max()) >= SMALL_LIMIT:
        return None  # (records of 32 KiB and more: the loop's cost per byte is small)
    kl = key_rows = None
    if key_lengths is not None:
        key_width = key_lengths[0]
        if 0 <= key_width <= _MAX_KEY_COLUMNS and key_lengths.count(key_width) == count:
            # Keys of one length go in the rows: one piece a record fewer to join.
            try:
                key_rows = np.frombuffer(b"".join(key_pieces), np.uint8).reshape(count, key_width)
            except (TypeError, ValueError):  # text, or memoryviews of wider items: the loop decides
                return None
        else:
            kl = np.array(key_lengths, dtype=np.int64)
            if int(kl.max()) >= SMALL_LIMIT:
                return None
    heads, records_size = _record_heads(runs, deltas, vl, kl, key_rows)
    if kl is None:
        pieces: list[Any] = [None] * (2 * count)
        pieces[0::2] = heads
        pieces[1::2] = value_pieces
    else:  # keys of several lengths: the key and the value's length are pieces of their own
        pieces = [None] * (4 * count)
        pieces[0::4] = heads
        pieces[1::4] = key_pieces
        pieces[2::4] = _small_codes(value_lengths, vl)
        pieces[3::4] = value_pieces
    pieces.append(b"\x00")  # the last record's headerCount
    try:
        data = b"".join(pieces)
    except TypeError:  # text, or another sized object that is not bytes-like: the loop refuses it
        return None
    if len(data) != records_size:  # a memoryview whose len() is not its size in bytes: the loop decides
        return None
    return data, base, base + max_delta


def _record_heads(
    runs: list[tuple[int, int, int, int]], deltas: Any, vl: Any, kl: Any | None, key_rows: Any | None
) -> tuple[list[bytes], int]:
    """Per record, the bytes from the previous record's headerCount up to its value (or, for
    keys of several lengths ``kl``, up to its key); and the size of the records section.
    ``key_rows``: keys of one length, as rows; neither: every key is null."""
    count = len(vl)
    value_varints, value_widths = _length_varints(vl)
    body = 2 + value_widths + np.maximum(vl, 0)  # (attributes, the value, headerCount)
    key_width = 0 if key_rows is None else key_rows.shape[1]
    key_length = SMALL[key_width]
    if kl is not None:  # the row ends with the key's length
        last, last_widths = _length_varints(kl)
        body += last_widths + np.maximum(kl, 0)
    else:
        last, last_widths = value_varints, value_widths
        body += 1 if key_rows is None else len(key_length) + key_width
    for first, stop, ts_width, offset_width in runs:
        body[first:stop] += ts_width + offset_width
    length_varints, length_widths = _length_varints(body)
    narrowest = int(length_widths.min())
    last_bytes = last.view(np.uint8).reshape(count, 4)
    # A row: the previous headerCount (0), the length varint (1-3 bytes), attributes (0),
    # the deltas, the key length (and the key and the value length, unless keys vary in
    # length) up to the last length varint. Written as if every length varint were as
    # narrow as the narrowest, then shifted right where it is wider.
    row_width = -(-(_ROW + key_width) // 8) * 8  # whole uint64 lanes
    rows = np.zeros((count, row_width), np.uint8)
    ends = np.empty(count, np.int64)
    for first, stop, ts_width, offset_width in runs:
        run = rows[first:stop]
        at = 2 + narrowest
        put_varints(run, at, deltas[first:stop] * 2, ts_width)
        at += ts_width
        run[:, at : at + offset_width] = offset_varints(stop)[first:stop, :offset_width]
        at += offset_width
        if kl is None and key_rows is None:
            run[:, at] = 1  # a null key
            at += 1
        elif key_rows is not None:
            run[:, at : at + len(key_length)] = np.frombuffer(key_length, np.uint8)
            at += len(key_length)
            run[:, at : at + key_width] = key_rows[first:stop]
            at += key_width
        run[:, at : at + 3] = last_bytes[first:stop, :3]
        ends[first:stop] = at + last_widths[first:stop]
    if int(length_widths.max()) > narrowest:
        _shift_right(rows, length_widths - narrowest)
        ends += length_widths - narrowest
    rows.view(np.uint64)[:, 0] |= length_varints.astype(np.uint64) << np.uint64(8)
    heads: list[bytes] = rows.view(f"S{row_width}").reshape(-1).tolist()
    # tolist() dropped trailing zeros: a row whose last length is 0 (its varint is 0x00)
    # gets them back.
    for index in np.flatnonzero((vl if kl is None else kl) == 0).tolist():
        heads[index] = rows[index, : ends[index]].tobytes()
    heads[0] = heads[0][1:]  # no record before the first
    return heads, int((length_widths + body).sum())


def _shift_right(rows: Any, columns: Any) -> None:
    """Move each row's bytes right by its ``columns`` (0-2; the row's last bytes are zeros).

    A row is a little-endian number of 64-bit lanes: moving its bytes right by k columns
    is a shift left by 8k bits, carrying between lanes.
    """
    lanes = rows.view(np.uint64)
    bits = (columns.astype(np.uint64) * np.uint64(8))[:, None]
    carried = (lanes[:, :-1] >> (np.uint64(63) - bits)) >> np.uint64(1)
    lanes <<= bits
    lanes[:, 1:] |= carried


# Row bytes besides a key: headerCount, length (3), attributes, deltas (3 + 3), key length
# (3, or a null key's 1) and value length (3): at most 16.
_ROW = 16


def _length_varints(lengths: Any) -> tuple[Any, Any]:
    """The zigzag varint of each length (-1: null; all below LENGTHS_LIMIT) as the little-endian
    uint32 of its bytes, and its width: looked up, a seventh of the arithmetic's time."""
    index = lengths + 1
    return _length_table.varints[index], _length_table.widths[index]


#: Lengths the varint table covers: a record's body is at most two lengths below SMALL_LIMIT and a few bytes.
LENGTHS_LIMIT = 4 * SMALL_LIMIT


class _LengthTable:
    """Entry ``n + 1``: the zigzag varint of length ``n`` (-1 <= n < LENGTHS_LIMIT); built on first use."""

    def __init__(self) -> None:
        self._varints: Any = None
        self._widths: Any = None

    @property
    def varints(self) -> Any:
        if self._varints is None:
            self._build()
        return self._varints

    @property
    def widths(self) -> Any:
        if self._widths is None:
            self._build()
        return self._widths

    def _build(self) -> None:
        zigzagged = np.arange(-1, LENGTHS_LIMIT, dtype=np.int64) * 2
        zigzagged[0] = 1  # -1: a null
        widths = 1 + (zigzagged >= 1 << 7).astype(np.int64) + (zigzagged >= 1 << 14)
        varints = (
            ((zigzagged & 0x7F) | ((widths > 1) << 7))
            | ((((zigzagged >> 7) & 0x7F) | ((widths > 2) << 7)) << 8)
            | ((zigzagged >> 14) << 16)
        ).astype("<u4")
        self._widths = widths  # (set first: a thread that sees the varints sees both)
        self._varints = varints


_length_table = _LengthTable()


def _lengths_and_pieces(items: list[Any]) -> tuple[list[int] | None, list[Any]]:
    """Each item's length (-1 for None) and the items with None as b"", or (None, []) when
    an item has no length (the loop refuses it). A bytes-like whose len() is not its size
    in bytes (a memoryview of wider items) is caught by the caller's total."""
    try:
        return list(map(len, items)), items
    except TypeError:  # None among them (a null), or something the loop must refuse
        pass
    lengths = [_NULL_LENGTH if item is None else _len(item) for item in items]
    if _NOT_BYTES in lengths:
        return None, []
    return lengths, [b"" if item is None else item for item in items]


def _len(item: Any) -> int:
    try:
        return len(item)
    except TypeError:
        return _NOT_BYTES


def _small_codes(lengths: list[int], array: Any) -> list[bytes] | tuple[bytes, ...]:
    """The length varint of each item (-1: null), all below SMALL_LIMIT; ``array``: the lengths."""
    if int(array.min()) >= 0:
        return itemgetter(*lengths)(SMALL) if len(lengths) > 1 else [SMALL[lengths[0]]]  # type: ignore[no-any-return]
    return [_NULL if length < 0 else SMALL[length] for length in lengths]
