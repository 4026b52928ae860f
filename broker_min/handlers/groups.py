"""Classic group membership and admin: JoinGroup (11) v0-7, SyncGroup (14) v0-5, Heartbeat (12) v0-4,
LeaveGroup (13) v0-5, DescribeGroups (15) v0-5, ListGroups (16) v0-5, DeleteGroups (42) v0-2.
ListGroups and DeleteGroups also cover KIP-932 share groups (:mod:`.share_groups`); ListGroups v5
filters by group type.

The handlers translate between kio messages and the coordinator
(:mod:`kafkakit.broker.coordinators.group_coordinator`, whose classic protocol rules live in
:mod:`kafkakit.broker.coordinators.classic_group_protocol`).
JoinGroup and SyncGroup may park: they await the coordinator's future while the
rest of the group joins, and the server keeps serving the connection's later
requests and every other connection meanwhile.

Version notes: JoinGroup v0 has no rebalance timeout (the session timeout is
used, as Kafka does); v4+ hands a dynamic member with an empty member id
MEMBER_ID_REQUIRED and its id; v5+ carries ``group_instance_id`` (static
membership); v7+ answers the protocol type and name (nullable).  SyncGroup v5+
sends protocol type and name, checked against the group's.  LeaveGroup v3+
leaves a batch of members, by member id or by instance id alone.

A group whose ``__consumer_offsets`` partition this node does not lead gets
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while the partition loads), and
an answer that follows a write of the coordinator waits until the write is
replicated (:func:`settled`; immediate on a single node).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.group_api import JoinRequest, SyncRequest
from kafkakit.broker.handlers import share_groups
from kafkakit.broker.handlers.base import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLIENT_HOST,
    NO_THROTTLE,
    ApiHandler,
    has_field,
    make,
    nested,
)
from kafkakit.protocol import RequestHeaderInfo, response_class
from kafkakit.protocol.build import millis
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

FIRST_MEMBER_ID_REQUIRED_VERSION = 4
# Kafka's AclOperation codes a group resource supports: READ (3), DELETE (6), DESCRIBE (8).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

def may_use_group(state: BrokerState, group_id: str, operation: AclOperation = AclOperation.READ) -> bool:
    """Kafka's group checks: READ to be a member or commit, DESCRIBE to look, DELETE to delete."""
    return state.allowed(operation, ResourceType.GROUP, group_id)


_REFUSED = ErrorCode.group_authorization_failed


async def settled(state: BrokerState, group_id: str, error: ErrorCode) -> ErrorCode:
    """``error``, or, when it is NONE, whatever making the coordinator's writes to the group's
    partition durable failed with (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR; Kafka's mapping)."""
    if error is not ErrorCode.none:
        return error
    return await state.groups.settle(group_id) or ErrorCode.none


async def handle_join_group(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Join (or rejoin) a group; parks until the join phase completes."""
    version = header.api_version
    if not may_use_group(state, request.group_id):
        cls = response_class(JOIN_GROUP, version)
        return make(cls, throttle_time=NO_THROTTLE, error_code=_REFUSED, generation_id=-1, protocol_type=None,
                    protocol_name=None if has_field(cls, "protocol_type") else "", leader="",
                    skip_assignment=False, member_id="", members=())  # fmt: skip
    if share_groups.is_share_group(state, request.group_id):
        # One namespace of group ids: a classic member cannot join a share group (as in Kafka).
        cls = response_class(JOIN_GROUP, version)
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.inconsistent_group_protocol,
                    generation_id=-1, protocol_type=None,
                    protocol_name=None if has_field(cls, "protocol_type") else "", leader="",
                    skip_assignment=False, member_id=request.member_id, members=())  # fmt: skip
    session_timeout_ms = millis(request.session_timeout)
    rebalance_timeout_ms = millis(request.rebalance_timeout) if version >= 1 else session_timeout_ms
    result = await state.groups.join(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=header.client_id or "",
            client_host=CLIENT_HOST.get(),
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            require_known_member_id=version >= FIRST_MEMBER_ID_REQUIRED_VERSION,
        )
    )
    error = await settled(state, request.group_id, result.error)
    if error is not result.error:
        result = dataclasses.replace(result, error=error, generation_id=-1, members=())
    cls = response_class(JOIN_GROUP, version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    members = tuple(
        make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
        for m in result.members
    )
    nullable = has_field(cls, "protocol_type")  # v7+: protocol type and name may be null
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if nullable else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Send the leader's assignment / receive this member's; followers park until the leader's arrives."""
    if not may_use_group(state, request.group_id):
        return make(response_class(SYNC_GROUP, header.api_version), throttle_time=NO_THROTTLE, error_code=_REFUSED,
                    protocol_type=None, protocol_name=None, assignment=b"")  # fmt: skip
    result = await state.groups.sync(
        SyncRequest(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignments=[(a.member_id, bytes(a.assignment)) for a in request.assignments],
        )
    )
    error = await settled(state, request.group_id, result.error)
    if error is not result.error:
        result = dataclasses.replace(result, error=error, assignment=b"")
    return make(
        response_class(SYNC_GROUP, header.api_version),
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Keep the session alive; REBALANCE_IN_PROGRESS asks the member to rejoin."""
    if not may_use_group(state, request.group_id):
        return make(response_class(HEARTBEAT, header.api_version), throttle_time=NO_THROTTLE, error_code=_REFUSED)
    error = state.groups.heartbeat(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
    )
    return make(response_class(HEARTBEAT, header.api_version), throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Leave one member (v0-2) or a batch of members by member id or instance id (v3+)."""
    cls = response_class(LEAVE_GROUP, header.api_version)
    if not may_use_group(state, request.group_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=_REFUSED, members=())
    batched = has_field(cls, "members")
    if batched:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    top_error, answers = state.groups.leave(request.group_id, leaving)
    top_error = await settled(state, request.group_id, top_error)
    if top_error is not ErrorCode.none:
        answers = []
    if not batched:
        # One member: its error becomes the top-level error, as Kafka's LeaveGroupResponse does.
        member_errors = [e for _, _, e in answers if e is not ErrorCode.none]
        error = (
            top_error
            if top_error is not ErrorCode.none
            else (member_errors[0] if member_errors else top_error)
        )
        return make(cls, throttle_time=NO_THROTTLE, error_code=error)
    member_cls = nested(cls, "MemberResponse")
    members = tuple(
        make(member_cls, member_id=member_id, group_instance_id=instance_id, error_code=error)
        for member_id, instance_id, error in answers
    )
    return make(cls, throttle_time=NO_THROTTLE, error_code=top_error, members=members)


async def handle_describe_groups(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """State, protocol and members of each group (metadata and assignments while Stable)."""
    cls = response_class(DESCRIBE_GROUPS, header.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    include_operations = bool(getattr(request, "include_authorized_operations", False))
    groups = []
    refused = [g for g in request.groups if not may_use_group(state, g, AclOperation.DESCRIBE)]
    for group_id in refused:
        groups.append(make(group_cls, error_code=_REFUSED, error_message=None, group_id=group_id, group_state="",
                           protocol_type="", protocol_data="", members=(),
                           authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
    for described in state.groups.describe([g for g in request.groups if g not in refused]):
        if described.error is not ErrorCode.none:
            groups.append(make(group_cls, error_code=described.error, error_message=None, group_id=described.group_id,
                               group_state="", protocol_type="", protocol_data="", members=(),
                               authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
            continue
        members = tuple(
            make(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in described.members
        )
        groups.append(
            make(
                group_cls,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=described.group_id,
                group_state=described.state,
                protocol_type=described.protocol_type,
                protocol_data=described.protocol_name,
                members=members,
                authorized_operations=GROUP_AUTHORIZED_OPERATIONS
                if include_operations
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def handle_list_groups(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Every group this broker coordinates, filtered by state from v4."""
    cls = response_class(LIST_GROUPS, header.api_version)
    group_cls = nested(cls, "ListedGroup")
    states = getattr(request, "states_filter", None) or ()
    types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
    if state.groups.partitions.loading:
        # Kafka answers the whole request so while one of its partitions loads.
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_load_in_progress, groups=())
    cluster_wide = state.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
    groups = tuple(
        make(
            group_cls,
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=group_state,
            group_type=state.groups.group_type(group_id),
        )
        for group_id, protocol_type, group_state in state.groups.list_groups(states)
        # Without DESCRIBE on the cluster, a caller sees only the groups it may describe.
        if cluster_wide or may_use_group(state, group_id, AclOperation.DESCRIBE)
        if not types or state.groups.group_type(group_id) in types  # v5 types filter
    )
    groups += _listed_share_groups(state, request, group_cls, states, cluster_wide)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


async def handle_delete_groups(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Delete Empty groups with their committed offsets."""
    cls = response_class(DELETE_GROUPS, header.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    allowed = [g for g in request.groups_names if may_use_group(state, g, AclOperation.DELETE)]
    refused = tuple(make(result_cls, group_id=g, error_code=_REFUSED) for g in request.groups_names if g not in allowed)

    shared = share_groups.delete_share_groups(state, allowed)  # KIP-932 share groups
    results = refused + tuple(make(result_cls, group_id=g, error_code=e) for g, e in shared.items()) + tuple(
        [
            make(result_cls, group_id=group_id, error_code=await settled(state, group_id, error))
            for group_id, error in state.groups.delete_groups([g for g in allowed if g not in shared])
        ]
    )
    return make(cls, throttle_time=NO_THROTTLE, results=results)


def _listed_share_groups(state: BrokerState, request: Any, group_cls: type, states: Any, cluster_wide: bool) -> tuple[Any, ...]:
    """Share groups for ListGroups (none when a v5 types filter leaves "share" out)."""

    types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
    if types and "share" not in types:
        return ()
    return tuple(
        make(group_cls, group_id=g, protocol_type="share", group_state=s, group_type="share")
        for g, s in share_groups.listed_share_groups(state, states)
        if cluster_wide or may_use_group(state, g, AclOperation.DESCRIBE)
    )


HANDLERS = (
    ApiHandler(JOIN_GROUP, 0, 7, handle_join_group),
    ApiHandler(HEARTBEAT, 0, 4, handle_heartbeat),
    ApiHandler(LEAVE_GROUP, 0, 5, handle_leave_group),
    ApiHandler(SYNC_GROUP, 0, 5, handle_sync_group),
    ApiHandler(DESCRIBE_GROUPS, 0, 5, handle_describe_groups),
    ApiHandler(LIST_GROUPS, 0, 5, handle_list_groups),
    ApiHandler(DELETE_GROUPS, 0, 2, handle_delete_groups),
)
