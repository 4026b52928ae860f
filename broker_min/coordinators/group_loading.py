"""Loading the group coordinator's state from ``__consumer_offsets``.

Replaying the topic rebuilds a :class:`~.group_offsets.GroupTables`: the last value per
key wins (which is also what the log cleaner leaves), transactional offsets are held per
producer until their transaction's COMMIT/ABORT marker in the same partition, and groups
come back Empty with their last generation and protocol type (members rejoin).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .group_offsets import GroupTables
from .group_records import GroupKey, GroupRecordError, OffsetKey, decode_key
from .offsets_topic import StoredMarker, StoredRecord

log = logging.getLogger("kafkakit.broker.groups")


def replay(
    tables: GroupTables, entries: Iterable[StoredRecord | StoredMarker], partition_for: Callable[[str], int]
) -> int:
    """Apply stored records and markers (in log order) to ``tables``; how many records were read.

    ``partition_for`` maps a group to its partition (a marker closes only that partition's offsets).
    """
    count = 0
    for entry in entries:
        if isinstance(entry, StoredMarker):
            tables.complete_pending(entry.producer_id, entry.commit, entry.partition, partition_for)
            continue
        count += 1
        apply_record(tables, entry)
    return count


def apply_record(tables: GroupTables, entry: StoredRecord) -> None:
    """One stored record: an offset (plain or transactional) or a group's metadata."""
    try:
        key = decode_key(entry.key)
        if isinstance(key, OffsetKey):
            if entry.producer_id >= 0:
                tables.replay_pending_offset(entry.producer_id, key, entry.value, entry.offset)
            else:
                tables.replay_offset(key, entry.value, entry.offset)
        elif isinstance(key, GroupKey):
            tables.replay_group(key, entry.value)
    except GroupRecordError as exc:
        log.warning("skipping unreadable __consumer_offsets record: %s", exc)
