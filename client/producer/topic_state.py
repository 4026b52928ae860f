"""What ``Producer.send`` needs about one topic: its partitions, sticky partition and key cache."""

from __future__ import annotations

from kafkakit.producer.accumulator import PartitionQueue
from kafkakit.producer.partitioner import partition_for_key

__all__ = ["KEYS_REMEMBERED", "TopicState"]

#: Keys whose partition queue a topic remembers (see TopicState.by_key): about 1.5 MB for
#: 16-byte keys, and hashing a new key in Python costs about 3.5 us.
KEYS_REMEMBERED = 16384


class TopicState:
    """What the hot path needs about one topic, rebuilt after every metadata refresh."""

    __slots__ = (
        "all_partitions", "available", "queues", "ordered_queues", "sticky", "sticky_queue", "sticky_limit", "by_key",
    )  # fmt: skip

    def __init__(
        self,
        all_partitions: list[int],
        available: list[int],
        queues: dict[int, PartitionQueue],
        sticky: int,
        sticky_limit: int,
    ) -> None:
        self.all_partitions = all_partitions
        self.available = available
        self.queues = queues
        self.ordered_queues = [queues[p] for p in all_partitions]  # by index into all_partitions
        self.sticky = sticky  # the partition keyless records go to (KIP-480), and its queue
        self.sticky_queue = queues[sticky]
        # KIP-480: the size of the sticky partition's open batch up to which keyless records
        # stay (Producer._sticky_limit: a batch's worth after those it held when they came).
        self.sticky_limit = sticky_limit
        #: The queue of each recently sent key (the default partitioner): a dict lookup costs
        #: a tenth of hashing the key again, and most applications send many records per key.
        self.by_key: dict[bytes, PartitionQueue] = {}

    def stick_to(self, partition: int) -> PartitionQueue:
        """Send keyless records to ``partition`` from now on; returns its queue."""
        self.sticky = partition
        pq = self.sticky_queue = self.queues[partition]
        return pq

    def queue_for_key(self, key: bytes) -> PartitionQueue:
        """The queue of ``key``'s partition (Java's murmur2 placement), remembered for its next record."""
        ordered = self.ordered_queues
        pq = ordered[partition_for_key(key, len(ordered))]
        by_key = self.by_key
        if len(by_key) >= KEYS_REMEMBERED:
            by_key.clear()  # cheaper than an LRU, and a key sent often is soon back
        by_key[key] = pq
        return pq
