"""DescribeTopicPartitions (key 75) v0 (KIP-966): topics' partitions with replicas and ISR, paged.

What newer admin clients (Kafka's Admin.describeTopics since 3.8) ask instead of Metadata.
The same view as Metadata (:func:`~kafkakit.broker.handlers.metadata.partition_fields`), with
Kafka's paging: topics in name order, at most ``response_partition_limit`` partitions (capped
by the broker at 2,000, Kafka's ``max.request.partition.size.limit``) from the cursor on, and
``next_cursor`` naming where the next page starts. Eligible leader replicas (KIP-966's ELR)
are not kept by broker_min: both ELR lists are empty.

An empty topic list means every topic the caller may describe; a named topic that does not
exist answers UNKNOWN_TOPIC_OR_PARTITION, one the caller may not describe
TOPIC_AUTHORIZATION_FAILED; a cursor naming a topic outside the requested ones is
INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.broker.handlers.base import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.handlers.metadata import live_brokers, may_describe_topic, partition_fields
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 75
#: Kafka's max.request.partition.size.limit.
MAX_PARTITIONS_PER_RESPONSE = 2000


async def handle_describe_topic_partitions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """One page of partitions of the requested (or all) topics."""
    cls = response_class(API_KEY, header.api_version)
    topic_cls = nested(cls, "DescribeTopicPartitionsResponseTopic")
    partition_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    named = [t.name for t in request.topics]
    names = sorted(set(named)) if named else sorted(i.name for i in state.topics if may_describe_topic(state, i.name))
    cursor = request.cursor
    if cursor is not None:
        if cursor.topic_name not in names:
            # Kafka's InvalidRequestException: every requested topic answers it.
            invalid = tuple(
                make(topic_cls, error_code=ErrorCode.invalid_request, name=name, topic_id=None, is_internal=False,
                     partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)  # fmt: skip
                for name in names
            )
            return make(cls, throttle_time=NO_THROTTLE, topics=invalid, next_cursor=None)
        names = names[names.index(cursor.topic_name) :]
    limit = max(1, min(int(request.response_partition_limit), MAX_PARTITIONS_PER_RESPONSE))
    live = frozenset(node_id for node_id, _, _, _ in live_brokers(state))
    topics = []
    next_cursor = None
    budget = limit
    for name in names:
        error = _topic_error(state, name)
        info = state.topics.get(name)
        if error is not None or info is None:
            topics.append(make(topic_cls, error_code=error or ErrorCode.unknown_topic_or_partition, name=name,
                               topic_id=None, is_internal=False, partitions=(),
                               topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
            continue
        first = cursor.partition_index if cursor is not None and cursor.topic_name == name else 0
        indexes = list(range(first, info.num_partitions))
        if budget <= 0:
            next_cursor = (name, first)
            break
        shown, rest = indexes[:budget], indexes[budget:]
        budget -= len(shown)
        partitions = tuple(
            make(partition_cls, eligible_leader_replicas=(), last_known_elr=(), **partition_fields(state, name, p, live))
            for p in shown
        )
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
                           is_internal=info.is_internal, partitions=partitions,
                           topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
        if rest:
            next_cursor = (name, rest[0])
            break
    cursor_cls = nested(cls, "Cursor")
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(topics),
        next_cursor=None if next_cursor is None else make(cursor_cls, topic_name=next_cursor[0], partition_index=next_cursor[1]),
    )


def _topic_error(state: BrokerState, name: str) -> ErrorCode | None:
    if not may_describe_topic(state, name):
        return ErrorCode.topic_authorization_failed
    if state.topics.get(name) is None:
        return ErrorCode.unknown_topic_or_partition
    return None


HANDLERS = (ApiHandler(API_KEY, 0, 0, handle_describe_topic_partitions),)
