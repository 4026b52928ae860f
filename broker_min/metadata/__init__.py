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
    AccessControlEntryRecord,
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
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UserScramCredentialRecord,
    decode,
    encode,
)
from .security_image import SecurityImage

__all__ = [
    "BROKER_RESOURCE",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "TOPIC_RESOURCE",
    "AccessControlEntryRecord",
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
    "RemoveAccessControlEntryRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "SecurityImage",
    "TopicImage",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UserScramCredentialRecord",
    "decode",
    "encode",
]
