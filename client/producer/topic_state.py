"""What ``Producer.send`` needs about one topic: its partitions, sticky partition and key cache."""

from __future__ import annotations

from typing import Any

from kafkakit.producer.accumulator import Accumulator, PartitionQueue
from kafkakit.producer.key_placement import UnplacedKeys
from kafkakit.structs import TopicPartition

__all__ = ["KEYS_REMEMBERED", "TopicState"]

#: Keys whose partition queue a topic remembers (see TopicState.by_key): about 1.5 MB for
#: 16-byte keys, and hashing a new key in Python costs about 3.5 us.
KEYS_REMEMBERED = 16384
#: A window of placed keys from which TopicState.remember first checks that keys repeat:
#: remembering a key costs about 30 ns, wasted when every key is new (an id per record).
SAMPLED_WINDOW = 1024
#: Keys of such a window looked up among the remembered ones (and among themselves).
SAMPLE = 32
#: While sampled windows show no repeated key, one in this many is remembered anyway, so
#: that keys which start repeating are noticed.
REMEMBER_ONE_IN = 8
#: What ``TopicState.by_key`` is while keyed records are parked: every key misses.
_NO_KEYS: dict[bytes, PartitionQueue] = {}
#: What ``TopicState.sticky_queue`` is while keyed records are parked: it has no open
#: batch, so a keyless record takes the slow path (Producer._switch_sticky), which places them.
_NO_QUEUE = PartitionQueue(TopicPartition("", -1))


class TopicState:
    """What the hot path needs about one topic, rebuilt after every metadata refresh."""

    __slots__ = (
        "all_partitions", "available", "queues", "ordered_queues", "send_queues", "single", "sticky",
        "sticky_queue", "sticky_limit", "by_key", "remembered", "unplaced", "spare_unplaced", "unrepeated",
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
        #: The queues send() indexes by an explicit partition: ``queues``, or nothing while
        #: keyed records are parked (then it takes the slow path, which places them first).
        self.send_queues = queues
        #: The one queue of a one-partition topic: every key goes there, unhashed.
        self.single = self.ordered_queues[0] if len(all_partitions) == 1 else None
        self.sticky = sticky  # the partition keyless records go to (KIP-480), and its queue
        self.sticky_queue = queues[sticky]
        # KIP-480: the size of the sticky partition's open batch up to which keyless records
        # stay (Producer._sticky_limit: a batch's worth after those it held when they came).
        self.sticky_limit = sticky_limit
        #: The queue of each recently sent key (the default partitioner): a dict lookup costs
        #: a tenth of hashing the key again, and most applications send many records per key.
        self.remembered: dict[bytes, PartitionQueue] = {}
        #: What send() looks keys up in: ``remembered``, or nothing while keyed records are
        #: parked (records of remembered keys must queue behind them too).
        self.by_key = self.remembered
        #: Keyed records waiting for their partition (kafkakit.producer.key_placement).
        self.unplaced: UnplacedKeys | None = None
        self.spare_unplaced: UnplacedKeys | None = None  # placed and emptied, for the next park
        self.unrepeated = 0  # sampled windows in a row whose keys did not repeat (see remember)

    def park(self, topic: str, acc: Accumulator) -> UnplacedKeys:
        """Start parking keyed records of new keys; every other record now takes a slow path
        that places them first (see kafkakit.producer.key_placement)."""
        unplaced = self.spare_unplaced
        if unplaced is None:
            unplaced = UnplacedKeys(topic, self, acc)
        else:
            self.spare_unplaced = None
        self.unplaced = unplaced
        self.by_key = _NO_KEYS
        self.send_queues = {}
        self.sticky_queue = _NO_QUEUE
        acc.unplaced.append(unplaced)
        acc.wake_sender()  # the sender places them (and learns of their batches) on its next cycle
        return unplaced

    def unpark(self, unplaced: UnplacedKeys) -> None:
        """``unplaced`` is being placed: send() takes its fast paths again."""
        if self.unplaced is unplaced:
            self.unplaced = None
            self.by_key = self.remembered
            self.send_queues = self.queues
            self.sticky_queue = self.queues[self.sticky]

    def place_parked(self) -> None:
        """Place the parked keyed records, if any (before a record that must queue behind them)."""
        if self.unplaced is not None:
            self.unplaced.place()

    def remember(self, keys: list[bytes], partitions: Any) -> None:
        """Remember the queues of just-placed keys (``partitions``: indexes into ordered_queues,
        an int array), unless a large window's sample shows keys that do not repeat."""
        remembered = self.remembered
        if len(keys) >= SAMPLED_WINDOW and remembered and not self._repeats(keys[:SAMPLE]):
            self.unrepeated += 1
            if self.unrepeated % REMEMBER_ONE_IN:
                return
        else:
            self.unrepeated = 0
        partitions = partitions.tolist()
        if len(remembered) + len(keys) > KEYS_REMEMBERED:
            remembered.clear()  # cheaper than an LRU, and a key sent often is soon back
            if len(keys) > KEYS_REMEMBERED:  # only the last ones would stay
                keys, partitions = keys[-KEYS_REMEMBERED:], partitions[-KEYS_REMEMBERED:]
        remembered.update(zip(keys, map(self.ordered_queues.__getitem__, partitions), strict=True))

    def _repeats(self, sample: list[bytes]) -> bool:
        """Whether a key of ``sample`` was remembered already, or comes twice in it."""
        return any(map(self.remembered.__contains__, sample)) or len(set(sample)) < len(sample)

    def stick_to(self, partition: int) -> PartitionQueue:
        """Send keyless records to ``partition`` from now on; returns its queue."""
        self.sticky = partition
        pq = self.queues[partition]
        if self.unplaced is None:
            self.sticky_queue = pq
        return pq
