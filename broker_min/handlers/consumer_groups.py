"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) v0-1 and ConsumerGroupDescribe (69) v0-1.

The handlers translate between kio messages and the coordinator's consumer group protocol
(:mod:`kafkakit.broker.coordinators.consumer_group_protocol`).  A heartbeat never parks: the
coordinator answers at once with the member's epoch and, when it changed, its assignment;
the answer waits only until the records it wrote are replicated (cluster mode).

Version notes: v0 lets the coordinator name a joining member that sends an empty member id;
from v1 the member id is the client's (INVALID_REQUEST when empty).  ConsumerGroupDescribe v1
adds the member type (0 for a classic member of a mixed group, 1 for a consumer-protocol member).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation
from kafkakit.broker.coordinators.consumer_group import ConsumerGroup, Partitions
from kafkakit.broker.coordinators.consumer_group_protocol import HeartbeatRequest
from kafkakit.broker.handlers.base import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLIENT_HOST,
    NO_THROTTLE,
    ApiHandler,
    make,
    nested,
)
from kafkakit.broker.handlers.groups import GROUP_AUTHORIZED_OPERATIONS, may_use_group, settled
from kafkakit.protocol import RequestHeaderInfo, response_class
from kafkakit.protocol.build import millis
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
#: Member types in ConsumerGroupDescribe v1 (Kafka's: 0 classic, 1 consumer).
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


async def handle_consumer_group_heartbeat(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Join, heartbeat, reconcile or leave a consumer group."""
    cls = response_class(CONSUMER_GROUP_HEARTBEAT, header.api_version)
    if not may_use_group(state, request.group_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                    error_message=None, member_id=None, member_epoch=0, heartbeat_interval=NO_THROTTLE, assignment=None)  # fmt: skip
    owned = (
        None
        if request.topic_partitions is None
        else {t.topic_id: tuple(t.partitions) for t in request.topic_partitions if t.topic_id is not None}
    )
    result = state.groups.consumer_heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=None
            if request.subscribed_topic_names is None
            else tuple(request.subscribed_topic_names),
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=header.client_id or "",
            client_host=CLIENT_HOST.get(),
            version=header.api_version,
        )
    )
    error = await settled(state, request.group_id, result.error)
    if error is not result.error:
        return make(cls, throttle_time=NO_THROTTLE, error_code=error, error_message=None, member_id=None,
                    member_epoch=0, heartbeat_interval=NO_THROTTLE, assignment=None)  # fmt: skip
    assignment = None
    if result.assignment is not None:
        assignment = make(nested(cls, "Assignment"), topic_partitions=_topic_partitions(cls, result.assignment))
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


def _topic_partitions(cls: type, assignment: Partitions, names: Mapping[uuid.UUID, str] | None = None) -> tuple[Any, ...]:
    entry = nested(cls, "TopicPartitions")
    return tuple(
        make(entry, topic_id=topic_id, topic_name=(names or {}).get(topic_id, ""), partitions=tuple(sorted(ps)))
        for topic_id, ps in sorted(assignment.items(), key=lambda item: str(item[0]))
        if ps
    )


async def handle_consumer_group_describe(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Epochs, assignor, members with their current and target assignments."""
    cls = response_class(CONSUMER_GROUP_DESCRIBE, header.api_version)
    group_cls = nested(cls, "DescribedGroup")
    include_operations = bool(getattr(request, "include_authorized_operations", False))
    allowed = [g for g in request.group_ids if may_use_group(state, g, AclOperation.DESCRIBE)]
    described: dict[str, tuple[ErrorCode, ConsumerGroup | None]] = {
        g: (ErrorCode.group_authorization_failed, None) for g in request.group_ids if g not in allowed
    }
    for group_id, error, group in state.groups.consumer_describe(allowed):
        described[group_id] = (error, group)
    groups = []
    for group_id in request.group_ids:
        error, group = described[group_id]
        if group is None:
            message = f"Group {group_id} not found." if error is ErrorCode.group_id_not_found else None
            groups.append(make(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="",
                               group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                               authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
            continue
        groups.append(_describe(state, cls, group, include_operations))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _describe(state: BrokerState, cls: type, group: ConsumerGroup, include_operations: bool) -> Any:
    names = state.groups.consumer_topic_names(group)
    member_cls = nested(cls, "Member")
    assignment_cls = nested(cls, "Assignment")
    members = tuple(
        make(
            member_cls,
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=make(assignment_cls, topic_partitions=_topic_partitions(cls, m.assigned, names)),
            target_assignment=make(
                assignment_cls, topic_partitions=_topic_partitions(cls, group.target.get(m.member_id, {}), names)
            ),
            member_type=CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE,
        )
        for m in group.members.values()
    )
    return make(
        nested(cls, "DescribedGroup"),
        error_code=ErrorCode.none,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(state.groups.settings.consumer.assignors[0]),
        members=members,
        authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_operations else AUTHORIZED_OPERATIONS_OMITTED,
    )


HANDLERS = (
    ApiHandler(CONSUMER_GROUP_HEARTBEAT, 0, 1, handle_consumer_group_heartbeat),
    ApiHandler(CONSUMER_GROUP_DESCRIBE, 0, 1, handle_consumer_group_describe),
)
