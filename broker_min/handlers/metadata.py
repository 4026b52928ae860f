"""Metadata (key 3), v0-12: the brokers, the cluster id, and topics (auto-created when allowed).

On a single node every partition is led by this node with replicas = isr = [node id] and
the leader epoch of its log (0 from its creation).  In cluster mode everything comes from
the node's metadata image: the unfenced brokers (on the listener the request came in on),
each partition's leader, leader epoch, replicas and ISR; a partition without a leader answers
LEADER_NOT_AVAILABLE and its fenced replicas are listed as offline.  The controller id is the
active controller when it is a live broker (every node is combined here), as clients only
use it for admin requests that any broker accepts.

Topics that do not exist are created when the broker allows it and the request does
(``allow_auto_topic_creation`` from v4, always before), which librdkafka's and the Java
client's tests rely on: on a single node on the spot; in cluster mode through the
controller, answered with LEADER_NOT_AVAILABLE as Kafka does until the topic reaches this
node's image.
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
    requested = _requested(state, version, request)
    if state.controller_channel is not None:
        await _auto_create_in_cluster(state, requested)
    brokers = live_brokers(state)
    live = frozenset(node_id for node_id, _, _, _ in brokers)
    topics = tuple(_describe(state, cls, req, live) for req in requested)
    broker_cls = nested(cls, "MetadataResponseBroker")
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=tuple(make(broker_cls, node_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers),
        cluster_id=state.cluster_id,
        controller_id=controller_id(state),
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def live_brokers(state: BrokerState) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every live broker on the current request's listener."""
    if state.image is None:
        host, port = state.advertised_endpoint()
        return [(state.node_id, host, port, None)]
    out = []
    for broker in state.image.live_brokers():
        endpoint = state.node_endpoint(broker.broker_id)
        if endpoint is not None:
            out.append((broker.broker_id, endpoint[0], endpoint[1], broker.rack))
    return out


def controller_id(state: BrokerState) -> int:
    """The controller id clients see: the active controller if it is a live broker, else this node."""
    if state.image is None:
        return state.node_id
    active = state.active_controller()
    if active is not None and state.node_endpoint(active) is not None:
        return active
    return state.node_id


async def _auto_create_in_cluster(
    state: BrokerState, requested: list[tuple[str | None, uuid.UUID | None, bool]]
) -> None:
    """Ask the controller to create the missing topics this request may auto-create."""
    if not state.config.auto_create_topics_enable:
        return
    missing = [
        name
        for name, _, allow in requested
        if allow
        and name is not None
        and name not in state.topics_names()
        and topic_name_error(name) is None
        and _may_describe(state, name)
        and may_create_topic(state, name)
    ]
    if missing:
        from kafkakit.broker.handlers.topics import create_in_cluster  # topics imports this module

        await create_in_cluster(state, missing)


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


def _describe(
    state: BrokerState, cls: type, wanted: tuple[str | None, uuid.UUID | None, bool], live: frozenset[int]
) -> Any:
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
        if info is None and state.image is not None:
            # Cluster mode: _auto_create_in_cluster asked the controller; the topic is not here yet.
            created = allow_create and state.config.auto_create_topics_enable and may_create_topic(state, name)
            code = ErrorCode.leader_not_available if created else ErrorCode.unknown_topic_or_partition
            return _topic_error(cls, name, None, code)
        if info is None and allow_create and state.config.auto_create_topics_enable:
            if not may_create_topic(state, name):
                return _topic_error(cls, name, None, ErrorCode.topic_authorization_failed)
            info = state.create_topic(name, state.config.num_partitions)
        if info is None:
            return _topic_error(cls, name, None, ErrorCode.unknown_topic_or_partition)
    return _topic(state, cls, info, live)


def _may_describe(state: BrokerState, topic: str) -> bool:
    return state.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)


def may_create_topic(state: BrokerState, topic: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic itself."""
    return state.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or state.allowed(
        AclOperation.CREATE, ResourceType.TOPIC, topic
    )


def _topic(state: BrokerState, cls: type, info: TopicInfo, live: frozenset[int]) -> Any:
    partition_cls = nested(cls, "MetadataResponsePartition")
    partitions = tuple(_partition(state, partition_cls, info.name, p, live) for p in range(info.num_partitions))
    return make(
        nested(cls, "MetadataResponseTopic"),
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=partitions,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _partition(state: BrokerState, partition_cls: type, topic: str, index: int, live: frozenset[int]) -> Any:
    return make(partition_cls, **partition_fields(state, topic, index, live))


def partition_fields(state: BrokerState, topic: str, index: int, live: frozenset[int]) -> dict[str, Any]:
    """A partition as Metadata and DescribeTopicPartitions describe it: a leader that is not a
    live broker is reported as none (LEADER_NOT_AVAILABLE), fenced replicas as offline."""
    registration = state.partition_registration(topic, index)
    if registration is None:
        return {"error_code": ErrorCode.leader_not_available, "partition_index": index, "leader_id": -1,
                "leader_epoch": -1, "replica_nodes": (), "isr_nodes": (), "offline_replicas": ()}  # fmt: skip
    leader = registration.leader if registration.leader in live else -1
    return {
        "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": registration.leader_epoch,
        "replica_nodes": registration.replicas,
        "isr_nodes": registration.isr,
        "offline_replicas": tuple(r for r in registration.replicas if r not in live),
    }


def may_describe_topic(state: BrokerState, topic: str) -> bool:
    """Describing a topic needs DESCRIBE on it."""
    return _may_describe(state, topic)


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
