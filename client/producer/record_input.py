"""Checks of what applications hand to ``send``/``send_batch``: acks, bytes, headers.

Kept apart from the Producer so that both send paths share them; each raises the
typed error that names what is wrong (KafkaConfigError for a setting, TypeError
for a record field).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import add
from typing import Any

from kafkakit.errors import KafkaConfigError
from kafkakit.producer.record_future import MAX_TIMESTAMP_MS
from kafkakit.records import encode_batch, encode_values
from kafkakit.structs import Header

#: Upper bound of a bulk record's overhead: length(3) attributes(1) timestampDelta(1)
#: offsetDelta(4) keyLength(3) valueLength(3) headerCount(1) plus slack.
BULK_RECORD_OVERHEAD = 18

_BYTES_LIKE = (bytes, bytearray, memoryview)
_BYTES_OR_NONE = {bytes, type(None)}


def check_acks(acks: object) -> int:
    if acks == "all":
        return -1
    if isinstance(acks, int) and not isinstance(acks, bool) and acks in (0, 1, -1):
        return acks
    raise KafkaConfigError("acks", f"must be 0, 1, -1 or 'all', not {acks!r}")


def as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, _BYTES_LIKE):
        return bytes(data)
    raise TypeError(
        f"record {what} must be bytes (or set {what.split()[0]}_serializer), not {type(data).__name__}"
    )


def lengths(items: list[bytes | None]) -> list[int]:
    if None in items:
        return [0 if item is None else len(item) for item in items]
    return list(map(len, items))  # type: ignore[arg-type]


def bytes_list(items: Sequence[Any], what: str) -> list[bytes | None]:
    out = list(items)
    if set(map(type, out)) <= _BYTES_OR_NONE:
        return out
    for i, item in enumerate(out):
        if item is not None and item.__class__ is not bytes:
            out[i] = as_bytes(item, what)
    return out


def check_headers(headers: Sequence[Header]) -> tuple[list[Header], int]:
    """Validated headers as a list, plus their encoded size."""
    checked: list[Header] = []
    size = 0
    for header in headers:
        try:
            name, value = header
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes | None) pair, not {header!r}") from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, "header value")
        checked.append((name, value))
        name_size = len(name) if name.isascii() else len(name.encode("utf-8"))
        size += name_size + (len(value) if value is not None else 0) + 6
    return checked, size


def bulk_record_sizes(
    values: list[bytes | None], keys: list[bytes | None] | None, header_sizes: list[int] | None
) -> list[int]:
    """Upper bounds of each send_batch record's size in a batch."""
    # map/accumulate keep these loops in C: send_batch is the million-record path.
    sizes = list(map(add, lengths(values), repeat(BULK_RECORD_OVERHEAD, len(values))))
    if keys is not None:
        sizes = list(map(add, sizes, lengths(keys)))
    if header_sizes is not None:
        sizes = list(map(add, sizes, header_sizes))
    return sizes


def encode_bulk_chunk(
    index: range | list[int],
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    header_lists: list[Sequence[Header]] | None,
    timestamp_ms: int,
    compression: int,
) -> bytes:
    """One batch of send_batch's records (those at ``index``), all with one timestamp."""
    if isinstance(index, range) and index.step == 1:
        chunk_values = values[index.start : index.stop]
        chunk_keys = keys[index.start : index.stop] if keys is not None else None
        chunk_headers = header_lists[index.start : index.stop] if header_lists is not None else None
    else:
        chunk_values = [values[i] for i in index]
        chunk_keys = [keys[i] for i in index] if keys is not None else None
        chunk_headers = [header_lists[i] for i in index] if header_lists is not None else None
    if chunk_headers is None and None not in chunk_values:
        return encode_values(chunk_values, chunk_keys, timestamp_ms, compression)  # type: ignore[arg-type]
    return encode_batch(
        [
            (
                chunk_keys[j] if chunk_keys is not None else None,
                v,
                timestamp_ms,
                chunk_headers[j] if chunk_headers is not None else (),
            )
            for j, v in enumerate(chunk_values)
        ],
        compression=compression,
    )


def invalid_timestamp(timestamp_ms: object) -> Exception:
    """The error for a ``timestamp_ms`` that is not an int of milliseconds from 0 (Java's producer
    refuses negative ones too) to MAX_TIMESTAMP_MS (batches keep int64 nanoseconds)."""
    if timestamp_ms.__class__ is not int:
        return TypeError(f"timestamp_ms must be an int (milliseconds), not {type(timestamp_ms).__name__}")
    return ValueError(f"timestamp_ms must be from 0 to {MAX_TIMESTAMP_MS}, not {timestamp_ms}")
