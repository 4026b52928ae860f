"""The internal compacted topic ``__consumer_offsets``: where the group coordinator persists.

Committed offsets and group metadata are appended as ordinary record batches
(built with :func:`kafkakit.records.encode_batch`) holding Kafka's own key/value
formats (:mod:`.group_records`), to the partition Kafka's partitioning rule picks
for the group.  On start-up :meth:`OffsetsTopic.replay` reads every partition
from the start and yields the records in order; the coordinator keeps the last
value per key, which is what compaction would leave.  The log does not compact
(yet): the topic grows with every commit, and retention is switched off for it
so that no committed offset is ever deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from kafkakit.broker.log import PartitionLog
from kafkakit.records import decode_batch, encode_batch

from .group_records import partition_for_group

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's settings for the topic: compacted, 100 MiB segments.  Retention is off
# explicitly because broker_min's log applies time retention whatever cleanup.policy says.
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
    "retention.bytes": "-1",
}


class OffsetsTopicHost(Protocol):
    """What the coordinator needs from the broker: the topic's logs and the append notifier."""

    def offsets_topic_partitions(self) -> int | None:
        """Partition count of ``__consumer_offsets``, or None when the topic does not exist yet."""
        ...

    def offsets_topic_log(self, partition: int) -> PartitionLog:
        """The log of one partition, creating the topic (internal, compacted) on first use."""
        ...

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake fetches waiting on that partition."""
        ...


CoordinatorRecord = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone


class OffsetsTopic:
    """Appends coordinator records for a group and replays the whole topic."""

    def __init__(self, host: OffsetsTopicHost, default_partitions: int) -> None:
        self._host = host
        self._default_partitions = default_partitions

    def partition_for(self, group_id: str) -> int:
        """The partition holding ``group_id``'s records (Kafka's rule, over the topic's actual size)."""
        count = self._host.offsets_topic_partitions() or self._default_partitions
        return partition_for_group(group_id, count)

    def append(self, group_id: str, records: Sequence[CoordinatorRecord]) -> None:
        """Append ``records`` as one batch; raises :class:`~kafkakit.broker.log.LogError` on failure."""
        if not records:
            return
        partition = self.partition_for(group_id)
        log = self._host.offsets_topic_log(partition)
        now = time.time_ns() // 1_000_000
        log.append(encode_batch([(key, value, now, ()) for key, value in records]))
        self._host.notify_append(OFFSETS_TOPIC, partition)

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) stored in the topic, partition by partition, oldest first."""
        count = self._host.offsets_topic_partitions()
        if count is None:
            return
        for partition in range(count):
            log = self._host.offsets_topic_log(partition)
            for header, data in log.iter_batches():
                if header.is_control:
                    continue
                for record in decode_batch(data.read_bytes(), 0, header, OFFSETS_TOPIC, partition):
                    if record.key is not None:
                        yield bytes(record.key), None if record.value is None else bytes(record.value)
