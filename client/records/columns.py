"""Records as columns: numpy arrays over one payload buffer, no Python object per record.

For readers that want columns rather than record objects (the Spark source
builds Arrow arrays from them). The vectorised parser of :mod:`.fastdecode`
finds every field of every record; keys and values stay where they are in the
payload buffer, as (start, size) pairs. Layouts the parser declines go through
the reference decoder and are converted, so every valid input gives the same
columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from kafkakit.structs import Header

from .compression import decompress
from .decoder import decode_batch_list, read_headers
from .fastdecode import Section, decode_columns
from .header import CODEC_MASK, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, BatchHeader

__all__ = ["RecordColumns", "decode_record_columns"]

if TYPE_CHECKING:  # numpy.typing costs 28 ms to import; only the type checker needs it
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]
    ByteArray = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class RecordColumns:
    """Decoded records, one numpy array per field.

    ``key_starts``/``key_sizes`` (and the value ones) locate each key in
    ``payload``; a size of -1 is a null key. ``timestamp_types`` is 0 for
    CreateTime, 1 for LogAppendTime. ``headers`` is None when no record has
    any, else one tuple per record.
    """

    payload: ByteArray
    offsets: IntArray
    timestamps: IntArray
    timestamp_types: IntArray
    key_starts: IntArray
    key_sizes: IntArray
    value_starts: IntArray
    value_sizes: IntArray
    headers: list[tuple[Header, ...]] | None

    def __len__(self) -> int:
        return len(self.offsets)

    def keys(self) -> list[bytes | None]:
        """The keys as Python objects (one per record: for small results and tests)."""
        return self._objects(self.key_starts, self.key_sizes)

    def values(self) -> list[bytes | None]:
        """The values as Python objects (one per record: for small results and tests)."""
        return self._objects(self.value_starts, self.value_sizes)

    def _objects(self, starts: IntArray, sizes: IntArray) -> list[bytes | None]:
        data = self.payload
        return [
            None if size < 0 else data[start : start + size].tobytes()
            for start, size in zip(starts.tolist(), sizes.tolist(), strict=True)
        ]

    def take(self, index: IntArray) -> RecordColumns:
        """The records at positions ``index`` (over the same payload)."""
        headers = self.headers
        if headers is not None:
            headers = [headers[i] for i in index.tolist()]
        return RecordColumns(
            self.payload,
            self.offsets[index],
            self.timestamps[index],
            self.timestamp_types[index],
            self.key_starts[index],
            self.key_sizes[index],
            self.value_starts[index],
            self.value_sizes[index],
            headers,
        )

    def between(self, start: int, end: int) -> RecordColumns:
        """The records with offsets in ``[start, end)``."""
        keep = (self.offsets >= start) & (self.offsets < end)
        if keep.all():
            return self
        return self.take(np.flatnonzero(keep))


def decode_record_columns(data: bytes, batches: list[tuple[int, BatchHeader]]) -> RecordColumns:
    """Every record of ``batches`` (data batches of ``data``, e.g. from :func:`visible_batches`) as columns.

    CRCs are not checked here: select the batches with ``check_crcs`` first.
    """
    sections = [_section(data, pos, header) for pos, header in batches if not header.is_control]
    sections = [section for section in sections if section.record_count > 0]
    decoded = decode_columns(sections, read_headers) if sections else None
    if decoded is None:
        return _columns_slowly(data, batches)
    _buffer, arr, fields = decoded  # arr is a view of _buffer (and keeps it alive)
    return RecordColumns(
        arr,
        fields.offsets,
        fields.timestamps,
        fields.timestamp_types,
        fields.key_starts,
        fields.key_sizes,
        fields.value_starts,
        fields.value_sizes,
        fields.headers,
    )


def _section(data: bytes, pos: int, header: BatchHeader) -> Section:
    first = pos + HEADER_SIZE
    stop = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & CODEC_MASK
    if codec:
        data = decompress(codec, data[first:stop])
        first, stop = 0, len(data)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return Section(data, first, stop, header.record_count, header.base_offset, header.base_timestamp, log_append_time)


def _columns_slowly(data: bytes, batches: list[tuple[int, BatchHeader]]) -> RecordColumns:
    """Columns from the reference decoder (odd layouts: a record at a time)."""
    records = decode_batch_list(data, batches, "", 0, check_crc=False)
    parts: list[bytes] = []
    at = 0
    starts: list[list[int]] = [[], []]
    sizes: list[list[int]] = [[], []]
    for record in records:
        for column, payload in enumerate((record.key, record.value)):
            starts[column].append(at)
            if payload is None:
                sizes[column].append(-1)
            else:
                parts.append(payload)
                sizes[column].append(len(payload))
                at += len(payload)
    has_headers = any(record.headers for record in records)

    def ints(values: list[int]) -> IntArray:
        return np.array(values, dtype=np.int64)

    return RecordColumns(
        np.frombuffer(b"".join(parts), np.uint8),
        ints([r.offset for r in records]),
        ints([r.timestamp for r in records]),
        ints([r.timestamp_type for r in records]),
        ints(starts[0]),
        ints(sizes[0]),
        ints(starts[1]),
        ints(sizes[1]),
        [tuple(cast(Any, r.headers)) for r in records] if has_headers else None,
    )
