"""Share group membership and admin (KIP-932): ShareGroupHeartbeat (76) v1, ShareGroupDescribe (77) v1,
DescribeShareGroupOffsets (90) v0-1, AlterShareGroupOffsets (91) v0, DeleteShareGroupOffsets (92) v0.

The rules live in :mod:`kafkakit.broker.coordinators.share_coordinator`; these handlers
translate kio messages.  Share groups are served on a single node only: in cluster mode every
share API answers with an error that says so (UNSUPPORTED_VERSION for the group APIs, whose
clients then report share groups as unavailable).

A group id that a classic group already uses is not a share group (GROUP_ID_NOT_FOUND, as
Kafka answers for a group of another type).  ListGroups (type "share") and DeleteGroups of share
groups are answered by :mod:`.groups`, which calls :func:`listed_share_groups` and
:func:`delete_share_groups`.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.share_coordinator import share_coordinator
from kafkakit.broker.coordinators.share_group_protocol import ASSIGNOR_NAME
from kafkakit.broker.handlers.base import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLIENT_HOST,
    NO_THROTTLE,
    ApiHandler,
    make,
    nested,
)
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
CLUSTER_MODE_MESSAGE = "share groups are not yet supported by broker_min in cluster mode"
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def unavailable(state: BrokerState, group_id: str) -> tuple[ErrorCode, str] | None:
    """Why ``group_id`` cannot be served as a share group here, or None."""
    if state.config.cluster_mode:
        return ErrorCode.unsupported_version, CLUSTER_MODE_MESSAGE
    if group_id in state.groups.groups:
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    return None


async def handle_share_group_heartbeat(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Join, stay in or leave a share group; the answer carries the member's assignment when it changed."""
    cls = response_class(SHARE_GROUP_HEARTBEAT, header.api_version)
    refused = unavailable(state, request.group_id)
    if refused is None and not state.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.group_authorization_failed, None  # type: ignore[assignment]
    if refused is not None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=refused[0], error_message=refused[1],
                    member_id=None, member_epoch=0, heartbeat_interval=datetime.timedelta(0), assignment=None)  # fmt: skip
    coordinator = share_coordinator(state)
    result = coordinator.heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        request.rack_id,
        request.subscribed_topic_names,
        header.client_id or "",
        CLIENT_HOST.get(),
    )
    assignment = None
    if result.assignment is not None:
        assignment_cls = nested(cls, "Assignment")
        tp_cls = nested(cls, "TopicPartitions")
        assignment = make(
            assignment_cls,
            topic_partitions=tuple(
                make(tp_cls, topic_id=topic_id, partitions=tuple(parts))
                for topic_id, parts in result.assignment.items()
            ),
        )
    interval = coordinator.configs.heartbeat_interval_ms(request.group_id)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=interval),
        assignment=assignment,
    )


async def handle_share_group_describe(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """State, epochs and members (with subscriptions and assignments) of each share group."""
    cls = response_class(SHARE_GROUP_DESCRIBE, header.api_version)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    assignment_cls, tp_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    include_operations = bool(getattr(request, "include_authorized_operations", False))
    if not state.config.cluster_mode:
        share_coordinator(state).sweep()
    out = []
    for group_id in request.group_ids:
        error: tuple[ErrorCode, str | None] | None = unavailable(state, group_id)
        if error is None and not state.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed, None
        group = None if error is not None else share_coordinator(state).protocol.groups.get(group_id)
        if error is None and group is None:
            error = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        if error is not None or group is None:
            code, message = error or (ErrorCode.group_id_not_found, None)
            out.append(make(group_cls, error_code=code, error_message=message, group_id=group_id, group_state="Dead",
                            group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
            continue
        coordinator = share_coordinator(state)
        members = []
        for m in group.members.values():
            tps = []
            for topic_id, parts in m.assignment.items():
                found = coordinator.topic_by_id(topic_id)
                tps.append(make(tp_cls, topic_id=topic_id, topic_name=found[0] if found else "",
                                partitions=tuple(parts)))  # fmt: skip
            members.append(
                make(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                     client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=m.subscribed,
                     assignment=make(assignment_cls, topic_partitions=tuple(tps)))  # fmt: skip
            )
        out.append(
            make(
                group_cls,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=ASSIGNOR_NAME,
                members=tuple(members),
                authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_operations else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))


async def handle_describe_share_group_offsets(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Each partition's share-partition start offset (SPSO) and lag; every partition with state when
    a group names no topics."""
    cls = response_class(DESCRIBE_SHARE_GROUP_OFFSETS, header.api_version)
    group_cls = nested(cls, "DescribeShareGroupOffsetsResponseGroup")
    topic_cls = nested(cls, "DescribeShareGroupOffsetsResponseTopic")
    part_cls = nested(cls, "DescribeShareGroupOffsetsResponsePartition")
    groups = []
    for g in request.groups:
        error: tuple[ErrorCode, str | None] | None = unavailable(state, g.group_id)
        if error is None and not state.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            error = ErrorCode.group_authorization_failed, None
        if error is not None:
            groups.append(make(group_cls, group_id=g.group_id, topics=(), error_code=error[0], error_message=error[1]))
            continue
        coordinator = share_coordinator(state)
        wanted: list[tuple[str, Any, list[int]]] = []
        if g.topics is None:
            for topic_id, parts in coordinator.offsets_of_group(g.group_id).items():
                found = coordinator.topic_by_id(topic_id)
                if found is not None:
                    wanted.append((found[0], topic_id, parts))
        else:
            for t in g.topics:
                known = coordinator.topic(t.topic_name)
                wanted.append((t.topic_name, None if known is None else known[0], list(t.partitions)))
        topics = []
        for name, topic_id, parts in wanted:
            partitions = []
            for p in parts:
                if topic_id is None:
                    partitions.append(make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                                           error_code=ErrorCode.unknown_topic_or_partition, error_message=None))  # fmt: skip
                    continue
                info = coordinator.describe_offsets(g.group_id, topic_id, p)
                partitions.append(make(part_cls, partition_index=p, start_offset=info.start_offset, leader_epoch=0,
                                       lag=info.lag, error_code=ErrorCode.none, error_message=None))  # fmt: skip
            topics.append(make(topic_cls, topic_name=name, topic_id=topic_id, partitions=tuple(partitions)))
        groups.append(make(group_cls, group_id=g.group_id, topics=tuple(topics), error_code=ErrorCode.none,
                           error_message=None))  # fmt: skip
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def handle_alter_share_group_offsets(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Set share-partition start offsets of an empty share group."""
    cls = response_class(ALTER_SHARE_GROUP_OFFSETS, header.api_version)
    topic_cls = nested(cls, "AlterShareGroupOffsetsResponseTopic")
    part_cls = nested(cls, "AlterShareGroupOffsetsResponsePartition")
    error: tuple[ErrorCode, str | None] | None = unavailable(state, request.group_id)
    if error is None and not state.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed, None
    if error is not None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=error[0], error_message=error[1], responses=())
    coordinator = share_coordinator(state)
    group = coordinator.protocol.groups.get(request.group_id)
    if group is not None and group.members:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.non_empty_group,
                    error_message="The group is not empty.", responses=())  # fmt: skip
    topics = []
    for t in request.topics:
        known = coordinator.topic(t.topic_name)
        parts = []
        for p in t.partitions:
            if known is None or not 0 <= p.partition_index < known[1]:
                code = ErrorCode.unknown_topic_or_partition
            else:
                code = coordinator.alter_offset(request.group_id, known[0], p.partition_index, p.start_offset)
            parts.append(make(part_cls, partition_index=p.partition_index, error_code=code, error_message=None))
        topics.append(make(topic_cls, topic_name=t.topic_name, topic_id=None if known is None else known[0],
                           partitions=tuple(parts)))  # fmt: skip
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, responses=tuple(topics))


async def handle_delete_share_group_offsets(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Forget an empty share group's state for whole topics."""
    cls = response_class(DELETE_SHARE_GROUP_OFFSETS, header.api_version)
    topic_cls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")
    error: tuple[ErrorCode, str | None] | None = unavailable(state, request.group_id)
    if error is None and not state.allowed(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed, None
    coordinator = None if error is not None else share_coordinator(state)
    if error is None and coordinator is not None and not coordinator.is_share_group(request.group_id):
        error = ErrorCode.group_id_not_found, f"Group {request.group_id} not found."
    if error is not None or coordinator is None:
        code, message = error or (ErrorCode.group_id_not_found, None)
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, responses=())
    group = coordinator.protocol.groups.get(request.group_id)
    if group is not None and group.members:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.non_empty_group,
                    error_message="The group is not empty.", responses=())  # fmt: skip
    topics = []
    for t in request.topics:
        known = coordinator.topic(t.topic_name)
        code = ErrorCode.unknown_topic_or_partition if known is None else coordinator.delete_offsets(request.group_id, known[0])
        topics.append(make(topic_cls, topic_name=t.topic_name, topic_id=None if known is None else known[0],
                           error_code=code, error_message=None))  # fmt: skip
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, responses=tuple(topics))


def listed_share_groups(state: BrokerState, states: Any) -> list[tuple[str, str]]:
    """(group id, state) of every share group, for ListGroups (type "share"); none in cluster mode."""
    if state.config.cluster_mode:
        return []
    wanted = {s.lower() for s in states or ()}
    coordinator = share_coordinator(state)
    coordinator.sweep()
    groups = coordinator.protocol.groups.values()
    return [(g.group_id, g.state) for g in groups if not wanted or g.state.lower() in wanted]


def is_share_group(state: BrokerState, group_id: str) -> bool:
    """Whether ``group_id`` names a share group here (never in cluster mode, which has none)."""
    return not state.config.cluster_mode and share_coordinator(state).is_share_group(group_id)


def delete_share_groups(state: BrokerState, group_ids: list[str]) -> dict[str, ErrorCode]:
    """DeleteGroups for the ids that are share groups here; the others are left to the group coordinator."""
    if state.config.cluster_mode:
        return {}
    coordinator = share_coordinator(state)
    return {g: coordinator.delete_group(g) for g in group_ids if coordinator.is_share_group(g)}


def alter_group_configs(state: BrokerState, resource: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs of a GROUP resource: a share group's ``share.*`` configs
    (SET and DELETE; see :mod:`kafkakit.broker.coordinators.share_group_configs`)."""
    group_id = resource.resource_name
    if state.config.cluster_mode:
        return ErrorCode.invalid_request, "group configs are not yet supported by broker_min in cluster mode"
    if not state.allowed(AclOperation.ALTER_CONFIGS, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, "Authorization failed."
    store = share_coordinator(state).configs
    configs = dict(store.groups.get(group_id, {}))
    for change in resource.configs:
        operation = int(change.config_operation)
        if operation == 1:  # DELETE
            configs.pop(change.name, None)
            continue
        if operation != 0:  # APPEND/SUBTRACT: no share group config is a list
            return ErrorCode.invalid_config, f"config {change.name!r} is not a list"
        problem = store.validate(change.name, change.value)
        if problem is not None:
            return ErrorCode.invalid_config, problem
        configs[change.name] = str(change.value)
    if not validate_only:
        store.replace(group_id, configs)
    return ErrorCode.none, None


HANDLERS = (
    ApiHandler(SHARE_GROUP_HEARTBEAT, 1, 1, handle_share_group_heartbeat),
    ApiHandler(SHARE_GROUP_DESCRIBE, 1, 1, handle_share_group_describe),
    ApiHandler(DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, handle_describe_share_group_offsets),
    ApiHandler(ALTER_SHARE_GROUP_OFFSETS, 0, 0, handle_alter_share_group_offsets),
    ApiHandler(DELETE_SHARE_GROUP_OFFSETS, 0, 0, handle_delete_share_group_offsets),
)
