"""The internal compacted topic ``__consumer_offsets``: where the group coordinator persists.

Committed offsets and group metadata are appended as ordinary record batches
(built with :func:`kafkakit.records.encode_batch`) holding Kafka's own key/value
formats (:mod:`.group_records`), to the partition Kafka's partitioning rule picks
for the group.  On start-up :meth:`OffsetsTopic.replay` reads every partition
from the start and yields the records in order; the coordinator keeps the last
value per key, which is also what the log cleaner leaves (the topic is
compacted, see kafkakit.broker.log.cleaner): old commits and aborted
transactional commits are removed once their segment is closed, and retention
is switched off so that no committed offset is ever deleted.

Transactional offset commits (TxnOffsetCommit) are appended as Kafka's group
coordinator writes them: the same key/value records in a *transactional*
batch carrying the producer id and epoch (no sequence), which the transaction's
COMMIT/ABORT marker, written to the same partition, later closes.
:meth:`OffsetsTopic.replay_entries` yields those markers too, with each
record's offset, so the coordinator can rebuild pending transactional offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kafkakit.broker.log import BatchHeader, PartitionLog
from kafkakit.errors import CorruptRecordError
from kafkakit.records import CONTROL_COMMIT, decode_batch, encode_batch, read_control_type
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.producer_state import ProducerStateRegistry

from .group_records import partition_for_group

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's settings for the topic: compacted, 100 MiB segments.  Retention is off
# explicitly (a compact-only log ignores it anyway, as in Kafka).
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
    "retention.bytes": "-1",
}


class OffsetsTopicHost(Protocol):
    """What the coordinator needs from the broker: the topic's logs, the append notifier and
    (cluster mode) when an append reached the ISR."""

    def offsets_topic_partitions(self) -> int | None:
        """Partition count of ``__consumer_offsets``, or None when the topic does not exist yet."""
        ...

    def offsets_topic_log(self, partition: int) -> PartitionLog:
        """The log of one partition, creating the topic (internal, compacted) on first use."""
        ...

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake fetches waiting on that partition."""
        ...

    async def wait_committed(
        self, topic: str, partition: int, end_offset: int, timeout: float
    ) -> ErrorCode | None:
        """Wait until the partition's high watermark reaches ``end_offset``; None, or why not."""
        ...


CoordinatorRecord = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone
NO_PRODUCER_ID = -1
COORDINATOR_SEQUENCE = 0
_log = logging.getLogger("kafkakit.broker.groups")


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A replayed record: where it is stored and, for a transactional one, its producer id."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None
    producer_id: int = NO_PRODUCER_ID  # >= 0 only in a transactional batch


@dataclass(frozen=True, slots=True)
class StoredMarker:
    """A replayed COMMIT/ABORT marker that ends ``producer_id``'s transaction in ``partition``."""

    partition: int
    offset: int
    producer_id: int
    commit: bool


class OffsetsTopic:
    """Appends coordinator records for a group and replays the whole topic."""

    def __init__(
        self,
        host: OffsetsTopicHost,
        default_partitions: int,
        producer_states: ProducerStateRegistry | None = None,
    ) -> None:
        self._host = host
        self._default_partitions = default_partitions
        self._producer_states = producer_states
        # Log end offset after this coordinator's last append, per partition.
        self._written: dict[int, int] = {}

    def partition_count(self) -> int:
        """Partitions of the topic (the configured count until it exists)."""
        return self._host.offsets_topic_partitions() or self._default_partitions

    def partition_for(self, group_id: str) -> int:
        """The partition holding ``group_id``'s records (Kafka's rule, over the topic's actual size)."""
        return partition_for_group(group_id, self.partition_count())

    async def wait_written(self, partition: int, timeout: float) -> ErrorCode | None:
        """Wait until everything this coordinator appended to ``partition`` is committed (replicated
        to the ISR; at once on a single node); None, or the append error (see
        :func:`.partitions.coordinator_write_error`)."""
        end = self._written.get(partition)
        if end is None:
            return None
        return await self._host.wait_committed(OFFSETS_TOPIC, partition, end, timeout)

    def forget_writes(self, partition: int) -> None:
        """The partition is being loaded anew: earlier appends (another leadership, maybe truncated
        since) are not this coordinator's to wait for."""
        self._written.pop(partition, None)

    def append(self, group_id: str, records: Sequence[CoordinatorRecord]) -> int:
        """Append ``records`` as one batch; its base offset (-1 when empty).

        Raises :class:`~kafkakit.broker.log.LogError` on failure.
        """
        if not records:
            return -1
        partition = self.partition_for(group_id)
        log = self._host.offsets_topic_log(partition)
        now = time.time_ns() // 1_000_000
        result = log.append(encode_batch([(key, value, now, ()) for key, value in records]))
        self._written[partition] = result.last_offset + 1
        self._host.notify_append(OFFSETS_TOPIC, partition)
        return result.base_offset

    def append_transactional(
        self, group_id: str, records: Sequence[CoordinatorRecord], producer_id: int, producer_epoch: int
    ) -> int:
        """Append ``records`` as a transactional batch of ``producer_id``; its base offset.

        Kafka's coordinator writes such batches without a sequence (-1); the
        log here applies the client rules (a producer id needs a sequence) to
        every batch, so they carry sequence 0, which no reader of the topic
        uses.  The partition's producer state learns of the open transaction
        (its LSO), which the marker closes.  Raises
        :class:`~kafkakit.broker.log.LogError`.
        """
        partition = self.partition_for(group_id)
        log = self._host.offsets_topic_log(partition)
        now = time.time_ns() // 1_000_000
        batch = encode_batch(
            [(key, value, now, ()) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=COORDINATOR_SEQUENCE,
            transactional=True,
        )
        result = log.append(batch)
        self._written[partition] = result.last_offset + 1
        if self._producer_states is not None:
            self._producer_states.for_log(log).record(result.batches)
        self._host.notify_append(OFFSETS_TOPIC, partition)
        return result.base_offset

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every non-transactional (key, value) stored in the topic, partition by partition, oldest first."""
        for entry in self.replay_entries():
            if isinstance(entry, StoredRecord) and entry.producer_id == NO_PRODUCER_ID:
                yield entry.key, entry.value

    def replay_entries(self) -> Iterator[StoredRecord | StoredMarker]:
        """Every record and transaction marker stored in the topic, partition by partition, in log order."""
        count = self._host.offsets_topic_partitions()
        if count is None:
            return
        for partition in range(count):
            yield from self.partition_entries(partition)

    def partition_entries(self, partition: int) -> Iterator[StoredRecord | StoredMarker]:
        """Every record and transaction marker of one partition, in log order (none if it does not exist)."""
        count = self._host.offsets_topic_partitions()
        if count is None or not 0 <= partition < count:
            return
        log = self._host.offsets_topic_log(partition)
        for header, data in log.iter_batches():
            raw = data.read_bytes()
            if header.is_control:
                if header.producer_id >= 0:
                    yield StoredMarker(partition, header.base_offset, header.producer_id, _is_commit(raw, header))
                continue
            producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
            for record in decode_batch(raw, 0, header, OFFSETS_TOPIC, partition):
                if record.key is not None:
                    value = None if record.value is None else bytes(record.value)
                    yield StoredRecord(partition, record.offset, bytes(record.key), value, producer_id)


def _is_commit(raw: bytes, header: BatchHeader) -> bool:
    """Whether a stored marker is COMMIT; an unreadable one counts as ABORT (drops the offsets)."""
    try:
        return read_control_type(raw, 0, header) == CONTROL_COMMIT
    except (CorruptRecordError, ValueError, IndexError) as exc:
        _log.warning("unreadable transaction marker in %s treated as ABORT: %s", OFFSETS_TOPIC, exc)
        return False
