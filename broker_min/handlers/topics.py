"""CreateTopics (key 19) v2-7 and DeleteTopics (key 20) v1-6.

A single node can only hold one replica, so replication factor must be 1 or -1
(the broker default); explicit assignments must name this node only.

In cluster mode the broker checks authorization and forwards the rest of the request, in
the client's own version, to the active controller (Kafka forwards these to the controller
too), which validates, places replicas and writes the metadata records; the broker then
waits briefly for the change to reach its own image, so that a client's next Metadata
request here already sees it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, has_field, make, nested
from kafkakit.broker.handlers.configs import describe_topic_configs
from kafkakit.broker.handlers.metadata import may_create_topic
from kafkakit.broker.log import LogConfig
from kafkakit.broker.state import TopicInfo, topic_name_error
from kafkakit.errors import KafkaConfigError
from kafkakit.protocol import RequestHeaderInfo, request_class, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

CREATE_TOPICS = 19
DELETE_TOPICS = 20
_ZERO_UUID = uuid.UUID(int=0)


class _Rejected(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: Seconds a forwarding broker waits for a created or deleted topic to reach its own image.
_PROPAGATION_WAIT = 5.0


async def handle_create_topics(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Create (or with validate_only, only check) each requested topic."""
    cls = response_class(CREATE_TOPICS, header.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    names = [t.name for t in request.topics]
    results = []
    forwarded = []
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(
                _create_error(result_cls, topic.name, ErrorCode.invalid_request, "topic named twice")
            )
            continue
        if not may_create_topic(state, topic.name):
            results.append(_create_error(result_cls, topic.name, ErrorCode.topic_authorization_failed,
                                         "Authorization failed."))  # fmt: skip
            continue
        if state.controller_channel is not None:
            forwarded.append(topic)
            continue
        try:
            num_partitions, configs = _validate(state, topic)
        except _Rejected as exc:
            results.append(_create_error(result_cls, topic.name, exc.code, exc.message))
            continue
        if request.validate_only:
            info = TopicInfo(topic.name, _ZERO_UUID, num_partitions, configs)
        else:
            info = state.create_topic(topic.name, num_partitions, configs)
        results.append(_created(state, cls, result_cls, info))
    if forwarded:
        results.extend(await _forward_create(state, request, forwarded, result_cls))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


async def _forward_create(state: BrokerState, request: Any, topics: list[Any], result_cls: type) -> list[Any]:
    """Cluster mode: the controller creates ``topics``; its answers, in the client's version."""
    channel = state.controller_channel
    assert channel is not None
    timeout = max(request.timeout.total_seconds(), 1.0)
    try:
        answer = await channel.send(dataclasses.replace(request, topics=tuple(topics)), timeout)
    except (TimeoutError, ConnectionError) as exc:
        return [_create_error(result_cls, t.name, ErrorCode.request_timed_out, f"controller: {exc!r}") for t in topics]
    created = [r.name for r in answer.topics if r.error_code == ErrorCode.none]
    if created and not request.validate_only:
        await state.wait_for_topics(created, _PROPAGATION_WAIT)
    return list(answer.topics)


async def create_in_cluster(state: BrokerState, names: list[str]) -> None:
    """Cluster mode: ask the controller to create ``names`` with the broker defaults (auto-creation);
    errors (e.g. another broker created one first) are left to the caller's next look."""
    channel = state.controller_channel
    assert channel is not None
    topic_cls = nested(request_class(CREATE_TOPICS, _FORWARD_VERSION), "CreatableTopic")
    topics = tuple(
        make(topic_cls, name=name, num_partitions=-1, replication_factor=-1, assignments=(), configs=())
        for name in names
    )
    request = make(
        request_class(CREATE_TOPICS, _FORWARD_VERSION),
        topics=topics,
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
    )
    try:
        await channel.send(request, _PROPAGATION_WAIT)
    except (TimeoutError, ConnectionError):
        return


_FORWARD_VERSION = 7


def _validate(state: BrokerState, topic: Any) -> tuple[int, dict[str, str]]:
    """(partition count, config overrides) or :class:`_Rejected` with Kafka's error code."""
    reason = topic_name_error(topic.name)
    if reason is not None:
        raise _Rejected(ErrorCode.invalid_topic_exception, reason)
    if topic.name in state.topics:
        raise _Rejected(ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists")
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Rejected(
                ErrorCode.invalid_request,
                "num_partitions and replication_factor must be -1 when assignments are given",
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise _Rejected(ErrorCode.invalid_replica_assignment, "partitions must be numbered 0..n-1")
        for a in topic.assignments:
            if list(a.broker_ids) != [state.node_id]:
                raise _Rejected(
                    ErrorCode.invalid_replica_assignment,
                    f"partition {a.partition_index} must be assigned to broker {state.node_id} only",
                )
        num_partitions = len(indexes)
    else:
        num_partitions = state.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if num_partitions < 1:
            raise _Rejected(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
        if topic.replication_factor not in (-1, 1):
            raise _Rejected(
                ErrorCode.invalid_replication_factor,
                f"replication factor {topic.replication_factor} is larger than the 1 available broker",
            )
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    try:
        LogConfig.from_topic_configs(configs, state.default_log_config)
    except KafkaConfigError as exc:
        raise _Rejected(ErrorCode.invalid_config, str(exc)) from None
    return num_partitions, configs


def _created(state: BrokerState, cls: type, result_cls: type, info: TopicInfo) -> Any:
    configs = None
    if has_field(result_cls, "configs"):  # v5+
        config_cls = nested(cls, "CreatableTopicConfigs")
        configs = tuple(
            make(
                config_cls,
                name=e.name,
                value=e.value,
                read_only=False,
                config_source=e.source,
                is_sensitive=False,
            )
            for e in describe_topic_configs(state, info)
        )
    return make(
        result_cls,
        name=info.name,
        topic_id=info.topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=info.num_partitions,
        replication_factor=1,
        configs=configs,
    )


def _create_error(result_cls: type, name: str, code: ErrorCode, message: str) -> Any:
    return make(
        result_cls,
        name=name,
        topic_id=_ZERO_UUID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


async def handle_delete_topics(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Delete topics by name (v1-5) or by name or topic id (v6)."""
    cls = response_class(DELETE_TOPICS, header.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if header.api_version >= 6:
        wanted = [(t.name, None if t.topic_id == _ZERO_UUID else t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    forward: list[tuple[str | None, uuid.UUID | None]] = []
    for name, topic_id in wanted:
        info = state.topics.get(name) if name is not None else None
        if name is None and topic_id is not None:
            info = state.topics.by_id(topic_id)
        target = name if name is not None else (info.name if info is not None else None)
        if target is not None and not state.allowed(AclOperation.DELETE, ResourceType.TOPIC, target):
            # Refused before existence is looked at, so the answer reveals nothing.
            results.append(make(result_cls, name=name, topic_id=topic_id or _ZERO_UUID,
                                error_code=ErrorCode.topic_authorization_failed, error_message="Authorization failed."))  # fmt: skip
            continue
        if info is None:
            code = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
            results.append(
                make(
                    result_cls,
                    name=name,
                    topic_id=topic_id or _ZERO_UUID,
                    error_code=code,
                    error_message=None,
                )
            )
            continue
        if state.controller_channel is not None:
            forward.append((info.name, info.topic_id))
            continue
        state.delete_topic(info.name)
        results.append(
            make(
                result_cls,
                name=info.name,
                topic_id=info.topic_id,
                error_code=ErrorCode.none,
                error_message=None,
            )
        )
    if forward:
        results.extend(await _forward_delete(state, header.api_version, request, forward, result_cls))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


async def _forward_delete(
    state: BrokerState, version: int, request: Any, wanted: list[tuple[str | None, uuid.UUID | None]], result_cls: type
) -> list[Any]:
    """Cluster mode: the controller deletes the (authorized, existing) topics; its answers."""
    channel = state.controller_channel
    assert channel is not None
    if version >= 6:
        state_cls = nested(request_class(DELETE_TOPICS, version), "DeleteTopicState")
        forwarded = dataclasses.replace(
            request, topics=tuple(make(state_cls, name=n, topic_id=i or _ZERO_UUID) for n, i in wanted)
        )
    else:
        forwarded = dataclasses.replace(request, topic_names=tuple(n for n, _ in wanted if n is not None))
    try:
        answer = await channel.send(forwarded, 30.0)
    except (TimeoutError, ConnectionError) as exc:
        return [
            make(result_cls, name=n, topic_id=i or _ZERO_UUID, error_code=ErrorCode.request_timed_out,
                 error_message=f"controller: {exc!r}")  # fmt: skip
            for n, i in wanted
        ]
    deleted = {r.name for r in answer.responses if r.error_code == ErrorCode.none}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _PROPAGATION_WAIT
    while deleted & set(state.topics_names()) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return list(answer.responses)


HANDLERS = (
    ApiHandler(CREATE_TOPICS, 2, 7, handle_create_topics),
    ApiHandler(DELETE_TOPICS, 1, 6, handle_delete_topics),
)
