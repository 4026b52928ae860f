"""Metadata (key 3), v0-12: this broker, the cluster id, and topics (auto-created when allowed).

Every partition is led by this node with replicas = isr = [node id] and the
leader epoch of its log (0 from its creation on a single node).  Topics that do
not exist are created on the spot when the broker allows it and the request
does (``allow_auto_topic_creation`` from v4, always before), which librdkafka's
and the Java client's tests rely on.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.state import TopicInfo, topic_name_error
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 3
CLUSTER_NAME = "kafka-cluster"
_ZERO_UUID = uuid.UUID(int=0)


async def handle_metadata(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Describe the broker and the requested (or all) topics."""
    version = header.api_version
    cls = response_class(API_KEY, version)
    broker = make(
        nested(cls, "MetadataResponseBroker"),
        node_id=state.node_id,
        host=state.advertised_endpoint()[0],
        port=state.advertised_endpoint()[1],
        rack=None,
    )
    topics = tuple(_describe(state, cls, req) for req in _requested(state, version, request))
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=(broker,),
        cluster_id=state.cluster_id,
        controller_id=state.node_id,
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _requested(
    state: BrokerState, version: int, request: Any
) -> list[tuple[str | None, uuid.UUID | None, bool]]:
    """(name, topic id, may auto-create) per topic to describe."""
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        # A full listing leaves out the topics the caller may not describe (Kafka does the same).
        return [(info.name, None, False) for info in state.topics if _may_describe(state, info.name)]
    allow = version < 4 or bool(request.allow_auto_topic_creation)
    out: list[tuple[str | None, uuid.UUID | None, bool]] = []
    for t in wanted:
        topic_id = getattr(t, "topic_id", None)
        out.append((t.name, None if topic_id == _ZERO_UUID else topic_id, allow))
    return out


def _describe(state: BrokerState, cls: type, wanted: tuple[str | None, uuid.UUID | None, bool]) -> Any:
    name, topic_id, allow_create = wanted
    info: TopicInfo | None
    if name is None:
        info = state.topics.by_id(topic_id) if topic_id is not None else None
        if info is None:
            return _topic_error(cls, None, topic_id, ErrorCode.unknown_topic_id)
        if not _may_describe(state, info.name):
            return _topic_error(cls, None, topic_id, ErrorCode.topic_authorization_failed)
    else:
        if topic_name_error(name) is not None:
            return _topic_error(cls, name, None, ErrorCode.invalid_topic_exception)
        if not _may_describe(state, name):  # checked first: existence is not revealed
            return _topic_error(cls, name, None, ErrorCode.topic_authorization_failed)
        info = state.topics.get(name)
        if info is None and allow_create and state.config.auto_create_topics_enable:
            if not may_create_topic(state, name):
                return _topic_error(cls, name, None, ErrorCode.topic_authorization_failed)
            info = state.create_topic(name, state.config.num_partitions)
        if info is None:
            return _topic_error(cls, name, None, ErrorCode.unknown_topic_or_partition)
    return _topic(state, cls, info)


def _may_describe(state: BrokerState, topic: str) -> bool:
    return state.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)


def may_create_topic(state: BrokerState, topic: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic itself."""
    return state.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or state.allowed(
        AclOperation.CREATE, ResourceType.TOPIC, topic
    )


def _topic(state: BrokerState, cls: type, info: TopicInfo) -> Any:
    partition_cls = nested(cls, "MetadataResponsePartition")
    node = (state.node_id,)
    partitions = tuple(
        make(
            partition_cls,
            error_code=ErrorCode.none,
            partition_index=p,
            leader_id=state.node_id,
            leader_epoch=state.leader_epoch(info.name, p),
            replica_nodes=node,
            isr_nodes=node,
            offline_replicas=(),
        )
        for p in range(info.num_partitions)
    )
    return make(
        nested(cls, "MetadataResponseTopic"),
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=partitions,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _topic_error(cls: type, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> Any:
    return make(
        nested(cls, "MetadataResponseTopic"),
        error_code=code,
        name=name,
        topic_id=topic_id or _ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


HANDLERS = (ApiHandler(API_KEY, 0, 12, handle_metadata),)
