"""Replays the committed metadata log into a :class:`MetadataImage` and tells publishers what changed.

Kafka's MetadataLoader: one per node, registered with the Raft client. Committed entries are
decoded and applied in order; each delivered batch becomes one :class:`MetadataDelta` handed to
every publisher (the controller's view, the replica manager, the coordinators). A snapshot
(installed from the leader, or the node's own at start) replaces the image: the publishers
then get a delta naming everything, as Kafka's loader publishes a full image.

The snapshot policy is Kafka's ``metadata.log.max.record.bytes.between.snapshots`` in record
counts: after ``snapshot_every`` records past the last snapshot the loader stores the image as
a snapshot of the Raft log (:meth:`RaftNode.snapshot`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kafkakit.broker.raft import CommittedRecord, RaftNode, Snapshot

from .image import MetadataDelta, MetadataImage
from .records import MetadataRecordError, decode, encode

log = logging.getLogger("kafkakit.broker.metadata")

Publisher = Callable[[MetadataImage, MetadataDelta], None]
#: Records between two snapshots of the metadata log.
DEFAULT_SNAPSHOT_EVERY = 20_000


class MetadataLoader:
    """The node's metadata image, kept current from the Raft log."""

    def __init__(self, raft: RaftNode, snapshot_every: int = DEFAULT_SNAPSHOT_EVERY) -> None:
        self.raft = raft
        self.image = MetadataImage()
        self.snapshot_every = snapshot_every
        self._publishers: list[Publisher] = []
        self._since_snapshot = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def start(self) -> None:
        """Register with the Raft node: what is committed so far is applied at once."""
        self.raft.register(self._on_records, self._on_snapshot)

    def add_publisher(self, publisher: Publisher, *, replay: bool = True) -> None:
        """Call ``publisher(image, delta)`` after each applied batch; ``replay`` hands it the current image first."""
        self._publishers.append(publisher)
        if replay and self.image.offset >= 0:
            publisher(self.image, _everything(self.image))

    async def wait_for_offset(self, offset: int, timeout: float) -> None:
        """Wait until the image has applied ``offset`` (TimeoutError after ``timeout`` seconds)."""
        async with asyncio.timeout(timeout):
            while self.image.offset < offset:
                self._changed.clear()
                await self._changed.wait()

    async def stop(self) -> None:
        """Wait for a snapshot being written."""
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)

    # -- raft listener callbacks ---------------------------------------------------------------

    def _on_records(self, records: list[CommittedRecord]) -> None:
        delta = MetadataDelta()
        for committed in records:
            try:
                record = decode(committed.value)
            except MetadataRecordError:
                log.error("skipping metadata log entry %d: not a metadata record", committed.offset)
                self.image.offset = max(self.image.offset, committed.offset)
                continue
            delta.merge(self.image.apply(record, committed.offset))
        self._since_snapshot += len(records)
        self._publish(delta)
        self._maybe_snapshot()

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        image = MetadataImage()
        for value in snapshot.records:
            image.apply(decode(value))
        image.offset = snapshot.end_offset - 1
        removed = {name: topic for name, topic in self.image.topics.items() if name not in image.topics}
        previous = self.image.security
        self.image = image
        self._since_snapshot = 0
        delta = _everything(image)
        delta.removed_topics.update(removed)
        # ACLs and credentials the snapshot no longer has are changes too.
        delta.changed_acls.update(previous.acls)
        delta.changed_scram.update(previous.scram)
        self._publish(delta)

    def _publish(self, delta: MetadataDelta) -> None:
        self._changed.set()
        for publisher in list(self._publishers):
            try:
                publisher(self.image, delta)
            except Exception:
                log.exception("metadata publisher %r failed", publisher)

    def _maybe_snapshot(self) -> None:
        if self._since_snapshot < self.snapshot_every or self._snapshot_task is not None:
            return
        end = self.image.offset + 1
        values = [encode(r) for r in self.image.to_records()]
        self._since_snapshot = 0
        self._snapshot_task = asyncio.get_running_loop().create_task(self._write_snapshot(end, values))

    async def _write_snapshot(self, end: int, values: list[bytes]) -> None:
        try:
            if end > self.raft.log.start_offset:
                await self.raft.snapshot(end, values)
                log.info("metadata snapshot at offset %d (%d records)", end, len(values))
        except Exception:
            log.exception("metadata snapshot at offset %d failed", end)
        finally:
            self._snapshot_task = None


def _everything(image: MetadataImage) -> MetadataDelta:
    """A delta that names every topic, partition, broker, config, ACL and SCRAM credential of ``image``."""
    delta = MetadataDelta()
    for topic in image.topics.values():
        delta.created_topics.add(topic.name)
        delta.changed_partitions.update((topic.name, index) for index in topic.partitions)
    delta.changed_brokers.update(image.brokers)
    delta.changed_configs.update(image.configs)
    delta.changed_acls.update(image.security.acls)
    delta.changed_scram.update(image.security.scram)
    return delta
