"""The consumer protocol: what group members put in JoinGroup metadata and SyncGroup assignments.

Kafka's ``ConsumerProtocol`` writes an int16 version followed by a
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` "data"
entity of that version (v0-3, never flexible). The entities come from kio's
generated schemas; the version prefix is ours, as it is Java's.

Decoding follows Java: a version above the highest known is parsed with the
highest known schema (new versions only append fields) and bytes after the
known fields are ignored, so a newer client's metadata still decodes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from ...errors import KafkaError
from ...structs import TopicPartition

__all__ = [
    "PROTOCOL_TYPE",
    "LOWEST_VERSION",
    "HIGHEST_VERSION",
    "DEFAULT_GENERATION",
    "ConsumerProtocolError",
    "Subscription",
    "Assignment",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
]

#: The JoinGroup protocol type every consumer group uses.
PROTOCOL_TYPE = "consumer"
LOWEST_VERSION = 0
HIGHEST_VERSION = 3
#: Java's ``AbstractStickyAssignor.DEFAULT_GENERATION``: "no generation known".
DEFAULT_GENERATION = -1

_VERSION = struct.Struct(">h")


class ConsumerProtocolError(KafkaError, ValueError):
    """Consumer protocol bytes (subscription or assignment) could not be parsed or built."""


@dataclass(slots=True)
class Subscription:
    """One member's subscription, as carried in its JoinGroup protocol metadata.

    ``member_id`` and ``group_instance_id`` are not encoded: the group leader
    fills them in from the JoinGroup response's member list before calling
    :meth:`PartitionAssignor.assign`.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(slots=True)
class Assignment:
    """The partitions (and optional assignor user data) the leader gives one member."""

    partitions: list[TopicPartition] = field(default_factory=list)
    user_data: bytes | None = None


_SUBSCRIPTION_MODULES: tuple[Any, ...] = (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
_ASSIGNMENT_MODULES: tuple[Any, ...] = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
_SUBSCRIPTION_READERS: tuple[Callable[[Any, int], tuple[Any, int]], ...] = tuple(
    entity_reader(m.ConsumerProtocolSubscription) for m in _SUBSCRIPTION_MODULES
)
_SUBSCRIPTION_WRITERS: tuple[Callable[[Any, Any], None], ...] = tuple(
    entity_writer(m.ConsumerProtocolSubscription) for m in _SUBSCRIPTION_MODULES
)
_ASSIGNMENT_READERS: tuple[Callable[[Any, int], tuple[Any, int]], ...] = tuple(
    entity_reader(m.ConsumerProtocolAssignment) for m in _ASSIGNMENT_MODULES
)
_ASSIGNMENT_WRITERS: tuple[Callable[[Any, Any], None], ...] = tuple(
    entity_writer(m.ConsumerProtocolAssignment) for m in _ASSIGNMENT_MODULES
)


def _check_write_version(version: int) -> None:
    if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
        raise ConsumerProtocolError(
            f"cannot write consumer protocol version {version} (supported {LOWEST_VERSION}-{HIGHEST_VERSION})"
        )


def _read_version(data: bytes | bytearray | memoryview, what: str) -> int:
    """The schema version to parse ``data`` with: Java's ``checkSubscriptionVersion`` rule."""
    if len(data) < 2:
        raise ConsumerProtocolError(
            f"consumer protocol {what} too short for its version header ({len(data)} bytes)"
        )
    (version,) = _VERSION.unpack_from(data, 0)
    if version < LOWEST_VERSION:
        raise ConsumerProtocolError(f"unsupported consumer protocol {what} version {version}")
    return min(int(version), HIGHEST_VERSION)


def _group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped per topic, topics in first-seen order (as Java's assignment writer)."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _encode(writer: Callable[[Any, Any], None], version: int, entity: Any, what: str) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    try:
        writer(buffer, entity)
    except (SerialError, struct.error, TypeError, ValueError, OverflowError) as exc:
        raise ConsumerProtocolError(f"cannot encode consumer protocol {what}: {exc}") from exc
    return buffer.getvalue()


def _decode(
    reader: Callable[[Any, int], tuple[Any, int]], data: bytes | bytearray | memoryview, what: str
) -> Any:
    if not isinstance(data, bytes):
        data = bytes(data)  # kio's native reader wants a read-only buffer
    try:
        entity, _size = reader(data, 2)
    except (SerialError, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise ConsumerProtocolError(f"malformed consumer protocol {what}: {exc}") from exc
    return entity


def encode_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """Serialise ``subscription`` as ConsumerProtocolSubscription ``version`` (0-3) with its int16 prefix.

    Like Java, topics and owned partitions are written sorted; fields the
    version lacks (owned partitions before v1, generation before v2, rack
    before v3) are dropped.
    """
    _check_write_version(version)
    module = _SUBSCRIPTION_MODULES[version]
    fields: dict[str, Any] = {
        "topics": tuple(sorted(subscription.topics)),
        "user_data": subscription.user_data,
    }
    if version >= 1:
        owned = _group_by_topic(sorted(subscription.owned_partitions))
        fields["owned_partitions"] = tuple(
            module.TopicPartition(topic=topic, partitions=tuple(partitions))
            for topic, partitions in owned.items()
        )
    if version >= 2:
        fields["generation_id"] = subscription.generation_id
    if version >= 3:
        fields["rack_id"] = subscription.rack_id
    return _encode(
        _SUBSCRIPTION_WRITERS[version], version, module.ConsumerProtocolSubscription(**fields), "subscription"
    )


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Parse JoinGroup member metadata of any consumer protocol version.

    Raises :class:`ConsumerProtocolError` for a negative version or truncated data.
    An empty rack id reads as ``None`` (as in Java).
    """
    version = _read_version(data, "subscription")
    entity = _decode(_SUBSCRIPTION_READERS[version], data, "subscription")
    owned: list[TopicPartition] = []
    if version >= 1:
        owned = [
            TopicPartition(tp.topic, p) for tp in entity.owned_partitions or () for p in tp.partitions or ()
        ]
    return Subscription(
        topics=list(entity.topics or ()),
        user_data=entity.user_data,
        owned_partitions=owned,
        generation_id=entity.generation_id if version >= 2 else DEFAULT_GENERATION,
        rack_id=(entity.rack_id or None) if version >= 3 else None,
    )


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """Serialise ``assignment`` as ConsumerProtocolAssignment ``version`` (0-3; all share one layout)."""
    _check_write_version(version)
    module = _ASSIGNMENT_MODULES[version]
    grouped = _group_by_topic(assignment.partitions)
    entity = module.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            module.TopicPartition(topic=topic, partitions=tuple(partitions))
            for topic, partitions in grouped.items()
        ),
        user_data=assignment.user_data,
    )
    return _encode(_ASSIGNMENT_WRITERS[version], version, entity, "assignment")


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Parse a SyncGroup member assignment of any version; empty bytes mean an empty assignment."""
    if len(data) == 0:
        return Assignment()
    version = _read_version(data, "assignment")
    entity = _decode(_ASSIGNMENT_READERS[version], data, "assignment")
    return Assignment(
        partitions=[
            TopicPartition(tp.topic, p)
            for tp in entity.assigned_partitions or ()
            for p in tp.partitions or ()
        ],
        user_data=entity.user_data,
    )
