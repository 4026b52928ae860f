"""KIP-848 consumer group records as objects: building them, encoding them, and replaying them.

Every change to a consumer group is a list of :data:`Record` (a key and a value object, None for
a tombstone): :mod:`.consumer_group_protocol` appends them encoded (:func:`encode_record`) and then
applies them with :func:`replay`, the same function that rebuilds the groups when
``__consumer_offsets`` is loaded (values decoded by :func:`decode_value`), as Kafka's
``GroupMetadataManager.replay`` does.  The byte formats are in :mod:`.consumer_group_records`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .consumer_group import LEAVE_GROUP_MEMBER_EPOCH, ConsumerGroup, ConsumerMember, MemberState
from .consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ConsumerKey,
    MemberAssignment,
    MemberMetadata,
    decode_current_assignment,
    decode_epoch,
    decode_member_metadata,
    decode_partition_metadata,
    decode_target_assignment_member,
    encode_current_assignment,
    encode_group_metadata,
    encode_key,
    encode_member_metadata,
    encode_partition_metadata,
    encode_target_assignment_member,
    encode_target_assignment_metadata,
)
from .offsets_topic import CoordinatorRecord

#: A decoded record: key and value object (None: tombstone).
Record = tuple[ConsumerKey, Any]


def decode_value(key: ConsumerKey, value: bytes | None) -> Any:
    """The value object of a stored record (None for a tombstone)."""
    if value is None:
        return None
    t = key.record_type
    if t in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        return decode_epoch(value)
    if t == PARTITION_METADATA:
        return decode_partition_metadata(value)
    if t == MEMBER_METADATA:
        return decode_member_metadata(value)
    if t == TARGET_ASSIGNMENT_MEMBER:
        return decode_target_assignment_member(value)
    return decode_current_assignment(value)


def encode_record(key: ConsumerKey, value: Any) -> CoordinatorRecord:
    """A record as appended to ``__consumer_offsets``."""
    if value is None:
        return encode_key(key), None
    t = key.record_type
    if t == GROUP_METADATA:
        data = encode_group_metadata(value)
    elif t == TARGET_ASSIGNMENT_METADATA:
        data = encode_target_assignment_metadata(value)
    elif t == PARTITION_METADATA:
        data = encode_partition_metadata(value)
    elif t == MEMBER_METADATA:
        data = encode_member_metadata(value)
    elif t == TARGET_ASSIGNMENT_MEMBER:
        data = encode_target_assignment_member(value)
    else:
        data = encode_current_assignment(value)
    return encode_key(key), data


def replay(groups: dict[str, ConsumerGroup], key: ConsumerKey, value: Any) -> None:
    """Apply one record to ``groups`` (Kafka's ``GroupMetadataManager.replay`` for consumer groups)."""
    group = groups.get(key.group)
    if group is None:
        if value is None:
            return
        group = groups[key.group] = ConsumerGroup(key.group)
    t = key.record_type
    if t == GROUP_METADATA:
        if value is None:
            del groups[key.group]
        else:
            group.group_epoch = value
    elif t == PARTITION_METADATA:
        group.subscription_metadata = dict(value or {})
    elif t == TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = value if value is not None else 0
    elif t == TARGET_ASSIGNMENT_MEMBER:
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = dict(value)
    elif t == MEMBER_METADATA:
        if value is None:
            group.remove_member(key.member_id)
            return
        m: MemberMetadata = value
        member = group.members.get(key.member_id) or ConsumerMember(key.member_id)
        group.update_member(
            replace(
                member,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                server_assignor=m.server_assignor,
                classic=m.classic,
            )
        )
    elif t == CURRENT_MEMBER_ASSIGNMENT:
        member = group.members.get(key.member_id) or ConsumerMember(key.member_id)
        if value is None:
            group.update_member(
                replace(member, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, assigned={}, pending_revocation={})
            )
            return
        a: MemberAssignment = value
        group.update_member(
            replace(
                member,
                member_epoch=a.member_epoch,
                previous_member_epoch=a.previous_member_epoch,
                state=MemberState(a.state) if a.state in MemberState._value2member_map_ else MemberState.UNKNOWN,
                assigned=dict(a.assigned),
                pending_revocation=dict(a.pending_revocation),
            )
        )


def record_key(record_type: int, group_id: str, member_id: str = "") -> ConsumerKey:
    return ConsumerKey(record_type, group_id, member_id)


def member_records(group_id: str, member: ConsumerMember) -> list[Record]:
    """The subscription record of ``member``."""
    value = MemberMetadata(
        member.instance_id,
        member.rack_id,
        member.client_id,
        member.client_host,
        member.subscribed_topic_names,
        member.subscribed_topic_regex,
        member.rebalance_timeout_ms,
        member.server_assignor,
        member.classic,
    )
    return [(record_key(MEMBER_METADATA, group_id, member.member_id), value)]


def assignment_record(group_id: str, member: ConsumerMember) -> Record:
    value = MemberAssignment(
        member.member_epoch,
        member.previous_member_epoch,
        int(member.state),
        member.assigned,
        member.pending_revocation,
    )
    return record_key(CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id), value


def removal_records(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target assignment, subscription tombstones."""
    return [
        (record_key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
        (record_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
        (record_key(MEMBER_METADATA, group_id, member_id), None),
    ]


def group_tombstones(group_id: str) -> list[Record]:
    """Deleting an empty consumer group (Kafka's ``createGroupTombstoneRecords``)."""
    return [
        (record_key(TARGET_ASSIGNMENT_METADATA, group_id), None),
        (record_key(PARTITION_METADATA, group_id), None),
        (record_key(GROUP_METADATA, group_id), None),
    ]
