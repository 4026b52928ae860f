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

Converting a whole group (Kafka's migration with its default policy, ``bidirectional``):

- *online upgrade*: a consumer-protocol member joining a non-empty classic group of protocol type
  ``consumer`` turns it into a consumer group whose members are the classic members, each at the
  group's generation as its member epoch with its last assignment as current and target
  assignment (Kafka's ``ConsumerGroup.fromClassicGroup``); their parked JoinGroup/SyncGroup get
  REBALANCE_IN_PROGRESS and the joining member then bumps the group epoch as usual;
- *online downgrade*: when the last consumer-protocol member leaves or is fenced and classic
  members remain, the group becomes a Stable classic group of those members at the group epoch,
  each with its target assignment, and a rebalance starts (Kafka's ``ClassicGroup.fromConsumerGroup``).

Both write Kafka's records: tombstones for the old group's records, then the new group's.
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

from .classic_group_protocol import ClassicGroupProtocol
from .consumer_group import ConsumerGroup, ConsumerMember, MemberState, Partitions
from .consumer_group_protocol import ConsumerGroupProtocol
from .consumer_group_records import (
    GROUP_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMetadata,
)
from .consumer_group_replay import (
    Record,
    assignment_record,
    group_tombstones,
    member_records,
    record_key,
    removal_records,
)
from .group import (
    ClassicGroup,
    GroupError,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    complete_join,
    complete_sync,
    now_ms,
)
from .group_api import JoinRequest, SyncRequest, group_metadata_record
from .group_records import GroupKey, encode_group_key

log = logging.getLogger("kafkakit.broker.groups")

PROTOCOL_TYPE = "consumer"
_SUBSCRIPTIONS = [
    entity_reader(m.ConsumerProtocolSubscription)
    for m in (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
]
_WRITE_ASSIGNMENT = entity_writer(assignment_v3.ConsumerProtocolAssignment)
_READ_ASSIGNMENT = entity_reader(assignment_v3.ConsumerProtocolAssignment)  # v0-3 share one layout


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


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """Topic -> partitions of a ConsumerProtocolAssignment of any version (empty bytes: nothing)."""
    if len(data) < 2:
        return {}
    entity, _ = _READ_ASSIGNMENT(bytes(data), 2)
    out: dict[str, list[int]] = {}
    for t in entity.assigned_partitions:
        out.setdefault(t.topic, []).extend(t.partitions)
    return out


def encode_assignment(partitions: dict[str, list[int]], version: int = 3) -> bytes:
    """A ConsumerProtocolAssignment (v0-3 share one layout) with its version prefix."""
    entity = assignment_v3.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            assignment_v3.TopicPartition(topic=TopicName(topic), partitions=tuple(i32(p) for p in sorted(ps)))
            for topic, ps in sorted(partitions.items())
        ),
        user_data=None,
    )
    out = io.BytesIO()
    out.write(struct.pack(">h", min(max(version, 0), 3)))
    _WRITE_ASSIGNMENT(out, entity)
    return out.getvalue()


class ClassicMembers:
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic members in consumer groups."""

    def __init__(
        self, protocol: ConsumerGroupProtocol, classic: ClassicGroupProtocol, classic_groups: dict[str, ClassicGroup]
    ) -> None:
        self._protocol = protocol
        self._classic = classic
        self._classic_groups = classic_groups
        protocol.upgrade = self.upgrade
        protocol.downgrade = self.downgrade

    # -- converting groups ------------------------------------------------------------------

    def upgrade(self, classic: ClassicGroup) -> bool:
        """Turn a non-empty classic group into a consumer group (Kafka's ``convertToConsumerGroup``);
        False when it cannot be (another protocol type, too many members, unreadable metadata)."""
        protocol = self._protocol
        if classic.protocol_type != PROTOCOL_TYPE or len(classic.members) > protocol.settings.max_size:
            return False
        topics_now = protocol.topics()
        generation = classic.generation_id
        members: list[ConsumerMember] = []
        try:
            for m in classic.members.values():
                topics, _owned, rack = decode_subscription(m.metadata(classic.protocol_name))
                assigned: dict[uuid.UUID, frozenset[int]] = {}
                for topic, partitions in decode_assignment(m.assignment).items():
                    if topic in topics_now:
                        assigned[topics_now[topic][0]] = frozenset(partitions)
                members.append(
                    ConsumerMember(
                        m.member_id,
                        member_epoch=generation,
                        previous_member_epoch=generation,
                        state=MemberState.STABLE,
                        instance_id=m.group_instance_id,
                        rack_id=rack,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=tuple(sorted(set(topics))),
                        rebalance_timeout_ms=m.rebalance_timeout_ms,
                        classic=ClassicMetadata(m.session_timeout_ms, m.protocols),
                        assigned=assigned,
                    )
                )
        except Exception as exc:
            log.warning("cannot upgrade classic group %s: %s", classic.group_id, exc)
            return False
        group_id = classic.group_id
        for m in classic.members.values():
            complete_join(m, JoinResult(ErrorCode.rebalance_in_progress, m.member_id))
            complete_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        records: list[Record] = []
        for member in members:
            records += member_records(group_id, member)
        records.append((record_key(GROUP_METADATA, group_id), generation))
        records += [(record_key(TARGET_ASSIGNMENT_MEMBER, group_id, m.member_id), m.assigned) for m in members]
        records.append((record_key(TARGET_ASSIGNMENT_METADATA, group_id), generation))
        records += [assignment_record(group_id, m) for m in members]
        error = protocol._write_raw(group_id, [(encode_group_key(GroupKey(group_id)), None)])
        if error is not None:
            raise GroupError(error)
        self._timers_cancel(group_id)
        del self._classic_groups[group_id]
        classic.transition_to(GroupState.DEAD)
        protocol._write(group_id, records)
        group = protocol.groups[group_id]
        for member in group.members.values():
            protocol.touch(group, member)
        log.info("group %s: upgraded from classic to consumer group at epoch %d", group_id, generation)
        return True

    def downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> bool:
        """Turn a consumer group whose remaining members all use the classic protocol into a classic
        group and start a rebalance (Kafka's ``convertToClassicGroup``)."""
        group_id = group.group_id
        remaining = [m for m in group.members.values() if m.member_id != leaving_member_id]
        names = self._protocol.topic_names(group)
        classic = ClassicGroup(
            group_id, state=GroupState.STABLE, protocol_type=PROTOCOL_TYPE, generation_id=group.group_epoch,
            state_timestamp_ms=now_ms(),
        )  # fmt: skip
        for m in remaining:
            assert m.classic is not None
            classic.add(
                Member(
                    m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                    m.classic.session_timeout_ms, PROTOCOL_TYPE, m.classic.protocols,
                )
            )  # fmt: skip
        try:
            classic.protocol_name = classic.select_protocol()
        except RuntimeError:
            return False
        assignments: dict[str, bytes] = {}
        for m in remaining:
            member = classic.members[m.member_id]
            metadata = member.metadata(classic.protocol_name)
            version = struct.unpack_from(">h", metadata)[0] if len(metadata) >= 2 else 0
            target: Partitions = group.target.get(m.member_id, {})
            member.assignment = encode_assignment(
                {names[t]: sorted(ps) for t, ps in target.items() if t in names and ps}, version
            )
            assignments[m.member_id] = member.assignment
        records: list[Record] = []
        for m in group.members.values():
            records += removal_records(group_id, m.member_id)
        records += group_tombstones(group_id)
        self._protocol._write(group_id, records)
        error = self._protocol._write_raw(group_id, [group_metadata_record(classic, assignments)])
        if error is not None:
            log.error("group %s: writing the downgraded classic group failed: %s", group_id, error)
        self._timers_cancel(group_id)
        self._classic_groups[group_id] = classic
        self._classic.start_rebalance(classic, f"Downgrade group {group_id} from consumer to classic.")
        return True

    def _timers_cancel(self, group_id: str) -> None:
        self._protocol._timers.cancel_matching(1, group_id)

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
            topics_now = self._protocol.topics()
            owned_ids: dict[uuid.UUID, list[int]] = {}
            for topic, partition in owned:
                if topic in topics_now:
                    owned_ids.setdefault(topics_now[topic][0], []).append(partition)
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
