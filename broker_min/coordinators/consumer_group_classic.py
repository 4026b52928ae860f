"""Classic members in KIP-848 consumer groups (a mixed group): JoinGroup, SyncGroup, Heartbeat and
LeaveGroup answered from a consumer group, as Apache Kafka's ``GroupMetadataManager`` does
(``classicGroupJoinToConsumerGroup`` and friends).

A classic consumer (protocol type ``consumer``) joining a non-empty consumer group becomes one
of its members: its JoinGroup metadata (a ConsumerProtocolSubscription) gives its subscribed
topics and the partitions it still owns; the coordinator records it like any member (with its
session timeout and protocols in the tagged ClassicMemberMetadata), runs the server assignor and
reconciles it.  The JoinGroup answer carries its member epoch as the generation, no leader and
no member list; its SyncGroup gets its assigned partitions (a ConsumerProtocolAssignment).  A
Heartbeat answers REBALANCE_IN_PROGRESS while the member must rejoin to move on: the group
epoch is ahead of it, it has partitions to revoke, or partitions it waited for were released.
Offsets it commits are checked against its member epoch (ILLEGAL_GENERATION).

Not built: converting a whole group between the two protocols (Kafka's online upgrade of a
classic group when a consumer-protocol member joins it, and downgrade when the last
consumer-protocol member leaves); the group stays a consumer group while it has members.
"""

from __future__ import annotations

import io
import logging
import struct
import uuid
from collections.abc import Sequence
from dataclasses import replace

from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from .consumer_group import ConsumerGroup, ConsumerMember, MemberState
from .consumer_group_protocol import ConsumerGroupProtocol
from .consumer_group_records import ClassicMetadata
from .group import GroupError, JoinResult, SyncResult
from .group_api import JoinRequest, SyncRequest

log = logging.getLogger("kafkakit.broker.groups")

PROTOCOL_TYPE = "consumer"
_SUBSCRIPTIONS = [
    entity_reader(m.ConsumerProtocolSubscription)
    for m in (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
]
_WRITE_ASSIGNMENT = entity_writer(assignment_v3.ConsumerProtocolAssignment)


def decode_subscription(metadata: bytes) -> tuple[list[str], list[tuple[str, int]], str | None]:
    """(topics, owned partitions, rack id) of a ConsumerProtocolSubscription of any version
    (a newer version is read with the newest schema known, as Java does)."""
    if len(metadata) < 2:
        raise GroupError(ErrorCode.inconsistent_group_protocol, "empty consumer protocol subscription")
    (version,) = struct.unpack_from(">h", metadata)
    if version < 0:
        raise GroupError(ErrorCode.inconsistent_group_protocol, f"subscription version {version}")
    try:
        entity, _ = _SUBSCRIPTIONS[min(version, 3)](bytes(metadata), 2)
    except Exception as exc:
        raise GroupError(ErrorCode.inconsistent_group_protocol, f"malformed subscription: {exc}") from None
    owned = [(t.topic, p) for t in getattr(entity, "owned_partitions", None) or () for p in t.partitions]
    return list(entity.topics), owned, (getattr(entity, "rack_id", None) or None)


def encode_assignment(partitions: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment v3 with its version prefix."""
    entity = assignment_v3.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            assignment_v3.TopicPartition(topic=TopicName(topic), partitions=tuple(i32(p) for p in sorted(ps)))
            for topic, ps in sorted(partitions.items())
        ),
        user_data=None,
    )
    out = io.BytesIO()
    out.write(struct.pack(">h", 3))
    _WRITE_ASSIGNMENT(out, entity)
    return out.getvalue()


class ClassicMembers:
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic members in consumer groups."""

    def __init__(self, protocol: ConsumerGroupProtocol) -> None:
        self._protocol = protocol

    # -- JoinGroup -------------------------------------------------------------------------

    def join(self, group: ConsumerGroup, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        unknown = member_id == ""
        if unknown:
            member_id = str(uuid.uuid4())
        try:
            settings = self._protocol.settings
            if len(group.members) >= settings.max_size and member_id not in group.members:
                raise GroupError(ErrorCode.group_max_size_reached)
            if not self._supports(group, request.protocol_type, [name for name, _ in request.protocols]):
                raise GroupError(ErrorCode.inconsistent_group_protocol, f"Member {member_id}'s protocols are not supported.")
            if request.require_known_member_id and unknown and request.group_instance_id is None:
                return JoinResult(ErrorCode.member_id_required, member_id)
            member, replaced = self._member(group, request, member_id, unknown)
            topics, owned, rack = decode_subscription(request.protocols[0][1])
            previous = group.members.get(member_id)
            updated = replace(
                member,
                instance_id=request.group_instance_id if request.group_instance_id is not None else member.instance_id,
                rack_id=rack if rack is not None else member.rack_id,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                subscribed_topic_names=tuple(sorted(set(topics))),
                client_id=request.client_id,
                client_host=request.client_host,
                classic=ClassicMetadata(request.session_timeout_ms, tuple(request.protocols)),
            )
            ids = {name: topic_id for name, (topic_id, _) in self._protocol.topics().items()}
            owned_ids: dict[uuid.UUID, list[int]] = {}
            for topic, partition in owned:
                if topic in ids:
                    owned_ids.setdefault(ids[topic], []).append(partition)
            reconciled = self._protocol.progress(group, previous, replaced, updated, owned_ids)
        except GroupError as exc:
            return JoinResult(exc.code, "" if unknown else member_id)
        log.info("group %s: classic member %s joined at epoch %d", group.group_id, member_id, reconciled.member_epoch)
        return JoinResult(
            ErrorCode.none,
            member_id,
            reconciled.member_epoch,
            PROTOCOL_TYPE,
            request.protocols[0][0],
            "",
        )

    @staticmethod
    def _supports(group: ConsumerGroup, protocol_type: str, names: Sequence[str]) -> bool:
        """Kafka's ``ConsumerGroup.supportsClassicProtocols``."""
        if protocol_type != PROTOCOL_TYPE:
            return False
        classic = [m for m in group.members.values() if m.classic is not None]
        if not group.members:
            return bool(names)
        return any(
            sum(1 for m in classic if m.classic and name in {n for n, _ in m.classic.protocols}) == len(classic)
            for name in names
        )

    def _member(
        self, group: ConsumerGroup, request: JoinRequest, member_id: str, unknown: bool
    ) -> tuple[ConsumerMember, ConsumerMember | None]:
        instance_id = request.group_instance_id
        if instance_id is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        existing = group.static_member(instance_id)
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        if unknown:  # a static member restarting: takes its predecessor's place and assignment
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing.member_id != member_id:
            raise GroupError(ErrorCode.fenced_instance_id)
        return existing, None

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------

    def _validate(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's ``validateConsumerGroupMember`` and ``throwIfMemberDoesNotUseClassicProtocol``."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        if member is None or member.classic is None:
            raise GroupError(ErrorCode.unknown_member_id)
        return member

    def sync(self, group: ConsumerGroup, request: SyncRequest) -> SyncResult:
        try:
            member = self._validate(group, request.member_id, request.group_instance_id)
            if request.generation_id != member.member_epoch:
                raise GroupError(ErrorCode.illegal_generation)
            assert member.classic is not None
            protocol_name = member.classic.protocols[0][0] if member.classic.protocols else None
            if request.protocol_type is not None and request.protocol_type != PROTOCOL_TYPE:
                raise GroupError(ErrorCode.inconsistent_group_protocol)
            if request.protocol_name is not None and request.protocol_name != protocol_name:
                raise GroupError(ErrorCode.inconsistent_group_protocol)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                raise GroupError(ErrorCode.rebalance_in_progress)
        except GroupError as exc:
            return SyncResult(exc.code)
        self._protocol.touch(group, member)
        names = self._protocol.topic_names(group)
        partitions = {names[t]: sorted(ps) for t, ps in member.assigned.items() if t in names and ps}
        return SyncResult(ErrorCode.none, encode_assignment(partitions), request.protocol_type, request.protocol_name)

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        try:
            member = self._validate(group, member_id, instance_id)
        except GroupError as exc:
            return exc.code
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        self._protocol.touch(group, member)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))
        ):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group: ConsumerGroup, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        answers: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in members:
            if instance_id is not None:
                member = group.static_member(instance_id)
                error = (
                    ErrorCode.unknown_member_id
                    if member is None
                    else ErrorCode.fenced_instance_id
                    if member_id and member.member_id != member_id
                    else ErrorCode.none
                )
            else:
                member = group.members.get(member_id)
                error = ErrorCode.unknown_member_id if member is None else ErrorCode.none
            if member is not None and error is ErrorCode.none:
                try:
                    self._protocol.fence(group, member.member_id, "left the group (LeaveGroup)")
                except GroupError as exc:
                    return exc.code, []
            answers.append((member_id, instance_id, error))
        return ErrorCode.none, answers


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's ``waitingOnUnreleasedPartition``: a partition of its target is still owned by another."""
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        for p in partitions - member.assigned.get(topic_id, frozenset()):
            if (topic_id, p) in group.partition_epochs:
                return True
    return False
