"""Kafka record batches straight to Arrow: the source's hot path.

kafkakit decodes a Fetch response's records as numpy columns
(:meth:`kafkakit.FetchedRange.columns`: every field of every record found with
numpy, keys and values left in one payload buffer); this module fills the Arrow
buffers from those positions, so no Python object is made per record (keys and
values are copied out with numpy, offsets and timestamps are numpy columns).

Which batches are read follows the consumer (read_committed filtering in
:func:`kafkakit.records.visible_batches`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from kafkakit.errors import CorruptRecordError
from kafkakit.records import BatchHeader, RecordColumns, decode_record_columns

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


def to_record_batch(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch:
    """The records of ``batches`` (selected with :func:`kafkakit.records.visible_batches`) in ``[start, end)``."""
    columns = decode_record_columns(data, batches).between(start, end)
    return columns_to_record_batch(columns, topic, partition, include_headers)


def columns_to_record_batch(
    columns: RecordColumns, topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """Decoded records (kafkakit's numpy columns) as an Arrow batch of the source's schema."""
    count = len(columns)
    arrays = [
        _binary(columns.payload, columns.key_starts, columns.key_sizes),
        _binary(columns.payload, columns.value_starts, columns.value_sizes),
        _repeated_string(topic, count),
        pa.array(np.full(count, partition, np.int32)),
        pa.array(columns.offsets),
        pa.array(columns.timestamps * 1000, _TIMESTAMP),
        pa.array(columns.timestamp_types.astype(np.int32)),
    ]
    if include_headers:
        arrays.append(_headers(columns.headers, count))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


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


def _strided_runs(
    arr: npt.NDArray[np.uint8], starts: IntArray, size: int, count: int
) -> npt.NDArray[np.uint8] | None:
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
