"""Plain data types shared by every layer (the bottom of the import graph)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: A record header: a string key and a bytes value (None allowed).
Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    """A topic and a partition number."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset with its metadata string and, when known, the leader epoch of the
    record before it (KIP-320: lets a consumer that resumes there detect log truncation)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class OffsetAndTimestamp(NamedTuple):
    """The earliest offset whose timestamp is at least the one asked for."""

    offset: int
    timestamp: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed.

    A named tuple (as aiokafka's is): one is built per record whose result is asked
    for, and a tuple is several times cheaper to build than a frozen dataclass.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int = 0
    log_start_offset: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple, Generic[K, V]):
    """A record handed to the application by the consumer (immutable).

    A NamedTuple rather than a dataclass: the decoder builds records in bulk
    with ``map(partial(tuple.__new__, ConsumerRecord), rows)``, which runs
    entirely in C and costs about a third less than a slotted dataclass's
    ``__init__``; attribute access is as fast. Use ``record._replace(...)`` to
    derive a changed copy. ``headers`` is a tuple of (key, value) pairs; records
    without headers share one empty tuple.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: K
    value: V
    headers: Sequence[Header] = ()
    serialized_key_size: int = -1
    serialized_value_size: int = -1


@dataclass(slots=True)
class NewTopic:
    """A topic to create with :meth:`kafkakit.Admin.create_topics`."""

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition's leader and replicas as the cluster reports them."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic and its partitions."""

    name: str
    topic_id: Any
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker of the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster id, its controller and its brokers."""

    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
