"""The internal topic ``__share_group_state``: where share-partition state is persisted.

Kafka's share coordinator keeps each share-partition's state as a ShareSnapshot record (the
whole state) followed by ShareUpdate records (what changed since), in Kafka's own formats
(:mod:`.share_state_records`), keyed by (group, topic id, partition) and partitioned by Kafka's
rule over the key ``"group:topicId:partition"``.  After ``SNAPSHOT_EVERY`` updates a new
snapshot is written, so a replay reads at most that many updates per share-partition after the
last snapshot.  The topic uses ``cleanup.policy=delete`` with retention off, as compaction would
keep only the last update of each key; instead, as Kafka does, each partition is pruned (its log
start offset moved, DeleteRecords-style) up to the oldest latest-snapshot of the share-partitions
it holds whenever a snapshot is written, so it holds about ``SNAPSHOT_EVERY`` records per
share-partition.

:meth:`ShareStateTopic.replay` reads every partition from the start and folds the records into
one :class:`PersistedState` per share-partition: a snapshot replaces the state, an update
overwrites the offsets it names and moves the start offset unless it is -1; a tombstone (both
keys with a null value: DeleteShareGroupOffsets) forgets the share-partition.

Single node only: in cluster mode the topic would have to be created through the controller and
its writes replicated, which is not implemented (the share handlers refuse share groups there).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafkakit.records import decode_batch, encode_batch

from .group_records import partition_for_group
from .share_state_records import (
    NO_START_OFFSET,
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareStateKey,
    ShareStateValue,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
#: Updates of one share-partition between two snapshots (Kafka's
#: ``share.coordinator.snapshot.update.records.per.snapshot`` default).
SNAPSHOT_EVERY = 500

log = logging.getLogger("kafkakit.broker.share")


@dataclass(slots=True)
class PersistedState:
    """A share-partition as the topic holds it."""

    start_offset: int
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (state, delivery count)
    snapshot_epoch: int = 0
    state_epoch: int = 0
    updates_since_snapshot: int = 0
    create_timestamp: int = -1


def state_key_partition(key: ShareStateKey, partitions: int) -> int:
    """Kafka's partition for a share-partition's records: the Java hash of ``group:topicId:partition``
    (the topic id in Kafka's base64 form)."""
    return partition_for_group(f"{key.group_id}:{_kafka_uuid(key.topic_id)}:{key.partition}", partitions)


def _kafka_uuid(topic_id: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


class ShareStateTopic:
    """Appends share state records and replays the topic (single node)."""

    def __init__(self, state: BrokerState) -> None:
        self._state = state
        #: Where each share-partition's latest snapshot is: (partition, offset).
        self._snapshots: dict[ShareStateKey, tuple[int, int]] = {}

    def _partitions(self) -> int | None:
        info = self._state.topics.get(SHARE_STATE_TOPIC)
        return None if info is None else info.num_partitions

    def _log(self, partition: int) -> PartitionLog:
        if SHARE_STATE_TOPIC not in self._state.topics:
            self._state.create_topic(
                SHARE_STATE_TOPIC, self._state.config.offsets_topic_num_partitions, SHARE_STATE_TOPIC_CONFIGS
            )
        found = self._state.partition_log(SHARE_STATE_TOPIC, partition)
        if found is None:
            raise RuntimeError(f"{SHARE_STATE_TOPIC}-{partition} does not exist")
        return found

    def write_snapshot(self, key: ShareStateKey, persisted: PersistedState, batches: Sequence[StateBatch]) -> None:
        """Write the whole state of ``key`` (a new snapshot epoch)."""
        now = time.time_ns() // 1_000_000
        persisted.snapshot_epoch += 1
        persisted.updates_since_snapshot = 0
        if persisted.create_timestamp < 0:
            persisted.create_timestamp = now
        value = ShareStateValue(
            snapshot=True,
            snapshot_epoch=persisted.snapshot_epoch,
            state_epoch=persisted.state_epoch,
            leader_epoch=0,
            start_offset=persisted.start_offset,
            batches=tuple(batches),
            create_timestamp=persisted.create_timestamp,
            write_timestamp=now,
        )
        partition, offset = self._append(key, [(encode_key(SNAPSHOT_TYPE, key), encode_value(value))])
        self._snapshots[key] = (partition, offset)
        self._prune(partition)

    def _prune(self, partition: int) -> None:
        """Drop the records below the oldest latest-snapshot of the partition's share-partitions."""
        point = min((o for p, o in self._snapshots.values() if p == partition), default=None)
        source = self._log(partition)
        if point is not None and source.log_start_offset < point <= source.high_watermark:
            source.delete_records_before(point)

    def write_update(self, key: ShareStateKey, persisted: PersistedState, start_offset: int,
                     batches: Sequence[StateBatch]) -> None:  # fmt: skip
        """Write what changed: ``batches``, and ``start_offset`` when it moved (else -1)."""
        persisted.updates_since_snapshot += 1
        value = ShareStateValue(
            snapshot=False,
            snapshot_epoch=persisted.snapshot_epoch,
            state_epoch=persisted.state_epoch,
            leader_epoch=0,
            start_offset=start_offset,
            batches=tuple(batches),
        )
        self._append(key, [(encode_key(UPDATE_TYPE, key), encode_value(value))])

    def write_tombstones(self, key: ShareStateKey) -> None:
        """Forget ``key``'s state (DeleteShareGroupOffsets)."""
        self._append(key, [(encode_key(SNAPSHOT_TYPE, key), None), (encode_key(UPDATE_TYPE, key), None)])
        self._snapshots.pop(key, None)

    def _append(self, key: ShareStateKey, records: list[tuple[bytes, bytes | None]]) -> tuple[int, int]:
        """Append ``records`` as one batch to ``key``'s partition: (partition, base offset)."""
        count = self._partitions() or self._state.config.offsets_topic_num_partitions
        partition = state_key_partition(key, count)
        target = self._log(partition)
        now = time.time_ns() // 1_000_000
        result = target.append(encode_batch([(k, v, now, ()) for k, v in records]))
        self._state.notify_append(SHARE_STATE_TOPIC, partition)
        return partition, result.base_offset

    def replay(self) -> dict[ShareStateKey, PersistedState]:
        """Every share-partition's persisted state, from the whole topic."""
        states: dict[ShareStateKey, PersistedState] = {}
        count = self._partitions()
        for partition in range(count or 0):
            source = self._log(partition)
            for header, data in source.iter_batches():
                if header.is_control:
                    continue
                for record in decode_batch(data.read_bytes(), 0, header, SHARE_STATE_TOPIC, partition):
                    if record.key is None:
                        continue
                    key = _apply(states, bytes(record.key), None if record.value is None else bytes(record.value))
                    if key is not None and key in states and states[key].updates_since_snapshot == 0:
                        self._snapshots[key] = (partition, record.offset)
                    elif key is not None and key not in states:
                        self._snapshots.pop(key, None)
        return states


def _apply(states: dict[ShareStateKey, PersistedState], raw_key: bytes, raw_value: bytes | None) -> ShareStateKey | None:
    """Fold one record into ``states``; the share-partition it concerns (None for a foreign key)."""
    decoded = decode_key(raw_key)
    if decoded is None:
        return None
    record_type, key = decoded
    if raw_value is None:
        states.pop(key, None)
        return key
    try:
        value = decode_value(record_type, raw_value)
    except ValueError as exc:
        log.warning("skipping unreadable %s record for %s: %s", SHARE_STATE_TOPIC, key, exc)
        return None
    if value.snapshot:
        states[key] = PersistedState(
            value.start_offset,
            _offsets(value.batches),
            value.snapshot_epoch,
            value.state_epoch,
            0,
            value.create_timestamp,
        )
        return key
    found = states.get(key)
    if found is None:
        return None  # an update without its snapshot (a deleted or pruned share-partition's leftover)
    found.offsets.update(_offsets(value.batches))
    found.updates_since_snapshot += 1
    if value.start_offset != NO_START_OFFSET:
        found.start_offset = value.start_offset
    for offset in [o for o in found.offsets if o < found.start_offset]:
        del found.offsets[offset]
    return key


def _offsets(batches: Sequence[StateBatch]) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for b in batches:
        for offset in range(b.first_offset, b.last_offset + 1):
            out[offset] = (b.delivery_state, b.delivery_count)
    return out
