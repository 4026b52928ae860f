"""Vectorised record decoding with numpy: the fast path of :mod:`.decoder`.

The pure-Python record loop costs about 2 us per record, nearly all of it in
byte indexing. Here only the record *starts* are found sequentially (and for
sections whose records all have the same length not even that: the guessed
layout is verified in one numpy pass); every field of every record is then
decoded at once with numpy over the start positions, and the Python objects
are built in C-level loops (``map``/``zip``/slicing), down to about 0.6 us
per record.

Exactness: a section is accepted only when every record's fields end exactly
where the next record starts (the last one at the section end), so the
sequential reference loop would visit the very same positions and return the
very same records. Anything else (a varint longer than four bytes, a negative
length other than -1, a corrupt layout, offsets near the int64 limits) makes
:func:`decode_sections` return None, and the caller runs the reference loop,
which decodes the odd input or raises the right CorruptRecordError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain, pairwise, repeat
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
from kafkakit.errors import CorruptRecordError
from kafkakit.structs import ConsumerRecord, Header

from .varint import read_uvarint

__all__ = ["MIN_RECORDS", "Section", "decode_sections", "decode_sections_in_ranges"]

if TYPE_CHECKING:  # numpy.typing costs 28 ms to import; only the type checker needs it
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]
    ByteArray = npt.NDArray[np.uint8]

#: Below this many records numpy's fixed cost per call (about 75 us here: array set-up, a dozen
#: reductions) outweighs what it saves over the reference loop (0.55-0.65 us a record). Measured
#: 2026-11-25 on the 2-core VM, one batch of N records, vectorised / loop time: 128 records
#: 1.45-1.7x slower, 192 about even, 256 0.7-0.9x (faster for values of 100 B and more),
#: 320 0.75-0.99x. At 24 (the old value) a 20-to-30-record batch cost 80 us instead of 17-23 us,
#: which made consuming 10,000 partitions of 20 records each several times slower.
MIN_RECORDS = 256
# Varints longer than this go to the reference loop (4 bytes cover +-2**27).
_MAX_VARINT_BYTES = 4
# Base offsets/timestamps beyond this could overflow int64 when a delta is added.
_SAFE_BASE = 1 << 62
_NO_HEADERS: tuple[Header, ...] = ()
# A run of equally long records shorter than this switches a section to walking record by record.
_MIN_RUN = 16

#: Parses a record's header count and headers at a position: (headers, position after them).
HeaderReader = Callable[[bytes, int], tuple[list[Header], int]]


class Section(NamedTuple):
    """The records section of one batch: ``data[start:end]`` holds ``record_count`` records."""

    data: bytes
    start: int
    end: int
    record_count: int
    base_offset: int
    base_timestamp: int
    #: The batch's max timestamp when it is LogAppendTime (every record gets it), else None.
    log_append_time: int | None


def decode_sections(
    sections: Sequence[Section], topic: str, partition: int, min_offset: int, read_headers: HeaderReader
) -> list[ConsumerRecord[Any, Any]] | None:
    """The records of ``sections`` with offset >= ``min_offset``, or None when the fast path does not apply.

    ``read_headers`` parses the headers of the (few) records that have any.
    """
    if not sections:
        return []
    decoded = decode_columns(sections, read_headers)
    if decoded is None:
        return None
    data, _arr, columns = decoded
    if min_offset > min(s.base_offset for s in sections):  # a fetch may start in the middle of a batch
        columns = _keep_from(columns, min_offset)
    return _build(data, columns, topic, partition)


def decode_sections_in_ranges(
    sections: Sequence[Section],
    topic: str,
    partition: int,
    ranges: Sequence[tuple[int, int]],
    read_headers: HeaderReader,
) -> list[ConsumerRecord[Any, Any]] | None:
    """The records of ``sections`` whose offsets fall in ``ranges`` (sorted, disjoint, inclusive
    ``(first, last)`` pairs), or None when the fast path does not apply.

    Every record is parsed into the columns (cheap, vectorised) but Python objects are built
    for the wanted ones only: a share-group member acquires part of the batches it is sent.
    """
    if not sections or not ranges:
        return []
    decoded = decode_columns(sections, read_headers)
    if decoded is None:
        return None
    data, _arr, columns = decoded
    offsets = columns.offsets
    firsts = np.array([first for first, _ in ranges], np.int64)
    lasts = np.array([last for _, last in ranges], np.int64)
    inside = np.searchsorted(firsts, offsets, side="right") - 1  # the range starting at or before each
    keep = (inside >= 0) & (offsets <= lasts[np.maximum(inside, 0)])
    return _build(data, _keep(columns, keep), topic, partition)


def decode_columns(
    sections: Sequence[Section], read_headers: HeaderReader
) -> tuple[bytes, ByteArray, RecordColumns] | None:
    """Every record of ``sections`` as numpy columns over one buffer, or None when the fast path declines.

    For column-oriented consumers (the Spark source builds Arrow arrays from
    these): key/value starts and sizes index into the returned buffer, -1 size is null.
    """
    if not sections:
        return None
    if any(abs(s.base_offset) > _SAFE_BASE or abs(s.base_timestamp) > _SAFE_BASE for s in sections):
        return None
    data, sections = _one_buffer(sections)
    arr: ByteArray = np.frombuffer(data, np.uint8)
    starts: list[IntArray] = []
    for section in sections:
        found = _record_starts(data, arr, section)
        if found is None:
            return None
        starts.append(found)
    columns = _parse(data, arr, sections, starts, read_headers)
    return None if columns is None else (data, arr, columns)


def _one_buffer(sections: Sequence[Section]) -> tuple[bytes, Sequence[Section]]:
    """All sections inside one bytes object (joined when they come from several, e.g. decompressed)."""
    data = sections[0].data
    if all(s.data is data for s in sections):
        return data, sections
    joined: list[bytes] = []
    moved: list[Section] = []
    pos = 0
    for s in sections:
        size = s.end - s.start
        joined.append(s.data[s.start : s.end])
        moved.append(s._replace(start=pos, end=pos + size))
        pos += size
    data = b"".join(joined)
    return data, [s._replace(data=data) for s in moved]


def _record_starts(data: bytes, arr: ByteArray, section: Section) -> IntArray | None:
    """Start positions of the section's records, from their length varints; None if they do not tile it."""
    p, end, count = section.start, section.end, section.record_count
    if count <= 0:
        return np.empty(0, np.int64) if count == 0 and p == end else None
    if p >= end:
        return None
    found: list[IntArray] = []
    while count:
        if p >= end:
            return None
        run = _same_length_run(data, arr, p, end, count)
        if run is None:
            return None
        starts, p = run
        if len(starts) < _MIN_RUN:  # lengths vary record to record: guessing does not pay
            rest = _walk_starts(data, starts[0], end, count)
            if rest is None:
                return None
            found.append(rest)
            break
        found.append(starts)
        count -= len(starts)
    else:
        if p != end:
            return None
    return np.concatenate(found) if len(found) > 1 else found[0]


def _same_length_run(data: bytes, arr: ByteArray, p: int, end: int, count: int) -> tuple[IntArray, int] | None:
    """Starts of the records from ``p`` on as long as the one at ``p``, and the position after them.

    Guesses that the next ``count`` records are all equally long and keeps the
    prefix of guesses that hold the same length varint: each of those is a
    real start because its predecessor is one. Lengths change rarely in
    practice (e.g. when offset deltas grow from one byte to two at 64).
    """
    try:
        raw, body = read_uvarint(data, p)
    except CorruptRecordError:
        return None
    if raw & 1:
        return None
    step = body - p + (raw >> 1)
    guess: IntArray = np.arange(p, min(end, p + step * count), step, dtype=np.int64)
    same = arr[guess] == arr[p]
    for i in range(1, body - p):
        same &= arr.take(guess + i, mode="clip") == arr[p + i]
    taken = len(guess) if same.all() else int(np.argmin(same))
    return guess[:taken], p + taken * step


def _walk_starts(data: bytes, p: int, end: int, count: int) -> IntArray | None:
    """Record starts found one by one (only the length varint is read per record).

    Nothing is validated here but termination (every step moves forward, so an
    absurd count ends in IndexError): the field decoding checks that each
    record's fields end exactly at the next start.
    """
    out: list[int] = []
    append = out.append
    try:
        for _ in range(count):
            append(p)
            u = data[p]
            if u < 128:
                p += (u >> 1) + 1
            elif data[p + 1] < 128:
                p += (((u & 127) | (data[p + 1] << 7)) >> 1) + 2
            else:
                u, p = read_uvarint(data, p)
                p += u >> 1
    except (IndexError, CorruptRecordError):
        return None
    if p != end:
        return None
    return np.array(out, dtype=np.int64)


def _uvarints(arr: ByteArray, at: IntArray) -> tuple[IntArray, IntArray] | None:
    """Unsigned varints at every position of ``at``: (values, positions after them); None if one is too long.

    Reads past the buffer are clipped rather than raised: a record whose fields
    run past its end fails the final layout check anyway.
    """
    b = arr.take(at, mode="clip")
    if not len(b) or int(b.max()) < 128:
        return b.astype(np.int64), at + 1
    value = (b & 127).astype(np.int64)
    more = b >= 128
    size = np.ones(len(at), np.int64)
    for i in range(1, _MAX_VARINT_BYTES):
        b = arr.take(at + i, mode="clip")
        value |= np.where(more, (b & 127).astype(np.int64) << (7 * i), 0)
        size += more
        more &= b >= 128
        if not more.any():
            return value, at + size
    return None


def _zigzag(raw: IntArray) -> IntArray:
    return cast("IntArray", (raw >> 1) ^ -(raw & 1))


class RecordColumns(NamedTuple):
    """Every record's decoded fields (numpy columns) and its headers."""

    offsets: IntArray
    timestamps: IntArray
    timestamp_types: IntArray
    key_starts: IntArray
    key_sizes: IntArray
    value_starts: IntArray
    value_sizes: IntArray
    headers: list[tuple[Header, ...]] | None


def _parse(
    data: bytes, arr: ByteArray, sections: Sequence[Section], starts: list[IntArray], read_headers: HeaderReader
) -> RecordColumns | None:
    counts = [s.record_count for s in sections]
    at = np.concatenate(starts) if len(starts) > 1 else starts[0]
    ends = np.concatenate([np.append(s[1:], sec.end) for s, sec in zip(starts, sections, strict=True)])
    step = _uvarints(arr, at)  # record length: the starts already encode it
    if step is None:
        return None
    at = step[1] + 1  # attributes: unused (as in the reference loop)
    step = _uvarints(arr, at)
    if step is None:
        return None
    timestamp_deltas, at = _zigzag(step[0]), step[1]
    step = _uvarints(arr, at)
    if step is None:
        return None
    offset_deltas, at = _zigzag(step[0]), step[1]
    step = _uvarints(arr, at)
    if step is None:
        return None
    key_sizes, key_starts = _zigzag(step[0]), step[1]
    step = _uvarints(arr, key_starts + np.maximum(key_sizes, 0))
    if step is None:
        return None
    value_sizes, value_starts = _zigzag(step[0]), step[1]
    if int(key_sizes.min()) < -1 or int(value_sizes.min()) < -1:
        return None
    header_at = value_starts + np.maximum(value_sizes, 0)
    header_counts = arr.take(header_at, mode="clip")
    after = header_at + 1
    headers: list[tuple[Header, ...]] | None = None
    with_headers = np.flatnonzero(header_counts)
    if len(with_headers):
        headers = _read_some_headers(read_headers, data, header_at, with_headers, ends, len(at))
        if headers is None:
            return None
        after[with_headers] = ends[with_headers]  # _read_some_headers checked they end there
    if not np.array_equal(after, ends):
        return None
    offsets = np.repeat(np.array([s.base_offset for s in sections], np.int64), counts) + offset_deltas
    timestamps = np.repeat(np.array([s.base_timestamp for s in sections], np.int64), counts) + timestamp_deltas
    log_append = [s.log_append_time for s in sections]
    timestamp_types = np.zeros(len(at), np.int64)
    if any(t is not None for t in log_append):
        fixed = np.repeat(np.array([-1 if t is None else 1 for t in log_append], np.int64), counts)
        max_timestamps = np.repeat(np.array([t or 0 for t in log_append], np.int64), counts)
        timestamp_types = (fixed > 0).astype(np.int64)
        timestamps = np.where(fixed > 0, max_timestamps, timestamps)
    return RecordColumns(offsets, timestamps, timestamp_types, key_starts, key_sizes, value_starts, value_sizes, headers)


def _read_some_headers(
    read_headers: HeaderReader,
    data: bytes, header_at: IntArray, which: IntArray, ends: IntArray, count: int
) -> list[tuple[Header, ...]] | None:
    """Headers of the records ``which`` (the rest get none); None unless each ends exactly at its record's end."""
    headers: list[tuple[Header, ...]] = [_NO_HEADERS] * count
    for i, pos, end in zip(which.tolist(), header_at[which].tolist(), ends[which].tolist(), strict=True):
        try:
            parsed, after = read_headers(data, pos)
        except (IndexError, CorruptRecordError):
            return None
        if after != end:
            return None
        headers[i] = tuple(parsed)
    return headers


def _keep_from(fields: RecordColumns, min_offset: int) -> RecordColumns:
    return _keep(fields, fields.offsets >= min_offset)


def _keep(fields: RecordColumns, keep: Any) -> RecordColumns:
    """The records where the boolean array ``keep`` is true."""
    if keep.all():
        return fields
    index = np.flatnonzero(keep)
    headers = fields.headers
    if headers is not None:
        headers = [headers[i] for i in index.tolist()]
    return RecordColumns(
        fields.offsets[index],
        fields.timestamps[index],
        fields.timestamp_types[index],
        fields.key_starts[index],
        fields.key_sizes[index],
        fields.value_starts[index],
        fields.value_sizes[index],
        headers,
    )


def _build(data: bytes, fields: RecordColumns, topic: str, partition: int) -> list[ConsumerRecord[Any, Any]]:
    """ConsumerRecords from the decoded columns, built in C-level loops.

    ``map(tuple.__new__, repeat(ConsumerRecord), rows)`` is the cheapest way
    to make NamedTuple instances in bulk: no Python-level ``__new__`` and (unlike
    a ``partial``) no extra call layer per record.
    """
    keys, key_sizes = _payloads(data, fields.key_starts, fields.key_sizes)
    values, value_sizes = _payloads(data, fields.value_starts, fields.value_sizes)
    types = fields.timestamp_types
    timestamp_types: Iterable[int] = types.tolist() if types.any() else repeat(0)
    headers: Iterable[tuple[Header, ...]] = repeat(_NO_HEADERS) if fields.headers is None else fields.headers
    rows = zip(
        repeat(topic),
        repeat(partition),
        fields.offsets.tolist(),
        _shared_ints(fields.timestamps),
        timestamp_types,
        keys,
        values,
        headers,
        key_sizes,
        value_sizes,
    )
    return cast(list[ConsumerRecord[Any, Any]], list(map(tuple.__new__, repeat(ConsumerRecord), rows)))


def _shared_ints(values: IntArray) -> Iterable[int]:
    """``values.tolist()``, but runs of equal values share one int object (timestamps: one per millisecond).

    A producer batch usually spans a few milliseconds, so this allocates a
    handful of ints instead of one per record.
    """
    count = len(values)
    if count < 2:
        return cast(list[int], values.tolist())
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    if len(cuts) * 4 > count:  # mostly distinct: the plain conversion is cheaper
        return cast(list[int], values.tolist())
    bounds = np.concatenate(([0], cuts, [count]))
    return chain.from_iterable(map(repeat, values[bounds[:-1]].tolist(), np.diff(bounds).tolist()))


def _payloads(data: bytes, starts: IntArray, sizes: IntArray) -> tuple[Iterable[bytes | None], Iterable[int]]:
    """(keys or values, their serialized sizes) as bytes, None where the size is -1."""
    if not len(sizes):
        return [], []
    top = int(sizes.max())
    if top < 0:  # all null (e.g. no keys): nothing to slice
        return repeat(None), repeat(-1)
    if int(sizes.min()) == top:
        gathered = _same_size_payloads(data, starts, top)
        if gathered is not None:
            return gathered, repeat(top)
    size_list = sizes.tolist()
    out: list[bytes | None] = [data[a:b] for a, b in zip(starts.tolist(), (starts + sizes).tolist(), strict=True)]
    if int(sizes.min()) < 0:
        for i in np.flatnonzero(sizes < 0).tolist():
            out[i] = None
    return out, size_list


def _same_size_payloads(data: bytes, starts: IntArray, size: int) -> Iterable[bytes] | None:
    """Payloads that all have ``size`` bytes, copied out by numpy; None when their layout is too irregular.

    Records of equal length lie at a constant stride, so a run of them is a
    strided view of ``data`` with a ``V<size>`` (raw bytes) dtype, and that
    view's ``tolist()`` makes every bytes object in one C loop: several times
    cheaper than slicing record by record. The stride changes where the record
    length does (e.g. when offset deltas grow a varint byte), so the records
    are split into runs of constant stride.
    """
    count = len(starts)
    if size == 0:
        return repeat(b"")
    if count < 2:
        return [data[int(s) : int(s) + size] for s in starts.tolist()]
    steps = np.diff(starts)
    cuts = (np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist()
    if len(cuts) * 16 > count:
        return None
    dtype = np.dtype(f"V{size}")
    bounds = [0, *cuts, count]
    if not cuts:  # one run (the common case): no list to merge into
        if int(steps[0]) < size:
            return None
        whole = np.ndarray((count,), dtype, buffer=data, offset=int(starts[0]), strides=(int(steps[0]),))
        return cast(list[bytes], whole.tolist())
    out: list[bytes] = []
    for first, stop in pairwise(bounds):
        stride = int(steps[first]) if stop - first > 1 else size
        if stride < size:  # overlapping payloads cannot happen in a valid layout
            return None
        view = np.ndarray((stop - first,), dtype, buffer=data, offset=int(starts[first]), strides=(stride,))
        out.extend(view.tolist())
    return out
