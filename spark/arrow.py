"""Kafka record batches straight to Arrow: the source's hot path.

A Fetch response's records are decoded column-wise: the record layout is
parsed with the consumer's vectorised decoder (:mod:`kafkakit.records.fastdecode`,
which finds every field of every record with numpy) and the Arrow buffers are
then filled from those positions, so no Python object is made per record (the
keys and values are copied out of the response with numpy, the offsets and
timestamps are numpy columns).  Inputs the fast path declines (an odd layout)
go through the reference decoder and are converted record by record.

Which batches are read follows the consumer (read_committed): control batches
are skipped, and the data batches of aborted transactions are dropped using
the Fetch response's aborted-transaction list.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from kafkakit.errors import CorruptRecordError
from kafkakit.records import BatchHeader, decode_batch_list, decompress, read_control_type, verify_crc
from kafkakit.records.decoder import read_headers
from kafkakit.records.fastdecode import Section, decode_columns
from kafkakit.records.header import CODEC_MASK, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK

IntArray = npt.NDArray[np.int64]

# Spark names list items "element" (to_arrow_schema), and the type must match exactly.
HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for the source's schema (types must match exactly)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def select_batches(
    data: bytes,
    batches: Sequence[tuple[int, BatchHeader]],
    aborted: list[tuple[int, int]] | None,
    start: int,
    end: int,
    *,
    check_crcs: bool,
    where: str,
) -> list[tuple[int, BatchHeader]]:
    """The data batches of ``data`` holding records in ``[start, end)`` that a reader may see.

    ``aborted`` is the sorted (producer id, first offset) list of a
    read_committed Fetch: a producer's batches are dropped from its aborted
    transaction's first offset until that transaction's ABORT marker, as the
    Java consumer does.
    """
    pending = deque(aborted or ())
    aborted_producers: set[int] = set()
    out: list[tuple[int, BatchHeader]] = []
    for pos, header in batches:
        last = header.base_offset + header.last_offset_delta
        while pending and pending[0][1] <= last:
            aborted_producers.add(pending.popleft()[0])
        if header.is_control:
            if header.producer_id in aborted_producers and read_control_type(data, pos, header) == 0:
                aborted_producers.discard(header.producer_id)
            continue
        if last < start or header.base_offset >= end:
            continue
        if header.is_transactional and header.producer_id in aborted_producers:
            continue
        if check_crcs and not verify_crc(data, pos, header):
            raise CorruptRecordError(f"CRC mismatch in the batch at offset {header.base_offset} of {where}")
        out.append((pos, header))
    return out


def to_record_batch(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch:
    """The records of ``batches`` (already selected) with offsets in ``[start, end)`` as Arrow."""
    sections = [_section(data, pos, header) for pos, header in batches]
    sections = [s for s in sections if s.record_count > 0]
    columns = _fast_columns(sections, topic, partition, start, end, include_headers) if sections else None
    if columns is None:
        columns = _slow_columns(data, batches, topic, partition, start, end, include_headers)
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _section(data: bytes, pos: int, header: BatchHeader) -> Section:
    first = pos + HEADER_SIZE
    stop = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & CODEC_MASK
    if codec:
        data = decompress(codec, data[first:stop])
        first, stop = 0, len(data)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return Section(
        data, first, stop, header.record_count, header.base_offset, header.base_timestamp, log_append_time
    )


def _fast_columns(
    sections: list[Section], topic: str, partition: int, start: int, end: int, include_headers: bool
) -> list[pa.Array] | None:
    """Columns decoded with numpy; None when the vectorised parser declines the input."""
    decoded = decode_columns(sections, read_headers)
    if decoded is None:
        return None
    data, arr, fields = decoded
    offsets = fields.offsets
    keep = (offsets >= start) & (offsets < end)
    index: IntArray | None = None if keep.all() else np.flatnonzero(keep)

    def pick(column: IntArray) -> IntArray:
        return column if index is None else column[index]

    offsets = pick(offsets)
    count = len(offsets)
    columns = [
        _binary(arr, pick(fields.key_starts), pick(fields.key_sizes)),
        _binary(arr, pick(fields.value_starts), pick(fields.value_sizes)),
        _repeated_string(topic, count),
        pa.array(np.full(count, partition, np.int32)),
        pa.array(offsets),
        pa.array(pick(fields.timestamps) * 1000, _TIMESTAMP),
        pa.array(pick(fields.timestamp_types).astype(np.int32)),
    ]
    if include_headers:
        headers = fields.headers
        if headers is not None and index is not None:
            headers = [headers[i] for i in index.tolist()]
        columns.append(_headers(headers, count))
    return columns


def _binary(arr: npt.NDArray[np.uint8], starts: IntArray, sizes: IntArray) -> pa.Array:
    """A binary column from payload positions in ``arr`` (size -1 = null), copied by numpy."""
    count = len(sizes)
    lengths = np.maximum(sizes, 0)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    payload = _gather(arr, starts, lengths, offsets, total)
    nulls = int(np.count_nonzero(sizes < 0))
    validity = None
    if nulls:
        validity = pa.py_buffer(np.packbits(sizes >= 0, bitorder="little"))
    if total >= 1 << 31:
        raise CorruptRecordError(f"{total} bytes of payload in one fetch exceed a binary column")
    return pa.Array.from_buffers(
        pa.binary(), count, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(payload)], nulls
    )


def _gather(
    arr: npt.NDArray[np.uint8], starts: IntArray, lengths: IntArray, offsets: IntArray, total: int
) -> npt.NDArray[np.uint8]:
    """The payloads back to back, copied by numpy.

    Equally long payloads lie at a constant stride within a run of equally
    long records (the stride changes where offset deltas grow a varint byte,
    or at a batch boundary), so each run is one strided copy.  Otherwise a
    byte mask of the payloads (runs of False/True of the gap and payload
    lengths) selects them in one pass.
    """
    if total == 0:
        return np.empty(0, np.uint8)
    count = len(lengths)
    size = int(lengths[0])
    if count > 1 and size > 0 and int(lengths.min()) == size == int(lengths.max()):
        copied = _strided_runs(arr, starts, size, count)
        if copied is not None:
            return copied
    present = np.flatnonzero(lengths)
    starts, lengths = starts[present], lengths[present]
    lo = int(starts[0])
    gaps = np.empty(len(starts), np.int64)
    gaps[0] = 0
    gaps[1:] = starts[1:] - (starts[:-1] + lengths[:-1])
    if int(gaps.min()) < 0:  # payloads out of order (cannot happen in a valid layout): gather byte by byte
        source = np.repeat(starts - offsets[:-1][present], lengths) + np.arange(total, dtype=np.int64)
        return arr[source]
    runs = np.empty(2 * len(starts), np.int64)
    runs[0::2] = gaps
    runs[1::2] = lengths
    mask: npt.NDArray[np.bool_] = np.repeat(np.tile(np.array([False, True]), len(starts)), runs)
    selected: npt.NDArray[np.uint8] = arr[lo : lo + len(mask)][mask]
    return selected


def _strided_runs(arr: npt.NDArray[np.uint8], starts: IntArray, size: int, count: int) -> npt.NDArray[np.uint8] | None:
    """Payloads of ``size`` bytes copied run by run (constant stride within a run); None if too irregular."""
    steps = np.diff(starts)
    cuts = (np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist()
    if len(cuts) * 16 > count or int(steps.min()) < size:
        return None
    out = np.empty((count, size), np.uint8)
    bounds = [0, *cuts, count]
    for first, stop in zip(bounds[:-1], bounds[1:], strict=True):
        stride = int(steps[first]) if stop - first > 1 else size
        out[first:stop] = np.lib.stride_tricks.as_strided(
            arr[int(starts[first]) :], shape=(stop - first, size), strides=(stride, 1), writeable=False
        )
    return out.reshape(-1)


def _repeated_string(text: str, count: int) -> pa.Array:
    encoded = np.frombuffer(text.encode(), np.uint8)
    offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(np.tile(encoded, count))]
    )


def _headers(headers: Sequence[Sequence[tuple[str, bytes | None]]] | None, count: int) -> pa.Array:
    if headers is None:  # no record has headers: every list is empty
        empty = pa.array([], HEADER_TYPE.value_type)
        return pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)), empty, type=HEADER_TYPE)
    rows = [[{"key": k, "value": v} for k, v in h] for h in headers]
    return pa.array(rows, HEADER_TYPE)


def _slow_columns(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> list[pa.Array]:
    """Columns from the reference decoder (odd layouts only: a record at a time)."""
    records = [
        r
        for r in decode_batch_list(data, batches, topic, partition, check_crc=False, min_offset=start)
        if r.offset < end
    ]
    columns: list[Any] = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        _repeated_string(topic, len(records)),
        pa.array(np.full(len(records), partition, np.int32)),
        pa.array(np.array([r.offset for r in records], np.int64)),
        pa.array(np.array([r.timestamp for r in records], np.int64) * 1000, _TIMESTAMP),
        pa.array(np.array([r.timestamp_type for r in records], np.int32)),
    ]
    if include_headers:
        columns.append(_headers([r.headers for r in records], len(records)))
    return columns
