"""Which batches of a fetch a reader may see: read_committed filtering and offset ranges.

Shared by the consumer's decode path and by column readers (the Spark source):
both must drop control batches and the batches of aborted transactions exactly
as the Java consumer does, so the rule lives in one place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kafkakit.errors import CorruptRecordError

from .decoder import read_control_type
from .header import BatchHeader, verify_crc

__all__ = ["NO_END", "visible_batches"]

#: ``end`` for "no upper bound".
NO_END = 1 << 63


def visible_batches(
    data: bytes,
    batches: Iterable[tuple[int, BatchHeader]],
    aborted: Iterable[tuple[int, int]] | None,
    start: int = 0,
    end: int = NO_END,
    *,
    check_crcs: bool = True,
    where: str = "",
) -> list[tuple[int, BatchHeader]]:
    """The data batches of ``data`` with records in ``[start, end)`` that a reader may see.

    ``aborted`` is a read_committed Fetch response's (producer id, first offset)
    list (None or empty for read_uncommitted). A producer's transactional batches
    are dropped from its aborted transaction's first offset up to that
    transaction's ABORT marker, as the Java consumer does; control batches are
    never returned. With ``check_crcs``, a returned batch whose CRC does not
    match raises CorruptRecordError naming ``where``.
    """
    pending = deque(sorted(aborted or (), key=lambda entry: entry[1]))
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
