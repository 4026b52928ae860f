"""kafkakit.broker.metadata: the cluster metadata records and the image every node replays from them.

Layering: this package sits below the controller (which writes records) and the broker's
replica manager and handlers (which read the image); it imports neither.
"""

from __future__ import annotations

from .image import BrokerRegistration, MetadataDelta, MetadataImage, PartitionRegistration, TopicImage
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
    MetadataRecordError,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode,
    encode,
)

__all__ = [
    "BROKER_RESOURCE",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "TOPIC_RESOURCE",
    "BrokerEndpoint",
    "BrokerRegistration",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "FenceBrokerRecord",
    "MetadataDelta",
    "MetadataImage",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionChangeRecord",
    "PartitionRecord",
    "PartitionRegistration",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicImage",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "decode",
    "encode",
]
