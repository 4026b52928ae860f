"""The bulk path's inputs: ``Producer.send_batch``'s lists checked and sized, and cut into batches.

Pure functions over the caller's lists, kept out of the Producer so that its module
holds the orchestration (routes, buffer memory, queues) and this one the list work.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from kafkakit.producer.record_future import MAX_TIMESTAMP_MS
from kafkakit.producer.record_input import bulk_record_sizes, bytes_list, check_headers, invalid_timestamp
from kafkakit.structs import Header

__all__ = ["BulkInput", "bulk_input", "cut_batches"]


@dataclass(frozen=True, slots=True)
class BulkInput:
    """``send_batch``'s records after serialisation and checks, with each one's size bound."""

    values: list[bytes | None]
    keys: list[bytes | None] | None  # None: no record has a key
    header_lists: list[Sequence[Header]] | None  # None: no record has headers
    sizes: list[int]
    timestamp_ms: int


def bulk_input(
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Sequence[Header] | None] | None,
    timestamp_ms: int | None,
    value_serializer: Callable[[Any], Any] | None,
    key_serializer: Callable[[Any], Any] | None,
) -> BulkInput:
    """Serialise and check ``send_batch``'s lists (ValueError, TypeError naming the culprit)."""
    count = len(values)
    if keys is not None and len(keys) != count:
        raise ValueError(f"send_batch: {len(keys)} keys for {count} values")
    if headers is not None and len(headers) != count:
        raise ValueError(f"send_batch: {len(headers)} header lists for {count} values")
    if value_serializer is not None:
        values = [value_serializer(v) for v in values]
    if keys is not None and key_serializer is not None:
        keys = [key_serializer(k) for k in keys]
    checked_values = bytes_list(values, "value")
    checked_keys = bytes_list(keys, "key") if keys is not None else None
    if checked_keys is not None and not any(k is not None for k in checked_keys):
        checked_keys = None
    header_lists: list[Sequence[Header]] | None = None
    header_sizes: list[int] | None = None
    if headers is not None and any(headers):
        header_lists, header_sizes = [], []
        for h in headers:
            checked, hsize = check_headers(h) if h else ((), 0)
            header_lists.append(checked)
            header_sizes.append(hsize)
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    elif timestamp_ms.__class__ is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
        raise invalid_timestamp(timestamp_ms)
    sizes = bulk_record_sizes(checked_values, checked_keys, header_sizes) if count else []
    return BulkInput(checked_values, checked_keys, header_lists, sizes, timestamp_ms)


def cut_batches(
    positions: range | list[int], sizes: list[int], limit: int
) -> Iterator[tuple[range | list[int], int]]:
    """(record positions, their size bound) per batch of at most ``limit`` bytes (one record at least).

    A range of positions means every record (``range(len(sizes))``); a list, those records.
    """
    if isinstance(positions, range):
        chunk_sizes = sizes
        selected = None
    else:
        chunk_sizes = [sizes[i] for i in positions]
        selected = positions
    ends = list(accumulate(chunk_sizes))
    start, total = 0, len(chunk_sizes)
    while start < total:
        base = ends[start - 1] if start else 0
        stop = max(bisect.bisect_right(ends, base + limit, lo=start), start + 1)
        index: range | list[int] = range(start, stop) if selected is None else selected[start:stop]
        yield index, ends[stop - 1] - base
        start = stop
