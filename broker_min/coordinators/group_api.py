"""The classic group coordinator's request and answer types, and read-only views of its groups.

Handlers build :class:`JoinRequest`/:class:`SyncRequest` with version differences
already resolved; DescribeGroups and ListGroups answers are built here from the
coordinator's groups (:func:`describe_group`, :func:`list_groups`), and so is the
metadata record a group is stored as (:func:`group_metadata_record`) and the group a
loaded record brings back (:func:`group_from_record`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .consumer_group_protocol import ConsumerSettings
from .group import ClassicGroup, GroupState, Member, Protocols
from .group_records import GroupKey, GroupValue, MemberValue, encode_group_key, encode_group_value
from .offsets_topic import CoordinatorRecord

log = logging.getLogger("kafkakit.broker.groups")


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker's group.* settings (Kafka's names and defaults unless noted)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    new_member_join_timeout_ms: int = 300_000
    offset_metadata_max_bytes: int = 4096
    #: KIP-848 consumer groups (group.consumer.*).
    consumer: ConsumerSettings = ConsumerSettings()


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup, version differences already resolved by the handler.

    ``require_known_member_id`` is True from v4 (a dynamic member with an empty
    member id gets MEMBER_ID_REQUIRED and an id to rejoin with).
    """

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """A SyncGroup; ``protocol_type``/``protocol_name`` are None before v5."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member as DescribeGroups shows it (metadata/assignment only while Stable)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as DescribeGroups shows it; an unknown group is described as Dead."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]
    error: ErrorCode = ErrorCode.none


def describe_group(group_id: str, group: ClassicGroup | None, error: ErrorCode | None = None) -> GroupDescription:
    """A group as DescribeGroups shows it: members with metadata and assignment only while Stable
    (an ``error``, e.g. NOT_COORDINATOR, describes nothing)."""
    if error is not None:
        return GroupDescription(group_id, "", "", "", (), error)
    if group is None:
        return GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
    stable = group.is_in(GroupState.STABLE)
    members = tuple(
        MemberDescription(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata(group.protocol_name) if stable else b"",
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return GroupDescription(
        group_id,
        group.state.value,
        group.protocol_type or "",
        (group.protocol_name or "") if stable else "",
        members,
    )


def list_groups(groups: Iterable[ClassicGroup], states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """(group id, protocol type, state) of ``groups``, optionally only those in ``states`` (any case)."""
    wanted = {s.lower() for s in states}
    return [
        (g.group_id, g.protocol_type or "", g.state.value)
        for g in groups
        if not wanted or g.state.value.lower() in wanted
    ]


def group_metadata_record(group: ClassicGroup, assignment: Mapping[str, bytes]) -> CoordinatorRecord:
    """The group's metadata record (Kafka's GroupMetadataKey/Value) with ``assignment`` per member."""
    members = tuple(
        MemberValue(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(group.protocol_name),
            assignment.get(m.member_id, b""),
        )
        for m in group.members.values()
    )
    value = GroupValue(
        group.protocol_type or "",
        group.generation_id,
        group.protocol_name,
        group.leader_id,
        group.state_timestamp_ms,
        members,
    )
    return encode_group_key(GroupKey(group.group_id)), encode_group_value(value)


def group_from_record(group_id: str, value: GroupValue) -> ClassicGroup:
    """The group a loaded ``GroupMetadataValue`` describes, as Kafka's replay rebuilds it.

    Stable with the stored members when there are any (each with the group's protocol as its only
    one, its subscription as that protocol's metadata, its assignment, its timeouts and its
    instance id), else Empty; the generation, protocol type and name, leader and state timestamp
    as stored.  Nothing of a rebalance in progress is stored, so none comes back: the coordinator
    arms each member's session as a fresh heartbeat (:meth:`ClassicGroupProtocol.on_loaded`).
    """
    group = ClassicGroup(
        group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        state_timestamp_ms=value.current_state_timestamp,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        generation_id=value.generation,
        leader_id=value.leader,
    )
    for stored in value.members:
        if stored.group_instance_id is not None and stored.group_instance_id in group.static_members:
            log.warning(
                "group %s: skipping stored member %s, its instance id %s is another's",
                group_id, stored.member_id, stored.group_instance_id,
            )  # fmt: skip
            continue
        protocols: Protocols = ((value.protocol, stored.subscription),) if value.protocol is not None else ()
        member = Member(
            stored.member_id,
            stored.group_instance_id,
            stored.client_id,
            stored.client_host,
            stored.rebalance_timeout,
            stored.session_timeout,
            value.protocol_type,
            protocols,
            assignment=stored.assignment,
        )
        group.add(member)
    return group
