"""The records of the cluster metadata log (``__cluster_metadata``), after Kafka's KRaft records.

Each record is one entry of the Raft log (:mod:`kafkakit.broker.raft`). The names and fields
follow Kafka's metadata record schemas (metadata/src/main/resources/common/metadata/*.json)
so that Kafka's documentation describes what the log holds: TopicRecord, PartitionRecord,
PartitionChangeRecord, RemoveTopicRecord, ConfigRecord, RegisterBrokerRecord,
FenceBrokerRecord, UnfenceBrokerRecord, BrokerRegistrationChangeRecord, ProducerIdsRecord,
AccessControlEntryRecord, RemoveAccessControlEntryRecord, UserScramCredentialRecord and
RemoveUserScramCredentialRecord.

Encoding: one compact JSON object per record, ``{"type": ..., "version": 0, ...fields}``.
Kafka encodes them with its generated binary serde, which no Python library provides (kio
has the RPC schemas, not the metadata records), and no third-party tool reads broker_min's
metadata log, so a readable, self-describing format is worth more here than byte
compatibility. Byte fields (a SCRAM credential's salt and keys) are base64 strings. Decoding
rejects an unknown type with :class:`MetadataRecordError`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

#: ConfigRecord resource types (Kafka's ConfigResource.Type ids).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
#: PartitionChangeRecord: the leader field is unchanged (Kafka: NO_LEADER_CHANGE = -2).
NO_LEADER_CHANGE = -2
NO_LEADER = -1


class MetadataRecordError(ValueError):
    """A metadata log entry that is not a record this broker knows."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic was created."""

    TYPE: ClassVar[str] = "TopicRecord"
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition was created (or reassigned): its full registration."""

    TYPE: ClassVar[str] = "PartitionRecord"
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A partition's ISR and/or leader changed; None (or NO_LEADER_CHANGE) = unchanged.

    A change of leader bumps the leader epoch; every change bumps the partition epoch
    (Kafka's PartitionRegistration.merge).
    """

    TYPE: ClassVar[str] = "PartitionChangeRecord"
    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """A topic was deleted."""

    TYPE: ClassVar[str] = "RemoveTopicRecord"
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A config was set (``value``) or removed (None) on a topic or broker."""

    TYPE: ClassVar[str] = "ConfigRecord"
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a registered broker."""

    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker registered (fenced until its first heartbeat that has caught up)."""

    TYPE: ClassVar[str] = "RegisterBrokerRecord"
    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    """A broker stopped heartbeating (or was shut down): it leads and follows nothing."""

    TYPE: ClassVar[str] = "FenceBrokerRecord"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    """A registered broker caught up with the metadata log and may hold partitions."""

    TYPE: ClassVar[str] = "UnfenceBrokerRecord"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """A broker entered controlled shutdown (leadership moves away from it first)."""

    TYPE: ClassVar[str] = "BrokerRegistrationChangeRecord"
    broker_id: int
    broker_epoch: int
    in_controlled_shutdown: bool = True


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """The controller handed ``broker_id`` the producer id block ending before ``next_producer_id``."""

    TYPE: ClassVar[str] = "ProducerIdsRecord"
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL was created; ``acl_id`` names it for its removal (Kafka's StandardAclWithId).

    The enums are Kafka's wire numbers (kafkakit.acls): ResourceType, PatternType (LITERAL or
    PREFIXED), AclOperation and AclPermissionType (ALLOW or DENY).
    """

    TYPE: ClassVar[str] = "AccessControlEntryRecord"
    acl_id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """The ACL ``acl_id`` was deleted."""

    TYPE: ClassVar[str] = "RemoveAccessControlEntryRecord"
    acl_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512) was set.

    What the server needs to check a proof, never the password (KIP-554): the salt, StoredKey,
    ServerKey and the iteration count.
    """

    TYPE: ClassVar[str] = "UserScramCredentialRecord"
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was deleted."""

    TYPE: ClassVar[str] = "RemoveUserScramCredentialRecord"
    name: str
    mechanism: int


MetadataRecord = (
    TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | ProducerIdsRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
)

_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (
        TopicRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        ConfigRecord,
        RegisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        BrokerRegistrationChangeRecord,
        ProducerIdsRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        UserScramCredentialRecord,
        RemoveUserScramCredentialRecord,
    )
}


def encode(record: MetadataRecord) -> bytes:
    """The log entry for ``record``."""
    fields: dict[str, Any] = {"type": record.TYPE, "version": 0}
    for f in dataclasses.fields(record):
        fields[f.name] = _to_json(getattr(record, f.name))
    return json.dumps(fields, separators=(",", ":")).encode()


def decode(entry: bytes) -> MetadataRecord:
    """Inverse of :func:`encode`; :class:`MetadataRecordError` for anything else."""
    try:
        data = json.loads(entry)
        cls = _TYPES[data.pop("type")]
        data.pop("version", None)
        values = {f.name: _from_json(f.name, data[f.name]) for f in dataclasses.fields(cls) if f.name in data}
        record: MetadataRecord = cls(**values)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MetadataRecordError(f"not a metadata record: {bytes(entry[:80])!r} ({exc})") from None
    return record


def _to_json(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, BrokerEndpoint):
        return [value.name, value.host, value.port, value.security_protocol]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


_UUID_FIELDS = frozenset({"topic_id", "incarnation_id", "acl_id"})
_TUPLE_FIELDS = frozenset({"replicas", "isr"})
_BYTES_FIELDS = frozenset({"salt", "stored_key", "server_key"})


def _from_json(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _UUID_FIELDS:
        return uuid.UUID(value)
    if name in _TUPLE_FIELDS:
        return tuple(int(v) for v in value)
    if name == "endpoints":
        return tuple(BrokerEndpoint(str(n), str(h), int(p), int(s)) for n, h, p, s in value)
    if name in _BYTES_FIELDS:
        return base64.b64decode(value, validate=True)
    return value
