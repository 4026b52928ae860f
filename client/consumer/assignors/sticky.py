"""Kafka's "sticky" (eager) and "cooperative-sticky" (KIP-429) assignors and their user data.

Both balance like round-robin but keep partitions where they were. They
differ in where a member's previous partitions come from and in what the
leader may hand out:

* ``sticky`` is eager: members revoke everything before rejoining, so each
  one sends what it owned (and its generation) in its subscription's user
  data, in the format of Java's ``StickyAssignor`` so mixed groups stay sticky.
* ``cooperative-sticky`` reads the subscription's ``owned_partitions`` and
  ``generation_id`` (user data carries only the generation, for v0/v1
  subscriptions) and never gives a partition to a new member while its
  current owner still holds it: the partition is only removed from the owner
  this round; the owner revokes it and rejoins, and the follow-up rebalance
  hands it to its new member.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import ClassVar

from ...structs import TopicPartition
from .base import PartitionAssignor, RebalanceProtocol, subscribed_partition_counts, to_assignments
from .protocol import DEFAULT_GENERATION, Assignment, Subscription
from .sticky_algorithm import MemberData, partitions_transferring_ownership, sticky_assign

__all__ = [
    "AbstractStickyAssignor",
    "StickyAssignor",
    "CooperativeStickyAssignor",
    "MemberData",
    "encode_sticky_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_user_data",
    "decode_cooperative_user_data",
]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class AbstractStickyAssignor(PartitionAssignor):
    """Shared sticky logic; subclasses say where a member's owned partitions come from."""

    def member_data(self, subscription: Subscription) -> MemberData:
        """The partitions ``subscription``'s member owned and its generation (``None`` if unknown)."""
        raise NotImplementedError

    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        result = sticky_assign(counts, subscriptions, self.member_data)
        assignment = {member: result.assignment.get(member, []) for member in subscriptions}
        self._adjust(assignment, subscriptions, result.transferring)
        return to_assignments(assignment)

    def _adjust(
        self,
        assignment: dict[str, list[TopicPartition]],
        subscriptions: dict[str, Subscription],
        transferring: dict[TopicPartition, str] | None,
    ) -> None:
        """Hook for the cooperative assignor's two-phase rule; eager assignors keep the target."""
        return None


class StickyAssignor(AbstractStickyAssignor):
    """The eager sticky assignor (Java's ``StickyAssignor``, protocol name ``"sticky"``)."""

    name: ClassVar[str] = "sticky"

    def __init__(self) -> None:
        self._member_assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._member_assignment = list(assignment.partitions)
        self._generation = generation_id

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        # Eager members own nothing when they rejoin: the previous assignment travels in user data.
        if not subscription.user_data:
            return MemberData([], None)
        return decode_sticky_user_data(subscription.user_data)


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """The incremental sticky assignor (Java's ``CooperativeStickyAssignor``, KIP-429)."""

    name: ClassVar[str] = "cooperative-sticky"
    rebalance_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = ("eager", "cooperative")

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return encode_cooperative_user_data(self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        if subscription.generation_id >= 0:  # ConsumerProtocolSubscription v2+
            return MemberData(list(subscription.owned_partitions), subscription.generation_id)
        if subscription.user_data is None:
            return MemberData(list(subscription.owned_partitions), None)
        return MemberData(
            list(subscription.owned_partitions), decode_cooperative_user_data(subscription.user_data)
        )

    def _adjust(
        self,
        assignment: dict[str, list[TopicPartition]],
        subscriptions: dict[str, Subscription],
        transferring: dict[TopicPartition, str] | None,
    ) -> None:
        # Java's adjustAssignment: a partition changing owner is withheld from its new
        # member until the old one has revoked it (the follow-up rebalance assigns it).
        if transferring is None:
            transferring = partitions_transferring_ownership(subscriptions, assignment)
        for tp, member in transferring.items():
            assignment[member].remove(tp)


# --------------------------------------------------------------------------- user data codecs


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """Java ``StickyAssignor`` user data (schema V1): ``[topic, [partition]]`` then int32 generation.

    With ``generation=None`` the V0 layout (no generation) is written.
    """
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    out = bytearray(_INT32.pack(len(grouped)))
    for topic in sorted(grouped):
        name = topic.encode()
        out += _INT16.pack(len(name))
        out += name
        numbers = grouped[topic]
        out += _INT32.pack(len(numbers))
        out += struct.pack(f">{len(numbers)}i", *numbers)
    if generation is not None:
        out += _INT32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | bytearray | memoryview) -> MemberData:
    """Parse Java ``StickyAssignor`` user data, V1 (with generation) falling back to V0.

    As in Java, unparseable data means "owned nothing, generation -1".
    """
    data = bytes(data)
    try:
        partitions, offset = _read_topic_partitions(data)
    except (ValueError, struct.error, UnicodeDecodeError):
        return MemberData([], DEFAULT_GENERATION)
    if len(data) - offset >= 4:
        (generation,) = _INT32.unpack_from(data, offset)
        return MemberData(partitions, generation)
    return MemberData(partitions, None)


def _read_topic_partitions(data: bytes) -> tuple[list[TopicPartition], int]:
    (topic_count,) = _INT32.unpack_from(data, 0)
    offset = 4
    if topic_count < 0:
        raise ValueError("negative topic count")
    partitions: list[TopicPartition] = []
    for _ in range(topic_count):
        (name_length,) = _INT16.unpack_from(data, offset)
        offset += 2
        if name_length < 0 or offset + name_length > len(data):
            raise ValueError("bad topic name length")
        topic = data[offset : offset + name_length].decode()
        offset += name_length
        (count,) = _INT32.unpack_from(data, offset)
        offset += 4
        if count < 0 or offset + 4 * count > len(data):
            raise ValueError("bad partition count")
        partitions.extend(TopicPartition(topic, p) for p in struct.unpack_from(f">{count}i", data, offset))
        offset += 4 * count
    return partitions, offset


def encode_cooperative_user_data(generation: int) -> bytes:
    """Java ``CooperativeStickyAssignor`` user data: the member's int32 generation."""
    return _INT32.pack(generation)


def decode_cooperative_user_data(data: bytes | bytearray | memoryview) -> int:
    """The generation in cooperative-sticky user data; -1 when it cannot be parsed (as Java)."""
    data = bytes(data)
    if len(data) < 4:
        return DEFAULT_GENERATION
    (generation,) = _INT32.unpack_from(data, 0)
    return int(generation)
