"""Apache Kafka's record formats in ``__consumer_offsets``: keys and values, byte for byte.

Each record's key starts with an int16 naming its type (Kafka's "coordinator-key"
api key): 0 and 1 are ``OffsetCommitKey`` (group, topic, partition), 2 is
``GroupMetadataKey`` (group).  Each value starts with an int16 version of its
schema.  The schemas are Kafka's ``group-coordinator/src/main/resources/common/
message/{OffsetCommitKey,OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json``:

- ``OffsetCommitValue`` v1: offset, metadata, commitTimestamp, expireTimestamp
  (written when the commit asked for a retention time); v3: offset, leaderEpoch,
  metadata, commitTimestamp (what Kafka writes otherwise); v4 is v3 made flexible.
- ``GroupMetadataValue`` v3: protocolType, generation, protocol (nullable),
  leader (nullable), currentStateTimestamp, members [memberId, groupInstanceId
  (nullable), clientId, clientHost, rebalanceTimeout, sessionTimeout,
  subscription, assignment]; v4 is v3 made flexible.

A null value is a tombstone: the offset or group was deleted.  Writing uses the
versions Kafka 3.x/4.x write (key 1 / value 3 or 1 for offsets, key 2 / value 3
for groups); reading accepts every version 0-4.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3
FIRST_FLEXIBLE_VALUE_VERSION = 4
NO_LEADER_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class GroupRecordError(ValueError):
    """A ``__consumer_offsets`` key or value that does not parse."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """``OffsetCommitKey``: which group's offset for which partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """``GroupMetadataKey``: which group."""

    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """``OffsetCommitValue``: a committed offset (``expire_timestamp`` -1 unless v1 set it)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    """One member in ``GroupMetadataValue``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """``GroupMetadataValue``: a classic group's generation, protocol, leader and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# -- writing ---------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def encode_offset_key(key: OffsetKey) -> bytes:
    """``OffsetCommitKey`` as Kafka writes it (type 1)."""
    return (
        _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(key.group)
        + _string(key.topic)
        + _I32.pack(key.partition)
    )


def encode_group_key(key: GroupKey) -> bytes:
    """``GroupMetadataKey`` as Kafka writes it (type 2)."""
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(key.group)


def encode_offset_value(value: OffsetValue) -> bytes:
    """``OffsetCommitValue`` v3, or v1 when the commit carries an expire timestamp (as Kafka)."""
    if value.expire_timestamp >= 0:
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION)
            + _I64.pack(value.offset)
            + _string(value.metadata)
            + _I64.pack(value.commit_timestamp)
            + _I64.pack(value.expire_timestamp)
        )
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _I64.pack(value.commit_timestamp)
    )


def encode_group_value(value: GroupValue) -> bytes:
    """``GroupMetadataValue`` v3."""
    parts = [
        _I16.pack(GROUP_METADATA_VALUE_VERSION),
        _string(value.protocol_type),
        _I32.pack(value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        _I64.pack(value.current_state_timestamp),
        _I32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _I32.pack(m.rebalance_timeout),
            _I32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# -- reading ---------------------------------------------------------------------------


class _Reader:
    """Reads Kafka's classic and flexible (compact, tagged) primitive encodings from one buffer."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise GroupRecordError(f"record ends after {len(self.data)} bytes, needed {end}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 35:
                raise GroupRecordError("varint longer than 5 bytes")

    def _length(self, classic: int) -> int:
        return self.uvarint() - 1 if self.flexible else classic

    def nullable_string(self) -> str | None:
        n = self._length(self.int16() if not self.flexible else 0)
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroupRecordError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise GroupRecordError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self._length(self.int32() if not self.flexible else 0)
        if n < 0:
            raise GroupRecordError("null where bytes are required")
        return self._take(n)

    def array_length(self) -> int:
        n = self._length(self.int32() if not self.flexible else 0)
        if n < 0:
            raise GroupRecordError("null where an array is required")
        return n

    def tagged_fields(self) -> None:
        """Skip a flexible struct's tagged fields (none are known to this reader)."""
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise GroupRecordError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types this broker does not use
    (KIP-848 consumer group records, share groups, ...), which replay skips as Kafka skips unknown ones."""
    reader = _Reader(data)
    record_type = reader.int16()
    if record_type in (0, 1):
        key: OffsetKey | GroupKey = OffsetKey(reader.string(), reader.string(), reader.int32())
    elif record_type == 2:
        key = GroupKey(reader.string())
    else:
        return None
    reader.finish()
    return key


def decode_offset_value(data: bytes) -> OffsetValue:
    """``OffsetCommitValue`` of any version 0-4."""
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= FIRST_FLEXIBLE_VALUE_VERSION:
        raise GroupRecordError(f"unknown OffsetCommitValue version {version}")
    reader.flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else -1
    reader.tagged_fields()
    reader.finish()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    """``GroupMetadataValue`` of any version 0-4."""
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= FIRST_FLEXIBLE_VALUE_VERSION:
        raise GroupRecordError(f"unknown GroupMetadataValue version {version}")
    reader.flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.int64() if version >= 2 else -1
    members = tuple(_member(reader, version) for _ in range(reader.array_length()))
    reader.tagged_fields()
    reader.finish()
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, members)


def _member(reader: _Reader, version: int) -> MemberValue:
    member_id = reader.string()
    instance_id = reader.nullable_string() if version >= 3 else None
    client_id = reader.string()
    client_host = reader.string()
    rebalance_timeout = reader.int32() if version >= 1 else -1
    session_timeout = reader.int32()
    if rebalance_timeout < 0:
        rebalance_timeout = session_timeout  # v0 had one timeout for both
    subscription = reader.bytes_()
    assignment = reader.bytes_()
    reader.tagged_fields()
    return MemberValue(
        member_id,
        instance_id,
        client_id,
        client_host,
        rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
    )


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, 32-bit wrapping)."""
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, by Kafka's rule
    ``Utils.abs(groupId.hashCode()) % partitions`` (``Utils.abs`` masks the sign bit)."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions
