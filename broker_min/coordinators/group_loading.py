"""Loading the group coordinator's state from ``__consumer_offsets``, one partition at a time.

Replaying a partition rebuilds a :class:`~.group_offsets.GroupTables`: the last value per
key wins (which is also what the log cleaner leaves), transactional offsets are held per
producer until their transaction's COMMIT/ABORT marker in the same partition, and classic
groups come back as their last ``GroupMetadataValue`` stored them, as in Kafka: a group with
members is Stable with those members (ids, instance ids, client ids and hosts, timeouts,
subscriptions, assignments), its generation, protocol type and name and its leader; one without
is Empty at its generation.  That record is written when a generation's assignment is stored
(SyncGroup of the leader), when a static member is replaced and when the group empties, so a
rebalance in progress is not in it and does not come back (a member that joined it is unknown,
the others' newer generation is ILLEGAL_GENERATION, and they rejoin).  Once the partition is
loaded the coordinator arms each loaded member's session timeout as a fresh heartbeat
(``on_loaded``), so after a coordinator failover or a restart the members go on heartbeating
and committing with their generation, without a rebalance, and a member that does not come
back within its session timeout is removed and the group rebalances.

The coordinator loads a partition into fresh tables and :func:`merge` s them into its own
when the load completes, so a partition being loaded shows nothing half-replayed; unloading
a partition :func:`take_partition` s its groups and offsets back out (see
:class:`~.partitions.CoordinatorPartitions` for the states and epochs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from . import consumer_group_records, consumer_group_replay
from .group_offsets import GroupTables
from .group_records import GroupKey, GroupRecordError, OffsetKey, decode_key
from .offsets_topic import OFFSETS_TOPIC, OffsetsTopic, StoredMarker, StoredRecord
from .partitions import (
    WRITE_TIMEOUT_SECONDS,
    CoordinatorPartitions,
    coordinator_write_error,
    replay_cooperatively,
)

log = logging.getLogger("kafkakit.broker.groups")


class GroupLoader:
    """Loads ``__consumer_offsets`` partitions into the coordinator's tables and unloads them.

    ``on_unloaded`` gets what an unload removed (the coordinator cancels those groups'
    timers and answers their parked requests).
    """

    def __init__(
        self, store: OffsetsTopic, tables: GroupTables, on_unloaded: Callable[[GroupTables], None]
    ) -> None:
        self._store = store
        self._tables = tables
        self._on_unloaded = on_unloaded
        #: Gets what a load added (the coordinator arms the loaded members' session timeouts).
        self.on_loaded: Callable[[GroupTables], None] = lambda _loaded: None
        self.partitions = CoordinatorPartitions(OFFSETS_TOPIC)

    def load_all(self) -> None:
        """Load every partition now, at epoch 0 (a single node)."""
        count = 0
        for partition in range(self._store.partition_count()):
            token = self.partitions.begin_load(partition, 0)
            if token is None:
                continue
            loaded = GroupTables()
            count += replay(loaded, self._store.partition_entries(partition), self._store.partition_for)
            self.partitions.finish_load(partition, token)
            merge(self._tables, loaded)
            self.on_loaded(loaded)
        if count:
            tables = self._tables
            log.info(
                "loaded %d group(s), %d committed offset(s) and %d open transaction(s) with offsets "
                "from %d record(s)",
                len(tables.groups),
                sum(len(o) for o in tables.offsets.values()),
                len(tables.pending_txn),
                count,
            )

    async def load_partition(self, partition: int, epoch: int = 0) -> bool:
        """Replay ``partition`` (yielding to the loop; its groups get COORDINATOR_LOAD_IN_PROGRESS
        meanwhile), then serve it.  False if ignored (loaded at ``epoch`` or later), superseded by
        an unload, or failed (then NOT_COORDINATOR, as Kafka's FAILED state)."""
        token = self.partitions.begin_load(partition, epoch)
        if token is None:
            return False
        self._store.forget_writes(partition)  # appends from an earlier leadership are not ours to wait for
        loaded = GroupTables()
        partition_for = self._store.partition_for

        def apply(entry: StoredRecord | StoredMarker) -> None:
            apply_entry(loaded, partition_for, entry)

        try:
            done = await replay_cooperatively(
                self._store.partition_entries(partition),
                apply,
                lambda: self.partitions.is_current(partition, token),
            )
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)
            self.partitions.abandon(partition, token)
            return False
        if not done or not self.partitions.finish_load(partition, token):
            return False
        merge(self._tables, loaded)
        self.on_loaded(loaded)
        log.info(
            "loaded %s-%d at epoch %d: %d group(s), %d with committed offsets",
            OFFSETS_TOPIC, partition, epoch, len(loaded.groups), len(loaded.offsets),
        )  # fmt: skip
        return True

    def unload_partition(self, partition: int, epoch: int | None = None) -> bool:
        """Drop ``partition``'s groups, offsets and pending offsets unless it was loaded at ``epoch``
        or later (None always unloads); whether it was unloaded."""
        if not self.partitions.unload(partition, epoch):
            return False
        removed = take_partition(self._tables, partition, self._store.partition_for)
        self._on_unloaded(removed)
        log.info("unloaded %s-%d: %d group(s)", OFFSETS_TOPIC, partition, len(removed.groups))
        return True

    async def settle(self, group_id: str) -> ErrorCode | None:
        """Wait until what was written to ``group_id``'s partition is replicated; None, or the error
        to answer instead."""
        partition = self._store.partition_for(group_id)
        error = await self._store.wait_written(partition, WRITE_TIMEOUT_SECONDS)
        if error is not None and error is not ErrorCode.none:
            return coordinator_write_error(error)
        # Unloaded meanwhile (this node resigned): the write may not survive, as in Kafka.
        return self.partitions.error(partition)


def replay(
    tables: GroupTables, entries: Iterable[StoredRecord | StoredMarker], partition_for: Callable[[str], int]
) -> int:
    """Apply stored records and markers (in log order) to ``tables``; how many records were read.

    ``partition_for`` maps a group to its partition (a marker closes only that partition's offsets).
    """
    count = 0
    for entry in entries:
        count += apply_entry(tables, partition_for, entry)
    return count


def apply_entry(tables: GroupTables, partition_for: Callable[[str], int], entry: StoredRecord | StoredMarker) -> int:
    """Apply one record or marker; 1 for a record, 0 for a marker."""
    if isinstance(entry, StoredMarker):
        tables.complete_pending(entry.producer_id, entry.commit, entry.partition, partition_for)
        return 0
    apply_record(tables, entry)
    return 1


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
        else:
            consumer_key = consumer_group_records.decode_key(entry.key)
            if consumer_key is not None:  # a KIP-848 consumer group record
                value = consumer_group_replay.decode_value(consumer_key, entry.value)
                consumer_group_replay.replay(tables.consumer_groups, consumer_key, value)
                classic = tables.groups.get(consumer_key.group)
                if classic is not None and classic.protocol_type is None and not classic.members:
                    del tables.groups[consumer_key.group]  # the "simple" group its offsets made
    except GroupRecordError as exc:
        log.warning("skipping unreadable __consumer_offsets record: %s", exc)


def merge(into: GroupTables, loaded: GroupTables) -> None:
    """Add a loaded partition's tables (its groups are in no other partition)."""
    into.groups.update(loaded.groups)
    into.consumer_groups.update(loaded.consumer_groups)
    into.offsets.update(loaded.offsets)
    into.positions.update(loaded.positions)
    for producer_id, groups in loaded.pending_txn.items():
        into.pending_txn.setdefault(producer_id, {}).update(groups)


def take_partition(tables: GroupTables, partition: int, partition_for: Callable[[str], int]) -> GroupTables:
    """Remove and return everything of the groups in ``partition``."""
    taken = GroupTables()
    for group_id in [g for g in tables.groups if partition_for(g) == partition]:
        taken.groups[group_id] = tables.groups.pop(group_id)
    for group_id in [g for g in tables.consumer_groups if partition_for(g) == partition]:
        taken.consumer_groups[group_id] = tables.consumer_groups.pop(group_id)
    for group_id in [g for g in tables.offsets if partition_for(g) == partition]:
        taken.offsets[group_id] = tables.offsets.pop(group_id)
    for key in [k for k in tables.positions if partition_for(k[0]) == partition]:
        taken.positions[key] = tables.positions.pop(key)
    for producer_id, groups in list(tables.pending_txn.items()):
        for group_id in [g for g in groups if partition_for(g) == partition]:
            taken.pending_txn.setdefault(producer_id, {})[group_id] = groups.pop(group_id)
        if not groups:
            del tables.pending_txn[producer_id]
    return taken
