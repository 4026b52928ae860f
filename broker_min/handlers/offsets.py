"""OffsetCommit (key 8) v2-9 and OffsetFetch (key 9) v1-9: committed offsets of groups.

OffsetCommit: partitions of topics this broker does not know get
UNKNOWN_TOPIC_OR_PARTITION (Kafka's KafkaApis check); the rest go to the group
coordinator, which validates generation and member (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while the group is
CompletingRebalance) and accepts a standalone consumer's commit (generation -1,
empty member id) while the group has no members.  ``retention_time`` (v2-4) is
stored as Kafka stores it (an expire timestamp) but offsets never expire here.

OffsetFetch: a null topic list (v2+) asks for every committed partition;
``require_stable`` (v7) answers UNSTABLE_OFFSET_COMMIT for partitions with a
pending transactional commit; v8+ asks for several groups; v9+ (and OffsetCommit v9+)
carry a KIP-848 member's id and epoch, checked against a consumer group (STALE_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID; a consumer-protocol member must commit with v9+: UNSUPPORTED_VERSION).

Both answer NOT_COORDINATOR for a group whose ``__consumer_offsets`` partition
this node does not lead (COORDINATOR_LOAD_IN_PROGRESS while it loads): per
partition for OffsetCommit and OffsetFetch v1, top-level from OffsetFetch v2.
A commit is answered once its record is replicated (immediately on a single
node); a failed replication becomes COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.group_offsets import OffsetToCommit
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, has_field, make, nested
from kafkakit.broker.handlers.groups import may_use_group, settled
from kafkakit.protocol import RequestHeaderInfo, response_class
from kafkakit.protocol.build import millis
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
NO_LEADER_EPOCH = -1


async def handle_offset_commit(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Store the committed offsets of each partition; one error code per partition."""
    cls = response_class(OFFSET_COMMIT, header.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    if not may_use_group(state, request.group_id):
        return _commit_refused(cls, topic_cls, partition_cls, request, lambda _topic: ErrorCode.group_authorization_failed)
    readable = {t.name for t in request.topics if state.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)}
    to_commit: list[OffsetToCommit] = []
    for topic in request.topics:
        if state.topics.get(topic.name) is None or topic.name not in readable:
            continue
        for p in topic.partitions:
            to_commit.append(
                OffsetToCommit(
                    topic.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                    p.committed_metadata,
                )
            )
    retention_ms = millis(request.retention_time) if has_field(type(request), "retention_time") else -1
    codes = (
        state.groups.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            getattr(request, "group_instance_id", None),
            to_commit,
            retention_ms,
            header.api_version,
        )
        if to_commit
        else []
    )
    if ErrorCode.none in codes:
        durable = await settled(state, request.group_id, ErrorCode.none)
        codes = [durable if code is ErrorCode.none else code for code in codes]
    errors = iter(codes)
    topics = []
    for topic in request.topics:
        known = state.topics.get(topic.name) is not None
        if topic.name not in readable:
            code = ErrorCode.topic_authorization_failed
        elif not known:
            code = ErrorCode.unknown_topic_or_partition
        else:
            code = ErrorCode.none
        partitions = tuple(
            make(partition_cls, partition_index=p.partition_index, error_code=next(errors) if code == ErrorCode.none else code)
            for p in topic.partitions
        )
        topics.append(make(topic_cls, name=topic.name, partitions=partitions))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _commit_refused(cls: type, topic_cls: type, partition_cls: type, request: Any, code_for: Any) -> Any:
    topics = tuple(
        make(topic_cls, name=t.name, partitions=tuple(
            make(partition_cls, partition_index=p.partition_index, error_code=code_for(t.name)) for p in t.partitions
        ))  # fmt: skip
        for t in request.topics
    )
    return make(cls, throttle_time=NO_THROTTLE, topics=topics)


async def handle_offset_fetch(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Committed offset, leader epoch and metadata per partition (-1 where nothing is committed).

    v8+ asks for several groups at once; v9+ carries the member id and epoch of a consumer group
    member, validated as Kafka does (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)."""
    cls = response_class(OFFSET_FETCH, header.api_version)
    if not has_field(cls, "groups"):
        wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
        error, fetched = _fetch_group(state, request.group_id, wanted, request, None, -1)
        if error is not ErrorCode.none:
            if has_field(cls, "error_code") or error is ErrorCode.group_authorization_failed:
                return make(cls, throttle_time=NO_THROTTLE, topics=(), error_code=error)
            fetched = state.groups.fetch_offsets(request.group_id, wanted)  # v1: the error per partition
        return make(cls, throttle_time=NO_THROTTLE, topics=_fetched_topics(cls, "", fetched), error_code=ErrorCode.none)
    group_cls = nested(cls, "OffsetFetchResponseGroup")
    groups = []
    for group in request.groups:
        wanted = None if group.topics is None else [(t.name, list(t.partition_indexes)) for t in group.topics]
        error, fetched = _fetch_group(
            state, group.group_id, wanted, request, getattr(group, "member_id", None), getattr(group, "member_epoch", -1)
        )
        topics = () if error is not ErrorCode.none else _fetched_topics(cls, "s", fetched)
        groups.append(make(group_cls, group_id=group.group_id, topics=topics, error_code=error))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _fetch_group(
    state: BrokerState,
    group_id: str,
    wanted: list[tuple[str, list[int]]] | None,
    request: Any,
    member_id: str | None,
    member_epoch: int,
) -> tuple[ErrorCode, list[tuple[str, list[Any]]]]:
    """One group's answer: a group-level error, or the offsets per topic."""
    if not may_use_group(state, group_id, AclOperation.DESCRIBE):
        return ErrorCode.group_authorization_failed, []
    not_served = state.groups.coordinator_error(group_id)
    if not_served is not None:
        return not_served, []
    invalid = state.groups.validate_offset_fetch(group_id, member_id, member_epoch)
    if invalid is not None:
        return invalid, []
    fetched = state.groups.fetch_offsets(group_id, wanted, bool(getattr(request, "require_stable", False)))
    # Topics the caller may not describe: left out of a full fetch, refused when asked by name.
    described = {topic: state.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic) for topic, _ in fetched}
    if wanted is None:
        return ErrorCode.none, [(topic, partitions) for topic, partitions in fetched if described[topic]]
    return ErrorCode.none, [
        (topic, partitions if described[topic] else [_refused_fetch(f) for f in partitions])
        for topic, partitions in fetched
    ]


def _fetched_topics(cls: type, plural: str, fetched: list[tuple[str, list[Any]]]) -> tuple[Any, ...]:
    topic_cls = nested(cls, f"OffsetFetchResponseTopic{plural}")
    partition_cls = nested(cls, f"OffsetFetchResponsePartition{plural}")
    return tuple(
        make(
            topic_cls,
            name=topic,
            partitions=tuple(
                make(
                    partition_cls,
                    partition_index=f.partition,
                    committed_offset=f.offset,
                    committed_leader_epoch=f.leader_epoch,
                    metadata=f.metadata,
                    error_code=f.error,
                )
                for f in partitions
            ),
        )
        for topic, partitions in fetched
    )


def _refused_fetch(fetched: Any) -> Any:
    return dataclasses.replace(
        fetched, offset=-1, leader_epoch=NO_LEADER_EPOCH, metadata="", error=ErrorCode.topic_authorization_failed
    )


HANDLERS = (
    ApiHandler(OFFSET_COMMIT, 2, 9, handle_offset_commit),
    ApiHandler(OFFSET_FETCH, 1, 9, handle_offset_fetch),
)
