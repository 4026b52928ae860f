"""The cluster metadata as of an offset of the metadata log: Kafka's MetadataImage, applied in order.

Every node (controller or broker) replays the same committed records into a
:class:`MetadataImage`, so all agree on topics, partition leaders and ISRs, broker
registrations, configs, ACLs and SCRAM credentials (:mod:`.security_image`).
:meth:`MetadataImage.apply` returns a :class:`MetadataDelta`
naming what changed, which the broker's publishers (the replica manager, the coordinators)
act on; :meth:`MetadataImage.to_records` is the snapshot form of the image.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .records import (
    BROKER_RESOURCE,
    NO_LEADER,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from .security_image import SECURITY_RECORDS, ScramKey, SecurityImage


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """A partition's replicas, ISR, leader and epochs (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(slots=True)
class TopicImage:
    """A topic: name, id and partitions by index."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker; fenced brokers hold no partitions and are left out of Metadata."""

    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        """The endpoint of ``listener`` (case-insensitive), if the broker has it."""
        for endpoint in self.endpoints:
            if endpoint.name.upper() == listener.upper():
                return endpoint
        return None


@dataclass(slots=True)
class MetadataDelta:
    """What one batch of records changed."""

    #: (topic name, partition) whose registration changed or appeared.
    changed_partitions: set[tuple[str, int]] = field(default_factory=set)
    #: Topics removed: name -> the image they had (their partitions' replicas drop their logs).
    removed_topics: dict[str, TopicImage] = field(default_factory=dict)
    created_topics: set[str] = field(default_factory=set)
    changed_brokers: set[int] = field(default_factory=set)
    changed_configs: set[tuple[int, str]] = field(default_factory=set)
    #: ACL ids created or removed (the image's ``security.acls``).
    changed_acls: set[uuid.UUID] = field(default_factory=set)
    #: SCRAM credentials set or removed: (user, mechanism number).
    changed_scram: set[ScramKey] = field(default_factory=set)

    def merge(self, other: MetadataDelta) -> None:
        """Add ``other``'s changes (a later batch) to these."""
        self.changed_partitions |= other.changed_partitions
        self.removed_topics.update(other.removed_topics)
        self.created_topics |= other.created_topics
        self.changed_brokers |= other.changed_brokers
        self.changed_configs |= other.changed_configs
        self.changed_acls |= other.changed_acls
        self.changed_scram |= other.changed_scram

    def __bool__(self) -> bool:
        return bool(
            self.changed_partitions
            or self.removed_topics
            or self.created_topics
            or self.changed_brokers
            or self.changed_configs
            or self.changed_acls
            or self.changed_scram
        )


class MetadataImage:
    """Topics, brokers, configs, the producer id high-water mark, ACLs and SCRAM credentials, replayed from the log."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        #: The next producer id no broker holds yet.
        self.next_producer_id = 0
        #: ACLs and SCRAM credentials.
        self.security = SecurityImage()
        #: Offset of the last record applied (-1: none).
        self.offset = -1

    # -- reading -------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        """The registration of ``topic``/``partition``, if both exist."""
        found = self.topics.get(topic)
        return None if found is None else found.partitions.get(partition)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """A topic's config overrides (empty when none)."""
        return dict(self.configs.get((TOPIC_RESOURCE, topic), {}))

    def live_brokers(self) -> list[BrokerRegistration]:
        """Unfenced brokers by id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def partitions_of(self, broker_id: int) -> Iterator[tuple[str, int, PartitionRegistration]]:
        """Every partition that has ``broker_id`` among its replicas."""
        for topic in self.topics.values():
            for index, registration in topic.partitions.items():
                if broker_id in registration.replicas:
                    yield topic.name, index, registration

    # -- replay --------------------------------------------------------------------------------

    def apply(self, record: MetadataRecord, offset: int = -1) -> MetadataDelta:
        """Apply one record (in log order) and say what changed."""
        delta = MetadataDelta()
        if isinstance(record, TopicRecord):
            topic = TopicImage(record.name, record.topic_id)
            self.topics[record.name] = topic
            self.topics_by_id[record.topic_id] = topic
            delta.created_topics.add(record.name)
        elif isinstance(record, PartitionRecord):
            topic = self.topics_by_id[record.topic_id]
            topic.partitions[record.partition_id] = PartitionRegistration(
                record.replicas, record.isr, record.leader, record.leader_epoch, record.partition_epoch
            )
            delta.changed_partitions.add((topic.name, record.partition_id))
        elif isinstance(record, PartitionChangeRecord):
            self._apply_partition_change(record, delta)
        elif isinstance(record, RemoveTopicRecord):
            removed = self.topics_by_id.pop(record.topic_id, None)
            if removed is not None:
                del self.topics[removed.name]
                self.configs.pop((TOPIC_RESOURCE, removed.name), None)
                delta.removed_topics[removed.name] = removed
        elif isinstance(record, ConfigRecord):
            key = (record.resource_type, record.resource_name)
            values = self.configs.setdefault(key, {})
            if record.value is None:
                values.pop(record.name, None)
            else:
                values[record.name] = record.value
            if not values:
                del self.configs[key]
            delta.changed_configs.add(key)
        elif isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = BrokerRegistration(
                record.broker_id, record.broker_epoch, record.incarnation_id, record.endpoints, record.rack, record.fenced
            )
            delta.changed_brokers.add(record.broker_id)
        elif isinstance(record, FenceBrokerRecord | UnfenceBrokerRecord | BrokerRegistrationChangeRecord):
            self._apply_broker_change(record, delta)
        elif isinstance(record, ProducerIdsRecord):
            self.next_producer_id = max(self.next_producer_id, record.next_producer_id)
        elif isinstance(record, SECURITY_RECORDS):
            self.security.apply(record, delta)
        self.offset = max(self.offset, offset)
        return delta

    def _apply_partition_change(self, record: PartitionChangeRecord, delta: MetadataDelta) -> None:
        topic = self.topics_by_id.get(record.topic_id)
        if topic is None:
            return
        current = topic.partitions[record.partition_id]
        leader_changed = record.leader != NO_LEADER_CHANGE and record.leader != current.leader
        topic.partitions[record.partition_id] = replace(
            current,
            isr=current.isr if record.isr is None else record.isr,
            replicas=current.replicas if record.replicas is None else record.replicas,
            leader=record.leader if leader_changed else current.leader,
            leader_epoch=current.leader_epoch + 1 if leader_changed else current.leader_epoch,
            partition_epoch=current.partition_epoch + 1,
        )
        delta.changed_partitions.add((topic.name, record.partition_id))

    def _apply_broker_change(
        self, record: FenceBrokerRecord | UnfenceBrokerRecord | BrokerRegistrationChangeRecord, delta: MetadataDelta
    ) -> None:
        current = self.brokers.get(record.broker_id)
        if current is None or current.broker_epoch != record.broker_epoch:
            return  # a record about an older registration of the broker
        if isinstance(record, FenceBrokerRecord):
            updated = replace(current, fenced=True)
        elif isinstance(record, UnfenceBrokerRecord):
            updated = replace(current, fenced=False, in_controlled_shutdown=False)
        else:
            updated = replace(current, in_controlled_shutdown=record.in_controlled_shutdown)
        self.brokers[record.broker_id] = updated
        delta.changed_brokers.add(record.broker_id)

    # -- snapshots -----------------------------------------------------------------------------

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from nothing (the body of a metadata snapshot)."""
        out: list[MetadataRecord] = []
        for broker in self.brokers.values():
            out.append(
                RegisterBrokerRecord(
                    broker.broker_id, broker.broker_epoch, broker.incarnation_id, broker.endpoints, broker.rack, broker.fenced
                )
            )
            if broker.in_controlled_shutdown:
                out.append(BrokerRegistrationChangeRecord(broker.broker_id, broker.broker_epoch, True))
        for topic in self.topics.values():
            out.append(TopicRecord(topic.name, topic.topic_id))
            for index, p in sorted(topic.partitions.items()):
                out.append(
                    PartitionRecord(topic.topic_id, index, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)
                )
        for (resource_type, name), values in self.configs.items():
            for key, value in values.items():
                out.append(ConfigRecord(resource_type, name, key, value))
        if self.next_producer_id:
            out.append(ProducerIdsRecord(-1, -1, self.next_producer_id))
        out += self.security.to_records()
        return out


__all__ = [
    "BROKER_RESOURCE",
    "TOPIC_RESOURCE",
    "BrokerRegistration",
    "MetadataDelta",
    "MetadataImage",
    "PartitionRegistration",
    "TopicImage",
]
