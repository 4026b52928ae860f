"""Apache Kafka's KIP-848 consumer group records in ``__consumer_offsets``, byte for byte.

Every key is Kafka's "coordinator-key": an int16 record type followed by the key's fields
in the classic (non-flexible) encoding.  Every value is an int16 version (0) followed by
the value's fields in the flexible encoding (compact strings and arrays, tagged fields).
The schemas are Kafka's ``group-coordinator/src/main/resources/common/message/
ConsumerGroup*.json``:

====  ==========================================  =============================================
type  key (GroupId [, MemberId])                  value
====  ==========================================  =============================================
3     ConsumerGroupMetadataKey                    Epoch (the group epoch)
4     ConsumerGroupPartitionMetadataKey           Topics [TopicId, TopicName, NumPartitions,
                                                  PartitionMetadata [Partition, Racks]]
5     ConsumerGroupMemberMetadataKey              InstanceId, RackId, ClientId, ClientHost,
                                                  SubscribedTopicNames, SubscribedTopicRegex,
                                                  RebalanceTimeoutMs, ServerAssignor
                                                  (+ tagged ClassicMemberMetadata: SessionTimeoutMs,
                                                  SupportedProtocols [Name, Metadata])
6     ConsumerGroupTargetAssignmentMetadataKey    AssignmentEpoch
7     ConsumerGroupTargetAssignmentMemberKey      TopicPartitions [TopicId, Partitions]
8     ConsumerGroupCurrentMemberAssignmentKey     MemberEpoch, PreviousMemberEpoch, State,
                                                  AssignedPartitions, PartitionsPendingRevocation
====  ==========================================  =============================================

A null value is a tombstone (the member left, the group was deleted).  Tagged fields added
by later Kafka versions (e.g. the metadata hash of Kafka 4.1+) are skipped on read.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .group_records import GroupRecordError, _Reader

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

#: topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A KIP-848 record key: its type, the group and (member records) the member."""

    record_type: int
    group: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic as ConsumerGroupPartitionMetadataValue records it."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """The tagged ClassicMemberMetadata of a member that joined with the classic protocol."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """ConsumerGroupMemberMetadataValue: a member's subscription and identity."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadata | None = None


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """ConsumerGroupCurrentMemberAssignmentValue: where a member is in its reconciliation."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


# -- writing ----------------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def _compact_length(n: int) -> bytes:
    return _uvarint(n + 1)


_NO_TAGS = b"\x00"


def _topic_partitions(assignment: Assignment) -> bytes:
    parts = [_compact_length(len(assignment))]
    for topic_id in sorted(assignment, key=str):
        partitions = sorted(assignment[topic_id])
        parts.append(topic_id.bytes)
        parts.append(_compact_length(len(partitions)))
        parts.extend(_I32.pack(p) for p in partitions)
        parts.append(_NO_TAGS)
    return b"".join(parts)


def encode_key(key: ConsumerKey) -> bytes:
    """The key: record type, group id, and the member id of member records (classic strings)."""
    group = key.group.encode("utf-8")
    out = _I16.pack(key.record_type) + _I16.pack(len(group)) + group
    if key.record_type in _MEMBER_KEYS:
        member = key.member_id.encode("utf-8")
        out += _I16.pack(len(member)) + member
    return out


def _value(*parts: bytes) -> bytes:
    return _I16.pack(VALUE_VERSION) + b"".join(parts) + _NO_TAGS


def encode_group_metadata(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue."""
    return _value(_I32.pack(epoch))


def encode_partition_metadata(topics: Mapping[uuid.UUID, TopicMetadata]) -> bytes:
    """ConsumerGroupPartitionMetadataValue (no rack information)."""
    parts = [_compact_length(len(topics))]
    for topic in sorted(topics.values(), key=lambda t: t.name):
        parts += [topic.topic_id.bytes, _compact_string(topic.name), _I32.pack(topic.num_partitions)]
        parts += [_compact_length(0), _NO_TAGS]  # PartitionMetadata: racks unknown
    return _value(*parts)


def encode_member_metadata(m: MemberMetadata) -> bytes:
    """ConsumerGroupMemberMetadataValue (ClassicMemberMetadata as tagged field 0 when set)."""
    names = [_compact_length(len(m.subscribed_topic_names))]
    names += [_compact_string(n) for n in m.subscribed_topic_names]
    body = _I16.pack(VALUE_VERSION) + b"".join(
        [
            _compact_string(m.instance_id),
            _compact_string(m.rack_id),
            _compact_string(m.client_id),
            _compact_string(m.client_host),
            *names,
            _compact_string(m.subscribed_topic_regex),
            _I32.pack(m.rebalance_timeout_ms),
            _compact_string(m.server_assignor),
        ]
    )
    if m.classic is None:
        return body + _NO_TAGS
    parts = [_I32.pack(m.classic.session_timeout_ms), _compact_length(len(m.classic.protocols))]
    for name, metadata in m.classic.protocols:
        parts += [_compact_string(name), _uvarint(len(metadata) + 1), metadata, _NO_TAGS]
    struct_bytes = b"\x01" + b"".join(parts) + _NO_TAGS  # a nullable tagged struct: presence byte first
    return body + _uvarint(1) + _uvarint(0) + _uvarint(len(struct_bytes)) + struct_bytes


def encode_target_assignment_metadata(epoch: int) -> bytes:
    """ConsumerGroupTargetAssignmentMetadataValue."""
    return _value(_I32.pack(epoch))


def encode_target_assignment_member(assignment: Assignment) -> bytes:
    """ConsumerGroupTargetAssignmentMemberValue."""
    return _value(_topic_partitions(assignment))


def encode_current_assignment(a: MemberAssignment) -> bytes:
    """ConsumerGroupCurrentMemberAssignmentValue."""
    return _value(
        _I32.pack(a.member_epoch),
        _I32.pack(a.previous_member_epoch),
        bytes([a.state & 0xFF]),
        _topic_partitions(a.assigned),
        _topic_partitions(a.pending_revocation),
    )


# -- reading ----------------------------------------------------------------------------


def decode_key(data: bytes) -> ConsumerKey | None:
    """A KIP-848 consumer group key, or None for other record types."""
    reader = _Reader(data)
    record_type = reader.int16()
    if record_type not in RECORD_TYPES:
        return None
    group = reader.string()
    member = reader.string() if record_type in _MEMBER_KEYS else ""
    reader.finish()
    return ConsumerKey(record_type, group, member)


def _value_reader(data: bytes, name: str) -> _Reader:
    reader = _Reader(data, flexible=True)
    reader.flexible = False
    version = reader.int16()
    if version != VALUE_VERSION:
        raise GroupRecordError(f"unknown {name} version {version}")
    reader.flexible = True
    return reader


def _uuid(reader: _Reader) -> uuid.UUID:
    return uuid.UUID(bytes=reader._take(16))


def _read_topic_partitions(reader: _Reader) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(reader.array_length()):
        topic_id = _uuid(reader)
        out[topic_id] = frozenset(reader.int32() for _ in range(reader.array_length()))
        reader.tagged_fields()
    return out


def _done(reader: _Reader) -> None:
    reader.tagged_fields()
    reader.finish()


def decode_epoch(data: bytes) -> int:
    """ConsumerGroupMetadataValue / ConsumerGroupTargetAssignmentMetadataValue: the epoch."""
    reader = _value_reader(data, "epoch value")
    epoch = reader.int32()
    _done(reader)
    return epoch


def decode_partition_metadata(data: bytes) -> dict[uuid.UUID, TopicMetadata]:
    """ConsumerGroupPartitionMetadataValue."""
    reader = _value_reader(data, "ConsumerGroupPartitionMetadataValue")
    topics: dict[uuid.UUID, TopicMetadata] = {}
    for _ in range(reader.array_length()):
        topic_id = _uuid(reader)
        name = reader.string()
        count = reader.int32()
        for _ in range(reader.array_length()):  # PartitionMetadata
            reader.int32()
            for _ in range(reader.array_length()):
                reader.string()
            reader.tagged_fields()
        reader.tagged_fields()
        topics[topic_id] = TopicMetadata(topic_id, name, count)
    _done(reader)
    return topics


def decode_member_metadata(data: bytes) -> MemberMetadata:
    """ConsumerGroupMemberMetadataValue (a classic member's tagged metadata is skipped)."""
    reader = _value_reader(data, "ConsumerGroupMemberMetadataValue")
    instance_id = reader.nullable_string()
    rack_id = reader.nullable_string()
    client_id = reader.string()
    client_host = reader.string()
    names = tuple(reader.string() for _ in range(reader.array_length()))
    regex = reader.nullable_string()
    rebalance_timeout = reader.int32()
    assignor = reader.nullable_string()
    classic = None
    for _ in range(reader.uvarint()):
        tag, size = reader.uvarint(), reader.uvarint()
        if tag != 0:
            reader._take(size)
            continue
        end = reader.pos + size
        if reader._take(1)[0]:
            session_timeout = reader.int32()
            protocols = []
            for _ in range(reader.array_length()):
                name = reader.string()
                protocols.append((name, reader.bytes_()))
                reader.tagged_fields()
            reader.tagged_fields()
            classic = ClassicMetadata(session_timeout, tuple(protocols))
        reader.pos = end
    reader.finish()
    return MemberMetadata(
        instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout, assignor, classic
    )


def decode_target_assignment_member(data: bytes) -> dict[uuid.UUID, frozenset[int]]:
    """ConsumerGroupTargetAssignmentMemberValue."""
    reader = _value_reader(data, "ConsumerGroupTargetAssignmentMemberValue")
    out = _read_topic_partitions(reader)
    _done(reader)
    return out


def decode_current_assignment(data: bytes) -> MemberAssignment:
    """ConsumerGroupCurrentMemberAssignmentValue."""
    reader = _value_reader(data, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch = reader.int32()
    previous = reader.int32()
    state = reader._take(1)[0]
    assigned = _read_topic_partitions(reader)
    pending = _read_topic_partitions(reader)
    _done(reader)
    return MemberAssignment(epoch, previous, state, assigned, pending)
